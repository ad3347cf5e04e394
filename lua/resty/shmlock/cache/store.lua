-- resty.shmlock.cache.store (internal): the cache's two levels, written
-- and read together, and the coherence between them.
--
-- Coherence.  Every change of a key (set, delete, a loader's store,
-- purge) bumps a generation word of the zone after it, chosen by the
-- hash of the zone key (shmlock.h: shmlock_zone_gens; 1024 words, so a
-- change costs the keys that share its word a revalidation, not a
-- reload).  An L1 entry keeps the word's value read before its zone read;
-- an L1 hit compares it with the word (under LuaJIT one load through a
-- pointer into the mapping; under PUC Lua a call of the C module).  A
-- word that moved sends the hit to the zone: the same stamp there keeps
-- the L1 entry (revalidated), another stamp or no entry is a fresh read
-- or a miss.  In an ngx.shared dict (no generation words) one counter key
-- plays the part, read by a dict get per hit.
--
-- Invalidation.  A load must not store what it read before a set, delete
-- or purge that returned meanwhile (its value would be served for its
-- whole ttl).  Those three add INVALIDATE to the word before their zone
-- write (and CHANGED after it, as every change does); a load reads the
-- word before it calls the loader, and stores only if the word's high
-- half (the invalidations) is the same, checked in the store's critical
-- section (shmlock_dict_store_guarded): a change that began first wins,
-- and one that begins later overwrites the store.  Another load's store
-- in the same word moves the low half only, and cancels nothing.

local core = require "resty.shmlock.internal.core"
local codec = require "resty.shmlock.cache.codec"
local options = require "resty.shmlock.internal.options"
local now_ms = require("resty.shmlock.internal.clock").now_ms
local set_guarded = require("resty.shmlock.shdict")._set_guarded

local tostring = tostring
local floor = math.floor
local min = math.min
local band = core.bit.band
local hash = core.hash
local self_pid = core.self_pid
local zone_gen_add = core.zone_gen_add
local encode, decode, header = codec.encode, codec.decode, codec.header
local at_least_ms = options.at_least_ms
local MAX_SECONDS = options.MAX_SECONDS

local _M = {}

local GEN_MASK = core.constant("GEN_WORDS") - 1
local CHANGED = 1               -- added to the word after every change
local INVALIDATE = 65536        -- and this before a set, delete or purge
local INVALIDATIONS = 0xffff0000
local MAX_L1_TTL = MAX_SECONDS
_M.CHANGED, _M.INVALIDATE = CHANGED, INVALIDATE

-- the L1 marker of a cached nil (an L1 cannot hold nil)
local NIL = {}
_M.NIL = NIL


-- Version stamps: a double below 2^53, unique per write on the host:
-- this process's pid (< 2^22) above a 31-bit serial that starts at a
-- random point (a pid reused after a crash does not restart at the
-- same serial).  The pid is read at each write: a forked child has its
-- own.
local serial = floor(core.now_us() % 2147483648)

local function new_stamp()
    serial = serial + 1
    if serial >= 2147483648 then
        serial = 0
    end
    return self_pid() * 2147483648 + serial
end


-- ---- generation words ----

-- syntax: slot = store.slot_of(vkey): the generation word of zone key vkey
local function slot_of(vkey)
    return band(hash(vkey), GEN_MASK)
end
_M.slot_of = slot_of

-- syntax: gen = store.gen_read(self, slot)
-- The word's value, read before the zone is (sequentially consistent: a
-- zone read after it cannot see an older state than the word says).
local function gen_read(self, slot)
    local zone = self.zone
    if zone then
        return zone_gen_add(zone, slot, 0)
    end
    return self.dict:get(self.gen_key) or 0
end
_M.gen_read = gen_read

