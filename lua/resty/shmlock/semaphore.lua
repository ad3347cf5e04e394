-- resty.shmlock.semaphore: a counting semaphore shared by every process
-- and nginx worker of the host that opens the zone (docs/semaphore.md).
--
--     local semaphore = require "resty.shmlock.semaphore"
--     local sem = assert(semaphore:new("my_zone", { permits = 4 }))
--     local elapsed, err = sem:acquire("backend")
--     ...
--     sem:release()
--
-- The permits of a key are records in the zone's lock slots, counted by
-- the C core under the key's shard mutex (src/group.h): never more
-- holders than the acquirer's `permits`, a dead process's permit back at
-- the next acquire that finds the key full, a lease (`exptime`) per
-- permit.  While the object holds a permit, a handle keeps what the
-- release needs, so that a collected object gives its permit back; a copy
-- of the object in a forked child holds nothing (the handle keeps the pid
-- that acquired, token.ours).
--
-- Bindings.  The logic is written once, here, over the binding's holder
-- group calls (resty.shmlock.lock.slots: under LuaJIT C is the library
-- itself, so acquire and release are the FFI calls, nothing in between;
-- under PUC Lua the C module's functions of the same names) and its
-- permit handle (resty.shmlock.semaphore.permit: a cdata with a
-- finalizer; .permit.capi: a table with __gc, or a proxy under Lua 5.1).
--
-- Waiting: outside nginx, on the zone's wait word of the key (a release
-- wakes a sleeper at once), in steps that look for dead holders between
-- them; inside nginx, the lock's one wait (resty.shmlock.lock.wait:
-- resty.lock's steps, then the worker's queue, where the oldest queued
-- waiter's turn keeps everyone else out: a bounded wait); where the phase
-- cannot yield, nil, "cannot wait in <phase> phase", unless
-- blocking_timeout lets the worker block that long.

local slots = require "resty.shmlock.lock.slots"
local core = require "resty.shmlock.internal.core"
local permit = core.part("permit")
local names = require "resty.shmlock.internal.names"
local zone_handle = require("resty.shmlock.shdict")._zone_handle
local version = require "resty.shmlock.version"
local errors = require "resty.shmlock.errors"
local codes = require "resty.shmlock.internal.codes"
local nginx = require "resty.shmlock.internal.nginx"
local key_check = require("resty.shmlock.internal.key").check
local token = require "resty.shmlock.internal.token"
local options = require "resty.shmlock.internal.options"
local clock = require "resty.shmlock.internal.clock"
local zone_backend = require "resty.shmlock.lock.zone"
local waits = require "resty.shmlock.lock.wait"
local inspect = require "resty.shmlock.lock.inspect"

local C = slots.C
local L = slots.lock
local type = type
local error = error
local setmetatable = setmetatable
local getmetatable = getmetatable
local floor = math.floor
local min = math.min
local now_ms = clock.now_ms
local now_us = clock.now_us
local next_id = token.next_id
local released = waits.released
local self_pid = core.self_pid
local ms = options.ms
local take = permit.take
local held = permit.held
local give_back = permit.give_back
local marked_in = slots.marked
local group_reclaim = slots.group_reclaim

local OK = codes.OK
local EXISTS = codes.EXISTS
local NOT_FOUND = codes.NOT_FOUND
local LOOK_HERE = codes.LOOK_HERE
local KEEP_TTL = codes.KEEP_TTL
local SEMAPHORE = codes.SEMAPHORE
local PERMITS_MAX = codes.GROUP_MAX

local ngx = nginx.api()
local in_nginx = ngx ~= nil

local _M = { _VERSION = version }
local mt = { __index = _M }

local tk = slots.ticket()       -- acquire's out-parameter

