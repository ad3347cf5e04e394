-- resty.shmlock: a drop-in for OpenResty's resty.lock, over shmlock zones.
--
--     local resty_lock = require "resty.shmlock"
--     local lock, err = resty_lock:new("my_locks", { timeout = 1 })
--     local elapsed, err = lock:lock(key)       -- or lock:lock(key, timeout)
--     ...
--     local ok, err = lock:unlock()
--
-- Same constructor, options (and clamping), methods, returns and error
-- strings as resty.lock.  Beyond it: owner tokens (a late unlock or expire
-- never touches somebody else's lock: 1, "expired" and nil, "expired"),
-- waiters woken by the
-- release (outside nginx), locks of dead processes taken at once, bounded
-- waits under contention (starvation mode, see resty.shmlock.lock.zone),
-- trylock() and owned().
--
-- Inside nginx, waiting is resty.lock's (ngx.sleep steps, elapsed = the
-- sum of the steps), then, past 0.2 s of steps, a queue without barging
-- (resty.shmlock.lock.wait).  Where the phase cannot yield (init,
-- init_worker, set, header_filter, body_filter, log, balancer, ...), a
-- free key is taken and a held one answers nil, "cannot wait in <phase>
-- phase", unless opts.blocking_timeout lets the worker block that long
-- (never for a key this worker holds: nil, "cannot wait in <phase> phase:
-- held by this worker").
--
-- The lock object is this file's: its fields are read and written here
-- only.  The store it locks in is a zone (resty.shmlock.lock.zone: the
-- zone's lock slots) or an ngx.shared dict (resty.shmlock.lock.ngx_shared);
-- both backends answer one interface for the waits, with the store passed
-- in.  `tok` names the waiter: on a zone the handle (resty.shmlock.lock.
-- handle: its owner id, and the ticket the backend writes when the lock
-- becomes ours), on an ngx.shared dict the owner token (a Lua string):
--
--     expiry = backend.expiry(seconds)          the exptime as add wants it
--     ok, err = backend.add(store, key, klen, tok, tlen, expiry)
--         true: ours; false: held by someone; nil, err: the store failed
--         (tlen: a token's length, nil for #tok)
--     outcome, err = backend.look(store, key, klen, tok, expiry, check)
--         after a failed add: BUSY, ACQUIRED (a dead holder's lock, or a
--         key freed meanwhile), FAILED with the store's error
--     elapsed, err = backend.block(store, key, klen, tok, expiry, timeout,
--                                  step, ratio, max_step, stop)
--         the wait outside nginx (zones only: ngx.shared dicts exist only
--         inside nginx)
--     here = backend.here(store, key, klen)   held by this very process
--     ident = backend.ident(tok)               lock.wait's name of tok
--
-- Releasing, extending and asking whether the lock is still ours differ
-- (a zone's ticket, a dict's token): unlock, expire and owned call each
-- backend's own.
--
-- While the object holds a lock, a handle (resty.shmlock.lock.handle)
-- keeps copies of the key and token, so that the lock is released when the
-- object is collected.  The handle also says which process took the lock:
-- a copy of the object in a child (fork, a raw fork or clone, _Fork; an
-- nginx worker forked after init_by_lua locked) holds nothing, whichever
-- method is called (held()).
--
-- Shared holds (lock_shared) are resty.shmlock.lock.shared's, which keeps
-- their handle in the object's `sh` field (absent until the first one) and
-- reads the object's target, expiry and wait options.  Here they cost the
-- exclusive lock one field test, on the paths where it holds nothing.

-- The binding's parts come from resty.shmlock.internal.core (core.part):
-- under LuaJIT the lock object is this file's Lua object over the FFI
-- (its handles, shared holds and ngx.shared locks); under PUC Lua it is
-- the C module's (core.lock_object, the end of this file), and the parts
-- only the Lua object uses are nil.  ngx.shared dicts exist only inside
-- nginx, under LuaJIT (docs/every-lua.md).
local core = require "resty.shmlock.internal.core"
local shdict = require "resty.shmlock.shdict"
local zone_of = shdict._zone_handle
local version = require "resty.shmlock.version"
local nginx = require "resty.shmlock.internal.nginx"
local names = require "resty.shmlock.internal.names"
local key_check = require("resty.shmlock.internal.key").check
local token = require "resty.shmlock.internal.token"
local options = require "resty.shmlock.internal.options"
local zone_backend = require "resty.shmlock.lock.zone"
local waits = require "resty.shmlock.lock.wait"
local inspect = require "resty.shmlock.lock.inspect"
local log = require "resty.shmlock.internal.log"
local errors = require "resty.shmlock.errors"
local codes = require "resty.shmlock.internal.codes"
local clock = require "resty.shmlock.internal.clock"
local handle = core.part("handles")
local ngx_shared = core.part("ngx_shared")
local shared_hold = core.part("shared_holds")

local ffi_str = ngx_shared and ngx_shared.string
local type = type
local error = error
local setmetatable = setmetatable
local getmetatable = getmetatable
local next_token = token.next
local cached_ms = clock.cached_ms
local take = handle and handle.take
local zone_handle = handle and handle.zone
local put_zone = handle and handle.put_zone
local give_zone = handle and handle.give_zone
local put_shared = handle and handle.put_shared
local lock_acquire = require("resty.shmlock.lock.slots").lock.acquire
local zone_release = zone_backend.release
local retoken = handle and handle.retoken
local ours = handle and handle.ours
local seconds_ok = options.seconds_ok
local check_timeout = options.timeout
local ACQUIRED = zone_backend.ACQUIRED
local FAILED = zone_backend.FAILED
local released = waits.released
local log_event = log.event
local recoveries = log.recoveries
local recovered = log.recovered
local OK = codes.OK
local EXISTS = codes.EXISTS
local KEY_MAX = codes.KEY_MAX

local ngx = nginx.api()
local in_nginx = ngx ~= nil

local _M = { _VERSION = version }
local mt = { __index = _M }

-- under PUC Lua, the C module's lock objects (the end of this file)
local lock_object = core.lock_object

-- names resolved to ngx.shared dicts, and names whose store was logged
local shared_names = {}
local logged = {}

-- Names resolved to zones (in the default zone directory, while it is the
-- one they were resolved in: env.serial counts core.setenv's changes), and
-- each zone's dead word (shmlock_zone_dead_word): new() by such a name
-- reads one word instead of walking to the zone again and looking at its
-- file (lock() looks, as every call does).  Weak, as shdict's own record.
local env = core.env
local zone_names = setmetatable({}, { __mode = "v" })
local zone_names_serial = env.serial
local dead_words = setmetatable({}, { __mode = "k" })

-- whether the zone of dict, resolved by name before, is still alive (not
-- destroyed): one load of its dead word (core.dead_word; under PUC Lua a
-- call of the C module)
local word_dead = core.word_dead
local function zone_live(dict)
    return not word_dead(dead_words[dict])
end


-- new() attaches to existing zones, never creates one
local ATTACH = { create = false }


-- Zone errors that are resty.lock's "dictionary not found": no zone of
-- that name, or a name no zone can have.  Any other error of open (a file
-- is there under that name but cannot be used, and why) is reported as is.
local NOT_FOUND = { ["not found"] = true, ["bad zone name"] = true }


-- inside nginx, once per name and VM: which store the name reaches
local function log_store(name, what)
    if in_nginx and not logged[name] then
        logged[name] = true
        log_event("info", 'lock name "' .. name .. '" uses ' .. what)
    end
end


-- The dict object (a zone) or the ngx.shared dict behind dict_name; else
-- nil, nil, and why our zone of that name could not be opened.
--
-- The rule (resty.shmlock.internal.names; docs/lock.md, "How names
-- resolve"): inside nginx, a name declared with lua_shared_dict is that
-- dict, whatever files exist; any other name is a zone, attached by name
-- (never created).  So the store a name reaches never depends on leftover
-- files or on the user a process runs as.
local function find(name)
    if type(name) == "table" then
        if zone_of(name) then
            return name
        end
        return nil
    end
    if type(name) ~= "string" then
        return nil
    end

    if zone_names_serial == env.serial then
        local dict = zone_names[name]
        if dict and zone_live(dict) then
            return dict
        end
    else
        zone_names = setmetatable({}, { __mode = "v" })
        zone_names_serial = env.serial
    end
    local shared = shared_names[name]
    if shared then
        return nil, shared
    end
    if in_nginx then
        shared = names.lua_shared_dict(ngx, name)
        if shared then
            shared_names[name] = shared
            log_store(name, 'the lua_shared_dict "' .. name .. '"')
            return nil, shared
        end
    end
    local dict, err = shdict.opened(name)
    if not dict then
        dict, err = shdict.open(name, ATTACH)
    end
    if dict then
        log_store(name, 'the zone "' .. name .. '"')
        if not dead_words[dict] then
            dead_words[dict] = core.dead_word(zone_of(dict))
        end
        zone_names[name] = dict
        return dict
    end
    return nil, nil, err
end


-- find(), with new()'s errors: the dict or nil, the ngx.shared dict; or
-- nil, nil and the error
local function resolve(dict_name)
    local dict, shared, why = find(dict_name)
    if dict or shared then
        return dict, shared
    end
    if why and not NOT_FOUND[why] then
        return nil, nil, why
    end
    -- resty.lock's words, then what was tried (the zone, its directory,
    -- and inside nginx the lua_shared_dict of that name)
    return nil, nil, names.not_found(dict_name, ngx)
end


-- Misuse: a method called on anything but a lock object (lock.lock(key),
-- a dict, another module's object) raises at the method's caller, before
-- anything of it is read.  One compare on the hot path.
local function check_self(self)
    if getmetatable(self) ~= mt then
        error("bad lock object (use lock:method(), not lock.method())", 3)
    end
end


-- true inside nginx, in a phase where ngx.sleep may yield
_M.can_sleep = waits.can_sleep


-- syntax: lock, err = resty_lock:new(dict_name, opts?)
--         (resty_lock.new(dict_name, opts?) works too)
function _M.new(a, b, c)
    local dict_name, opts = b, c
    if a ~= _M and getmetatable(a) ~= mt then
        dict_name, opts = a, b
    end

    local dict, shared, err = resolve(dict_name)
    if not dict and not shared then
        return nil, err
    end

    local exptime, timeout, step, ratio, max_step, blocking_timeout =
        options.lock(opts, "opts", 2)

    if lock_object then
        -- PUC Lua: the C module's object (see the end of this file)
        return lock_object(zone_of(dict), dict.name, exptime, timeout, step,
                           ratio, max_step)
    end

    local target, backend, number, store
    if dict then
        target, backend, number, store = zone_of(dict), zone_backend, 0, "zone"
    else
        target, backend, number, store = shared, ngx_shared,
                                         handle.number(shared), "ngx.shared"
    end

    return setmetatable({
        dict = dict or shared,
        store = store,      -- public: "zone" or "ngx.shared"
        backend = backend,  -- resty.shmlock.lock.zone or .ngx_shared
        target = target,    -- the zone cdata, or the ngx.shared dict
        number = number,    -- the handle's number of the store (0: a zone)
        cd = false,         -- the handle while holding (nil or false
                            -- when not: unlock stores nil)
        key = false,        -- the key held (while cd or sh holds; an
                            -- unlock leaves the last one: see unlock)
        exptime = exptime,
        expiry = backend.expiry(exptime),
        timeout = timeout,
        step = step,
        ratio = ratio,
        max_step = max_step,
        blocking_timeout = blocking_timeout,
    }, mt)
end


-- after the first add found the key held; timeout: this call's; done:
-- see _lock_unless.  Where and how: resty.shmlock.lock.wait's choice.
local function wait(self, backend, key, klen, tok, may_wait, timeout, done)
    local refusal = "timeout"
    if may_wait and timeout > 0 then
        local elapsed, err, refused = waits.wait(backend, self.target, key,
                                                 klen, tok, self.expiry,
                                                 timeout, self, done)
        if not refused then
            return elapsed, err
        end
        refusal = err
    end

    -- no waiting; a dead holder's lock is still ours at once
    local got, err = backend.look(self.target, key, klen, tok, self.expiry,
                                  true)
    if got == ACQUIRED then
        return 0
    end
    if got == FAILED then
        return nil, err
    end
    return nil, refusal
end


-- the object holds no lock any more
local function forget(self, cd)
    if self.number == 0 then
        put_zone(cd)
    else
        put_shared(cd)
    end
    self.cd = false
    self.key = false
end


-- The handle of the lock this object holds, or false (or nil).  An
-- object copied into a child holds nothing there: the lock is the
-- parent's, and the child may neither release it, extend it nor take it
-- as its own (its token is the parent's too).  The copy forgets it, and
-- may lock anew.
-- One load and a compare: this is on every lock and unlock.
local function held(self)
    local cd = self.cd
    if cd and not ours(cd) then
        forget(self, cd)
        return false
    end
    return cd
end


-- Whether this object has a shared hold (its handle: self.sh).  A copy in
-- a forked child has none: it forgets the parent's, as held() does.
local function holds_shared(self)
    if shared_hold.holds(self.sh) then
        return true
    end
    if not self.cd then
        self.key = false
    end
    return false
end


-- the lock taken or waited for: on a zone
local function acquire_zone(self, key, klen, may_wait, timeout, done)
    local cd = zone_handle(self.target)
    -- (the handle's ticket is its last lock's: a hint of where key's slot
    -- is, right when this object or the handle's last one locks the same
    -- key again; the core draws the acquisition's owner id)
    local rc = lock_acquire(cd, key, klen, self.expiry, cached_ms())
    if recovered() then
        recoveries(self.dict.name)      -- report a shard recovered
    end
    if rc == OK then
        self.cd = cd
        self.key = key
        return 0
    end
    local elapsed, err
    if rc == EXISTS then
        elapsed, err = wait(self, self.backend, key, klen, cd, may_wait,
                            timeout, done)
    else
        err = errors[rc]
    end
    if elapsed then
        self.cd = cd
        self.key = key
        return elapsed
    end
    put_zone(cd)
    return nil, err
end


local function acquire(self, key, may_wait, timeout, done)
    if not key then
        return nil, "nil key"
    end
    if held(self) or (self.sh and holds_shared(self)) then
        return nil, "locked"
    end
    local err
    key, err = key_check(key)
    if not key then
        return nil, err
    end
    local klen = #key
    if self.number == 0 then
        return acquire_zone(self, key, klen, may_wait, timeout, done)
    end

    -- an ngx.shared dict
    local tok, tlen = next_token()
    local store = self.target
    local ok
    ok, err = ngx_shared.add(store, key, klen, tok, tlen, self.expiry)
    if ok then
        self.cd = take(store, self.number, key, klen, tok, tlen)
        self.key = key
        return 0
    end
    if ok == nil then
        return nil, err
    end

    -- the token buffer is reused by the next lock(): keep our own copy
    tok = ffi_str(tok, tlen)
    local elapsed
    elapsed, err = wait(self, ngx_shared, key, klen, tok, may_wait, timeout,
                        done)
    if elapsed then
        self.cd = take(store, self.number, key, klen, tok, tlen)
        self.key = key
        return elapsed
    end
    return nil, err
end


-- syntax: elapsed, err = lock:lock(key, timeout?)
-- elapsed: seconds waited (0: at once).  err: "timeout", "locked" (this
-- object holds a lock already), "nil key", "empty key", "key too long",
-- "cannot wait in <phase> phase", or the zone's ("no memory").  timeout:
-- the longest wait of this call instead of the object's, checked and
-- clamped (to exptime) as opts.timeout; a bad one raises at the caller.
function _M.lock(self, key, timeout)
    check_self(self)
    if timeout == nil then
        timeout = self.timeout
    else
        timeout = check_timeout(timeout, self.exptime, 2)
    end
    return acquire(self, key, true, timeout)
end


-- syntax: elapsed, err = lock:lock_shared(key, timeout?)
-- A shared (reader) hold of key (resty.shmlock.lock.shared): as lock(),
-- with the same returns and errors; shared with the other shared holders
-- (as many as the key's shard has lock slots for: then "no memory"),
-- never with an exclusive lock(key).  On an ngx.shared
-- dict: nil, "shared holds need a zone ...".
function _M.lock_shared(self, key, timeout)
    check_self(self)
    if timeout == nil then
        timeout = self.timeout
    else
        timeout = check_timeout(timeout, self.exptime, 2)
    end
    if not key then
        return nil, "nil key"
    end
    if held(self) or (self.sh and holds_shared(self)) then
        return nil, "locked"
    end
    local err
    key, err = key_check(key)
    if not key then
        return nil, err
    end
    -- a shared hold's records add 4 bytes to the key (src/group.h)
    if #key > KEY_MAX - 4 then
        return nil, "key too long"
    end
    if self.number ~= 0 then
        return nil, names.needs_zone("shared holds need",
                                     names.shared_name(ngx, self.target)
                                     or "?")
    end
    local klen = #key
    local cd, rc = shared_hold.acquire(self.sh, self.target, key, klen,
                                       self.expiry)
    self.sh = cd
    local elapsed = 0
    if rc == EXISTS then
        -- a dead exclusive holder's key is ours at once, as a reader's
        elapsed, err = wait(self, shared_hold, key, klen, cd, true, timeout)
        if not elapsed then
            return nil, err
        end
    elseif rc ~= OK then
        return nil, errors[rc]
    end
    self.key = key
    return elapsed
end


-- unlock() of an object holding a shared hold (or nothing)
local function unlock_shared(self)
    local key = self.key
    if not holds_shared(self) then
        return nil, "unlocked"
    end
    self.key = false
    local ok, err = shared_hold.release(self.sh)
    if ok and in_nginx then
        released(key)           -- wakes this worker's queued waiters
    end
    if err then
        return ok, err
    end
    return ok
end


-- syntax: elapsed, err = resty_lock._lock_unless(lock, key, done)
-- Internal (resty.shmlock.cache's wait for a key being loaded, inside
-- nginx where the phase may yield): lock(key), but done() is called at
-- every look while waiting, and true ends the wait with nil, "done"; the
-- wait queues at once (no resty.lock steps).  Elsewhere, lock(key).
function _M._lock_unless(self, key, done)
    check_self(self)
    return acquire(self, key, true, self.timeout, done)
end


-- syntax: yes = resty_lock._is_lock(v)
-- Internal (resty.shmlock.cache): whether v is a lock object of this
-- module (else another lock factory's).
function _M._is_lock(v)
    return getmetatable(v) == mt
end


-- syntax: elapsed, err = lock:trylock(key)
-- lock() without waiting: 0, or nil, "timeout" (as lock() with timeout 0),
-- and the same other errors.
function _M.trylock(self, key)
    check_self(self)
    return acquire(self, key, false, 0)
end


-- syntax: ok, err = lock:unlock()
-- 1; 1, "expired" if our lock expired before (the object no longer holds
-- it; someone else may hold the key now: left untouched; 1 as resty.lock
-- answers, so that callers such as lua-resty-mlcache keep their result);
-- nil, "unlocked" if this object holds no lock; nil and the store's error
-- ("no memory", ...) if the release failed while the key is still ours:
-- the object keeps holding it (unlock again, or the lock goes when the
-- object is collected or at its exptime).
function _M.unlock(self)
    check_self(self)
    local cd = held(self)
    if not cd then
        if self.sh then
            return unlock_shared(self)
        end
        return nil, "unlocked"
    end
    local ok, err
    if self.number == 0 then
        ok, err = zone_release(self.target, cd)
    else
        ok, err = ngx_shared.release(self.target, self.key, cd.key_len,
                                     cd.tok, cd.tok_len)
    end
    if ok then
        if in_nginx then
            released(self.key)  -- wakes this worker's queued waiters
        end
        if self.number == 0 then
            give_zone(cd)       -- (the core cleared its held)
        else
            put_shared(cd)
        end
        -- (self.key stays: read only while cd or sh holds, and left as
        -- it is, the next lock of the same key stores nothing; clearing
        -- it cost 8 instructions per reused pair under LuaJIT, the store
        -- and the spills of its table slot around the two FFI calls).
        -- nil, not false: one store in LuaJIT's trace, not two; the field
        -- stays in the table (set by new), only its value goes
        self.cd = nil
        if err then
            return ok, err      -- 1, "expired"
        end
        return ok               -- one value, as resty.lock's
    end
    return nil, err
end


-- syntax: ok, err = lock:expire(timeout?)
-- Resets the lock's expiry to timeout seconds (nil: the object's exptime;
-- 0: never expires; NaN, infinite or above 1e12 raises, as a negative
-- timeout).  true; nil, "unlocked"; nil, "expired" (our lock expired
-- meanwhile: the object no longer holds it); nil and the store's error
-- (the object still holds the lock, with its old expiry).
function _M.expire(self, time)
    check_self(self)
    local cd = held(self)
    if not cd then
        if self.sh and holds_shared(self) then
            if time == nil then
                time = self.exptime
            elseif not seconds_ok(time) then
                error('bad "exptime" argument', 2)
            end
            local ok, err = shared_hold.extend(self.sh, options.ms(time))
            if ok then
                return ok
            end
            if err == "expired" then
                self.key = false        -- gone: nothing to release
            end
            return nil, err
        end
        return nil, "unlocked"
    end
    if time == nil then
        time = self.exptime
    elseif not seconds_ok(time) then
        error('bad "exptime" argument', 2)
    end

    local ok, err
    if self.number == 0 then
        ok, err = self.backend.renew(self.target, cd, time)
    else
        local tok = ffi_str(cd.tok, cd.tok_len)
        local new_tok = ffi_str(next_token())
        ok, err = ngx_shared.renew(self.target, self.key, cd.key_len, tok,
                                   new_tok, time)
        if ok then
            retoken(cd, new_tok, #new_tok)
        end
    end
    if ok then
        return true
    end
    if err == "expired" then
        forget(self, cd)
    end
    return nil, err
end


-- syntax: held = lock:owned()
-- true while this object's lock is held by it in the store.
function _M.owned(self)
    check_self(self)
    local cd = held(self)
    if not cd then
        if self.sh then
            return holds_shared(self) and shared_hold.owned(self.sh)
        end
        return false
    end
    if self.number == 0 then
        return self.backend.holds(self.target, self.key, #self.key, cd)
    end
    return ngx_shared.holds(self.target, self.key, cd.key_len,
                            ffi_str(cd.tok, cd.tok_len))
end


-- syntax: info, err = resty_lock.inspect(dict_name, key)
-- What holds the lock on key, read without changing anything: the
-- holder's pid, whether its process lives, the ttl left, the starving
-- waiter marked on it, the waiters sleeping on the key's wait word
-- (resty.shmlock.lock.inspect; docs/lock.md).  dict_name as new()'s.
-- nil and "not locked", "not a lock", new()'s errors, the key's, the
-- zone's.
function _M.inspect(a, b, c)
    local dict_name, key = a, b
    if a == _M then
        dict_name, key = b, c
    end

    local dict, shared, err = resolve(dict_name)
    if not dict and not shared then
        return nil, err
    end
    if not key then
        return nil, "nil key"
    end
    key, err = key_check(key)
    if not key then
        return nil, err
    end
    if dict then
        return inspect.key(dict, key, zone_of(dict))
    end
    return inspect.key(shared, key)
end



-- Under PUC Lua (no FFI, never inside nginx) a lock object is the C
-- module's (src/lua/lock_object.c): a userdata whose methods lock,
-- trylock, lock_shared, unlock, expire and owned are C functions, each one
-- call of the core, the metatable in their upvalue; their __index is this
-- module.  The Lua methods above are LuaJIT's.
if lock_object then
    mt = core.lock_class(_M, key_check, zone_backend.dead_notice, recoveries)
    _M.store = "zone"

    function _M._lock_unless(self, key)
        return self:lock(key)
    end
end


return _M
