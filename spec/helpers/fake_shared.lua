-- helpers.fake_shared: a stand-in for an ngx.shared dict over a plain
-- table: get, get_stale, set, delete, incr and get_keys, as a cache calls
-- them, without generation words (the cache falls back to a counter key).
--
-- syntax: dict, store = fake_shared.new(): the dict and its table
-- (key -> value)

local pairs = pairs

local _M = {}

function _M.new()
    local store = {}
    local dict = {
        get = function(_, k) return store[k] end,
        get_stale = function(_, k) return store[k] end,
        set = function(_, k, v) store[k] = v return true end,
        delete = function(_, k) store[k] = nil return true end,
        incr = function(_, k, n, init)
            store[k] = (store[k] or init) + n
            return store[k]
        end,
        get_keys = function()
            local keys = {}
            for k in pairs(store) do keys[#keys + 1] = k end
            return keys
        end,
    }
    return dict, store
end

return _M
