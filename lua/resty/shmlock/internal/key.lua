-- resty.shmlock.internal.key (internal): the checks of a key given to a
-- dictionary or a lock.  A key is a string (others are made one with
-- tostring, as ngx.shared.DICT does), never empty; a key of a zone is at
-- most KEY_MAX bytes.  These are runtime conditions: nil and the message,
-- never an error.

local KEY_MAX = require("resty.shmlock.internal.codes").KEY_MAX

local type = type
local tostring = tostring

local _M = {}

-- syntax: key, err = key.text(key)
-- key as a string; nil, "nil key" / "empty key"
local function text(key)
    if key == nil then
        return nil, "nil key"
    end
    if type(key) ~= "string" then
        key = tostring(key)
    end
    if #key == 0 then
        return nil, "empty key"
    end
    return key
end
_M.text = text

-- syntax: key, err = key.check(key)
-- A key of a zone: text(key), or nil, "key too long".
function _M.check(key)
    local err
    key, err = text(key)
    if key and #key > KEY_MAX then
        return nil, "key too long"
    end
    return key, err
end

return _M
