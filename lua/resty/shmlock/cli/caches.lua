-- resty.shmlock.cli.caches (internal): what the shmlock command shows of
-- the caches (resty.shmlock.cache) that keep their L2 in a zone.  A cache
-- named N keeps key K's entry under "N:K" (its encoding: cache.lua's
-- codec, read through cache.decode_entry) and its counters under
-- "N#stats:<counter>" (cache.COUNTERS, what c:stats() returns), and with
-- a fleet tier its host's view of Redis under "N#fleet:..."
-- (resty.shmlock.cache.fleet_log); cache names are zone names, so they
-- hold no ':' or '#'.

local cache = require "resty.shmlock.cache"
local clock = require "resty.shmlock.internal.clock"
local json = require "resty.shmlock.cli.json"
local output = require "resty.shmlock.cli.output"

local type = type
local pcall = pcall
local tostring = tostring
local format = string.format
local match = string.match
local concat = table.concat
local sort = table.sort

local _M = {}

local NAME = "[A-Za-z0-9_.%-]+"
local ENTRY_KEY = "^(" .. NAME .. "):(.+)$"
local STATS_KEY = "^(" .. NAME .. ")#stats:([%w_]+)$"

-- how a get of the key would answer from the zone (c:get's hit_level)
local LEVELS = {
    [2] = "2 (fresh: a get answers it from L2, or 1 from a process's L1)",
    [4] = "4 (stale: a get serves it only within the cache's stale_ttl or "
          .. "resurrect_ttl, else it loads: 3)",
}

local function shown(value)
    local typ = type(value)
    if value == nil then
        return "nil (a cached miss)"
    elseif typ == "string" then
        return output.printable(value)
    elseif typ == "table" then
        local ok, s = pcall(json.encode, value)
        return ok and s or tostring(value)
    elseif typ == "number" then
        return json.encode(value)
    end
    return tostring(value)
end

-- syntax: data, text = caches.entry(key, s, zone_ttl)
-- The decoded cache entry under zone key `key` (a string value s, the
-- zone entry's ttl in seconds), for --json and for people; nil if the key
-- is not a cache's or s not one of its entries.
function _M.entry(key, s, zone_ttl)
    local name, ckey = match(key, ENTRY_KEY)
    if not name or type(s) ~= "string" then
        return nil
    end
    local e = cache.decode_entry(s)
    if not e then
        return nil
    end
    local ttl, stale = 0, false
    if e.expiry > 0 then
        ttl = (e.expiry - clock.now_ms()) / 1000
        stale = ttl <= 0
    end
    local level = stale and 4 or 2
    local value = e.value
    local data = {
        key = key, cache = name, cache_key = ckey,
        type = value == nil and "nil" or type(value),
        value = value == nil and json.null or value,
        ttl = ttl, stale = stale, hit_level = level,
        zone_ttl = zone_ttl or json.null,
        writer_pid = e.writer_pid,
    }
    local ttl_text = output.seconds(ttl)
    if stale then
        ttl_text = format("%s (stale for %s)", ttl_text,
                          output.seconds(-ttl))
    end
    local text = output.fields({
        { "cache", name }, { "key", output.printable(ckey) },
        { "type", data.type }, { "value", shown(value) },
        { "ttl", ttl_text }, { "stale", stale and "yes" or "no" },
        { "hit level", LEVELS[level] },
        { "zone ttl", output.seconds(zone_ttl) },
        { "written by", format("pid %d", e.writer_pid) },
    })
    return data, text
end

-- syntax: data, text = caches.stats(dict, keys)
-- Every cache's counters found among `keys` (the zone's), as the zone
-- has them: what its processes flushed.  data: { name = { counter = n } }
-- (an empty object when no cache keeps stats there); text: a section per
-- cache, "" when none.
function _M.stats(dict, keys)
    local data, names = {}, {}
    for _, key in ipairs(keys) do
        local name, counter = match(key, STATS_KEY)
        if name then
            local n = dict:get(key)
            if type(n) == "number" then
                if not data[name] then
                    data[name] = {}
                    names[#names + 1] = name
                end
                data[name][counter] = n
            end
        end
    end
    sort(names)
    local sections = {}
    for i, name in ipairs(names) do
        local counts, fields, seen = data[name], {}, {}
        -- cache.COUNTERS first, in their order, every one (0 if absent),
        -- then any other counter found (a newer version's)
        for _, c in ipairs(cache.COUNTERS) do
            counts[c] = counts[c] or 0
            fields[#fields + 1] = { "  " .. c, counts[c] }
            seen[c] = true
        end
        local extra = {}
        for c in pairs(counts) do
            if not seen[c] then
                extra[#extra + 1] = c
            end
        end
        sort(extra)
        for _, c in ipairs(extra) do
            fields[#fields + 1] = { "  " .. c, counts[c] }
        end
        -- a cache with a fleet tier (opts.redis): its host's view of Redis
        local read_at = dict:get(name .. "#fleet:read")
        if type(read_at) == "number" then
            counts.log_age = (clock.now_ms() - read_at) / 1000
            counts.redis_down = dict:get(name .. "#fleet:down") and 1 or 0
            fields[#fields + 1] = { "  log_age",
                                    format("%.3fs", counts.log_age) }
            fields[#fields + 1] = { "  redis_down", counts.redis_down }
        end
        sections[i] = format("cache %s\n", name) .. output.fields(fields)
    end
    return data, concat(sections, "\n")
end

return _M
