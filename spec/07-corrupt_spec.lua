-- Corrupted zones: a zone whose body holds garbage (random bytes, links
-- bent out of range or into loops, a dead mutex holder over garbage) must
-- answer every call with an ordinary result or nil, "corrupt zone", and
-- never kill the process (SIGSEGV, SIGBUS, ...) nor hang it.
--
-- Each case overwrites part of a fresh copy of a populated zone through
-- plain file I/O (the zone is mapped MAP_SHARED, so what the file says is
-- what the processes see), then a forked child opens the copy and runs one
-- fixed sequence of every dictionary and lock method over many keys,
-- under a deadline.  Results may be garbage (a corrupted zone is allowed
-- to answer with the wrong value), but of a sane shape: error strings from
-- the documented set, strings no longer than the zone.
--
-- A failure names the case: its seed, what was written where.  To run one
-- random case again:
--
--     SHMLOCK_CORRUPT_SEED=<seed> SHMLOCK_CORRUPT_CASES=1 \
--         scripts/busted.sh spec/07-corrupt_spec.lua
--
-- (the template's lock tokens hold this run's pid, so the chunks after
-- them may move by a chunk between runs).  SHMLOCK_CORRUPT_CASES sets the
-- number of random cases per layout (300), SHMLOCK_CORRUPT_FAILURES the
-- number of failures after which a test stops (6).

local ffi = require "ffi"
local bit = require "bit"
local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local checkout = require "helpers.checkout"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local lib = require "resty.shmlock.lib"
local zone_layout = require "helpers.zone_layout"

local fmt = string.format
local concat = table.concat
local floor = math.floor
local min = math.min
local bxor, lshift, rshift = bit.bxor, bit.lshift, bit.rshift

-- mirrors of src/zone.h and src/chunk.h: see helpers.zone_layout
local LAYOUT = zone_layout.LAYOUT
pcall(ffi.cdef, [[
void *mmap(void *addr, size_t len, int prot, int flags, int fd, long off);
]])

local ZONE_HDR = zone_layout.ZONE_HDR
local SHARD_HDR = zone_layout.SHARD_HDR
local ENTRY = zone_layout.ENTRY
local CHUNK = 64

local function env_number(name, default)
    return tonumber(os.getenv(name)) or default
end

local CASES = env_number("SHMLOCK_CORRUPT_CASES", 300)   -- per layout
local SEED = env_number("SHMLOCK_CORRUPT_SEED", 1)       -- of the first case
-- failures after which a test stops: enough examples, and a bounded run
-- when every case hangs
local MAX_FAILURES = env_number("SHMLOCK_CORRUPT_FAILURES", 6)
-- seconds for a child's whole sequence: a ceiling only a hang reaches (a
-- sequence takes 0.1 s of CPU at most; on a loaded 2-core box one has
-- taken more than 5 s of wall time)
local DEADLINE = 30

local LAYOUTS = {
    { size = "64k" },
    { size = "256k" },
    { size = "4m", shards = 4 },
}

-- every error string a call may answer on a corrupted zone
local ERRORS = {}
for _, e in ipairs { "corrupt zone", "no memory", "not found", "exists",
                     "changed", "not a number", "timeout", "expired",
                     "locked", "unlocked", "value not a list",
                     "value is a list" } do
    ERRORS[e] = true
end

local SIGNALS = { [4] = "SIGILL", [6] = "SIGABRT", [7] = "SIGBUS",
                  [8] = "SIGFPE", [9] = "SIGKILL", [11] = "SIGSEGV",
                  [14] = "SIGALRM" }


-- ---- the zone's layout, read from a copy of its bytes ----

local function align64(n)
    return floor((n + 63) / 64) * 64
end

local function geometry(bytes)
    local h = ffi.cast("const " .. ZONE_HDR .. " *", bytes)
    assert(h.layout == LAYOUT and h.hdr_size == ffi.sizeof(ZONE_HDR)
           and h.shard_hdr_size == align64(ffi.sizeof(SHARD_HDR))
           and h.chunk_size == CHUNK and ffi.sizeof(ENTRY) == CHUNK,
           "src/zone.h changed: update the mirrors in this spec")
    local g = {
        size = tonumber(h.size),
        body = tonumber(h.waits_off),            -- after the header
        nshards = h.nshards,
        shards_off = tonumber(h.shards_off),
        shard_size = tonumber(h.shard_size),
        nchunks = h.nchunks,
        nbuckets = h.nbuckets,
        buckets_off = tonumber(h.buckets_off),
        refs_off = tonumber(h.refs_off),
        chunks_off = tonumber(h.chunks_off),
    }
    g.shard_div = 2 ^ 32 / g.nshards     -- the shard is the hash's top bits
    return g
end

local function shard_off(g, s)
    return g.shards_off + s * g.shard_size
end

local function hdr_field(g, s, field)
    return shard_off(g, s) + ffi.offsetof(SHARD_HDR, field)
end

local function bucket_off(g, s, b)
    return shard_off(g, s) + g.buckets_off + 4 * b
end

local function chunk_off(g, s, i)
    return shard_off(g, s) + g.chunks_off + CHUNK * i
