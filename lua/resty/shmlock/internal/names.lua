-- resty.shmlock.internal.names (internal): the one rule by which every
-- module that takes a dict by name (the lock, the semaphore, the cache,
-- inspect) finds its store, and the words of its refusals (docs/lock.md,
-- "How names resolve"):
--
--     inside nginx, a name declared with lua_shared_dict is that
--     ngx.shared dict, whatever zone files exist; any other name is a zone.
--
-- So the store a name reaches depends neither on leftover files, nor on
-- the user a process runs as, nor on the module.  A module that can only
-- work in a zone (the semaphore, a lock's shared holds) refuses a
-- lua_shared_dict's name with needs_zone's words, never reaching a zone
-- file of that name behind the operator's back.
--
-- `ngx`, where a function takes it: the caller module's nginx.api(), asked
-- when that module loaded (a module loaded inside nginx stays an nginx
-- module; a spec loads one with a stand-in ngx); nil outside nginx.

local shdict = require "resty.shmlock.shdict"

local type = type
local pairs = pairs

local _M = {}

-- attach, never create: a lock or a semaphore of a mistyped name must not
-- leave a zone file behind
local ATTACH = { create = false }

-- open()'s answers that mean "no zone of that name": no file, or a name
-- no zone can have
local NOT_FOUND = { ["not found"] = true, ["bad zone name"] = true }


-- syntax: dict = names.lua_shared_dict(ngx, name)
-- The ngx.shared dict a name is, inside nginx (declared with
-- lua_shared_dict); nil elsewhere, and for any other name.
function _M.lua_shared_dict(ngx, name)
    if ngx and type(name) == "string" then
        return ngx.shared[name]
    end
    return nil
end


-- syntax: name = names.shared_name(ngx, dict)
-- The lua_shared_dict name of an ngx.shared dict object, or nil (for a
-- message: a walk of ngx.shared).
function _M.shared_name(ngx, dict)
    if ngx then
        for name, d in pairs(ngx.shared) do
            if d == dict then
                return name
            end
        end
    end
    return nil
end


-- syntax: msg = names.not_found(name, ngx?)
-- resty.lock's "dictionary not found" (callers match its start), then
-- what was tried: the zone and its directory, and with ngx (inside nginx,
-- for a module that could have used one) the lua_shared_dict of that
-- name.
function _M.not_found(name, ngx)
    local msg = "dictionary not found"
    if type(name) ~= "string" then
        return msg .. ": " .. (name == nil and "no name"
                               or "a " .. type(name) .. " is no dict")
    end
    if shdict.check_name(name) then
        msg = msg .. ': no zone "' .. name .. '" in ' .. shdict.directory()
    else
        msg = msg .. ': "' .. name .. '" is no zone name'
    end
    if ngx then
        msg = msg .. ', and no lua_shared_dict "' .. name .. '"'
    end
    return msg
end


-- syntax: dict, err = names.attach(name, ngx?)
-- The zone of that name, never created: the one this process opened (in
-- the default directory), else its file there.  nil and not_found's words
-- when there is none; nil and open's refusal, as it is, when a file is
-- there but cannot be used (another user's, another layout, ...).
function _M.attach(name, ngx)
    local dict, err = shdict.opened(name)
    if not dict then
        dict, err = shdict.open(name, ATTACH)
    end
    if dict then
        return dict
    end
    if NOT_FOUND[err] then
        return nil, _M.not_found(name, ngx)
    end
    return nil, err
end


-- syntax: msg = names.needs_zone(what, name)
-- The refusal of a lua_shared_dict's name by a module that needs a zone;
-- what: its subject and verb ("the semaphore needs").
function _M.needs_zone(what, name)
    return what .. ' a zone: "' .. name .. '" is a lua_shared_dict, and '
           .. "inside nginx a lua_shared_dict name is that dict: give the "
           .. "zone another name, or pass the zone object (shdict.open(\""
           .. name .. '"))'
end


return _M
