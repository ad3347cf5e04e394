-- bin/shmlock, the command, run as a user runs it from a checkout (from
-- another directory, without LUA_PATH: it finds lua/ next to itself)
-- against live zones: each command's output, --json that parses, the exit
-- statuses, and that it never creates a zone.  Its pieces (the JSON
-- encoder, the glob patterns, the argument parser) are checked in process
-- at the end.

local ffi = require "ffi"
local proc = require "harness.proc"
local fixture = require "helpers.fixture"
local checkout = require "helpers.checkout"
local holder = require "helpers.lock_holder"
local env = require "helpers.lock_env"
local resty_lock = require "resty.shmlock"
local jd = require "helpers.json_decode"
local zone_layout = require "helpers.zone_layout"
local json = require "resty.shmlock.cli.json"
local glob = require "resty.shmlock.cli.glob"
local args = require "resty.shmlock.cli.args"

local BIN = checkout.ROOT .. "/bin/shmlock"

local function q(s)
    return "'" .. s:gsub("'", "'\\''") .. "'"
end

-- status, stdout, stderr of `shmlock <words...>` run in dir, with
-- SHMLOCK_DIR unset (zones are found through --dir, given by the caller)
local function shmlock(dir, ...)
    local words = {}
    for i, w in ipairs { ... } do
        words[i] = q(w)
    end
    local out, err = dir .. "/.out", dir .. "/.err"
    local status = checkout.sh("cd / && env -u LUA_PATH -u SHMLOCK_DIR "
                               .. q(BIN) .. " " .. table.concat(words, " ")
                               .. " >" .. q(out) .. " 2>" .. q(err)
                               .. "; echo $?")
    local o, e = checkout.read_file(out), checkout.read_file(err)
    os.remove(out)
    os.remove(err)
    return tonumber(status), o, e
end

