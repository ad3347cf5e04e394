-- Builds bench/RESULTS.md (and prints it) from a run's results.tsv and
-- machine.tsv; writes the data files bench/plots.gp draws from.
--
-- usage: luajit report.lua work_dir results_dir "failed sections"

local work, out_dir, failed = arg[1], arg[2], arg[3] or ""
local fmt = string.format
local concat = table.concat

-- ---- input ----

local R = {}          -- R[section][id] = { med, lo, hi, reps, unit, note }
for line in io.lines(work .. "/results.tsv") do
    local f = {}
    for v in (line .. "\t"):gmatch("([^\t]*)\t") do f[#f + 1] = v end
    if #f >= 7 then
        R[f[1]] = R[f[1]] or {}
        R[f[1]][f[2]] = {
            unit = f[3], med = tonumber(f[4]), lo = tonumber(f[5]),
            hi = tonumber(f[6]), reps = tonumber(f[7]), note = f[8] or "",
        }
    end
end

local machine = {}
for line in io.lines(work .. "/machine.tsv") do
    local k, v = line:match("^([^\t]+)\t(.*)$")
    if k then machine[#machine + 1] = { k, v } end
end

local function get(section, id)
    return R[section] and R[section][id]
end

-- ---- formatting ----

local function num(x)
    if x == nil then return "–" end
    local a = math.abs(x)
    if a >= 1e9 then return fmt("%.3g G", x / 1e9) end
    if a >= 1e6 then return fmt("%.3g M", x / 1e6) end
    if a >= 1e4 then return fmt("%.3g k", x / 1e3) end
    if a >= 100 then return fmt("%.0f", x) end
    if a >= 10 then return fmt("%.1f", x) end
    return fmt("%.2f", x)
end

local function ns(x)
    if x == nil then return "–" end
    if x >= 1e6 then return fmt("%.3g ms", x / 1e6) end
    if x >= 1e3 then return fmt("%.3g µs", x / 1e3) end
    return fmt("%.3g ns", x)
end

local function us(x)
    if x == nil then return "–" end
    if x >= 1e3 then return fmt("%.3g ms", x / 1e3) end
    return fmt("%.3g µs", x)
end

local function ms(x)
    if x == nil then return "–" end
    if x < 1 then return fmt("%.3g µs", x * 1e3) end
    if x >= 1e3 then return fmt("%.3g s", x / 1e3) end
    return fmt("%.3g ms", x)
end

local function ratio(x)
    if x == nil or x ~= x then return "–" end
    if x >= 100 then return fmt("%.0f×", x) end
    if x >= 10 then return fmt("%.1f×", x) end
    return fmt("%.2f×", x)
end

local lines = {}
local function put(...)
    lines[#lines + 1] = concat({ ... })
end

local function row(cells)
    put("| ", concat(cells, " | "), " |")
end

local function header(cells, align)
    row(cells)
    local sep = {}
    for i = 1, #cells do sep[i] = align and align[i] or "---" end
    row(sep)
end

-- median with the min–max range
local function span(r, f)
    if not r then return "not measured" end
    return fmt("%s (%s – %s)", f(r.med), f(r.lo), f(r.hi))
end

-- ---- targets ----

-- a target: ours and peer results, how to compare, the bound
--   kind "faster": peer.med / ours.med >= want      (costs: lower is better)
--   kind "within": ours.med / peer.med <= want
--   kind "bound":  ours.med <= want, an absolute figure (the peer's shown)
--   kind "keeps":  ours.med / peer.med >= want (throughput: higher is better)
-- Pessimistic and optimistic ratios use the repetitions' extremes.
local targets = {}
local function target(name, ours, peer, kind, want, unitf)
    local t = { name = name, ours = ours, peer = peer, kind = kind,
                want = want, f = unitf }
    if ours and peer then
        if kind == "faster" then
            t.ratio = peer.med / ours.med
            t.worst = peer.lo / ours.hi
            t.best = peer.hi / ours.lo
            t.met = t.ratio >= want
        elseif kind == "bound" then
            t.ratio = ours.med / peer.med
            t.worst = ours.hi / peer.lo
            t.best = ours.lo / peer.hi
            t.met = ours.med <= want
        elseif kind == "keeps" then
            t.ratio = ours.med / peer.med
            t.worst = ours.lo / peer.hi
            t.best = ours.hi / peer.lo
            t.met = t.ratio >= want
        else
            t.ratio = ours.med / peer.med
            t.worst = ours.hi / peer.lo
            t.best = ours.lo / peer.hi
            t.met = t.ratio <= want
        end
    end
    targets[#targets + 1] = t
    return t
end

for _, w in ipairs{ 1, 2 } do
    local s = "nginx_w" .. w
    local tag = fmt(" (nginx, %d worker%s)", w, w > 1 and "s at once" or "")
    target("`new`+`lock`+`unlock` vs resty.lock on ngx.shared.DICT" .. tag,
           get(s, "lock_new_ours"), get(s, "lock_new_peer"), "faster", 5, ns)
    target("`lock`+`unlock`, reused object, vs resty.lock" .. tag,
           get(s, "lock_reused_ours"), get(s, "lock_reused_peer"), "faster",
           2, ns)
    -- the drop-in: ours on resty.lock's lua_shared_dict (issue 22)
    target("drop-in on a lua_shared_dict: `lock`+`unlock`, reused object, "
           .. "vs resty.lock" .. tag,
           get(s, "lock_reused_drop"), get(s, "lock_reused_peer"), "within",
           1.2, ns)
    target("drop-in on a lua_shared_dict: `new`+`lock`+`unlock` vs "
           .. "resty.lock" .. tag,
           get(s, "lock_new_drop"), get(s, "lock_new_peer"), "within", 1, ns)
    for _, op in ipairs{ "get", "set", "add", "delete" } do
        target("dict `" .. op .. "` vs ngx.shared.DICT" .. tag,
               get(s, op .. "_ours"), get(s, op .. "_ngx"), "faster", 1.5, ns)
    end
end
target("uncontended `lock`+`unlock` (reused object) vs flock(2), outside nginx",
       get("uncont", "shmlock_reused"), get("uncont", "flock"), "faster", 20,
       ns)
for _, x in ipairs { { "lua54", "Lua 5.4" }, { "lua51", "Lua 5.1" } } do
    target("uncontended `lock`+`unlock` (reused object) under " .. x[2]
           .. " vs flock(2), outside nginx (issue 33)",
           get("uncont", "shmlock_reused_" .. x[1]), get("uncont", "flock"),
           "faster", 3, ns)
end
target("uncontended `lock`+`unlock` (reused object) vs the C CAS floor",
       get("uncont", "shmlock_reused"), get("uncont", "floor_cas"), "within",
       10, ns)
target("handoff median vs the C futex floor",
       get("handoff", "shmlock_p50"), get("handoff", "futex_p50"), "within",
       3, us)
target("handoff median vs the resty.lock polling loop",
       get("handoff", "shmlock_p50"), get("handoff", "polling_p50"), "faster",
       50, us)
target("one key under load (section 7): max latency (in nginx) ≤ 1.5 s",
       get("load_w2", "ours_server_max"), get("load_w2", "peer_server_max"),
       "bound",
       1500, ms)
target("one key under load (section 7): p99 latency ≤ 0.5 s",
       get("load_w2", "ours_p99"), get("load_w2", "peer_p99"), "bound",
       500, ms)
target("one key under load (section 7): req/s ≥ 0.75× resty.lock's",
       get("load_w2", "ours_rps"), get("load_w2", "peer_rps"), "keeps",
       0.75, num)
target("the cache's coherent L1 hit vs an unchecked L1 hit",
       get("cache_l1", "coherent"), get("cache_l1", "unchecked"), "within",
       1.3, ns)
target("the cache's coherent L1 hit with `opts.redis` vs an unchecked L1 hit",
       get("cache_l1", "coherent_fleet"), get("cache_l1", "unchecked"),
       "within", 1.3, ns)
-- (2) what a 10 MiB store holds: counts, ours / ngx.shared.DICT's
local function entries(x)
    if x == nil then return "–" end
    return fmt("%.0f", x)
end
target("small entries (14-byte keys, 8–16-byte strings) a 10 MiB zone "
       .. "holds vs ngx.shared.DICT 10m",
       get("density", "small_ours"), get("density", "small_ngx"), "keeps",
       1.5, entries)
-- (9) 32 processes on one key, against flock(2)
target("32 processes on one key (section 9): acquisitions/s vs flock(2)",
       get("contended", "shmlock_rate"), get("contended", "flock_rate"),
       "keeps", 1.3, num)
target("32 processes on one key (section 9): CPU per acquisition vs "
       .. "flock(2)'s",
       get("contended", "shmlock_cpu"), get("contended", "flock_cpu"),
       "within", 1, us)
for _, w in ipairs{ 1, 2 } do
    target(fmt("stale_ttl stampede (section 6, %d worker%s): requests ≥ 5 ms",
               w, w > 1 and "s" or ""),
           get("stampede_w" .. w, "stale_stalls"),
           get("stampede_w" .. w, "ours_stalls"), "bound", 0, num)
    target(fmt("stale_ttl stampede (section 6, %d worker%s): p99 vs no "
               .. "expiry at all", w, w > 1 and "s" or ""),
           get("stampede_w" .. w, "stale_p99"),
           get("stampede_w" .. w, "warm_p99"), "within", 2, ms)
end
-- (10) instructions per operation: ours against its "at most" (the reference:
-- the count before issue 22's work, INSTR_BEFORE)
local instr_ops = require "instr_ops"
local INSTR = instr_ops.OPS
local INSTR_BEFORE_AT = instr_ops.BEFORE_AT
local INSTR_BEFORE = instr_ops.BEFORE
local function instr(x)
    if x == nil then return "–" end
    return fmt("%.0f", x)
end
for _, x in ipairs(INSTR) do
    if x[4] then
        local b = INSTR_BEFORE[x[1]]
        target("instructions per " .. x[2] .. " (callgrind, outside nginx; "
               .. "reference: before, " .. INSTR_BEFORE_AT .. ")",
               get("instr", x[1]), b and { med = b, lo = b, hi = b },
               "bound", x[4], instr)
    end
end
-- the L1 target by instructions, which the machine's load does not move
for _, x in ipairs{ { "cache_hit", "the cache's coherent L1 hit" },
                    { "cache_hit_fleet", "the cache's coherent L1 hit with "
                                         .. "`opts.redis`" } } do
    target(x[2] .. " vs an unchecked L1 hit, instructions (callgrind)",
           get("instr", x[1]), get("instr", "cache_hit_unchecked"), "within",
           1.3, instr)
end
for _, op in ipairs{ "get", "set", "add", "delete", "incr" } do
    target("`" .. op .. "` cost at 1e6 keys vs at 1e3 keys",
           get("size", op .. "_1000000"), get("size", op .. "_1000"),
           "within", 1.3, ns)
end


-- ---- the document ----

put("# lua-resty-shmlock: benchmark results")
put("")
put("Produced by `make bench` (`bench/run.sh`). Every figure is the median of")
put("several repetitions, with the minimum and maximum in parentheses; every")
put("ratio compares figures of this same run. How to reproduce and what each")
put("measurement does: `bench/README.md`.")
put("")
if failed ~= "" then
    put("**Sections that failed in this run: ", failed,
        ".** Their figures are missing below.")
    put("")
end

put("## Machine")
put("")
header({ "", "" })
for _, kv in ipairs(machine) do
    row({ kv[1], kv[2] })
end
put("")

put("## Targets")
put("")
put("“×” is how many times ours is faster (peer cost / our cost), or for")
put("“≤” bounds how many times our cost is the reference's. The range is the")
put("ratio's pessimistic – optimistic value from the repetitions' extremes.")
put("Section 7's latency bounds are absolute (ratio: ours / resty.lock's);")
put("its throughput target is ours / resty.lock's requests per second.")
put("")
header({ "target", "ours", "reference", "ratio (range)", "wanted", "met" },
       { "---", "---:", "---:", "---:", "---:", ":---:" })
local met, missed, unmeasured = 0, 0, 0
for _, t in ipairs(targets) do
    local wanted = (t.kind == "faster" and "≥ " or "≤ ") .. ratio(t.want)
    if t.kind == "bound" then
        wanted = "≤ " .. t.f(t.want)
    elseif t.kind == "keeps" then
        wanted = "≥ " .. ratio(t.want)
    end
    local verdict
    if t.ratio == nil then
        verdict = "not measured"
        unmeasured = unmeasured + 1
    elseif t.met then
        verdict = "**yes**"
        met = met + 1
    else
        verdict = "**no**"
        missed = missed + 1
    end
    local f = t.f
    -- near the bound, enough digits to see which side it falls on
    local shown = t.ratio and ratio(t.ratio)
    if t.ratio and shown == ratio(t.want) and t.ratio ~= t.want then
        shown = fmt("%.3f×", t.ratio)
    end
    row({ t.name, t.ours and f(t.ours.med) or "–",
          t.peer and f(t.peer.med) or "–",
          t.ratio and fmt("%s (%s – %s)", shown,
                          ratio(t.worst), ratio(t.best)) or "–",
          wanted, verdict })
end
put("")
put(fmt("%d met, %d missed%s.", met, missed,
        unmeasured > 0 and fmt(", %d not measured", unmeasured) or ""))
put("")

-- (1)
put("## 1. Uncontended lock+unlock, outside nginx (LuaJIT, JIT on)")
put("")
header({ "lock", "pairs/s", "ns per pair", "resty.shmlock (reused) is" },
       { "---", "---:", "---:", "---:" })
local ref = get("uncont", "shmlock_reused")
local function pairs_s(r)
    return r and fmt("%s (%s – %s)", num(1e9 / r.med), num(1e9 / r.hi),
                     num(1e9 / r.lo)) or "not measured"
end
for _, x in ipairs{
    { "shmlock_new", "resty.shmlock, `new`+`lock`+`unlock`" },
    { "shmlock_reused", "resty.shmlock, reused object" },
    { "shmlock_reused_lua54", "resty.shmlock, reused object, Lua 5.4 (the C module)" },
    { "shmlock_reused_lua51", "resty.shmlock, reused object, Lua 5.1 (the C module)" },
    { "flock", "flock(2) LOCK_EX/LOCK_UN (FFI)" },
    { "redis", "Redis SET NX PX + EVALSHA compare-and-delete (loopback)" },
    { "floor_cas", "floor: C, one CAS + release store on MAP_SHARED" },
} do
    local r = get("uncont", x[1])
    local rel = "–"
    if r and ref and x[1] ~= "shmlock_reused" then
        if r.med >= ref.med then
            rel = ratio(r.med / ref.med) .. " faster"
        else
            rel = ratio(ref.med / r.med) .. " slower"
        end
    end
    row({ x[2], pairs_s(r), span(r, ns), rel })
end
put("")

-- (2)
put("## 2. Dictionary operations by key count, outside nginx")
put("")
put("Random access over the whole key set (one shuffled pass after another),")
put("number values, the zone sized to hold every key. ns per operation.")
put("")
header({ "op", "1e3 keys", "1e5 keys", "1e6 keys", "1e6 / 1e3",
         "Lua table, 1e3 → 1e6" },
       { "---", "---:", "---:", "---:", "---:", "---:" })
for _, op in ipairs{ "get", "set", "add", "delete", "incr" } do
    local a, b, c = get("size", op .. "_1000"), get("size", op .. "_100000"),
                    get("size", op .. "_1000000")
    local lt = ""
    if op == "get" then
        local la, lc = get("size", "luatable_get_1000"),
                       get("size", "luatable_get_1000000")
        if la and lc then
            lt = fmt("%s → %s (%s)", ns(la.med), ns(lc.med),
                     ratio(lc.med / la.med))
        end
    end
    row({ "`" .. op .. "`", span(a, ns), span(b, ns), span(c, ns),
          (a and c) and ratio(c.med / a.med) or "–", lt })
end
put("")
local hg, hs = get("size", "get_hot_1000000"), get("size", "set_hot_1000000")
local g3, s3 = get("size", "get_1000"), get("size", "set_1000")
if hg and hs and g3 and s3 then
    put(fmt("Only a 1e3-key hot subset of the 1e6-key zone, which the"
            .. " caches can hold: `get` %s (%s the 1e3-key zone's), `set` %s"
            .. " (%s). The rest of the growth in the table is the cache and"
            .. " TLB misses of random access over the whole set.",
            ns(hg.med), ratio(hg.med / g3.med), ns(hs.med),
            ratio(hs.med / s3.med)))
    put("")
end
local go, gn = get("nginx_w1", "get_ours"), get("nginx_w1", "get_ngx")
local bo, bn = get("nginx_w1", "get_big_ours"), get("nginx_w1", "get_big_ngx")
if go and gn and bo and bn then
    put(fmt("The same growth inside nginx (section 5, 1 worker, string values):"
            .. " `get` at 1e3 → 1e6 keys costs %s → %s (%s) for resty.shmlock"
            .. " and %s → %s (%s) for ngx.shared.DICT.",
            ns(go.med), ns(bo.med), ratio(bo.med / go.med),
            ns(gn.med), ns(bn.med), ratio(bn.med / gn.med)))
    put("")
end
put("![cost vs size](size.png)")
put("")
put("What a 10 MiB store holds: the entries `set` stores before the first")
put("one evicts another (or is refused), 14-byte keys; a zone of ours of")
put("10 MiB and a `lua_shared_dict` of 10m, counted in the same nginx.")
put("")
header({ "entries", "resty.shmlock", "ngx.shared.DICT", "ours holds" },
       { "---", "---:", "---:", "---:" })
for _, x in ipairs{ { "small", "8 to 16-byte strings" },
                    { "number", "numbers" },
                    { "s64", "64-byte strings" } } do
    local o, p = get("density", x[1] .. "_ours"), get("density", x[1] .. "_ngx")
    row({ x[2], o and fmt("%.0f", o.med) or "not measured",
          p and fmt("%.0f", p.med) or "not measured",
          (o and p) and ratio(o.med / p.med) or "–" })
end
put("")

-- (3)
put("## 3. Contended handoff between 2 processes")
put("")
local hnote = get("handoff", "shmlock_p50")
put("From the holder's release (timestamp written just before `unlock`) to")
put("the waiter's return from `lock`, CLOCK_MONOTONIC shared by both")
put("processes; the waiter is asleep when the lock is released.",
    hnote and (" " .. hnote.note:gsub("^%l", string.upper) .. ".") or "")
put("")
header({ "lock", "median", "p99", "this lock's median is" },
       { "---", "---:", "---:", "---:" })
local h_ref = get("handoff", "shmlock_p50")
for _, x in ipairs{
    { "shmlock", "resty.shmlock (futex wake on release)" },
    { "flock", "flock(2)" },
    { "polling", "resty.lock algorithm (add + sleep 1 ms ×2 … 0.5 s)" },
    { "futex", "floor: C futex mutex" },
} do
    local p50, p99 = get("handoff", x[1] .. "_p50"),
                     get("handoff", x[1] .. "_p99")
    local rel = "–"
    if p50 and h_ref and x[1] ~= "shmlock" then
        rel = p50.med >= h_ref.med
              and (ratio(p50.med / h_ref.med) .. " slower")
              or (ratio(h_ref.med / p50.med) .. " faster")
    end
    row({ x[2], span(p50, us), span(p99, us), rel })
end
put("")
put("![handoff latency](handoff.png)")
put("")

-- (4)
put("## 4. Fairness: 3 processes contending for one key")
put("")
local fnote = get("fair", "shmlock_acq")
if fnote then
    put((fnote.note:gsub(";.*$", "")), ". Acquisitions: median of the 3",
        " processes (min – max); worst wait: the longest any process waited.")
    put("")
end
header({ "lock", "acquisitions per process", "each process",
         "min / max share", "worst wait" },
       { "---", "---:", "---:", "---:", "---:" })
for _, x in ipairs{
    { "shmlock", "resty.shmlock" },
    { "flock", "flock(2)" },
    { "polling", "resty.lock algorithm" },
} do
    local a, wst = get("fair", x[1] .. "_acq"), get("fair", x[1] .. "_worst")
    row({ x[2], span(a, num), a and (a.note:match("per process: (.*)$") or "")
                              or "–",
          a and fmt("%.2f", a.lo / a.hi) or "–",
          wst and ms(wst.hi) or "–" })
end
put("")

-- (5)
put("## 5. Inside nginx: lock and dictionary, ns per operation")
put("")
put("A tight loop in a timer of every worker (with 2 workers, both at once,")
put("each on its own keys); mean over the workers. The peer is resty.lock's")
put("algorithm on ngx.shared.DICT through resty.core (bench/lib/polling_lock.lua:")
put("Debian does not package lua-resty-lock). Lock loops: each iteration")
put("locks the next of 64 keys of the worker (a lock per request key). Our")
put("zones: locks 4 MiB with `shards = 16` (as docs/shdict.md advises for a zone")
put("of locks), dictionary 16 MiB (16 shards by default).")
put("Dictionary ops: 1000 keys per worker, 16-byte string values; the")
put("queue: a list per worker holding 100 of them, each iteration an `rpush`")
put("and an `lpop`. The lock rows' repetitions take turns (ours on the zone,")
put("the peer, ours on the peer's lua_shared_dict: the drop-in of a user who")
put("only swaps `require \"resty.lock\"`), so their ratios compare the same")
put("moments of the machine. The reused pair's turns include two floors:")
put("nginx's C functions behind ngx.shared.DICT called directly with nothing")
put("around them, resty.lock's 2 (`add`, `delete`), and the 3 an owner check")
put("takes without a compare-and-delete (`add`, `get`, `delete`), each taking")
put("the dict's mutex. The drop-in releases with our compare-and-delete, one")
put("call (bench/README, \"The drop-in on an ngx.shared dict\").")
put("")
header({ "operation", "workers", "resty.shmlock", "peer", "ours is" },
       { "---", "---:", "---:", "---:", "---:" })
for _, x in ipairs{
    { "`new`+`lock`+`unlock`", "lock_new_ours", "lock_new_peer" },
    { "`new`+`lock`+`unlock`, ours on the peer's lua_shared_dict",
      "lock_new_drop", "lock_new_peer" },
    { "`lock`+`unlock` (reused)", "lock_reused_ours", "lock_reused_peer" },
    { "`lock`+`unlock` (reused), ours on the peer's lua_shared_dict",
      "lock_reused_drop", "lock_reused_peer" },
    { "`lock`+`unlock` (reused), ours on the peer's lua_shared_dict, vs "
      .. "resty.lock's 2 C calls alone", "lock_reused_drop",
      "lock_reused_floor2" },
    { "without our compare-and-delete: the floor of `add`+`get`+`delete` "
      .. "vs resty.lock's 2 C calls", "lock_reused_floor3",
      "lock_reused_floor2" },
    { "`get`", "get_ours", "get_ngx" },
    { "`set`", "set_ours", "set_ngx" },
    { "`add`", "add_ours", "add_ngx" },
    { "`delete`", "delete_ours", "delete_ngx" },
    { "`rpush`+`lpop` (a queue of 100)", "queue_ours", "queue_ngx" },
    { "`get`, 1e6 keys", "get_big_ours", "get_big_ngx", { 1 } },
} do
    for _, w in ipairs(x[4] or { 1, 2 }) do
        local o, p = get("nginx_w" .. w, x[2]), get("nginx_w" .. w, x[3])
        local rel = "–"
        if o and p then
            rel = p.med >= o.med and (ratio(p.med / o.med) .. " faster")
                  or (ratio(o.med / p.med) .. " slower")
        end
        row({ x[1], tostring(w), span(o, ns), span(p, ns), rel })
    end
end
put("")

-- (6)
put("## 6. Stampede: wrk, 100 connections, one hot key, 50 ms loader")
put("")
local snote = get("stampede_w1", "ours_loads") or get("stampede_w2", "ours_loads")
put("The key lives 0.5 s; every expiry sends every connection to the lock",
    " (with `stale_ttl`: the stale value is served while one timer",
    " refreshes it; that variant starts with the key loaded, the others",
    " cold).",
    " Loader calls: fewer is better (one per expiry is the ideal).",
    " Stalls: requests that took ≥ 5 ms (the waiters and the loader's own).",
    snote and (" " .. snote.note:gsub("; .*$", "") .. " each.") or "")
put("")
local ours_desc = "resty.shmlock cache pattern"
for _, w in ipairs{ 1, 2 } do
    local o = get("stampede_w" .. w, "ours_loads")
    if o and o.note:find("resty.shmlock.cache", 1, true) then
        ours_desc = "resty.shmlock.cache"
    end
end
header({ "workers", "variant", "loader calls", "req/s", "p50", "p99",
         "p99.9", "max", "stalls", "stall mean", "stall max" },
       { "---:", "---", "---:", "---:", "---:", "---:", "---:", "---:",
         "---:", "---:", "---:" })
for _, w in ipairs{ 1, 2 } do
    for _, v in ipairs{ { "ours", ours_desc },
                        { "stale", "resty.shmlock.cache, `stale_ttl`" },
                        { "warm", "resty.shmlock.cache, no expiry in the run" },
                        { "peer", "resty.lock pattern, ngx.shared.DICT" } } do
        local s = "stampede_w" .. w
        local function m(k, f)
            local r = get(s, v[1] .. "_" .. k)
            return r and f(r.med) or "–"
        end
        row({ tostring(w), v[2], m("loads", num), m("rps", num),
              m("p50", ms), m("p99", ms), m("p999", ms), m("max", ms),
              m("stalls", num), m("stall_mean", ms), m("stall_max", ms) })
    end
end
put("")

-- (7)
put("## 7. One lock key under load: wrk -t2 -c100, 2 workers, ~1 ms critical section")
put("")
local lnote = get("load_w2", "ours_p50")
put("Every request locks the same key (timeout 30 s), reads a counter,",
    " sleeps 1 ms (`ngx.sleep(0.001)`), writes it + 1 and unlocks; the",
    " counter is checked exact after each run. Latencies are wrk's (requests",
    " that ended within its run); “max in nginx” also counts the requests",
    " that were still waiting when wrk stopped, “drain” how long they took",
    " to end; lock errors are `lock()` failures (timeouts) in nginx.",
    lnote and (" " .. lnote.note:gsub("; .*$", "") .. " each.") or "")
put("")
header({ "lock", "req/s", "p50", "p99", "max", "max in nginx", "errors",
         "lock errors", "drain" },
       { "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:",
         "---:" })
for _, v in ipairs{ { "ours", "resty.shmlock, zone" },
                    { "peer", "resty.lock algorithm, ngx.shared.DICT" } } do
    local function m(k, f)
        local r = get("load_w2", v[1] .. "_" .. k)
        return r and span(r, f) or "–"
    end
    row({ v[2], m("rps", num), m("p50", ms), m("p99", ms), m("max", ms),
          m("server_max", ms), m("errors", num), m("lock_errors", num),
          m("drain", ms) })
end
put("")

-- (8)
put("## 8. The cache's L1 hit, outside nginx (LuaJIT, JIT on)")
put("")
put("`get()` of 1000 keys in turn, every one an L1 hit. Coherent: this",
    " version (lrucache get, then one load of the key's generation word).",
    " Unchecked: the same argument checks and lrucache get, with no look at",
    " the generation word (no coherence). lrucache: lua-resty-lrucache's get alone.")
put("")
header({ "L1 hit", "ns per get", "vs unchecked" }, { "---", "---:", "---:" })
local unchecked = get("cache_l1", "unchecked")
for _, x in ipairs{ { "coherent", "resty.shmlock.cache, coherent" },
                    { "coherent_fleet", "resty.shmlock.cache, coherent, "
                                        .. "`opts.redis` set" },
                    { "unchecked", "L1 hit, unchecked (no coherence)" },
                    { "lrucache", "lua-resty-lrucache get" } } do
    local r = get("cache_l1", x[1])
    row({ x[2], span(r, ns), (r and unchecked)
          and ratio(r.med / unchecked.med) or "–" })
end
put("")

-- (9)
put("## 9. 32 processes on one key, outside nginx")
put("")
local cnote = get("contended", "shmlock_rate")
put("Plain LuaJIT processes on one key, each looping: lock, hold (busy),",
    " unlock, work outside the lock. Acquisitions per second (all",
    " processes), CPU time (user + system) and voluntary context switches",
    " per acquisition; medians of the runs.",
    cnote and (" " .. cnote.note:gsub("^%l", string.upper) .. ".") or "")
put("")
header({ "lock", "acquisitions/s", "CPU per acquisition",
         "switches per acquisition" }, { "---", "---:", "---:", "---:" })
for _, x in ipairs{ { "shmlock", "resty.shmlock" },
                    { "flock", "flock(2)" } } do
    row({ x[2], span(get("contended", x[1] .. "_rate"), num),
          span(get("contended", x[1] .. "_cpu"), us),
          span(get("contended", x[1] .. "_csw"),
               function(v) return fmt("%.2f", v) end) })
end
put("")

-- (10)
put("## 10. Instructions per operation (callgrind), outside nginx")
put("")
put("`(Ir(N) - Ir(0)) / N` with N = 100000: a loop of N operations minus a",
    " loop of none, each after the same warm-up (traces compiled), through",
    " the public Lua API on a zone, LuaJIT with a fixed random seed",
    " (bench/fixed_random.c): the same binary and inputs give the same",
    " counts, within a few instructions. Before: main at ", INSTR_BEFORE_AT,
    ", the start of issue 22's work.")
put("")
header({ "operation", "instructions", "before", "target", "at most", "met" },
       { "---", "---:", "---:", "---:", "---:", ":---:" })
for _, x in ipairs(INSTR) do
    local r = get("instr", x[1])
    local verdict = "–"
    if r and x[4] then
        verdict = r.med <= x[4] and "**yes**" or "**no**"
    elseif not r then
        verdict = "not measured"
    end
    row({ x[2], r and instr(r.med) or "–", instr(INSTR_BEFORE[x[1]]),
          x[3] and tostring(x[3]) or "–", x[4] and tostring(x[4]) or "–",
          verdict })
end
put("")

-- (11)
put("## 11. Semaphore (issue 25): its count and its handoff")
put("")
put("Inside nginx: a tight loop in a timer of every worker (with 2 workers,")
put("both at once), one key for every worker, as a per-client limit is: a")
put("semaphore's `acquire`+`release` (resty.shmlock.semaphore on a zone,")
put("one object reused, `permits` high enough that nobody waits) against")
put("limit.conn's count, `incr(key, 1, 0)`+`incr(key, -1)` on a")
put("lua_shared_dict; their repetitions take turns. ns per pair, mean over")
put("the workers.")
put("")
header({ "workers", "semaphore acquire+release", "incr + incr(-1)",
         "the semaphore costs" }, { "---:", "---:", "---:", "---:" })
for _, w in ipairs{ 1, 2 } do
    local o = get("semaphore_w" .. w, "sem_acquire_release")
    local p = get("semaphore_w" .. w, "incr_pair_ngx")
    if o or p then
        row({ tostring(w), span(o, ns), span(p, ns),
              (o and p) and (ratio(o.med / p.med) .. " the pair's") or "–" })
    end
end
put("")
put("Handoff between 2 processes (as section 3: the waiter asleep, the")
put("holder's release timestamped), a semaphore of one permit against the")
put("lock, their repetitions taking turns in one run.")
put("")
header({ "", "median", "p99" }, { "---", "---:", "---:" })
for _, x in ipairs{
    { "semaphore", "a permit (resty.shmlock.semaphore, permits = 1)" },
    { "shmlock", "the lock (resty.shmlock)" },
} do
    row({ x[2], span(get("sem_handoff", x[1] .. "_p50"), us),
          span(get("sem_handoff", x[1] .. "_p99"), us) })
end
put("")

-- (12)
put("## 12. The fleet tier: loader calls and Redis commands per miss")
put("")
put("One cold key, 8 processes on each host (hosts: zone directories on this",
    " machine), released together, a 100 ms loader; one redis-server on",
    " loopback. Fleet: resty.shmlock.cache with `opts.redis`. Recipe:",
    " docs/redis.md's lock factory of resty.shmlock.redis locks (one load",
    " per host, each host's waiters polling Redis). Redis commands: INFO",
    " commandstats, those the scripts ran included; sent: what the processes",
    " sent. Medians of the repetitions.")
put("")
header({ "hosts", "", "loader calls", "Redis commands", "sent",
         "slowest caller" }, { "---:", "---", "---:", "---:", "---:", "---:" })
for _, h in ipairs{ 1, 3 } do
    for _, x in ipairs{ { "fleet", "fleet tier (`opts.redis`)" },
                        { "recipe", "lock-factory recipe" } } do
        local function v(what)
            local r = get("fleet", ("%s_h%d_%s"):format(x[1], h, what))
            return r and r.med
        end
        if v("calls") then
            local function count(n)
                return n and fmt("%.0f", n) or "–"
            end
            row({ tostring(h), x[2], count(v("calls")), count(v("commands")),
                  count(v("sent")), ms(v("slowest")) })
        end
    end
end
put("")

-- (13)
put("## 13. The Redis lock under contention: Redis commands per acquisition")
put("")
put("One key, 8 processes on each host (hosts: zone directories on this",
    " machine) waiting behind a holder that lets go once they all wait, each",
    " holding the key for an instant; one redis-server on loopback. Redis",
    " commands: INFO commandstats for the whole episode (those the scripts",
    " ran included), per acquisition; last holder: its wait after the",
    " release. Medians of the repetitions, the modes taking turns.")
put("")
header({ "hosts", "", "Redis commands per acquisition", "last holder" },
       { "---:", "---", "---:", "---:" })
for _, h in ipairs{ 1, 3 } do
    for _, x in ipairs{
        { "wake", "resty.shmlock.redis, a connect function (host single "
                  .. "flight, wake-ups)" },
        { "today", "resty.shmlock.redis polling (connected clients, "
                   .. "`dict = false`)" },
        { "plain", "the plain SET NX PX polling loop" },
    } do
        local per = get("redis_lock", ("%s_h%d_per"):format(x[1], h))
        local last = get("redis_lock", ("%s_h%d_last"):format(x[1], h))
        if per then
            row({ tostring(h), x[2], fmt("%.1f", per.med),
                  ms(last and last.med) })
        end
    end
end
put("")

local md = concat(lines, "\n") .. "\n"
local f = assert(io.open(out_dir .. "/RESULTS.md", "w"))
f:write(md)
f:close()
io.write(md)


-- ---- plot data ----

-- size.dat: keys, then med lo hi for get set add delete incr, and the Lua
-- table reference
f = assert(io.open(work .. "/size.dat", "w"))
for _, n in ipairs{ 1000, 100000, 1000000 } do
    local cells = { tostring(n) }
    for _, op in ipairs{ "get", "set", "add", "delete", "incr" } do
        local r = get("size", op .. "_" .. n)
        cells[#cells + 1] = r and fmt("%g %g %g", r.med, r.lo, r.hi)
                            or "NaN NaN NaN"
    end
    local r = get("size", "luatable_get_" .. n)
    cells[#cells + 1] = r and fmt("%g %g %g", r.med, r.lo, r.hi)
                        or "NaN NaN NaN"
    f:write(concat(cells, " "), "\n")
end
f:close()

-- handoff_<v>.cdf: latency (µs), fraction of handoffs at or below it
for _, v in ipairs{ "shmlock", "flock", "polling", "futex" } do
    local vals = {}
    local src = io.open(work .. "/handoff_" .. v .. ".dat")
    if src then
        for l in src:lines() do vals[#vals + 1] = tonumber(l) end
        src:close()
    end
    table.sort(vals)
    local out = assert(io.open(work .. "/handoff_" .. v .. ".cdf", "w"))
    local n = #vals
    if n == 0 then
        out:write("NaN NaN\n")
    end
    local stride = math.max(1, math.floor(n / 2000))
    for i = 1, n, stride do
        out:write(fmt("%g %g\n", vals[i], i / n))
    end
    if n > 0 then out:write(fmt("%g 1\n", vals[n])) end
    out:close()
end
