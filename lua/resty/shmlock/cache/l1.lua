-- resty.shmlock.cache.l1 (internal): the cache's per-process L1, an LRU
-- of at most `size` items with a ttl each.
--
-- Under LuaJIT it is lua-resty-lrucache (Debian's lua-resty-lrucache: its
-- FFI one); under PUC Lua, the LRU below, in plain Lua, expiring on the
-- zone's monotonic clock.  Both answer lrucache's new(size), get(key),
-- set(key, value, ttl?), delete(key) and flush_all().

local core = require "resty.shmlock.internal.core"
local nginx = require "resty.shmlock.internal.nginx"
local now_ms = require("resty.shmlock.internal.clock").now_ms

local setmetatable = setmetatable
local tostring = tostring

local _M = {}


-- Debian's lua-resty-lrucache reads ngx.now once, when it loads, and needs
-- nothing else from ngx.  Outside nginx we load it in an environment whose
-- ngx.now is the zone's clock, so no global `ngx` ever appears (other
-- modules take a global ngx to mean "inside nginx").  The cache gives its
-- L1 entries no ttl here (lrucache's clock, inside nginx, is ngx.now, the
-- wall clock): it checks each hit's own expiry, one read of the zone's
-- clock, and lrucache's get reads no clock.
local function load_lrucache()
    if nginx.api() then
        return require "resty.lrucache"
    end

    local path, err = package.searchpath("resty.lrucache", package.path)
    if not path then
        error("resty.shmlock.cache: cannot find resty.lrucache "
              .. "(Debian package lua-resty-lrucache):" .. err, 4)
    end
    local chunk, lerr = loadfile(path)
    if not chunk then
        error("resty.shmlock.cache: cannot load " .. path .. ": " .. lerr, 4)
    end
    local shim = { now = function() return now_ms() / 1000 end }
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
    if node.exp and node.exp <= now_ms() then
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
    node.exp = ttl and ttl > 0 and now_ms() + ttl * 1000 or nil
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

-- syntax: l, get = l1.new(size): this interpreter's L1 of size items
-- (>= 1), and its get function (get(l, key)), the same for every L1 this
-- interpreter makes: the cache's hit calls it directly, not as l:get(key),
-- a lookup that misses in the L1 object before its metatable's __index
-- finds it, costs the hit more than the rest of lrucache's get.
function _M.new(size)
    if not core.ffi then
        return _M.lru(size), lru.get
    end
    lrucache = lrucache or load_lrucache()
    return lrucache.new(size), lrucache.get
end

return _M