-- Misuse: a method called on anything but a semaphore object (sem.count(
-- "name", key) for semaphore.inspect, a dict, another module's object)
-- raises at the method's caller, before its zone reaches the core.
local function check_self(self)
    if getmetatable(self) ~= mt then
        error("bad semaphore object (use sem:method(), not sem.method())",
              3)
    end
end


-- ---- new ----

-- The zone behind dict_name, by the one name rule (resty.shmlock.
-- internal.names): a zone object, or a zone attached by name; inside
-- nginx a lua_shared_dict's name is that dict, which has no permits: a
-- refusal naming it.  nil and the error (the lock's words).
local function find(name)
    if type(name) == "table" then
        if zone_handle(name) then
            return name
        end
        local shared = names.shared_name(ngx, name)
        if shared then
            return nil, names.needs_zone("the semaphore needs", shared)
        end
        return nil, names.not_found(name)
    end
    if type(name) ~= "string" then
        return nil, names.not_found(name)
    end
    if names.lua_shared_dict(ngx, name) then
        return nil, names.needs_zone("the semaphore needs", name)
    end
    return names.attach(name)
end

local function check_permits(v)
    if v == nil then
        return 1
    end
    if type(v) ~= "number" or v ~= floor(v) or v < 1 or v > PERMITS_MAX then
        error("opts.permits must be an integer from 1 to " .. PERMITS_MAX, 3)
    end
    return v
end

-- syntax: sem, err = semaphore:new(dict_name_or_dict, opts?)
--         (semaphore.new(dict_name_or_dict, opts?) works too)
function _M.new(a, b, c)
    local dict_name, opts = b, c
    if a ~= _M and getmetatable(a) ~= mt then
        dict_name, opts = a, b
    end
    local exptime, timeout, step, ratio, max_step, blocking =
        options.lock(opts, "opts", 2)
    local permits = check_permits(opts and opts.permits)
    local dict, err = find(dict_name)
    if not dict then
        return nil, err
    end
    return setmetatable({
        dict = dict, zone = zone_handle(dict), permits = permits,
        exptime = exptime, timeout = timeout, step = step, ratio = ratio,
        max_step = max_step, blocking_timeout = blocking, permit = nil,
        key = false, exp_ms = ms(exptime),
    }, mt)
end


-- ---- acquire ----

-- One try for a permit, as owner id; out: the ticket (ours on OK; on
-- EXISTS the head's state, which a queued waiter marks)
local function try(self, key, klen, id, out)
    return C.shmlock_group_acquire(self.zone, SEMAPHORE, key, klen, id,
                                   self.permits, self.exp_ms, out)
end

-- dead holders and expired leases dropped; the permits held now
local function reclaim(zone, key, klen)
    local rc, n = group_reclaim(zone, SEMAPHORE, key, klen)
    if rc ~= OK then
        return nil, errors[rc]
    end
    return n
end


-- ---- waiting: the backend resty.shmlock.lock.wait drives ----
--
-- Inside nginx the semaphore waits as the lock does, in the lock's one
-- wait (resty.shmlock.lock.wait: resty.lock's steps, then the
-- worker's queue, the phase rules, blocking_timeout), through this
-- backend (the interface: resty.shmlock).  The store is the semaphore
-- object; `tok` is the wait (w: its owner id, its ticket, its owner
-- word).  A queued waiter marks the semaphore's head when its turn is
-- next (the oldest live queued waiter: src/group.h): nobody else is let in
-- until the mark's deadline, and the marked waiter comes in at its next
-- look after a permit is free.  Its mark's deadline is at most ACCEPT
-- ahead, moved on while it waits, so that a waiter nginx aborted in
-- another worker holds the others back for at most ACCEPT; in its own
-- worker it is known gone at once (wait.gone).

-- the wait keeps this backend's waiters apart from the lock's
local SPACE = "\0semaphore\0"
local sem_backend = { space = SPACE }

local moved = slots.ticket()    -- a swap's, not kept
local unghost

local ACQUIRED = zone_backend.ACQUIRED
local BUSY = zone_backend.BUSY
local MARKED = zone_backend.MARKED
local FAILED = zone_backend.FAILED
local mark_of = zone_backend.mark_of
local mark_alive = zone_backend.mark_alive
local read_mark = zone_backend.read_mark

-- a wait: its owner id, its ticket (ours once acquired; else the head
-- seen), a mark's or swap's result
local function new_wait()
    return { id = next_id(), tk = slots.ticket(), moved = slots.ticket() }
end

sem_backend.expiry = ms

function sem_backend.ident(w)
    return w.id
end

-- syntax: ok, err = add(sem, key, klen, w, _, exp_ms)
function sem_backend.add(sem, key, klen, w)
    local rc = try(sem, key, klen, w.id, w.tk)
    if rc == OK then
        return true
    end
    if rc == EXISTS then
        return false
    end
    return nil, errors[rc]
end

-- the mark of the head in state seen cleared (its owner kept): true, or
-- false if the head moved meanwhile
local function clear_mark(sem, seen, out)
    return slots.swap_keep(sem.zone, seen, false, KEEP_TTL, out) == OK
end

-- the mark on the head seen is w's, or w may replace it: its waiter came
-- later, stopped waiting, was aborted in this worker or (check) is dead
local function may_mark(w, since, now, check)
    local pid, id, _, m_since, m_till = mark_of()
    if pid == self_pid() and id == w.id then
        return "ours", m_till
    end
    if m_since > since or m_till <= now
       or (pid == self_pid() and zone_backend.gone(id))
       or (check and not mark_alive())
    then
        return "replace"
    end
    return nil
end

-- w's turn: its mark on the head seen, lasting at most ACCEPT
local function place(sem, w, since, till, now)
    if slots.place_mark(sem.zone, w.tk, w.id, 0, since,
                        min(till, now + floor(waits.ACCEPT * 1000)),
                        w.moved) == OK
    then
        return MARKED
    end
    return BUSY
end

-- syntax: outcome, err = look(sem, key, klen, w, exp_ms, check, since,
--                             till)
-- After a refused add: check drops the dead holders first (a /proc read
-- per holder) and tries again; a queued waiter (since, till: its wait's
-- start and deadline, ms) marks the head when its turn is next.
function sem_backend.look(sem, key, klen, w, _, check, since, till)
    if check then
        local n, err = reclaim(sem.zone, key, klen)
        if not n then
            return FAILED, err
        end
        local ok
        ok, err = sem_backend.add(sem, key, klen, w)
        if ok then
            return ACQUIRED
        end
        if ok == nil then
            return FAILED, err
        end
    end
    if not since then
        return BUSY
    end
    local now = now_ms()
    if not marked_in(w.tk) then
        return place(sem, w, since, till, now)
    end
    if read_mark(sem.zone, w.tk) ~= OK then
        return BUSY             -- being written: look again
    end
    local verdict, m_till = may_mark(w, since, now, check)
    if verdict == "ours" then
        -- moved on while half its time is left
        if m_till - now < waits.ACCEPT * 500 and m_till < till then
            return place(sem, w, since, till, now)
        end
        return MARKED
    end
    if verdict == "replace" then
        return place(sem, w, since, till, now)
    end
    return BUSY
end

-- syntax: got = withdraw(sem, key, klen, w)
-- A queued waiter stopping: a last try (true: the permit is ours after
-- all), else its mark removed, so that the others need not wait for its
-- deadline.
function sem_backend.withdraw(sem, key, klen, w)
    for _ = 1, 4 do
        local ok = sem_backend.add(sem, key, klen, w)
        if ok then
            return true
        end
        if ok == nil or not marked_in(w.tk)
           or read_mark(sem.zone, w.tk) ~= OK
        then
            return false
        end
        local pid, id = mark_of()
        if pid ~= self_pid() or id ~= w.id then
            return false
        end
        if clear_mark(sem, w.tk, w.moved) then
            return false
        end
    end
    return false
end

-- The head seen (a refused acquire's ticket, seen) is marked by a waiter
-- of this worker that nginx aborted: its mark cleared (no waiter is left
-- to come in on it).
function unghost(sem, seen)
    if not marked_in(seen) or read_mark(sem.zone, seen) ~= OK then
        return
    end
    local pid, id = mark_of()
    if pid == self_pid() and zone_backend.gone(id) then
        clear_mark(sem, seen, moved)
    end
end

-- syntax: here = here(sem, key, klen)
-- Every live holder of key is this process, and they fill the permits:
-- a worker blocked in a phase that cannot yield would wait for itself.
function sem_backend.here(sem, key, klen)
    return L.sem_here(sem.zone, key, klen, sem.permits)
end

-- syntax: elapsed, err = block(sem, key, klen, w, exp_ms, timeout, step,
--                              ratio, max_step, stop?)
-- Outside nginx (or blocking where the phase cannot yield): sleeps on the
-- key's wait word, woken by a release, at most a step at a time; dead
-- holders are dropped after every step no release cut short.
function sem_backend.block(sem, key, klen, w, _, timeout, step, ratio,
                           max_step, stop)
    -- the core's wait (src/shmlock_sem.c), on a record of its own
    local lk = L.new(sem.zone)
    local start = now_us()
    local rc = L.sem_acquire(lk, key, klen, sem.permits, sem.exp_ms)
    local us = 0
    if rc == EXISTS then
        rc, us = L.sem_wait(lk, key, klen, sem.permits, sem.exp_ms, start,
                            floor(timeout * 1000000), step, ratio, max_step,
                            stop and LOOK_HERE or 0)
    end
    if rc == OK then
        -- the permit goes to the object's handle (w.tk, then its own):
        -- the record lets go of it
        slots.copy(w.tk, L.ticket(lk))
        lk.held = 0
    end
    return zone_backend.answer(rc, us, stop)
end


-- the wait, after the first tries found the key full (where and how:
-- resty.shmlock.lock.wait's choice)
local function wait(self, key, klen, timeout)
    local w = new_wait()
    local elapsed, err = waits.wait(sem_backend, self, key, klen, w,
                                    self.exp_ms, timeout, self)
    if not elapsed then
        return nil, err
    end
    slots.copy(tk, w.tk)
    return elapsed
end

-- syntax: elapsed, err = sem:acquire(key, timeout?)
function _M.acquire(self, key, timeout)
    check_self(self)
    if held(self.permit) then
        return nil, "locked"
    end
    local err
    key, err = key_check(key)
    if not key then
        return nil, err
    end
    if timeout == nil then
        timeout = self.timeout
    else
        timeout = options.timeout(timeout, self.exptime, 2)
    end
    local klen = #key
    local rc = try(self, key, klen, next_id(), tk)
    local elapsed = 0
    if rc == EXISTS then
        -- a dead holder's permit is back at once, and inside nginx the
        -- turn of a waiter of this worker that nginx aborted
        if in_nginx then
            unghost(self, tk)
        end
        reclaim(self.zone, key, klen)
        rc = try(self, key, klen, next_id(), tk)
    end
    if rc == EXISTS then
        if timeout == 0 then
            return nil, "timeout"
        end
        elapsed, err = wait(self, key, klen, timeout)
        if not elapsed then
            return nil, err
        end
        rc = OK
    end
    if rc == OK then
        self.permit = take(self.permit, self.zone, SEMAPHORE, key, klen, tk)
        self.key = key
        return elapsed
    end
    return nil, errors[rc]
end


-- ---- release, expire, count ----

-- syntax: ok, err = sem:release()
function _M.release(self)
    check_self(self)
    local cd = held(self.permit)
    if not cd then
        return nil, "unlocked"
    end
    local rc = give_back(cd)
    if in_nginx then
        -- this worker's queued waiters of the key look again
        released(self.key, SPACE)
    end
    if rc == OK then
        return 1
    end
    if rc == NOT_FOUND then
        return 1, "expired"
    end
    return nil, errors[rc]
end

-- syntax: ok, err = sem:expire(seconds?)
function _M.expire(self, seconds)
    check_self(self)
    if seconds == nil then
        seconds = self.exptime
    else
        seconds = options.seconds(seconds, "seconds", 2)
    end
    local cd = held(self.permit)
    if not cd then
        return nil, "unlocked"
    end
    local rc = permit.extend(cd, ms(seconds))
    if rc == OK then
        return true
    end
    if rc == NOT_FOUND then
        -- the lease ran out: the permit is gone, and the object holds
        -- nothing any more (as the lock's expire): owned() is false, and
        -- acquire() may take a permit again
        permit.drop(cd)
        return nil, "expired"
    end
    return nil, errors[rc]
end

-- syntax: n, err = sem:count(key)
-- The permits of key held now (dead holders and expired leases dropped
-- first).
function _M.count(self, key)
    check_self(self)
    local err
    key, err = key_check(key)
    if not key then
        return nil, err
    end
    return reclaim(self.zone, key, #key)
end

-- syntax: info, err = semaphore.inspect(dict_name_or_dict, key)
-- What holds the permits of key, read without changing anything
-- (docs/semaphore.md): { count, holders = { { pid, alive, ttl }, ... },
-- marked = { pid, alive, deadline, waited } or nil, waiters }; nil, "not
-- locked"; new()'s errors ("dictionary not found: ..."); the key's errors.
function _M.inspect(a, b, c)
    local dict_name, key = a, b
    if a == _M then
        dict_name, key = b, c
    end
    local dict, err = find(dict_name)
    if not dict then
        return nil, err
    end
    key, err = key_check(key)
    if not key then
        return nil, err
    end
    return inspect.semaphore(zone_handle(dict), key)
end

-- syntax: holding = sem:owned()
-- Whether this object holds a permit (false in a forked child).
function _M.owned(self)
    check_self(self)
    return held(self.permit) ~= nil
end

return _M