-- syntax: gen, err = store.gen_bump(self, slot, delta)
-- Adds delta (CHANGED after a change, INVALIDATE before a set, delete or
-- purge) to the word of this slot (nil: every slot): the word's new value
-- (true for every slot); nil, err when the counter key of an ngx.shared
-- dict could not be incremented (the change is not announced).
local function gen_bump(self, slot, delta)
    local zone = self.zone
    if not zone then
        local n, err = self.dict:incr(self.gen_key, delta, 0)
        if not n then
            return nil, "could not announce the change: " .. tostring(err)
        end
        return n
    elseif slot then
        return zone_gen_add(zone, slot, delta)
    end
    for i = 0, GEN_MASK do
        zone_gen_add(zone, i, delta)
    end
    return true
end
_M.gen_bump = gen_bump

-- the zone write of a load (the word's value `gen` read before its loader
-- ran): true; false when a set, delete or purge began since (nothing
-- written); nil, err.  An ngx.shared dict has no conditional store: its
-- counter is read just before the store, so a change in the window of that
-- one call may still be overwritten.
local function guarded_set(self, vkey, slot, gen, s, exptime)
    local dict = self.dict
    local ok, err
    if self.zone then
        ok, err = set_guarded(dict, vkey, s, exptime, nil, slot,
                              INVALIDATIONS, gen)
        if err == "changed" then
            return false
        end
    else
        local now = dict:get(self.gen_key) or 0
        if (now - now % INVALIDATE) ~= (gen - gen % INVALIDATE) then
            return false
        end
        ok, err = dict:set(vkey, s, exptime)
    end
    if not ok then
        return nil, err
    end
    return true
end


-- ---- the two levels ----

-- the zone expiry of an entry with logical ttl `ttl`: a stale copy stays
-- `extra` more seconds (stale_ttl + resurrect_ttl).  At most MAX_SECONDS,
-- and never below 1 ms but for 0: an ngx.shared dict would truncate it to
-- 0, never expires (our zones round it up by themselves).
local function zone_exptime(ttl, extra)
    if ttl ~= 0 and extra > 0 then
        ttl = min(ttl + extra, MAX_SECONDS)
    end
    return at_least_ms(ttl)
end

-- syntax: s = store.extra_ttl(stale_ttl, resurrect_ttl)
function _M.extra_ttl(stale_ttl, resurrect_ttl)
    return stale_ttl + (resurrect_ttl or 0)
end

-- An L1 entry, an array: the value (NIL for nil); its expiry (ms of the
-- zone's clock, monotonic; MAX_L1_TTL ahead for a value that never
-- expires); the value the key's generation word had before the zone
-- read; the word's slot; the zone entry's stamp.  get()'s hit reads the
-- word as self.gens[slot] under the FFI (gens: a pointer to the zone's
-- words), not through a pointer kept in the entry: a boxed pointer is one
-- more object per entry, placed wherever the heap had room, and a hit
-- that follows it touches one more line of memory, which in a process
-- whose heap is busy costs the hit more than the instructions do.
-- get() checks exp at every hit, and the L1 itself is given no ttl:
-- lrucache's clock inside nginx is ngx.now, the wall clock, which may
-- step back by hours, and a hit then reads one clock, not two.  That
-- clock read (an FFI call) also keeps the JIT from hoisting the
-- generation word's load out of a loop of hits.
local L1_VALUE, L1_EXP, L1_GEN, L1_SLOT, L1_STAMP = 1, 2, 3, 4, 5
_M.L1_VALUE, _M.L1_EXP, _M.L1_GEN, _M.L1_SLOT =
    L1_VALUE, L1_EXP, L1_GEN, L1_SLOT

