-- resty.shmlock.cache.l1 (internal): the cache's per-process L1, an LRU
-- of at most `size` items with a ttl each.
--
-- Under LuaJIT it is lua-resty-lrucache (Debian's lua-resty-lrucache: its
-- FFI one); under PUC Lua, the LRU below, in plain Lua, expiring on the
-- zone's monotonic clock.  Both answer lrucache's new(size), get(key),
-- set(key, value, ttl?), delete(key) and flush_all().

local core = require "resty.shmlock.internal.core"
local now_ms = require("resty.shmlock.internal.clock").now_ms

local setmetatable = setmetatable
local tostring = tostring

local _M = {}


-- The L1's clock: the zone's (CLOCK_MONOTONIC, in ms), read by an FFI
-- call at each hit, whose reading the cache keeps (l1.last[0]) for its
-- own use of the time at that hit (opts.redis: whether the fleet's
-- changes are due), so that a hit reads the clock once.  The call also
-- keeps the JIT from hoisting the cache's load of a generation word, made
-- after it, out of a loop of hits (spec/31).  The reading is kept in an
-- FFI array, not an upvalue: a store to an upvalue is a guard, which
-- would make the JIT keep the clock call's boxed 64-bit result for its
-- snapshot, and an allocation in a loop stops it from hoisting the
-- cache's lookups out of a loop of hits (some 200 instructions a hit).
local last = core.ffi and require("ffi").new("double[1]") or { [0] = 0 }
_M.last = last

local function clock_ms()
    local ms = now_ms()
    last[0] = ms
    return ms
end


-- Debian's lua-resty-lrucache reads ngx.now once, when it loads, and needs
-- nothing else from ngx.  We load a copy of our own in an environment
-- whose ngx.now is the L1's clock, inside nginx too: its ttls then run by
-- the zone's monotonic clock (nginx's ngx.now is the wall clock, which
-- may step back by hours), and no global `ngx` appears outside nginx
-- (other modules take a global ngx to mean "inside nginx").
local function load_lrucache()
    local path, err = package.searchpath("resty.lrucache", package.path)
    if not path then
        error("resty.shmlock.cache: cannot find resty.lrucache "
              .. "(Debian package lua-resty-lrucache):" .. err, 4)
    end
    local chunk, lerr = loadfile(path)
    if not chunk then
        error("resty.shmlock.cache: cannot load " .. path .. ": " .. lerr, 4)
    end
    local shim = { now = function() return clock_ms() / 1000 end }
    setfenv(chunk, setmetatable({ ngx = shim }, { __index = _G }))
    local ok, mod = pcall(chunk, "resty.lrucache")
    if not ok then
        error("resty.shmlock.cache: cannot load " .. path .. ": "
              .. tostring(mod), 4)
    end
    return mod
end


-- The plain-Lua LRU: a table of nodes by key and a doubly linked ring
-- through a sentinel, the most recent first.
local lru = {}
local lru_mt = { __index = lru }

local function unlink(node)
    node.prev.next = node.next
    node.next.prev = node.prev
end

local function push_front(self, node)
    local head = self.head
    node.next = head.next
    node.prev = head
    head.next.prev = node
    head.next = node
end

function lru.get(self, key)
    local node = self.nodes[key]
    if not node then
        return nil
    end
    if node.exp and node.exp <= clock_ms() then
        unlink(node)
        self.nodes[key] = nil
        self.n = self.n - 1
        return nil
    end
    unlink(node)
    push_front(self, node)
    return node.value
end

function lru.set(self, key, value, ttl)
    local nodes = self.nodes
    local node = nodes[key]
    if node then
        unlink(node)
    else
        if self.n >= self.size then
            local oldest = self.head.prev
            unlink(oldest)
            nodes[oldest.key] = nil
            self.n = self.n - 1
        end
        node = { key = key }
        nodes[key] = node
        self.n = self.n + 1
    end
    node.value = value
    node.exp = ttl and ttl > 0 and clock_ms() + ttl * 1000 or nil
    push_front(self, node)
end

function lru.delete(self, key)
    local node = self.nodes[key]
    if node then
        unlink(node)
        self.nodes[key] = nil
        self.n = self.n - 1
    end
end

function lru.flush_all(self)
    local head = {}
    head.next, head.prev = head, head
    self.head, self.nodes, self.n = head, {}, 0
end

-- syntax: l = l1.lru(size): the plain-Lua LRU (size >= 1)
function _M.lru(size)
    local self = setmetatable({ size = size }, lru_mt)
    self:flush_all()
    return self
end


local lrucache   -- loaded by the first new()

-- syntax: l = l1.new(size): this interpreter's L1 of size items (>= 1)
function _M.new(size)
    if not core.ffi then
        return _M.lru(size)
    end
    lrucache = lrucache or load_lrucache()
    return lrucache.new(size)
end

return _M