end

local function entry_field(g, s, i, field)
    return chunk_off(g, s, i) + ffi.offsetof(ENTRY, field)
end

-- the last of `fields` (of struct ctype) that starts at or before byte rel
local function field_at(ctype, fields, rel)
    local name = fields[1]
    for _, f in ipairs(fields) do
        if ffi.offsetof(ctype, f) <= rel then
            name = f
        end
    end
    return name
end

local HDR_FIELDS = { "lock", "lock_start", "waiters", "takeovers", "seq",
                     "free_head",
                     "free_count", "lru_head", "lru_tail", "nentries",
                     "sweep", "recoveries", "stat_spins", "stat_sleeps",
                     "stat_evictions", "stat_expired" }
local ENTRY_FIELDS = { "next", "hnext", "lru_prev", "lru_next", "hash",
                       "value_len", "key_len", "meta_type", "meta_high",
                       "data", "num" }

-- what lives at byte `off` of the zone, for the failure messages
local function where(g, off)
    if off < g.shards_off then
        return "wait words"
    end
    local s = floor((off - g.shards_off) / g.shard_size)
    local rel = off - shard_off(g, s)
    local name = fmt("shard %d ", s)
    if rel < ffi.offsetof(SHARD_HDR, "undo_active") then
        return name .. field_at(SHARD_HDR, HDR_FIELDS, rel)
    elseif rel < g.buckets_off then
        return name .. "undo record"
    elseif rel < g.refs_off then
        return name .. "bucket " .. floor((rel - g.buckets_off) / 4)
    elseif rel < g.chunks_off then
        return name .. "read marks"
    end
    local i = floor((rel - g.chunks_off) / CHUNK)
    local at = (rel - g.chunks_off) % CHUNK
    return fmt("%schunk %d +%d (%s)", name, i, at,
               field_at(ENTRY, ENTRY_FIELDS, at))
end


-- ---- a populated zone's bytes, and finding things in them ----

local image_mt = {}
image_mt.__index = image_mt

local function image(bytes)
    return setmetatable({ bytes = bytes, geo = geometry(bytes),
                          ptr = ffi.cast("const char *", bytes) }, image_mt)
end

function image_mt:u32(off)
    return tonumber(ffi.cast("const uint32_t *", self.ptr + off)[0])
end

function image_mt:entry(s, i)
    return ffi.cast("const " .. ENTRY .. " *",
                    self.ptr + chunk_off(self.geo, s, i))
end

function image_mt:dict(s, field)
    return self:u32(hdr_field(self.geo, s, field))
end