local function set_l1(self, key, value, remaining, slot, gen, stamp)
    local lru = self.lru
    if lru then
        if value == nil then
            value = NIL
        end
        local ttl = remaining or MAX_L1_TTL
        -- (an array: a hit's reads of it are array loads, cheaper under
        -- the JIT than a hash's; the indices are _M.L1_*)
        lru:set(key, { value, now_ms() + ttl * 1000, gen, slot, stamp })
    end
end

-- the L2 string of value with logical ttl `ttl`, or nil and err
local function entry(value, ttl, stamp)
    local expiry = 0
    if ttl > 0 then
        expiry = now_ms() + ttl * 1000
    end
    return encode(value, expiry, stamp)
end

-- syntax: ok, err, bad = store.put(self, key, vkey, value, ttl, extra,
--                                  loaded?)
-- Stores value in L2 (with logical ttl `ttl`, kept `extra` seconds
-- longer), bumps the key's generation word, and puts the value in L1.
-- true, or nil and err (bad: a value that cannot be cached, see codec).
-- A load's store gives `loaded`, the word read before its loader ran:
-- when a set, delete or purge began since, it stores nothing, here or in
-- L1, and returns false.
function _M.put(self, key, vkey, value, ttl, extra, loaded)
    local stamp = new_stamp()
    local s, err = entry(value, ttl, stamp)
    if not s then
        return nil, err, true
    end
    local slot = slot_of(vkey)
    local gen = gen_read(self, slot)
    local ok
    if loaded then
        ok, err = guarded_set(self, vkey, slot, loaded, s,
                              zone_exptime(ttl, extra))
        if ok == false then
            return false
        end
    else
        ok, err = self.dict:set(vkey, s, zone_exptime(ttl, extra))
    end
    if not ok then
        return nil, "could not store the value: " .. tostring(err)
    end
    -- Our L1 copy takes the word after our bump only if nobody else bumped
    -- it since our read; else the word before our write (another process
    -- may have written after us, and bumped first): our next hit then
    -- revalidates.
    local bumped, berr = gen_bump(self, slot, CHANGED)
    if not bumped then
        return nil, berr
    end
    if bumped == (gen + CHANGED) % 4294967296 then
        gen = bumped
    end
    set_l1(self, key, value, ttl > 0 and ttl or nil, slot, gen, stamp)
    return true
end

-- syntax: found, value, err, stale, kept = store.fetch(self, key, vkey,
--                                                      stale_ttl, old?)
-- An L2 lookup: found is true for a fresh entry (copied into L1 for the
-- rest of its ttl; `old`, an L1 entry of the key, is kept when the zone
-- still has its stamp: kept).  An entry past its ttl but within stale_ttl
-- (> 0) seconds of it is returned with found false and stale true.
function _M.fetch(self, key, vkey, stale_ttl, old)
    local slot = old and old[L1_SLOT] or slot_of(vkey)
    local gen = gen_read(self, slot)
    local s, err = self.dict:get(vkey)
    if s == nil then
        return false, nil, err
    end
    local expiry, stamp = header(s)
    if not expiry then
        return false, nil, "bad entry in the zone for key \"" .. key
                           .. "\": not a cache entry"
    end

    local remaining
    if expiry > 0 then
        remaining = expiry - now_ms()
        if remaining <= 0 then
            if stale_ttl > 0 and remaining > -stale_ttl * 1000 then
                local ok, value = decode(s)
                if ok then
                    return false, value, nil, true
                end
            end
            return false
        end
        remaining = remaining / 1000
    end

    if old and old[L1_STAMP] == stamp then
        -- unchanged: the L1 copy is good again
        old[L1_GEN] = gen
        local value = old[L1_VALUE]
        if value == NIL then
            value = nil
        end
        return true, value, nil, false, true
    end
    local ok, value = decode(s)
    if not ok then
        return false, nil, "bad entry in the zone for key \"" .. key .. "\": "
                           .. value
    end
    set_l1(self, key, value, remaining, slot, gen, stamp)
    return true, value
end

-- syntax: found, value = store.fetch_stale(self, vkey)
-- An entry past its ttl or the zone's (resurrect_ttl).
function _M.fetch_stale(self, vkey)
    local s = self.dict:get_stale(vkey)
    if s == nil then
        return false
    end
    local ok, value = decode(s)
    if not ok then
        return false
    end
    return true, value
end

return _M