-- the names in dir, sorted (what the command must not add to)
local function listing(dir)
    local names = {}
    for name in checkout.sh("ls -A " .. q(dir)):gmatch("[^\n]+") do
        names[#names + 1] = name
    end
    table.sort(names)
    return names
end

describe("bin/shmlock", function()
    local fx = fixture.new { dir = "test", children = "assert" }
    local dir, dict

    before_each(function()
        dir = fx.dir
        dict = fx:zone("cache", { size = "64k" })
    end)

    -- shmlock with --dir of this test
    local function run(...)
        return shmlock(dir, "--dir", dir, ...)
    end

    describe("ls", function()
        it("lists a zone made by the test, with its figures", function()
            assert.is_true(dict:set("a", "1"))
            assert.is_true(dict:set("b", "2"))
            local status, out, err = run("ls")
            assert.same({ 0, "" }, { status, err })
            local head, row = out:match("^([^\n]*)\n([^\n]*)\n$")
            assert.truthy(head:match("^NAME +SIZE +SHARDS +USED +ENTRIES"
                                     .. " +OWNER +MODE +STATUS$"), head)
            local user = checkout.trim(checkout.sh("id -un"))
            assert.truthy(row:match("^cache +64K +1 +%d[%d.]*K +2  "
                                    .. user .. " +0600  ok$"), row)
        end)

        it("gives every figure with --json", function()
            assert.is_true(dict:set("a", "1"))
            local status, out = run("ls", "--json")
            assert.equal(0, status)
            local zones = jd.decode(out)
            assert.equal(1, #zones)
            local z = zones[1]
            assert.equal("cache", z.name)
            assert.equal(65536, z.size)
            assert.equal(1, z.shards)
            assert.equal(1, z.entries)
            assert.equal(dict:free_space(), z.free)
            assert.equal(65536 - dict:free_space(), z.used)
            assert.equal("0600", z.mode)
            assert.equal(dir .. "/shmlock.cache", z.path)
            assert.equal(jd.null, z.error)
        end)

        it("lists a zone it may not use, with the library's reason",
           function()
            fx:zone("shared", { size = "64k" })
            assert(os.execute("chmod 0666 " .. q(dir .. "/shmlock.shared"))
                   == 0)
            local status, out = run("ls")
            assert.equal(0, status)
            assert.truthy(out:match("\nshared +64K +%- +%- +%- +%S+ +0666"
                                    .. "  zone file mode 0666 is writable"
                                    .. " by others\n"), out)
        end)

        it("answers an empty table for a directory without zones, and 6 "
           .. "for one it cannot read", function()
            local empty = dir .. "/empty"
            assert(os.execute("mkdir " .. q(empty)) == 0)
            assert.same({ 0, "[]\n", "" },
                        { shmlock(dir, "ls", "--json", "--dir", empty) })
            local status, out, err = shmlock(dir, "ls", "--dir",
                                             dir .. "/none")
            assert.same({ 6, "" }, { status, out })
            assert.equal("shmlock: cannot read directory " .. dir
                         .. "/none: No such file or directory\n", err)
        end)
    end)

    describe("stat", function()
        it("shows one zone's figures and counters", function()
            local status, out = run("stat", "cache")
            assert.equal(0, status)
            assert.truthy(out:match("^name        cache\n"), out)
            assert.truthy(out:match("\nsize        64K %(65536 bytes%)\n"),
                          out)
            assert.truthy(out:match("\nshards      1\n"), out)
            assert.truthy(out:match("\nentries     0\n"), out)
            assert.truthy(out:match("\nmode        0600\nevictions   0\n"
                                    .. "expired     0\nspins       0\n"
                                    .. "sleeps      0\ntakeovers   0\n"
                                    .. "recoveries  0\n$"), out)
        end)

        it("shows what the counters counted, and each shard's figures in a"
           .. " table when there are several", function()
            local four = fx:zone("four", { size = "4m" })
            for i = 1, 40 do
                assert.is_true((four:set("k" .. i, i, i % 2 == 0 and 0.001
                                                      or 0)))
            end
            proc.sleep(0.01)
            four:flush_expired()       -- (the stores freed some already)
            local st = assert(four:stats())
            assert.same({ 20, 20 }, { st.entries, st.expired })

            local status, out = run("stat", "four")
            assert.equal(0, status)
            assert.truthy(out:match("\nentries     20\n"), out)
            assert.truthy(out:match("\nexpired     20\n"), out)
            local head, rows = out:match("\n\n([^\n]*)\n(.*)$")
            assert.truthy(head:match("^SHARD +SIZE +USED +ENTRIES +EVICTIONS"
                                     .. " +EXPIRED +SPINS +SLEEPS +TAKEOVERS"
                                     .. " +RECOVERIES$"), head)
            local n = 0
            for row in rows:gmatch("[^\n]+") do
                local one = st.shard[n + 1]
                assert.truthy(row:match("^ +" .. n .. " +1020%.9K +%d[%d.]*K"
                                        .. " +" .. one.entries .. " +0 +"
                                        .. one.expired .. " +0 +0 +0 +0$"),
                              row)
                n = n + 1
            end
            assert.equal(4, n)

            local json_out
            status, json_out = run("stat", "four", "--json")
            assert.equal(0, status)
            local z = jd.decode(json_out)
            assert.same({ 4194304, 4, 20, 0, 20, 0, 0, 0, 0 },
                        { z.size, z.shards, z.entries, z.evictions,
                          z.expired, z.spins, z.sleeps, z.takeovers,
                          z.recoveries })
            assert.equal(4, #z.shard)
            for i, s in ipairs(z.shard) do
                local one = st.shard[i]
                assert.same({ shard = i - 1, size = one.capacity,
                              free = one.free_space,
                              used = one.capacity - one.free_space,
                              entries = one.entries, evictions = 0,
                              expired = one.expired, spins = 0, sleeps = 0,
                              takeovers = 0, recoveries = 0 }, s)
            end
        end)

        it("shows no shard table for a zone of one shard", function()
            local _, out = run("stat", "cache")
            assert.is_nil(out:find("SHARD", 1, true))
            local _, json_out = run("stat", "cache", "--json")
            assert.equal(1, #jd.decode(json_out).shard)
        end)

        it("exits 3 for a missing zone, and creates nothing", function()
            local before = listing(dir)
            local status, out, err = run("stat", "nope")
            assert.same({ 3, "", 'shmlock: no zone "nope" in ' .. dir .. "\n" },
                        { status, out, err })
            for _, cmd in ipairs { "keys", "locks", "verify", "destroy" } do
                assert.equal(3, (run(cmd, "nope")))
            end
            assert.equal(3, (run("get", "nope", "k")))
            assert.same(before, listing(dir))
        end)

        it("exits 4 with the library's reason for a zone it may not use",
           function()
            fx:zone("open", { size = "64k" })
            assert(os.execute("chmod 0666 " .. q(dir .. "/shmlock.open"))
                   == 0)
            assert.same({ 4, "", 'shmlock: zone "open": zone file mode 0666'
                                 .. " is writable by others\n" },
                        { run("stat", "open") })
            checkout.write_file(dir .. "/shmlock.junk", "not a zone")
            assert.same({ 4, "", 'shmlock: zone "junk": incompatible zone: '
                                 .. dir .. "/shmlock.junk is not a zone "
                                 .. "file\n" },
                        { run("locks", "junk") })
            -- a zone of another version names both layouts
            fx:zone("older", { size = "64k" })
            local f = assert(io.open(dir .. "/shmlock.older", "r+b"))
            f:seek("set", 8)            -- the header's layout word
            f:write("\5")
            f:close()
            local status, out, err = run("stat", "older")
            assert.same({ 4, "" }, { status, out })
            assert.matches("is a zone of layout 5, made by another version "
                           .. "of lua%-resty%-shmlock %(this one reads layout "
                           .. "%d+%): destroy it to make it anew %(shmlock "
                           .. "%-%-dir [^ ]+ destroy older, or shdict%.destroy",
                           err)
            assert.equal(0, (run("destroy", "older")))
            assert.is_nil(io.open(dir .. "/shmlock.older"))
        end)

        it("exits 4 for another user's zone", function()
            local uid = tonumber(checkout.trim(checkout.sh("id -u")))
            if uid ~= 0 then
                pending("needs root to give a zone to another user")
                return
            end
            fx:zone("theirs", { size = "64k" })
            assert(os.execute("chown nobody " .. q(dir .. "/shmlock.theirs"))
                   == 0)
            local status, out, err = run("keys", "theirs")
            assert.same({ 4, "" }, { status, out })
            assert.truthy(err:match('^shmlock: zone "theirs": zone file owned'
                                    .. " by another user %(uid %d+%)"), err)
        end)
    end)

    describe("keys", function()
        before_each(function()
            for i = 1, 20 do
                assert(dict:set("user:" .. i, i))
            end
            assert(dict:set("session:1", "s"))
        end)

        it("lists the live keys sorted, filtered by --match, cut by --limit",
           function()
            assert.same({ 0, "user:1\nuser:10\nuser:11\n", "" },
                        { run("keys", "cache", "--match", "user:1*",
                              "--limit", "3") })
            assert.same({ 0, "session:1\n", "" },
                        { run("keys", "cache", "--match", "s*") })
            local status, out = run("keys", "cache")
            assert.equal(0, status)
            local n = select(2, out:gsub("\n", ""))
            assert.equal(21, n)
            assert.same({ 0, '["user:20"]\n', "" },
                        { run("keys", "cache", "--match", "user:2?", "--json")
                        })
            assert.same({ 0, '["user:2","user:20"]\n', "" },
                        { run("keys", "cache", "--match", "user:2*", "--json")
                        })
        end)

        it("writes control bytes escaped, and keys of any byte as JSON",
           function()
            local odd = "a\"b\\c\nd\1\255é"
            assert(dict:set(odd, 1))
            local status, out = run("keys", "cache", "--match", "a*",
                                    "--json")
            assert.equal(0, status)
            assert.equal('["a\\"b\\\\c\\nd\\u0001\\u00ffé"]\n', out)
            assert.same({ "a\"b\\c\nd\1\195\191é" }, jd.decode(out))
            assert.same({ 0, "a\"b\\\\c\\x0ad\\x01\255é\n", "" },
                        { run("keys", "cache", "--match", "a*") })
        end)
    end)

    describe("get", function()
        it("writes the value, or with --json its type, flags and ttl",
           function()
            assert(dict:set("s", "hello", 0, 7))
            assert(dict:set("n", 2.5, 100))
            assert.same({ 0, "hello\n", "" }, { run("get", "cache", "s") })
            assert.same({ 0, "2.5\n", "" }, { run("get", "cache", "n") })
            local status, out = run("get", "cache", "s", "--json")
            assert.equal(0, status)
            assert.same({ key = "s", value = "hello", type = "string",
                          flags = 7, ttl = 0 }, jd.decode(out))
            local v = jd.decode(select(2, run("get", "cache", "n", "--json")))
            assert.equal(2.5, v.value)
            assert.is_true(v.ttl > 50 and v.ttl <= 100)
        end)

        it("tells a list's length (its elements only pop)", function()
            assert(dict:rpush("l", "a"))
            assert(dict:rpush("l", 2))
            assert.same({ 0, "(a list of 2 elements)\n", "" },
                        { run("get", "cache", "l") })
            local status, out = run("get", "cache", "l", "--json")
            assert.equal(0, status)
            assert.same({ key = "l", type = "list", length = 2, ttl = 0 },
                        jd.decode(out))
            assert.equal(2, dict:llen("l"))
        end)

        it("exits 5 for an absent key", function()
            assert.same({ 5, "", 'shmlock: no key "k" in zone "cache"\n' },
                        { run("get", "cache", "k") })
        end)

        it("writes NaN and the infinities as nan, inf and -inf, in JSON as "
           .. "those strings", function()
            assert(dict:set("nan", 0 / 0))
            assert(dict:set("inf", math.huge))
            assert(dict:set("-inf", -math.huge))
            for _, k in ipairs({ "nan", "inf", "-inf" }) do
                assert.same({ 0, k .. "\n", "" },
                            { run("get", "cache", "--", k) })
                local status, out = run("--json", "get", "cache", "--", k)
                assert.equal(0, status)
                assert.same({ key = k, value = k, type = "number",
                              flags = 0, ttl = 0 }, jd.decode(out))
            end
        end)

        it("names a key as keys prints it with --escaped (-e)", function()
            local odd = { "a\0b", "x\\y", "a\"b\\c\nd\1\255\195\169",
                          "\\x41", "-" }
            for i, k in ipairs(odd) do
                assert(dict:set(k, "v" .. i))
            end
            local status, out = run("keys", "cache")
            assert.equal(0, status)
            local n = 0
            for line in out:gmatch("[^\n]+") do
                local v = dict:get(
                    assert(require("resty.shmlock.cli.output")
                           .unprintable(line)))
                for _, opt in ipairs({ "-e", "--escaped" }) do
                    assert.same({ 0, v .. "\n", "" },
                                { run("get", opt, "cache", "--", line) })
                end
                n = n + 1
            end
            assert.equal(#odd, n)
            -- without it, KEY is taken as it is
            assert.same({ 0, "v2\n", "" }, { run("get", "cache", "x\\y") })
            assert.same({ 0, "v4\n", "" }, { run("get", "cache", "\\x41") })
            assert.same({ 2, "", "shmlock: KEY: bad escape at byte 2 (\\xHH "
                                 .. "for a byte, \\\\ for a backslash)\n"
                                 .. "Try 'shmlock --help'.\n" },
                        { run("get", "-e", "cache", "a\\x0") })
            assert.same({ 2, "", "shmlock: option --escaped is not for keys\n"
                                 .. "Try 'shmlock --help'.\n" },
                        { run("keys", "-e", "cache") })
        end)
    end)

    describe("locks", function()
        it("shows a child's lock alive, then dead after SIGKILL", function()
            assert(dict:set("plain", "not a lock"))
            assert(dict:rpush("queue", "a list: not a lock either"))
            local pid = holder.hold(dict, "job", 30)

            local status, out, err = run("locks", "cache")
            assert.same({ 0, "" }, { status, err })
            local head, row = out:match("^([^\n]*)\n([^\n]*)\n$")
            assert.truthy(head:match("^KEY +PID +ALIVE +TTL +WAITERS"
                                     .. " +MARKED$"), head)
            assert.truthy(row:match("^job +" .. pid .. " +yes +[%d.]+s +0"
                                    .. " +%-$"), row)

            local locks = jd.decode(select(2, run("locks", "cache", "--json")))
            assert.equal(1, #locks)
            assert.equal("job", locks[1].key)
            assert.equal(pid, locks[1].pid)
            assert.is_true(locks[1].alive)
            assert.is_true(locks[1].ttl > 10 and locks[1].ttl <= 30)
            assert.equal(0, locks[1].waiters)
            assert.equal(jd.null, locks[1].marked)

            proc.kill(pid)
            assert.equal("signal", proc.wait(pid, 5).how)
            locks = jd.decode(select(2, run("locks", "cache", "--json")))
            assert.equal(pid, locks[1].pid)
            assert.is_false(locks[1].alive)
            assert.truthy(select(2, run("locks", "cache"))
                          :match("\njob  " .. pid .. "  no "))
        end)

        it("counts the waiters and names the marked one", function()
            local pid = holder.hold(dict, "job", 30)
            local waiter = holder.wait(dict, "job", 10)
            local lock = env.wait_for(function()
                local l = jd.decode(select(2, run("locks", "cache",
                                                  "--json")))[1]
                return l.waiters == 1 and l.marked ~= jd.null and l
            end, 10)
            assert.truthy(lock, "never saw the waiter")
            assert.equal(pid, lock.pid)
            assert.equal(waiter, lock.marked.pid)
            assert.is_true(lock.marked.alive)
            assert.is_true(lock.marked.deadline > 0)
            proc.kill(pid)
            proc.wait(pid, 5)
            assert.same({ how = "exit", code = 0, msg = "" },
                        proc.wait(waiter, 5))
        end)

        it("lists a semaphore's permits and a long key's first bytes, each "
           .. "kind said", function()
            local semaphore = require "resty.shmlock.semaphore"
            local sem = assert(semaphore:new(dict, { permits = 2 }))
            assert.equal(0, sem:acquire("backend"))
            local lock = assert(resty_lock:new(dict))
            local long = ("x"):rep(40)
            assert.equal(0, lock:lock(long))
            local locks = jd.decode(select(2, run("locks", "cache", "--json")))
            assert.equal(2, #locks)
            assert.same({ "backend", 7, "semaphore", env.pid() },
                        { locks[1].key, locks[1].key_len, locks[1].kind,
                          locks[1].pid })
            assert.same({ ("x"):rep(24), 40, "lock", env.pid() },
                        { locks[2].key, locks[2].key_len, locks[2].kind,
                          locks[2].pid })
            local out = select(2, run("locks", "cache"))
            assert.truthy(out:find("\nbackend %(semaphore%) +%d+ +yes"), out)
            assert.truthy(out:find("\n" .. ("x"):rep(24)
                                   .. "%.%.%. %(40 bytes%) +%d+ +yes"), out)
            assert.equal(1, sem:release())
            assert.equal(1, lock:unlock())
            assert.same({ 0, "[]\n", "" }, { run("locks", "cache", "--json") })
        end)

        it("says each lock's kind as its slot does, whatever the key's "
           .. "bytes", function()
            local function listed()
                local status, out = run("locks", "cache", "--json")
                assert.equal(0, status)
                local got = {}
                for i, l in ipairs(jd.decode(out)) do
                    got[i] = { l.key, l.key_len, l.kind, l.pid }
                end
                return got, out
            end
            local pid = env.pid()
            -- an exclusive lock on a key spelt as a semaphore's permit
            -- record of "abc" (layouts before 10: src/group.h) is a lock
            local first = assert(resty_lock:new(dict))
            assert.same({ 0 }, { first:lock("\0s\0\0abc", 0) })
            local got, out = listed()
            assert.same({ { "\0s\0\0abc", 7, "lock", pid } }, got)
            -- its bytes as the command escapes them
            assert.truthy(out:find('"key":"\\u0000s\\u0000\\u0000abc"',
                                   1, true), out)
            -- beside it: a real permit of "abc", real shared holds of
            -- "rw", and locks spelt as their records and heads
            local semaphore = require "resty.shmlock.semaphore"
            local sem = assert(semaphore:new(dict, { permits = 2 }))
            assert.equal(0, sem:acquire("abc", 0))
            local r1, r2 = assert(resty_lock:new(dict)),
                           assert(resty_lock:new(dict))
            assert.equal(0, r1:lock_shared("rw", 0))
            assert.equal(0, r2:lock_shared("rw", 0))
            local held = { first }
            for _, key in ipairs { "\0s\255\255abc", "\0r\0\0rw" } do
                held[#held + 1] = assert(resty_lock:new(dict))
                assert.same({ 0 }, { held[#held]:lock(key, 0) })
            end
            got, out = listed()
            assert.same({
                { "\0r\0\0rw", 6, "lock", pid },
                { "\0s\0\0abc", 7, "lock", pid },
                -- (the decoder gives \u00ff as UTF-8)
                { "\0s\195\191\195\191abc", 7, "lock", pid },
                { "abc", 3, "semaphore", pid },
                { "rw", 2, "shared", pid },
                { "rw", 2, "shared", pid },
            }, got)
            assert.truthy(out:find('"key":"\\u0000s\\u00ff\\u00ffabc"',
                                   1, true), out)
            for _, lk in ipairs(held) do
                assert.equal(1, lk:unlock())
            end
            assert.equal(1, sem:release())
            assert.equal(1, r1:unlock())
            assert.equal(1, r2:unlock())
            assert.same({ 0, "[]\n", "" }, { run("locks", "cache", "--json") })
        end)

        it("shows nothing but the header for a zone without locks",
           function()
            assert(dict:set("k", "v"))
            assert.same({ 0, "KEY  PID  ALIVE  TTL  WAITERS  MARKED\n", "" },
                        { run("locks", "cache") })
            assert.same({ 0, "[]\n", "" }, { run("locks", "cache", "--json") })
        end)
    end)

    describe("verify", function()
        it("exits 0 for a sound zone", function()
            assert(dict:set("k", "v"))
            assert.same({ 0, "cache: ok\n", "" }, { run("verify", "cache") })
            assert.same({ 0, '{"error":null,"ok":true,"zone":"cache"}\n', "" },
                        { run("verify", "cache", "--json") })
        end)

        it("exits 1 for a zone corrupted on purpose", function()
            assert(dict:set("k", "v"))
            -- one more free chunk counted than the free list holds
            local path = dir .. "/shmlock.cache"
            local f = assert(io.open(path, "r+b"))
            local hdr = ffi.new(zone_layout.ZONE_HDR)
            ffi.copy(hdr, f:read(ffi.sizeof(hdr)), ffi.sizeof(hdr))
            assert.equal(zone_layout.LAYOUT, hdr.layout)
            local at = tonumber(hdr.shards_off)
                       + ffi.offsetof(zone_layout.SHARD_HDR, "free_count")
            f:seek("set", at)
            local count = ffi.cast("const uint32_t *", f:read(4))[0]
            f:seek("set", at)
            f:write(ffi.string(ffi.new("uint32_t[1]", count + 1), 4))
            f:close()

            local msg = ("corrupt: free list holds %d chunks, %d counted")
                        :format(count, count + 1)
            assert.same({ 1, "cache: " .. msg .. "\n", "" },
                        { run("verify", "cache") })
            assert.same({ 1, '{"error":"' .. msg .. '","ok":false,'
                             .. '"zone":"cache"}\n', "" },
                        { run("verify", "cache", "--json") })
        end)
    end)

    describe("destroy", function()
        it("destroys a zone, then exits 3 for it", function()
            assert.same({ 0, "destroyed cache\n", "" },
                        { run("destroy", "cache") })
            assert.is_false(env.exists(dir .. "/shmlock.cache"))
            assert.same({ nil, "zone destroyed" }, { dict:get("k") })
            assert.same({ 3, "", 'shmlock: no zone "cache" in ' .. dir .. "\n" },
                        { run("destroy", "cache") })
        end)
    end)

    describe("caches (resty.shmlock.cache) in the zone", function()
        local cache = require "resty.shmlock.cache"

        local function users()
            return cache.new("users", { dict = dict, ttl = 300,
                                        stale_ttl = 60 })
        end

        it("get decodes a cache's entry: value, ttl, stale, hit level",
           function()
            local c = users()
            assert(c:get("42", nil, function()
                return { name = "alice", roles = { "admin" } }
            end))
            local status, out, err = run("get", "cache", "users:42")
            assert.same({ 0, "" }, { status, err })
            local pid = proc.getpid()
            local want = {
                "cache       users", "key         42", "type        table",
                'value       {"name":"alice","roles":%["admin"%]}',
                "ttl         %S+s", "stale       no",
                "hit level   2 %(fresh: a get answers it from L2, or 1 from"
                .. " a process's L1%)",
                "zone ttl    %S+s", "written by  pid " .. pid,
            }
            assert.truthy(out:match("^" .. table.concat(want, "\n") .. "\n$"),
                          out)
            local v = jd.decode(select(2, run("get", "cache", "users:42",
                                              "--json")))
            assert.is_true(v.ttl > 0 and v.ttl <= 300)
            assert.is_true(v.zone_ttl > v.ttl and v.zone_ttl <= 360)
            v.ttl, v.zone_ttl = nil, nil
            assert.same({ key = "users:42", cache = "users", cache_key = "42",
                          type = "table",
                          value = { name = "alice", roles = { "admin" } },
                          stale = false, hit_level = 2, writer_pid = pid }, v)
        end)

        it("get shows a cached miss and a stale entry as such", function()
            local c = users()
            assert.is_nil(c:get("nobody", nil, function() return nil end))
            local v = jd.decode(select(2, run("get", "cache", "users:nobody",
                                              "--json")))
            assert.same({ "nil", json.null, false, 2 },
                        { v.type, v.value, v.stale, v.hit_level })
            assert.truthy(select(2, run("get", "cache", "users:nobody"))
                          :match("\nvalue       nil %(a cached miss%)\n"))
            -- past its ttl (waited for: peek answers nil from then on),
            -- kept stale_ttl more by the zone
            assert(c:set("n", 3.5, 0.001))
            assert.is_true(env.wait_for(function()
                return c:peek("n") == nil
            end, 10))
            local status, out = run("get", "cache", "users:n")
            assert.equal(0, status)
            assert.truthy(out:match("\nvalue       3%.5\nttl         %-[%d.]+s "
                                    .. "%(stale for [%d.]+s%)\nstale       yes"
                                    .. "\nhit level   4 %(stale: "), out)
            v = jd.decode(select(2, run("get", "cache", "users:n", "--json")))
            assert.same({ 3.5, true, 4 }, { v.value, v.stale, v.hit_level })
            assert.is_true(v.ttl <= 0 and v.zone_ttl > 0)
        end)

        it("get leaves other keys as they are, colon or not", function()
            assert(dict:set("a:b", "$short"))
            assert(dict:set("users#stats:loads", 2))
            assert.same({ 0, "$short\n", "" }, { run("get", "cache", "a:b") })
            assert.same({ 0, "2\n", "" },
                        { run("get", "cache", "users#stats:loads") })
        end)

        it("stat shows each cache's counters by name", function()
            local c = users()
            assert(c:get("1", nil, function() return "one" end))
            assert(c:get("1", nil, error))                  -- an L1 hit
            assert(c:get("2", nil, function() return "two" end))
            local other = cache.new("sessions", { dict = dict })
            assert(other:get("s", nil, function() return true end))
            local want = assert(c:stats())                  -- flushes
            assert(other:stats())
            local status, out, err = run("stat", "cache")
            assert.same({ 0, "" }, { status, err })
            assert.truthy(out:find("\n\ncache sessions\n  hits_l1        0\n",
                                   1, true), out)
            assert.truthy(out:find("\n\ncache users\n  hits_l1        1\n"
                                   .. "  hits_l2        0\n  misses         2\n"
                                   .. "  loads          2\n", 1, true), out)
            local v = jd.decode(select(2, run("stat", "cache", "--json")))
            assert.same(want, v.caches.users)
            assert.same({ "hits_l1", "hits_l2", "loader_errors", "loads",
                          "lock_waits", "misses", "refreshes", "stale" },
                        (function()
                            local names = {}
                            for k in pairs(v.caches.sessions) do
                                names[#names + 1] = k
                            end
                            table.sort(names)
                            return names
                        end)())
        end)

        it("stat of a zone without caches: no section, caches {}", function()
            assert(dict:set("k", 1))
            local status, out = run("stat", "cache")
            assert.equal(0, status)
            assert.falsy(out:find("\ncache ", 1, true))
            assert.truthy(select(2, run("stat", "cache", "--json"))
                          :find('"caches":{}', 1, true))
        end)
    end)

    describe("the command line", function()
        it("exits 2 with a message on stderr for a usage error", function()
            local cases = {
                { {}, "no command" },
                { { "frobnicate" }, "unknown command frobnicate" },
                { { "ls", "--frob" }, "unknown option --frob" },
                { { "stat" }, "stat takes ZONE" },
                { { "get", "cache" }, "get takes ZONE KEY" },
                { { "ls", "extra" }, "ls takes no operands" },
                { { "ls", "--match", "x" }, "option --match is not for ls" },
                { { "keys", "cache", "--limit", "0" },
                  "option --limit needs a whole number >= 1" },
                { { "keys", "cache", "--limit" }, "option --limit needs a value" },
                { { "stat", "bad/name" }, 'zone "bad/name": bad zone name' },
                { { "keys", "cache", "--match", "[a" },
                  "bad --match pattern: unclosed [" },
                { { "run", "--exptime", "0.001", "z", "k", "--", "true" },
                  "option --exptime needs 0 (never expires) or at least "
                  .. "0.1 seconds" },
            }
            for _, c in ipairs(cases) do
                local status, out, err = run(unpack(c[1]))
                assert.same({ 2, "" }, { status, out })
                assert.equal("shmlock: " .. c[2], err:match("^[^\n]*"))
            end
        end)

        it("prints its help with --help, exit 0: every command, every "
           .. "option, --group in the usage line", function()
            local status, out, err = shmlock(dir, "--help")
            assert.same({ 0, "" }, { status, err })
            assert.equal("usage: shmlock [--dir D] [--group G] [--json] "
                         .. "COMMAND [ARGS]", out:match("^[^\n]*"))
            for name in pairs(args.COMMANDS) do
                assert.truthy(out:find("\n  " .. name .. " ", 1, true), name)
            end
            for _, option in ipairs(args.OPTIONS) do
                assert.truthy(out:find("--" .. option, 1, true), option)
            end
        end)

        it("prints its version with --version, exit 0", function()
            local version = require "resty.shmlock.version"
            assert.same({ 0, "shmlock " .. version .. "\n", "" },
                        { shmlock(dir, "--version") })
            assert.same({ 0, "shmlock " .. version .. "\n", "" },
                        { shmlock(dir, "run", "--version") })
        end)

        it("has a manual page, shmlock(1), that renders without a warning "
           .. "and names every command and option", function()
            local page = checkout.ROOT .. "/docs/shmlock.1"
            assert.equal("", checkout.sh("env -u LD_PRELOAD groff -man -ww -z " .. q(page)
                                         .. " 2>&1"))
            local text = checkout.sh("env -u LD_PRELOAD MANWIDTH=80 man -l " .. q(page)
                                     .. " 2>/dev/null")
            assert.truthy(text:find("^SHMLOCK%(1%)"), text)
            for name in pairs(args.COMMANDS) do
                assert.truthy(text:find("\n       " .. name .. "[ \n]"), name)
            end
            for _, option in ipairs(args.OPTIONS) do
                assert.truthy(text:find("--" .. option, 1, true), option)
            end
        end)

        it("finds zones in $SHMLOCK_DIR without --dir", function()
            assert.equal("[]\n0\n",
                         checkout.sh("cd / && SHMLOCK_DIR=" .. q(dir) .. " "
                                     .. q(BIN) .. " keys cache --json;"
                                     .. " echo $?"))
        end)
    end)
end)

describe("resty.shmlock.cli pieces", function()
    it("process.reap: nil while a child runs, its stop signal (untraced), its "
       .. "status; false and ECHILD's message for a pid that is no child",
       function()
        local process = require "resty.shmlock.cli.process"
        local pid = assert(process.fork())
        if pid == 0 then
            process.kill(process.getpid(), process.SIGSTOP)
            process.exit(7)
        end
        local r, stop
        for _ = 1, 1000 do      -- (10 s at most)
            r, stop = process.reap(pid, true)
            if r ~= nil or stop then
                break
            end
            proc.sleep(0.01)
        end
        assert.same({ nil, process.SIGSTOP }, { r, stop })
        assert.is_nil(process.reap(pid))        -- stopped: not ended
        assert.is_true(process.kill(pid, process.SIGCONT))
        for _ = 1, 1000 do
            r = process.reap(pid)
            if r then
                break
            end
            proc.sleep(0.01)
        end
        assert.equal(7, r)
        assert.same({ false, "No child processes", process.ECHILD },
                    { process.reap(pid) })
    end)

    it("a zone destroyed or whose file was removed meanwhile exits 6",
       function()
        local commands = require "resty.shmlock.cli.commands"
        local errors = require "resty.shmlock.errors"
        local lib = require "resty.shmlock.lib"
        assert.equal(6, commands.status_of(errors[lib.SHMLOCK_DESTROYED]))
        assert.equal(6, commands.status_of(errors[lib.SHMLOCK_REMOVED]))
    end)

    it("json.encode: sorted objects, arrays, escapes, numbers", function()
        assert.equal('{"a":[1,2.5,"nan",true],"b":{},"c":[],"d":null}',
                     json.encode { a = { 1, 2.5, 0 / 0, true }, b = {},
                                   c = json.array {}, d = json.null })
        assert.equal('["inf","-inf","nan"]',
                     json.encode { math.huge, -math.huge, -(0 / 0) })
        assert.equal('"\\"\\\\\\n\\t\\u0000\\u001f\\u00ff\226\130\172"',
                     json.encode('"\\\n\t\0\31\255\226\130\172'))
        assert.equal("0.1", json.encode(0.1))
        assert.equal("29.949", json.encode(29949 / 1000))
        assert.equal("-3", json.encode(-3))
    end)

    it("glob: *, ?, sets, ranges, negation, escapes, any byte", function()
        local function m(p, k)
            return glob.match(assert(glob.compile(p)), k)
        end
        assert.is_true(m("user:*", "user:"))
        assert.is_false(m("user:*", "a user:1"))
        assert.is_true(m("a?c", "a\0c"))
        assert.is_false(m("a?c", "ac"))
        assert.is_true(m("[a-c]x", "bx"))
        assert.is_false(m("[!a-c]x", "bx"))
        assert.is_true(m("[^a-c]x", "dx"))
        assert.is_true(m("a\\*", "a*"))
        assert.is_false(m("a\\*", "ab"))
        assert.is_true(m("%.(", "%.("))
        assert.is_false(m("%.(", "x.("))
        assert.same({ nil, "unclosed [" }, { glob.compile("[a") })
        assert.same({ nil, "trailing \\" }, { glob.compile("a\\") })
    end)

    it("output.unprintable: printable's inverse, for every byte",
       function()
        local output = require "resty.shmlock.cli.output"
        local all = {}
        for b = 0, 255 do
            all[#all + 1] = string.char(b)
        end
        all = table.concat(all)
        assert.equal(all, output.unprintable(output.printable(all)))
        assert.equal("a\\b", output.unprintable("a\\\\b"))
        assert.equal("\0", output.unprintable("\\x00"))
        for _, bad in ipairs({ "\\", "a\\", "\\x", "\\x4", "\\xg0",
                               "\\n" }) do
            assert.is_nil(output.unprintable(bad), bad)
        end
    end)

    it("args.parse: options anywhere, --opt=value, --", function()
        local cmd = assert(args.parse { "--json", "keys", "z", "--dir=/d",
                                        "--limit", "5" })
        assert.same({ name = "keys", operands = { "z" }, json = true,
                      dir = "/d", limit = 5 }, cmd)
        cmd = assert(args.parse { "get", "z", "--", "--json" })
        assert.same({ "z", "--json" }, cmd.operands)
        assert.is_nil(cmd.json)
    end)
end)