-- the shard and bucket of a key
function image_mt:slot(key)
    local g = self.geo
    local h = tonumber(lib.shmlock_hash(key, #key))
    return floor(h / g.shard_div), h % g.nbuckets, h
end

-- { s = shard, i = index, b = bucket } of a key's entry in the copy, or
-- nil when the key is not there
function image_mt:find(key)
    local s, b, h = self:slot(key)
    local i, hops = self:u32(bucket_off(self.geo, s, b)), 0
    while i ~= 0 do
        local e = self:entry(s, i)
        if e.hash == h and e.key_len == #key then
            return { s = s, i = i, b = b }
        end
        i, hops = e.hnext, hops + 1
        assert(hops < 10000, "a hash chain loops in the template")
    end
end

function image_mt:must_find(key)
    return assert(self:find(key), "not in the template: " .. key)
end

-- the last chunk of entry i's chain
function image_mt:last_chunk(s, i)
    local c = i
    while self:entry(s, c).next ~= 0 do
        c = self:entry(s, c).next
    end
    return c
end

-- n new key names that hash to shard s, bucket b (for lookups that must
-- walk that very chain)
function image_mt:probes(s, b, n)
    local out, j = {}, 0
    while #out < n do
        j = j + 1
        local key = "probe:" .. j
        local ks, kb = self:slot(key)
        if ks == s and kb == b then
            out[#out + 1] = key
        end
        assert(j < 1e7, "no probe key found")
    end
    return out
end


-- ---- writing the corruption ----

local function u32(v)
    return ffi.string(ffi.new("uint32_t[1]", v), 4)
end

local function u16(v)
    return ffi.string(ffi.new("uint16_t[1]", v), 2)
end

local function write_at(path, off, bytes)
    local f = assert(io.open(path, "r+b"))
    assert(f:seek("set", off))
    assert(f:write(bytes))
    f:close()
end

local write_file = checkout.write_file

local function read_file(path)
    return assert(checkout.read_file(path), "cannot read " .. path)
end

-- xorshift32: the same numbers from a seed on every machine; returns a
-- function answering an integer in [0, n)
local function rng(seed)
    local x = bxor(bit.tobit(seed % 4294967296), 0x2545F491)
    if x == 0 then
        x = 1
    end
    local function next_int(n)
        x = bxor(x, lshift(x, 13))
        x = bxor(x, rshift(x, 17))
        x = bxor(x, lshift(x, 5))
        return (x % 4294967296) % n
    end
    for _ = 1, 8 do      -- near seeds must not start near each other
        next_int(1)
    end
    return next_int
end

local function random_bytes(r, n)
    local t = {}
    for i = 1, n do
        t[i] = r(256)
    end
    local parts = {}
    for i = 1, n, 4096 do
        parts[#parts + 1] = string.char(unpack(t, i, min(i + 4095, n)))
    end
    return concat(parts)
end


-- ---- the random cases ----

-- a byte offset of the body, a quarter of them in a shard's header and
-- first buckets, where the words every call follows live
local function random_offset(r, g, len)
    if r(4) == 0 then
        local s = r(g.nshards)
        return shard_off(g, s) + r(g.buckets_off + min(4 * g.nbuckets, 1024))
    end
    return g.body + r(g.size - g.body - len)
end

local function span_case(r, g)
    local lens = { 1 + r(16), 17 + r(240), 2048 }
    local len = lens[r(3) + 1]
    local off = random_offset(r, g, len)
    return fmt("%d random bytes at %d: %s .. %s", len, off, where(g, off),
               where(g, off + len - 1)),
           { { off, random_bytes(r, len) } }
end

local LINKS = { "next", "hnext", "lru_prev", "lru_next", "value_len" }
local DICT_WORDS = { "lock", "seq", "free_head", "free_count", "lru_head",
                     "lru_tail", "nentries", "undo_active", "undo_entry" }

-- 1 to 8 index words bent: out of range, or a valid index (a loop, a
-- chunk of another list)
local function links_case(r, g)
    local patches, said = {}, {}
    for n = 1, 1 + r(8) do
        local s = r(g.nshards)
        local off
        local pick = r(8)
        if pick == 0 then
            off = hdr_field(g, s, DICT_WORDS[r(#DICT_WORDS) + 1])
        elseif pick == 1 then
            off = bucket_off(g, s, r(g.nbuckets))
        else
            off = entry_field(g, s, 1 + r(g.nchunks), LINKS[r(#LINKS) + 1])
        end
        local values = { 0xFFFFFFFF, g.nchunks + 1, r(g.nchunks + 1),
                         r(4294967296) }
        local v = values[r(#values) + 1]
        patches[n] = { off, u32(v) }
        said[n] = fmt("%s = %d", where(g, off), v)
    end
    return "words " .. concat(said, ", "), patches
end

local function random_case(img, seed)
    local r = rng(seed)
    local what, patches
    if r(2) == 0 then
        what, patches = span_case(r, img.geo)
    else
        what, patches = links_case(r, img.geo)
    end
    return { what = fmt("seed %d: %s", seed, what), patches = patches }
end


-- ---- the targeted cases: one link or count bent on purpose ----

-- Each returns the patches, as { offset, bytes }, and keys to update
-- besides the usual sample: the bent entry's own, and keys whose lookups
-- walk its chain.  t: the template and what it holds (t.short: a short
-- key's entry, t.long: an entry of a multi-chunk value, t.other: another
-- entry of t.short's shard, t.dead_pid: a pid no process has).
local function bent(t, key)
    local e = t.img:must_find(key)
    local keys = t.img:probes(e.s, e.b, 3)
    keys[#keys + 1] = key
    return e, keys
end

local TARGETED = {}

local function targeted(name, fn)
    TARGETED[#TARGETED + 1] = { name = name, make = fn }
end

local function dict_word(t, s, field, v)
    return { hdr_field(t.img.geo, s, field), u32(v) }
end

local function entry_word(t, e, i, field, v)
    return { entry_field(t.img.geo, e.s, i, field), u32(v) }
end

targeted("a bucket pointing far past the last chunk", function(t)
    local e, probes = bent(t, t.short)
    return { { bucket_off(t.img.geo, e.s, e.b), u32(0xFFFFFFFF) } }, probes
end)

targeted("a bucket pointing just past the last chunk", function(t)
    local e, probes = bent(t, t.short)
    return { { bucket_off(t.img.geo, e.s, e.b), u32(t.img.geo.nchunks + 1) } },
           probes
end)

targeted("a hash chain looping back to its own entry", function(t)
    local e, probes = bent(t, t.short)
    return { entry_word(t, e, e.i, "hnext", e.i) }, probes
end)

targeted("a hash chain looping through two entries", function(t)
    local e, probes = bent(t, t.short)
    local other = t.img:must_find(t.other)
    assert(other.s == e.s and other.i ~= e.i)
    return { entry_word(t, e, e.i, "hnext", other.i),
             entry_word(t, e, other.i, "hnext", e.i) }, probes
end)

targeted("a hash chain link far out of range", function(t)
    local e, probes = bent(t, t.short)
    return { entry_word(t, e, e.i, "hnext", 0xFFFFFFFF) }, probes
end)

targeted("a value's first chunk link looping to its head", function(t)
    local e, probes = bent(t, t.long)
    return { entry_word(t, e, e.i, "next", e.i) }, probes
end)

targeted("a value's last chunk linking back to its head", function(t)
    local e, probes = bent(t, t.long)
    return { entry_word(t, e, t.img:last_chunk(e.s, e.i), "next", e.i) },
           probes
end)

targeted("a value's chunk link far out of range", function(t)
    local e, probes = bent(t, t.long)
    local c = t.img:entry(e.s, e.i).next
    return { entry_word(t, e, c, "next", 0xFFFFFFFF) }, probes
end)

targeted("a huge value length", function(t)
    local e, probes = bent(t, t.long)
    return { entry_word(t, e, e.i, "value_len", 0xFFFFFFF0) }, probes
end)

targeted("a huge key length", function(t)
    local e, probes = bent(t, t.short)
    return { { entry_field(t.img.geo, e.s, e.i, "key_len"), u16(0xFFFF) } },
           probes
end)

-- a list's head keeps its first node in the low half of `num`, its last
-- in the high half (src/list.h)
local function list_nodes(t, e)
    local nodes = {}
    local n = tonumber(bit.band(t.img:entry(e.s, e.i).num, 0xFFFFFFFF))
    while n ~= 0 do
        nodes[#nodes + 1] = n
        n = t.img:entry(e.s, n).hnext
        assert(#nodes < 1000, "a list loops in the template")
    end
    assert(#nodes >= 3, "the list role has fewer than 3 nodes")
    return nodes
end

targeted("a list's first node far out of range", function(t)
    local e, probes = bent(t, t.list)
    return { entry_word(t, e, e.i, "num", 0xFFFFFFFF) }, probes
end)

targeted("a list's last node not its last", function(t)
    local e, probes = bent(t, t.list)
    local nodes = list_nodes(t, e)
    return { { entry_field(t.img.geo, e.s, e.i, "num") + 4, u32(nodes[1]) } },
           probes
end)

targeted("a list's nodes looping back to the first", function(t)
    local e, probes = bent(t, t.list)
    local nodes = list_nodes(t, e)
    return { entry_word(t, e, nodes[#nodes], "hnext", nodes[1]) }, probes
end)

targeted("a list's back link far out of range", function(t)
    local e, probes = bent(t, t.list)
    local nodes = list_nodes(t, e)
    return { entry_word(t, e, nodes[#nodes], "lru_prev", 0xFFFFFFFF) }, probes
end)

targeted("a list's node of a bad type", function(t)
    local e, probes = bent(t, t.list)
    local nodes = list_nodes(t, e)
    -- (meta's type byte: the type in its low 3 bits)
    return { { entry_field(t.img.geo, e.s, nodes[1], "meta_type"),
               string.char(5) } },
           probes
end)

targeted("a list's count far above its nodes", function(t)
    local e, probes = bent(t, t.list)
    return { entry_word(t, e, e.i, "value_len", 0xFFFFFFF0) }, probes
end)

targeted("the free list head far out of range", function(t)
    local e = t.img:must_find(t.short)
    return { dict_word(t, e.s, "free_head", 0xFFFFFFFF) }
end)

targeted("a free list looping back to its head", function(t)
    local e = t.img:must_find(t.short)
    local f = t.img:dict(e.s, "free_head")
    assert(f ~= 0, "the template has no free chunk")
    return { entry_word(t, e, f, "next", f) }
end)

targeted("a free count far above the free list's length", function(t)
    local e = t.img:must_find(t.short)
    return { dict_word(t, e.s, "free_count", 0xFFFFFFFF) }
end)

targeted("the LRU tail far out of range", function(t)
    local e = t.img:must_find(t.short)
    return { dict_word(t, e.s, "lru_tail", 0xFFFFFFFF) }
end)

targeted("the LRU head far out of range", function(t)
    local e = t.img:must_find(t.short)
    return { dict_word(t, e.s, "lru_head", 0xFFFFFFFF) }
end)

targeted("an LRU list looping at its tail", function(t)
    local e = t.img:must_find(t.short)
    local tail = t.img:dict(e.s, "lru_tail")
    return { entry_word(t, e, tail, "lru_prev", tail) }
end)

targeted("an LRU link far out of range", function(t)
    local e = t.img:must_find(t.short)
    local tail = t.img:dict(e.s, "lru_tail")
    return { entry_word(t, e, tail, "lru_prev", 0xFFFFFFFF) }
end)

targeted("a mutex owner of 0xFFFFFFFF (kill(-1, 0) succeeds)", function(t)
    local e, probes = bent(t, t.short)
    return { dict_word(t, e.s, "lock", 0xFFFFFFFF) }, probes
end)

targeted("a garbage mutex owner and waiter count", function(t)
    local e, probes = bent(t, t.short)
    return { dict_word(t, e.s, "lock", 0x7FFFFFF0),
             dict_word(t, e.s, "waiters", 0xFFFFFFFF) }, probes
end)

targeted("a dead mutex holder over a looping hash chain", function(t)
    local e, probes = bent(t, t.short)
    return { dict_word(t, e.s, "lock", t.dead_pid),
             entry_word(t, e, e.i, "hnext", e.i) }, probes
end)

targeted("a dead mutex holder over a bucket out of range", function(t)
    local e, probes = bent(t, t.short)
    return { dict_word(t, e.s, "lock", t.dead_pid),
             { bucket_off(t.img.geo, e.s, e.b), u32(0xFFFFFFFF) } }, probes
end)

targeted("a dead mutex holder over an undo record of garbage", function(t)
    local e, probes = bent(t, t.long)
    return { dict_word(t, e.s, "lock", t.dead_pid),
             dict_word(t, e.s, "undo_active", 1),
             dict_word(t, e.s, "undo_entry", e.i),
             dict_word(t, e.s, "undo_len", 4096),
             { hdr_field(t.img.geo, e.s, "undo_head"), ("\255"):rep(64) } },
           probes
end)

targeted("a dead mutex holder over an undo record out of range", function(t)
    local e, probes = bent(t, t.long)
    return { dict_word(t, e.s, "lock", t.dead_pid),
             dict_word(t, e.s, "undo_active", 0xFFFFFFFF),
             dict_word(t, e.s, "undo_entry", 0xFFFFFFFF),
             dict_word(t, e.s, "undo_len", 0xFFFFFFFF) }, probes
end)

targeted("a seqlock word left odd", function(t)
    local e, probes = bent(t, t.short)
    return { dict_word(t, e.s, "seq", 0xFFFFFFFF) }, probes
end)

targeted("read marks all set", function(t)
    local g = t.img.geo
    local e = t.img:must_find(t.short)
    return { { shard_off(g, e.s) + g.refs_off,
               ("\255"):rep(g.chunks_off - g.refs_off) } }
end)


-- ---- the populated zone ----

local VALUE_LENS = { 0, 5, 12, 40, 100, 300, 1000, 3000 }

local function long_key(i)
    return fmt("long/key/%d/", i) .. ("x"):rep(20 + i % 200)
end

-- fills the dictionary to about 98% with a mix of entries; returns the keys
-- and the roles the targeted cases need
local function populate(dict)
    local keys, roles, short, long, lists = {}, {}, {}, {}, {}
    local goal = dict:capacity() * 0.02
    local i = 0
    while dict:free_space() > goal do
        i = i + 1
        local key = i % 3 == 0 and long_key(i) or "k" .. i
        local len = VALUE_LENS[i % #VALUE_LENS + 1]
        local value = ("v"):rep(len)
        local m, ok, err = i % 10
        if m == 0 then
            ok, err = dict:add(key, value)
        elseif m == 1 then
            ok, err = dict:set(key, i * 1.5)
        elseif m == 2 then
            ok, err = dict:set(key, i % 4 == 0)
        elseif m == 3 then
            ok, err = dict:set(key, value, 0.001)     -- expired by the cases
        elseif m == 4 then
            ok, err = dict:add(key, value, 0.001)     -- pinned and expired
        elseif m == 5 then
            ok, err = dict:set(key, value, 1000, i)
        elseif m == 7 and dict:free_space() > 3 * goal then
            -- a list of a few elements of several sizes
            for j = 1, 1 + i % 5 do
                ok, err = dict:rpush(key, j % 2 == 0 and j or value:sub(j * 7))
                if not ok then
                    break
                end
            end
            if ok and i % 5 >= 2 then
                lists[#lists + 1] = key
            end
        else
            ok, err = dict:set(key, value)
        end
        assert(ok or err == "no memory", err)
        if ok then
            keys[#keys + 1] = key
            if m >= 8 and #key <= 8 then
                if len <= 12 then
                    short[#short + 1] = key
                elseif len >= 300 then
                    long[#long + 1] = key
                end
            end
        end
    end
    -- the targeted cases bend a free list: leave free chunks (for the
    -- six locks taken next too)
    while dict:free_space() < 32 * 64 and #keys > 0 do
        dict:delete(table.remove(keys))
    end
    -- the first of each kind that is still there (a shard that filled
    -- first evicted some: ttl() tells without marking them read)
    for _, key in ipairs(short) do
        if dict:ttl(key) then
            roles.short = key
            break
        end
    end
    for _, key in ipairs(long) do
        if dict:ttl(key) then
            roles.long = key
            break
        end
    end
    for _, key in ipairs(lists) do
        if dict:ttl(key) then
            roles.list = key
            break
        end
    end
    return keys, roles
end

-- a key of the same shard as `key` but another entry
local function other_key(img, keys, key)
    local s = img:slot(key)
    for _, k in ipairs(keys) do
        if k ~= key and img:slot(k) == s and img:find(k) then
            return k
        end
    end
end

-- three locks, on keys prefix1..3, held by the calling process
local function take_locks(dict, prefix)
    local held = {}
    for i = 1, 3 do
        local lock = assert(resty_lock:new(dict, { exptime = 600 }))
        assert(lock:lock(prefix .. i))
        held[i] = lock
    end
    return held
end


-- ---- the child's sequence ----

local pack = checkout.pack

-- pcall's verdict, and the results packed
local function verdict(ok, ...)
    return ok, pack(...)
end

local function show(v)
    if type(v) == "string" then
        return #v > 40 and fmt("a string of %d bytes", #v) or fmt("%q", v)
    end
    return tostring(v)
end

local function known_error(v, err)
    if v == nil and ERRORS[err] then
        return nil
    end
    return "answered " .. show(v) .. ", " .. show(err)
end

-- Checks of a call's results (r, packed, and the zone's size): nil when
-- they have a shape the method documents, else why not.
local check = {}

function check.value(r, size)
    local v = r[1]
    if v == nil then
        return r[2] ~= nil and known_error(nil, r[2]) or nil
    end
    local t = type(v)
    if t == "string" and #v > size then
        return fmt("a string of %d bytes from a zone of %d", #v, size)
    end
    if t ~= "string" and t ~= "number" and t ~= "boolean" then
        return "a value of type " .. t
    end
    if r[2] ~= nil and type(r[2]) ~= "number" then
        return "flags " .. show(r[2])
    end
    if r[3] ~= nil and type(r[3]) ~= "boolean" then
        return "stale " .. show(r[3])
    end
end

function check.store(r)
    if r[1] == true and r[2] == nil and type(r[3]) == "boolean" then
        return nil
    end
    -- forcible may be true on a failure, as ngx.shared.DICT's "no memory"
    -- after evictions: entries were evicted before the corruption showed
    if not r[1] and ERRORS[r[2]] and type(r[3]) == "boolean" then
        return nil
    end
    return "answered " .. show(r[1]) .. ", " .. show(r[2]) .. ", "
           .. show(r[3])
end

function check.number(r)
    if type(r[1]) == "number" then
        return nil
    end
    return known_error(r[1], r[2])
end

function check.ok(r)
    if r[1] == true or r[1] == 1 then
        return nil
    end
    return known_error(r[1], r[2])
end

function check.count(r)
    if type(r[1]) == "number" and r[1] >= 0 then
        return nil
    end
    return known_error(r[1], r[2])
end

function check.none(r)
    if r.n == 0 or r[1] == true then
        return nil
    end
    return known_error(r[1], r[2])
end

function check.keys(r, size)
    if type(r[1]) ~= "table" then
        return known_error(r[1], r[2])
    end
    for _, k in ipairs(r[1]) do
        if type(k) ~= "string" or #k > size then
            return "a key " .. show(k)
        end
    end
end

function check.stats(r)
    local st = r[1]
    if type(st) ~= "table" then
        return known_error(st, r[2])
    end
    if type(st.shard) ~= "table" or #st.shard ~= st.shards then
        return "stats.shard " .. show(st.shard)
    end
    for _, t in ipairs { st, unpack(st.shard) } do
        for _, f in ipairs { "capacity", "free_space", "entries", "evictions",
                             "expired", "spins", "sleeps", "takeovers",
                             "recoveries" } do
            if type(t[f]) ~= "number" or t[f] < 0 then
                return "stats " .. f .. " " .. show(t[f])
            end
        end
    end
end

function check.verify(r)
    if r[1] == true then
        return nil
    end
    if r[1] == nil and type(r[2]) == "string" and r[2]:find("^corrupt") then
        return nil
    end
    return "answered " .. show(r[1]) .. ", " .. show(r[2])
end


-- The call in progress (method and key), written where the parent reads
-- it after the child died: a crash leaves no time to say anything.  One
-- page shared by all the children (MAP_SHARED | MAP_ANONYMOUS), a note
-- of NOTE_SIZE bytes per job slot.
local NOTE_SIZE, NOTE_PART = 128, 60
local notes = ffi.cast("char *", ffi.C.mmap(nil, 4096, 3, 0x21, -1, 0))
assert(notes ~= ffi.cast("char *", -1), "mmap failed")
local note_buf = notes           -- the child's own slot, set after fork

local function note(name, key)
    local n, k = min(#name, NOTE_PART), min(#key, NOTE_PART)
    ffi.copy(note_buf, name, n)
    note_buf[n] = 32
    ffi.copy(note_buf + n + 1, key, k)
    note_buf[n + 1 + k] = 0
end

-- the first few problems, each cut short (they cross a pipe)
local MAX_PROBLEMS = 20

local function problem(ctx, what)
    if #ctx.problems < MAX_PROBLEMS then
        ctx.problems[#ctx.problems + 1] = what:sub(1, 300)
    end
end

-- Runs fn(...) as the call `name` on `key`, checks its results with
-- check[how]; what is wrong goes to ctx.problems.  Returns the first result.
local function call(ctx, how, name, key, fn, ...)
    note(name, key)
    local ok, r = verdict(pcall(fn, ...))
    local why
    if ok then
        why = check[how](r, ctx.size)
    else
        why = "raised " .. tostring(r[1])
    end
    if why then
        problem(ctx, name .. " " .. key:sub(1, NOTE_PART) .. ": " .. why)
    end
    return r[1]
end

-- dict:name(key, ...)
local function on_key(ctx, how, name, key, ...)
    return call(ctx, how, name, key, ctx.dict[name], ctx.dict, key, ...)
end

-- dict:name(...), a call on the whole dictionary
local function on_dict(ctx, how, name, ...)
    return call(ctx, how, name, "", ctx.dict[name], ctx.dict, ...)
end

-- every kind of update on one key that may exist; n: a value length
local function updates(ctx, key, n)
    on_key(ctx, "value", "get", key)
    on_key(ctx, "store", "replace", key, "r:" .. key)
    on_key(ctx, "store", "add", key, 1)
    on_key(ctx, "store", "safe_add", key, "x")
    on_key(ctx, "store", "set", key, ("L"):rep(n + 200))     -- longer
    on_key(ctx, "store", "set", key, ("S"):rep(n))           -- shorter
    on_key(ctx, "store", "set", key, ("T"):rep(n), 100, 7)   -- same size
    on_key(ctx, "store", "safe_set", key, ("U"):rep(n), 100)
    on_key(ctx, "ok", "cas", key, ("U"):rep(n), 42)
    on_key(ctx, "number", "incr", key, 1)
    on_key(ctx, "ok", "cad", key, 44)
    on_key(ctx, "number", "incr", key .. ":n", 1, 0, 100)
    on_key(ctx, "ok", "expire", key, 100)
    on_key(ctx, "number", "ttl", key)
    on_key(ctx, "count", "llen", key)
    on_key(ctx, "count", "rpush", key, ("P"):rep(n))
    on_key(ctx, "count", "lpush", key, n)
    on_key(ctx, "value", "rpop", key)
    on_key(ctx, "count", "llen", key .. ":l")
    on_key(ctx, "count", "lpush", key .. ":l", ("Q"):rep(n))
    on_key(ctx, "count", "rpush", key .. ":l", n)
    on_key(ctx, "value", "lpop", key .. ":l")
    on_key(ctx, "store", "set", key, true, 0.001)
    on_key(ctx, "value", "get_stale", key)
    if n % 2 == 0 then
        on_key(ctx, "store", "delete", key)
    end
end

local NEW_KINDS = { "set", "safe_set", "add", "safe_add" }

-- stores enough new data to make every shard evict (free: what
-- free_space said, which a corrupted count may inflate)
local function fill(ctx, free)
    local i, stored = 0, 0
    while stored < min(free, ctx.size) + ctx.size / 8 do
        i = i + 1
        local len = VALUE_LENS[i % #VALUE_LENS + 1] + 900
        local key = i % 3 == 0 and long_key(i) .. ":new" or "new:" .. i
        on_key(ctx, "store", NEW_KINDS[i % #NEW_KINDS + 1], key,
               ("n"):rep(len), i % 2 * 100)
        stored = stored + len
    end
end

-- a lock on keys free, held by a dead process, held by a live one
local function locks(ctx)
    local lock = resty_lock:new(ctx.dict, { timeout = 0.02, exptime = 10 })
    if not lock then
        problem(ctx, "resty_lock:new failed")
        return
    end
    local function lcall(how, name, key, ...)
        return call(ctx, how, "lock:" .. name, key, lock[name], lock, ...)
    end
    for _, key in ipairs { "lock:free", "lock:dead:1", "lock:live:1" } do
        lcall("number", "lock", key, key)
        lcall("ok", "expire", key, 5)
        lcall("ok", "unlock", key)
    end
    for _, key in ipairs { "lock:dead:2", "lock:live:2", ctx.keys[1] } do
        lcall("number", "trylock", key, key)
        lcall("ok", "unlock", key)
    end
end

-- every method, over every key; the problems found
local function sequence(ctx)
    on_dict(ctx, "verify", "verify")
    for _, key in ipairs(ctx.keys) do
        on_key(ctx, "value", "get", key)
        on_key(ctx, "value", "get_stale", key)
    end
    for j, key in ipairs(ctx.probes) do
        updates(ctx, key, j * 30)
    end
    local step = math.max(1, floor(#ctx.keys / 48))
    for j = 1, #ctx.keys, step do
        updates(ctx, ctx.keys[j], j % 70)
    end
    fill(ctx, on_dict(ctx, "count", "free_space") or 0)
    locks(ctx)
    on_dict(ctx, "keys", "get_keys", 0)
    on_dict(ctx, "count", "flush_expired")
    on_dict(ctx, "count", "free_space")
    on_dict(ctx, "count", "capacity")
    on_dict(ctx, "stats", "stats")
    on_dict(ctx, "verify", "verify")
    on_dict(ctx, "none", "flush_all")
    on_dict(ctx, "keys", "get_keys", 0)
    return ctx.problems
end

-- A mutex word that names a live process (this child included) is a
-- held mutex, not a corrupted one: waiting for it is right.  Such a word
-- is freed before the zone is used.
local function free_live_owners(path, g)
    local f = assert(io.open(path, "r+b"))
    for s = 0, g.nshards - 1 do
        local off = hdr_field(g, s, "lock")
        f:seek("set", off)
        local owner = ffi.cast("const uint32_t *", f:read(4))[0]
        if owner > 0 and owner < 2 ^ 31
           and lib.shmlock_proc_alive(owner, 0) == 1
        then
            f:seek("set", off)
            f:write(u32(0))
        end
    end
    f:close()
end

-- the child: opens the corrupted copy, zone `name`, runs the sequence
local function child(layout, name, case)
    ffi.C.alarm(DEADLINE + 2)
    free_live_owners(layout.dir .. "/shmlock." .. name, layout.img.geo)
    local dict = assert(shdict.open(name, { dir = layout.dir,
                                            create = false }))
    local ctx = { dict = dict, keys = layout.keys, probes = case.probes or {},
                  size = layout.img.geo.size, problems = {} }
    local problems = sequence(ctx)
    if case.intact and dict:verify() ~= true then
        problems[#problems + 1] = "verify after: " .. select(2, dict:verify())
    end
    if #problems > 0 then
        error(concat(problems, "\n    "), 0)
    end
end


-- ---- running cases ----

local JOBS = 2      -- cases run at once (one per core of a small box)

local function outcome(r)
    if r.how == "signal" then
        return fmt("killed by %s (%d)", SIGNALS[r.sig] or "signal", r.sig)
    elseif r.how == "timeout" then
        return fmt("still running after %d s (a hang)", DEADLINE)
    end
    return fmt("exit %d", r.code)
end

-- writes the case's copy of the zone in job slot `slot`, forks its child
local function start(layout, slot, case)
    local name = "case" .. slot
    local path = layout.dir .. "/shmlock." .. name
    write_file(path, layout.img.bytes)
    for _, p in ipairs(case.patches) do
        write_at(path, p[1], p[2])
    end
    note_buf = notes + (slot - 1) * NOTE_SIZE
    note("before the first call", "")
    return { case = case, slot = slot, deadline = proc.now() + DEADLINE,
             pid = proc.spawn(child, layout, name, case) }
end

-- the job's end if it has ended (or overstayed: then killed), else nil;
-- second result: what went wrong, nil when nothing did
local function finish(job)
    local r
    if proc.now() > job.deadline then
        r = proc.wait(job.pid, 0)
    else
        r = proc.try_wait(job.pid)
    end
    if not r or r.how == "exit" and r.code == 0 then
        return r
    end
    if r.how == "exit" and r.code == 99 then
        return r, fmt("%s: wrong results:\n    %s", job.case.what, r.msg)
    end
    return r, fmt("%s: %s in %s", job.case.what, outcome(r),
                  ffi.string(notes + (job.slot - 1) * NOTE_SIZE))
end

-- Runs the cases JOBS at a time, until MAX_FAILURES failed; fails the
-- test with every failure.
local function run(layout, cases)
    local failures, jobs, ran = {}, {}, 0
    repeat
        for slot = 1, JOBS do
            if not jobs[slot] and ran < #cases
               and #failures < MAX_FAILURES
            then
                ran = ran + 1
                jobs[slot] = start(layout, slot, cases[ran])
            end
        end
        for slot, job in pairs(jobs) do
            local ended, failure = finish(job)
            if ended then
                jobs[slot] = nil
                failures[#failures + 1] = failure
            end
        end
        proc.sleep(0.0005)
    until next(jobs) == nil and (ran == #cases or #failures >= MAX_FAILURES)
    assert.equal(0, #failures, fmt("%d of %d cases failed:\n  %s",
                                   #failures, ran, concat(failures, "\n  ")))
end


describe("resty.shmlock.shdict on a corrupted zone", function()
    fixture.new { dir = false, children = "assert" }

    for _, spec in ipairs(LAYOUTS) do
        local label = spec.size .. (spec.shards and ", " .. spec.shards
                                    .. " shards" or "")
        describe("(" .. label .. ")", function()
            local layout, t = {}, {}
            local live_locks

            lazy_setup(function()
                layout.dir = proc.tmpdir()
                local template = assert(shdict.open("template", {
                    dir = layout.dir, size = spec.size, shards = spec.shards,
                }))
                local keys, roles = populate(template)
                assert(roles.short and roles.long and roles.list,
                       "no entry for the roles")
                -- locks of a process that is gone, and of this one
                local locker = proc.spawn(take_locks, template, "lock:dead:")
                assert.same("exit", proc.wait(locker, 10).how)
                live_locks = take_locks(template, "lock:live:")
                for _, k in ipairs { "lock:dead:1", "lock:dead:2",
                                     "lock:live:1", "lock:live:2" } do
                    keys[#keys + 1] = k
                end
                proc.sleep(0.01)        -- the 1 ms entries have expired
                layout.img = image(read_file(layout.dir
                                             .. "/shmlock.template"))
                layout.keys = keys

                t.img, t.short, t.long = layout.img, roles.short, roles.long
                t.list = roles.list
                t.other = other_key(layout.img, keys, roles.short)
                t.dead_pid = locker     -- reaped: no process has its pid
            end)

            lazy_teardown(function()
                for _, lock in ipairs(live_locks or {}) do
                    lock:unlock()
                end
                if layout.dir then
                    proc.rmtree(layout.dir)
                end
            end)

            it("runs the whole sequence cleanly on an intact copy", function()
                run(layout, { { what = "intact copy", patches = {},
                                intact = true } })
            end)

            it(fmt("never crashes nor hangs, whatever %d random corruptions "
                   .. "of the body write", CASES), function()
                local cases = {}
                for seed = SEED, SEED + CASES - 1 do
                    cases[#cases + 1] = random_case(layout.img, seed)
                end
                run(layout, cases)
            end)

            for _, target in ipairs(TARGETED) do
                it("never crashes nor hangs on " .. target.name, function()
                    local patches, probes = target.make(t)
                    run(layout, { { what = target.name, patches = patches,
                                    probes = probes } })
                end)
            end
        end)
    end
end)
