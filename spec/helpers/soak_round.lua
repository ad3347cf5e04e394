-- helpers.soak_round: the soak's lock round on one key, and the check of
-- what the rounds left behind.  Any process may be SIGKILLed at any
-- instruction of it; the counts must still come out exact.
--
-- Keys, for a key K of a zone:
--
--     L:K          the lock (resty.shmlock)
--     in:K         "<pid>:<start>:<id>" of whoever is inside the critical
--                  section: exclusion checked directly
--     c:K          "<n> <id> <s>": the counter n, a non-atomic read-modify-
--                  write; id wrote it last, and its tally was s after it
--     d:<id>:K     id's tally: how many of c:K's increments are id's
--                  (id: one Lua VM of one process, never reused)
--
-- The round (holding L:K):
--
--     1. add in:K.  If it is there already, its owner must be dead (its
--        process gone, or its pid now another process's): a live owner is
--        a second holder, a violation.
--     2. read c:K = "<n> <lw> <ls>"; reconcile (below).
--     3. set c:K = "<n+1> <id> <t+1>", t our tally (we keep it, and check
--        that the zone's d:<id>:K still says t: nobody else writes it while
--        we live).
--     4. set d:<id>:K = t + 1.
--     5. delete in:K (cad: it must still be ours), unlock.
--
-- A kill between 3 and 4 leaves c:K one ahead of the tallies, and says
-- who: the next holder of L:K (step 2), or the final check, finds
-- d:<lw>:K = ls - 1 and sets it to ls on the dead writer's behalf.  That
-- is sound because lw only gives L:K up after step 4: if d:<lw>:K is
-- ls - 1, lw died between 3 and 4, and, dead, it writes nothing more.  Any
-- other value than ls or ls - 1 is a violation.  A kill anywhere else
-- leaves the two consistent (a dictionary write is whole or not at all,
-- even when the process dies inside it).  So at any moment no round is
-- under way:
--
--     n of c:K == the sum over every id of d:<id>:K
--
-- and two holders at once (lost updates) break it.  Killed processes'
-- increments count exactly: they are in the zone, not in the killed
-- process.

local resty_lock = require "resty.shmlock"
local ffi = require "ffi"
local C = require "resty.shmlock.lib"
local board = require "helpers.soak_board"

local tonumber = tonumber
local tostring = tostring
local fmt = string.format
local random = math.random

pcall(ffi.cdef, "int sched_yield(void);")
pcall(ffi.cdef, "struct pollfd { int fd; short events; short revents; };")
pcall(ffi.cdef, "int poll(struct pollfd *fds, unsigned long nfds, "
                .. "int timeout);")

local _M = {}


-- "<pid>:<start>:<id>": the marker of one VM of this process
function _M.me(id)
    local pid = C.shmlock_self_pid()
    return fmt("%d:%d:%s", pid, tonumber(C.shmlock_proc_start(pid)), id)
end

-- whether the process that wrote a marker lives (a pid reused by a younger
-- process is not it)
function _M.alive(marker)
    local pid, start = tostring(marker):match("^(%d+):(%d+):")
    if not pid then
        return true
    end
    return C.shmlock_proc_alive(tonumber(pid), tonumber(start)) == 1
end

local function parse(v)
    if v == nil then
        return 0
    end
    local n, lw, ls = tostring(v):match("^(%d+) (%S+) (%d+)$")
    if not n then
        return nil
    end
    return tonumber(n), lw, tonumber(ls)
end
_M.parse = parse

local function tally_key(id, key)
    return "d:" .. id .. ":" .. key
end
_M.tally_key = tally_key


-- What a zone call's failure means: in a zone that may be destroyed
-- (ctx.tolerate["zone destroyed"]) the round is abandoned; anything else
-- is a violation.  Returns the outcome for the caller.
local function failed(ctx, what, err)
    if ctx.tolerate[err] then
        board.add(ctx.lane, "destroyed")
        return "aborted"
    end
    ctx.violation(what .. ": " .. tostring(err))
    return "violation"
end

local function op(ctx)
    board.add(ctx.lane, "ops")
end

-- gives the lock up after a round went wrong
local function abandon(ctx, r)
    board.add(ctx.lane, "aborted")
    board.add(ctx.lane, "locks")
    r.lock:unlock()
    ctx.lane.state = board.IDLE
end

-- Step 2: a dead writer's half-done round completed for it; the value a
-- tally must have otherwise.  true, or nil and an error.
local function reconcile(ctx, dict, key, lw, ls)
    local tk = tally_key(lw, key)
    local t, err = dict:get(tk)
    op(ctx)
    if err then
        return nil, err
    end
    t = t or 0
    if t == ls then
        return true
    end
    if t ~= ls - 1 then
        ctx.violation(fmt("%s: c:%s says %s's tally is %d, it is %s",
                          ctx.zone_name(dict), key, lw, ls, tostring(t)))
        return true
    end
    local ok
    ok, err = dict:safe_set(tk, ls)
    op(ctx)
    if not ok then
        return nil, err
    end
    board.add(ctx.lane, "reconciled")
    return true
end
_M.reconcile = reconcile

-- a hold that varies: mostly none, sometimes a yield or up to a ms asleep
local function pause()
    local r = random()
    if r < 0.7 then
        return
    elseif r < 0.9 then
        ffi.C.sched_yield()
    else
        ffi.C.poll(nil, 0, random(0, 1))
    end
end


-- syntax: r, outcome = soak_round.enter(ctx, dict, lock, key, try)
-- Takes L:key (lock:trylock() if try, else lock:lock()) and does steps
-- 1-2.  r: the round, to pass to leave(); else
-- nil and "timeout", "aborted" (zone destroyed, tolerated) or "violation"
-- (reported).  ctx: { lane, id, me, tolerate = { [err] = true },
-- violation = fn(msg), zone_name = fn(dict), tallies = {}, die =
-- fn(point), zone_id = fn(dict) or nil }: our tallies are kept in
-- ctx.tallies[zone_id(dict)] (default: [dict]; a zone destroyed and made
-- again must have another id).
function _M.enter(ctx, dict, lock, key, try)
    local lane = ctx.lane
    board.add(lane, "locks")
    local elapsed, err
    lane.state = board.WAITING
    if try then
        elapsed, err = lock:trylock("L:" .. key)
    else
        elapsed, err = lock:lock("L:" .. key)
    end
    lane.state = elapsed and board.HOLDING or board.IDLE
    if not elapsed then
        if err == "timeout" then
            board.add(lane, "timeouts")
            return nil, "timeout"
        end
        return nil, failed(ctx, "lock " .. key, err)
    end
    local r = { dict = dict, lock = lock, key = key }

    local mk = "in:" .. key
    local ok
    ok, err = dict:safe_add(mk, ctx.me)
    op(ctx)
    if not ok then
        if err ~= "exists" then
            abandon(ctx, r)
            return nil, failed(ctx, "add " .. mk, err)
        end
        local cur
        cur, err = dict:get(mk)
        op(ctx)
        if err then
            abandon(ctx, r)
            return nil, failed(ctx, "get " .. mk, err)
        end
        if cur == ctx.me or _M.alive(cur) then
            -- reported, and the round goes on as if nothing had happened,
            -- so that the counts show what the breach did too
            ctx.violation(fmt("%s: two holders of L:%s: %s and %s (alive)",
                              ctx.zone_name(dict), key, ctx.me,
                              tostring(cur)))
            ok, err = dict:safe_set(mk, ctx.me)
        else
            ok, err = dict:cas(mk, cur, ctx.me)
        end
        op(ctx)
        if not ok then
            if ctx.tolerate[err] then
                abandon(ctx, r)
                return nil, failed(ctx, "cas " .. mk, err)
            end
            ctx.violation(fmt("%s: %s changed under L:%s: cas from %s: %s",
                              ctx.zone_name(dict), mk, key, tostring(cur),
                              tostring(err)))
        end
    end
    ctx.die(1)

    local v
    v, err = dict:get("c:" .. key)
    op(ctx)
    if err then
        abandon(ctx, r)
        return nil, failed(ctx, "get c:" .. key, err)
    end
    local n, lw, ls = parse(v)
    if not n then
        ctx.violation(fmt("%s: c:%s is %q", ctx.zone_name(dict), key,
                          tostring(v)))
        abandon(ctx, r)
        return nil, "violation"
    end
    if lw then
        ok, err = reconcile(ctx, dict, key, lw, ls)
        if not ok then
            abandon(ctx, r)
            return nil, failed(ctx, "reconcile " .. key, err)
        end
    end

    local zid = ctx.zone_id and ctx.zone_id(dict) or dict
    local tallies = ctx.tallies[zid]
    if not tallies then
        tallies = {}
        ctx.tallies[zid] = tallies
    end
    local t = tallies[key] or 0
    local zt
    zt, err = dict:get(tally_key(ctx.id, key))
    op(ctx)
    if err then
        abandon(ctx, r)
        return nil, failed(ctx, "get tally " .. key, err)
    end
    if (zt or 0) ~= t then
        ctx.violation(fmt("%s: our tally of %s is %d, the zone says %s",
                          ctx.zone_name(dict), key, t, tostring(zt)))
    end
    r.n, r.t, r.tallies = n, t, tallies
    return r
end


-- syntax: outcome = soak_round.leave(ctx, r)
-- Steps 3-5 of a round enter() began: "done", "aborted" or "violation".
function _M.leave(ctx, r)
    local dict, key, t = r.dict, r.key, r.t
    pause()

    local ok, err = dict:safe_set("c:" .. key,
                                  fmt("%d %s %d", r.n + 1, ctx.id, t + 1))
    op(ctx)
    if not ok then
        abandon(ctx, r)
        return failed(ctx, "set c:" .. key, err)
    end
    ctx.die(2)
    ok, err = dict:safe_set(tally_key(ctx.id, key), t + 1)
    op(ctx)
    if not ok then
        abandon(ctx, r)
        return failed(ctx, "set tally " .. key, err)
    end
    r.tallies[key] = t + 1
    ctx.die(3)

    local mk = "in:" .. key
    ok, err = dict:cad(mk, ctx.me)
    op(ctx)
    if not ok then
        if ctx.tolerate[err] then
            abandon(ctx, r)
            return failed(ctx, "cad " .. mk, err)
        end
        ctx.violation(fmt("%s: %s changed while we held L:%s: %s (%s)",
                          ctx.zone_name(dict), mk, key,
                          tostring(dict:get(mk)), tostring(err)))
    end
    ctx.die(4)

    board.add(ctx.lane, "locks")
    ok, err = r.lock:unlock()
    ctx.lane.state = board.IDLE
    if ok ~= 1 then
        return failed(ctx, "unlock " .. key, err)
    end
    board.add(ctx.lane, "rounds")
    board.beat(ctx.lane)
    return "done"
end


-- syntax: res = soak_round.check(dict, keys, lane)
-- What the rounds left in a zone nobody is changing (every writer
-- stopped, or every lock of keys held by the caller): each dead writer's
-- half-done round reconciled, then per key { n = counter, sum = the
-- tallies' sum, writers = ids with a tally, marker = in:K or nil,
-- reconciled = 0/1 }.  nil and a message when the zone says no.
function _M.check(dict, keys, lane)
    local res = {}
    local ctx = {
        lane = lane,
        violation = function(msg) res.violation = msg end,
        zone_name = function(d) return d.name end,
    }
    local err
    for _, key in ipairs(keys) do
        local v
        v, err = dict:get("c:" .. key)
        if err then
            return nil, "get c:" .. key .. ": " .. err
        end
        local n, lw, ls = parse(v)
        if not n then
            return nil, "c:" .. key .. " is " .. tostring(v)
        end
        local before = board.get(lane, "reconciled")
        if lw then
            local ok
            ok, err = reconcile(ctx, dict, key, lw, ls)
            if not ok then
                return nil, "reconcile " .. key .. ": " .. tostring(err)
            end
        end
        res[key] = { n = n, sum = 0, writers = 0,
                     reconciled = board.get(lane, "reconciled") - before,
                     marker = dict:get("in:" .. key),
                     lock = resty_lock.inspect(dict, "L:" .. key) }
    end
    -- the tallies, listed after the reconciliation: it may have made the
    -- tally of a writer that died in its first round on a key (listed
    -- before, that one went uncounted: the counter one ahead)
    local all
    all, err = dict:get_keys(0)
    if not all then
        return nil, "get_keys: " .. tostring(err)
    end
    for _, k in ipairs(all) do
        local key = k:match("^d:%S+:(%S+)$")
        local r = key and res[key]
        if r then
            local t
            t, err = dict:get(k)
            if err then
                return nil, "get " .. k .. ": " .. err
            end
            r.sum = r.sum + (t or 0)
            r.writers = r.writers + 1
        end
    end
    return res
end

return _M
