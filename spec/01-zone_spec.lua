-- Zones: shdict.open / shdict.destroy, from this process and from others.
--
-- Every test works in its own temporary directory (opts.dir), so no test
-- touches /dev/shm or the zones of another run.  Zone files live at
-- <dir>/shmlock.<name>.

local shdict = require "resty.shmlock.shdict"

local checkout = require "helpers.checkout"
local fixture = require "helpers.fixture"
local readable_copy = require "helpers.readable_copy"

local pack, sh, trim = checkout.pack, checkout.sh, checkout.trim
local read_file, write_file = checkout.read_file, checkout.write_file
local LUA_PATH = checkout.LUA_PATH

local function is_root()
    return trim(sh("id -u")) == "0"
end

local function exists(path)
    return trim(sh("test -e '" .. path .. "' && echo yes || echo no")) == "yes"
end

-- Runs `code` in a fresh LuaJIT process (with the package path of this
-- checkout) and returns what it printed, stdout and stderr together.
-- `prefix` goes before the luajit command in the shell (e.g. "umask 000;");
-- `paths`: its LUA_PATH=... SHMLOCK_LIB=... instead of the checkout's.
local script_seq = 0
local function run_child(tmp, code, prefix, paths)
    script_seq = script_seq + 1
    local file = tmp .. "/child" .. script_seq .. ".lua"
    write_file(file, code)
    return sh((prefix or "") .. " "
              .. (paths or "LUA_PATH='" .. LUA_PATH .. "'") .. " luajit "
              .. file .. " 2>&1")
end

-- A child's script opening zone `name` in `dir`, then running `body` with
-- the dict in `d` (or printing the open error).
local function child_script(dir, name, size, body)
    return ([[
local shdict = require "resty.shmlock.shdict"
local d, err = shdict.open(%q, { dir = %q, size = %s })
if not d then
    print("open failed: " .. tostring(err))
    os.exit(1)
end
%s
]]):format(name, dir, size and ("%q"):format(size) or "nil", body)
end

-- Bytes that look like nothing of ours (fixed, so a failure reproduces).
-- the advice of a refused zone of another user (or of group nogroup)
local function owner_hint(owner)
    return "run as " .. owner .. " (the zone's owner), or share the zone "
           .. "with a group on purpose: create it with opts.group = \"G\" "
           .. "and opts.mode = \"0660\", and attach with opts.group = \"G\""
end

local function garbage(len)
    local t = {}
    for i = 1, len do
        t[i] = string.char((i * 7919 + 13) % 251)
    end
    return table.concat(t)
end


describe("shdict zones", function()
    local fx = fixture.new()
    local tmp, dir

    -- the test's files in tmp, its zones in tmp/zones
    before_each(function()
        tmp = fx.dir
        dir = tmp .. "/zones"
        assert(os.execute("mkdir '" .. dir .. "'") == 0)
    end)

    local function zone_path(name)
        return dir .. "/shmlock." .. name
    end

    -- open()'s refusals of a file at a zone's path, as it words them
    local function not_a_zone(name)
        return "incompatible zone: " .. zone_path(name) .. " is not a zone file"
    end

    local function bad_header(name)
        return "incompatible zone: " .. zone_path(name) .. " has a header "
               .. "that does not match the file (truncated, or changed by "
               .. "another program)"
    end

    describe("open()", function()
        describe("zone names", function()
            local bad = {
                { "an empty string", "" },
                { "65 characters", ("n"):rep(65) },
                { "a leading '.'", ".hidden" },
                { "'..'", ".." },
                { "a '/'", "a/b" },
                { "a path", "../escape" },
                { "a space", "a b" },
                { "a tab", "a\tb" },
                { "a NUL byte", "a\0b" },
                { "a non-ASCII letter", "caf\195\169" },
                { "a '*'", "a*" },
            }
            for _, case in ipairs(bad) do
                it("returns nil, 'bad zone name' for " .. case[1], function()
                    assert.same({ n = 2, nil, "bad zone name" },
                                pack(shdict.open(case[2], { dir = dir })))
                    assert.same("", trim(sh("ls -A '" .. dir .. "'")))
                end)
            end

            local not_strings = {
                { "nil", nil }, { "a number", 42 }, { "a boolean", true },
                { "a table", {} },
            }
            for _, case in ipairs(not_strings) do
                it("returns nil, 'bad zone name' for " .. case[1], function()
                    assert.same({ n = 2, nil, "bad zone name" },
                                pack(shdict.open(case[2], { dir = dir })))
                end)
            end

            it("accepts 64 characters of [A-Za-z0-9_.-]", function()
                local name = ("aZ09_.-"):rep(9) .. "x"
                assert.equal(64, #name)
                local d, err = shdict.open(name, { dir = dir, size = "32k" })
                assert.same({ "table", nil }, { type(d), err })
                assert.is_true(exists(zone_path(name)))
            end)

            it("accepts a name starting with '-' or '_'", function()
                for _, name in ipairs({ "-dash", "_under", "0digit" }) do
                    local d, err = shdict.open(name, { dir = dir,
                                                       size = "32k" })
                    assert.same({ "table", nil }, { type(d), err })
                    assert.is_true(exists(zone_path(name)))
                end
            end)
        end)

        describe("opts.size", function()
            local bad = {
                { "garbage", "lots" },
                { "an empty string", "" },
                { "a negative string", "-64k" },
                { "a fractional string", "1.5m" },
                { "an unknown unit", "64x" },
                { "a negative number", -65536 },
                { "zero", 0 },
                { "the string '0'", "0" },
                { "a fractional number", 65536.5 },
                { "NaN", 0 / 0 },
                { "infinity", math.huge },
                { "less than 32k (number)", 32767 },
                { "less than 32k (string)", "31k" },
                { "an absurd size", "100000000000000000000" },
                { "a number that wraps around 2^64", 2 ^ 64 + 65536 },
                { "a string that wraps around 2^64", "18014398509482048k" },
                { "a table", {} },
                { "a boolean", true },
            }
            for _, case in ipairs(bad) do
                it("returns nil, 'bad size: ...' for " .. case[1], function()
                    local r = pack(shdict.open("sized", { dir = dir,
                                                          size = case[2] }))
                    assert.equal(2, r.n)
                    assert.is_nil(r[1])
                    assert.matches("^bad size: ", r[2])
                    assert.matches('%(give bytes as a whole number, or a '
                                   .. 'string of digits with an optional '
                                   .. 'unit k, m or g: 65536, "64k", "10m", '
                                   .. '"1g"; from 32k to 1024g%)$', r[2])
                    assert.is_false(exists(zone_path("sized")))
                end)
            end

            it("says what was given and what is wrong with it", function()
                local forms = ' (give bytes as a whole number, or a string '
                    .. 'of digits with an optional unit k, m or g: 65536, '
                    .. '"64k", "10m", "1g"; from 32k to 1024g)'
                local cases = {
                    { "10MB", 'bad size: "10MB" is not a size' },
                    { 65536.5, "bad size: 65536.5 is not a whole number" },
                    { "31k", 'bad size: "31k" is out of range' },
                    { {}, "bad size: a table is not a size" },
                }
                for _, case in ipairs(cases) do
                    assert.same({ n = 2, nil, case[2] .. forms },
                                pack(shdict.open("sized", { dir = dir,
                                                           size = case[1] })))
                end
            end)

            local good = {
                { "a number of bytes", 65536, 65536 },
                { "the minimum, 32k", "32k", 32768 },
                { "'64k'", "64k", 65536 },
                { "'10m'", "10m", 10 * 1024 * 1024 },
                { "'64K'", "64K", 65536 },
            }
            for _, case in ipairs(good) do
                it("accepts " .. case[1], function()
                    local d = assert(shdict.open("sized", { dir = dir,
                                                            size = case[2] }))
                    assert.same({ n = 1, case[3] }, pack(d:capacity()))
                    assert.equal(tostring(case[3]),
                                 trim(sh("stat -c %s '" .. zone_path("sized")
                                         .. "'")))
                end)
            end

            it("defaults to 1m", function()
                local d = assert(shdict.open("dflt", { dir = dir }))
                assert.same({ n = 1, 1024 * 1024 }, pack(d:capacity()))
            end)
        end)

        describe("opts.shards", function()
            local bad = {
                { "3", 3 }, { "32", 32 }, { "-1", -1 }, { "1.5", 1.5 },
                { "NaN", 0 / 0 }, { "a string", "4" }, { "a table", {} },
                { "16 in a 512k zone (32k shards)", 16, "512k" },
            }
            for _, case in ipairs(bad) do
                it("returns nil, 'bad shards' for " .. case[1], function()
                    assert.same({ n = 2, nil, "bad shards" },
                                pack(shdict.open("sharded",
                                                 { dir = dir,
                                                   size = case[3] or "4m",
                                                   shards = case[2] })))
                    assert.is_false(exists(zone_path("sharded")))
                end)
            end

            local by_size = {
                { "32k", 1 }, { "1m", 1 }, { "2m", 2 }, { "4m", 4 },
                { "12m", 8 }, { "64m", 16 }, { "1g", 16 },
            }
            for _, case in ipairs(by_size) do
                it("defaults to " .. case[2] .. " for a " .. case[1]
                   .. " zone", function()
                    local d = assert(shdict.open("sharded",
                                                 { dir = dir,
                                                   size = case[1] }))
                    assert.same({ n = 1, case[2] }, pack(d:shards()))
                end)
            end

            it("splits a zone as asked, and attaching keeps it", function()
                local d = assert(shdict.open("sharded", { dir = dir,
                                                          size = "1m",
                                                          shards = 16 }))
                assert.same({ n = 1, 16 }, pack(d:shards()))
                for i = 1, 500 do
                    assert.is_true((d:set("k" .. i, i)))
                end
                local out = run_child(tmp, child_script(dir, "sharded", nil,
                                                        [[
local keys = d:get_keys(0)
print(d:shards(), #keys, d:get("k1"), d:get("k500"))
]]))
                assert.equal("16\t500\t1\t500\n", out)
                assert.same({ n = 1, true }, pack(d:verify()))
            end)

            it("holds an entry as large as one shard, not larger", function()
                local d = assert(shdict.open("sharded", { dir = dir,
                                                          size = "4m" }))
                assert.same({ n = 1, 4 }, pack(d:shards()))
                assert.same({ n = 3, true, nil, false },
                            pack(d:set("big", ("x"):rep(850 * 1024))))
                assert.same({ n = 3, false, "no memory", false },
                            pack(d:set("bigger", ("x"):rep(1100 * 1024))))
                local one = assert(shdict.open("one", { dir = dir,
                                                        size = "4m",
                                                        shards = 1 }))
                assert.same({ n = 3, true, nil, false },
                            pack(one:set("bigger", ("x"):rep(3 * 1024 * 1024))))
            end)
        end)

        it("returns the same object when opened twice in a process",
           function()
            local a = assert(shdict.open("twice", { dir = dir, size = "64k" }))
            local b = assert(shdict.open("twice", { dir = dir, size = "1m" }))
            assert.is_true(rawequal(a, b))
            assert.same({ n = 1, 65536 }, pack(b:capacity()))
        end)

        it("opens distinct zones for the same name in distinct dirs",
           function()
            local dir2 = tmp .. "/other"
            assert(os.execute("mkdir '" .. dir2 .. "'") == 0)
            local a = assert(shdict.open("same", { dir = dir, size = "32k" }))
            local b = assert(shdict.open("same", { dir = dir2, size = "32k" }))
            assert.is_false(rawequal(a, b))
            a:set("k", "in a")
            assert.same({ n = 1, nil }, pack(b:get("k")))
            assert.same({ n = 1, "in a" }, pack(a:get("k")))
        end)

        it("uses $SHMLOCK_DIR when opts.dir is not given", function()
            local out = run_child(tmp, [[
local shdict = require "resty.shmlock.shdict"
local d, err = shdict.open("envdir", { size = "32k" })
print(type(d), err)
print(d:set("k", "v"))
]], "SHMLOCK_DIR='" .. dir .. "'")
            assert.equal("table\tnil\ntrue\tnil\tfalse\n", out)
            local d = assert(shdict.open("envdir", { dir = dir }))
            assert.same({ n = 1, "v" }, pack(d:get("k")))
        end)

        it("lets another process attach and see the same keys", function()
            local d = assert(shdict.open("shared", { dir = dir,
                                                     size = "64k" }))
            assert.same({ n = 3, true, nil, false }, pack(d:set("str", "abc")))
            d:set("num", 42.5)
            d:set("flagged", true, 0, 9)

            local out = run_child(tmp, child_script(dir, "shared", "64k", [[
print(d:get("str"))
print(d:get("num"))
print(d:get("flagged"))
print(d:add("from_child", "hello"))
]]))
            assert.equal("abc\n42.5\ntrue\t9\ntrue\tnil\tfalse\n", out)
            assert.same({ n = 1, "hello" }, pack(d:get("from_child")))
            assert.same({ n = 1, true }, pack(d:verify()))
        end)

        it("keeps the real size when attaching with another opts.size",
           function()
            local d = assert(shdict.open("sized", { dir = dir,
                                                    size = "64k" }))
            d:set("k", 1)
            local out = run_child(tmp, child_script(dir, "sized", "1m", [[
print(d:capacity(), d:get("k"))
]]))
            assert.equal("65536\t1\n", out)
            assert.equal("65536", trim(sh("stat -c %s '" .. zone_path("sized")
                                          .. "'")))
        end)

        it("creates the zone file with mode 0600 whatever the umask",
           function()
            local out = run_child(tmp, child_script(dir, "modes", "32k",
                                                    "print('ok')"),
                                  "umask 000;")
            assert.equal("ok\n", out)
            assert.equal("600", trim(sh("stat -c %a '" .. zone_path("modes")
                                        .. "'")))
        end)

        it("leaves nothing but the zone file in its directory", function()
            assert(shdict.open("tidy", { dir = dir, size = "32k" }))
            assert.equal("shmlock.tidy", trim(sh("ls -A '" .. dir .. "'")))
        end)

        describe("a file at the zone path that is not a zone", function()
            it("returns nil, 'incompatible zone' for random bytes", function()
                write_file(zone_path("junk"), garbage(65536))
                assert.same({ n = 2, nil, not_a_zone("junk") },
                            pack(shdict.open("junk", { dir = dir })))
                assert.equal(garbage(65536), read_file(zone_path("junk")))
            end)

            it("returns nil, 'incompatible zone' for a short file", function()
                write_file(zone_path("short"), "SHMLOCK\0\1\0\0\0")
                assert.same({ n = 2, nil, not_a_zone("short") },
                            pack(shdict.open("short", { dir = dir })))
                assert.equal("SHMLOCK\0\1\0\0\0",
                             read_file(zone_path("short")))
            end)

            it("returns nil, 'incompatible zone' for an empty file",
               function()
                write_file(zone_path("empty"), "")
                assert.same({ n = 2, nil, not_a_zone("empty") },
                            pack(shdict.open("empty", { dir = dir })))
                assert.equal("", read_file(zone_path("empty")))
            end)

            it("returns nil, 'incompatible zone' for a truncated zone",
               function()
                -- made by another process: a truncated mapping would fault
                assert.equal("ok\n",
                             run_child(tmp, child_script(dir, "cut", "1m",
                                                         "print('ok')")))
                assert(os.execute("truncate -s 64k '" .. zone_path("cut")
                                  .. "'") == 0)
                assert.same({ n = 2, nil, bad_header("cut") },
                            pack(shdict.open("cut", { dir = dir })))
            end)

            -- header: magic[8] at 0, layout (u32) at 8, size (u64) at 16
            local fields = {
                { "magic", 0, not_a_zone },
                { "layout version", 8, function(name)
                    local ours = tonumber(require("resty.shmlock.lib")
                                          .SHMLOCK_LAYOUT)
                    return "incompatible zone: " .. zone_path(name)
                           .. " is a zone of layout " .. (255 - ours)
                           .. ", made by another version of lua-resty-"
                           .. "shmlock (this one reads layout " .. ours
                           .. "): destroy it to make it anew (shmlock "
                           .. "--dir " .. dir .. " destroy " .. name
                           .. ', or shdict.destroy("' .. name
                           .. '", { dir = "' .. dir .. '" }))'
                end },
                { "size", 16, bad_header },
            }
            for _, field in ipairs(fields) do
                it("returns nil, 'incompatible zone' when the header's "
                   .. field[1] .. " differs", function()
                    assert.equal("ok\n",
                                 run_child(tmp, child_script(dir, "hdr",
                                                             "64k",
                                                             "print('ok')")))
                    local path = zone_path("hdr")
                    local data = read_file(path)
                    local off = field[2]
                    local byte = data:byte(off + 1)
                    local f = assert(io.open(path, "r+b"))
                    f:seek("set", off)
                    f:write(string.char(255 - byte))
                    f:close()

                    assert.same({ n = 2, nil, field[3]("hdr") },
                                pack(shdict.open("hdr", { dir = dir })))
                end)
            end
        end)

        it("names both layouts and how to destroy a zone of the layout "
           .. "before this one", function()
            -- a zone as the version before made it (its layout word)
            assert.equal("ok\n", run_child(tmp, child_script(dir, "older",
                                                             "64k",
                                                             "print('ok')")))
            local ours = tonumber(require("resty.shmlock.lib").SHMLOCK_LAYOUT)
            local f = assert(io.open(zone_path("older"), "r+b"))
            f:seek("set", 8)
            f:write(string.char(ours - 1))
            f:close()
            local _, err = shdict.open("older", { dir = dir })
            assert.equal("incompatible zone: " .. zone_path("older")
                         .. " is a zone of layout " .. (ours - 1)
                         .. ", made by another version of lua-resty-shmlock "
                         .. "(this one reads layout " .. ours .. "): destroy "
                         .. "it to make it anew (shmlock --dir " .. dir
                         .. ' destroy older, or shdict.destroy("older", '
                         .. '{ dir = "' .. dir .. '" }))', err)
            -- the fix it names works
            assert.is_true(shdict.destroy("older", { dir = dir }))
            assert.truthy(shdict.open("older", { dir = dir, size = "64k" }))
        end)

        describe("a symlink at the zone path", function()
            it("is refused, and the file it points to is left alone",
               function()
                local target = tmp .. "/target"
                write_file(target, "precious")
                assert(os.execute("ln -s '" .. target .. "' '"
                                  .. zone_path("link") .. "'") == 0)
                assert.same({ n = 2, nil, not_a_zone("link") },
                            pack(shdict.open("link", { dir = dir,
                                                       size = "32k" })))
                assert.equal("precious", read_file(target))
                assert.equal("link", trim(sh("stat -c %F '"
                                             .. zone_path("link") .. "'"))
                                       :match("symbolic (link)"))
            end)

            it("is refused even when it points to a valid zone", function()
                local dir2 = tmp .. "/real"
                assert(os.execute("mkdir '" .. dir2 .. "'") == 0)
                assert.equal("ok\n", run_child(tmp, child_script(dir2, "real",
                    "32k", "d:set('k', 'v') print('ok')")))
                assert(os.execute("ln -s '" .. dir2 .. "/shmlock.real' '"
                                  .. zone_path("alias") .. "'") == 0)
                assert.same({ n = 2, nil, not_a_zone("alias") },
                            pack(shdict.open("alias", { dir = dir })))
            end)

            it("is not followed to create a file where it points", function()
                local target = tmp .. "/nowhere"
                assert(os.execute("ln -s '" .. target .. "' '"
                                  .. zone_path("dangling") .. "'") == 0)
                assert.same({ n = 2, nil, not_a_zone("dangling") },
                            pack(shdict.open("dangling", { dir = dir,
                                                           size = "32k" })))
                assert.is_false(exists(target))
            end)
        end)

        it("returns nil and a message naming the zone when the directory "
           .. "does not exist", function()
            local d, err = shdict.open("lost", { dir = tmp .. "/missing" })
            assert.is_nil(d)
            assert.equal('failed to open zone "lost": No such file or '
                         .. 'directory', err)
        end)

        it("raises on a non-table opts", function()
            local ok, err = pcall(shdict.open, "x", "64k")
            assert.is_false(ok)
            assert.matches('bad "opts" argument', err, 1, true)
        end)

        it("creates a new zone exactly once when processes race for it",
           function()
            local n = 8
            local go = tmp .. "/go"
            local body = ([[
local shdict = require "resty.shmlock.shdict"
local go, id = %q, tonumber(arg[1])
while not io.open(go) do end
local d, err = shdict.open("race", { dir = %q, size = "64k" })
if not d then
    print(id .. " open: " .. tostring(err))
    os.exit(1)
end
local ok, aerr = d:add("p" .. id, id)
print(id .. " " .. tostring(ok) .. " " .. tostring(aerr) .. " "
      .. d:capacity())
]]):format(go, dir)
            local file = tmp .. "/racer.lua"
            write_file(file, body)

            local cmd = { "(" }
            for i = 1, n do
                cmd[#cmd + 1] = ("LUA_PATH='%s' luajit %s %d &"):format(
                    LUA_PATH, file, i)
            end
            cmd[#cmd + 1] = "sleep 0.3; touch '" .. go .. "'; wait) 2>&1"
            local out = sh(table.concat(cmd, " "))

            local lines = {}
            for line in out:gmatch("[^\n]+") do
                lines[#lines + 1] = line
            end
            table.sort(lines)
            local want = {}
            for i = 1, n do
                want[i] = i .. " true nil 65536"
            end
            table.sort(want)
            assert.same(want, lines)

            local d = assert(shdict.open("race", { dir = dir }))
            local keys = d:get_keys(0)
            table.sort(keys)
            local want_keys = {}
            for i = 1, n do
                want_keys[i] = "p" .. i
                assert.same({ n = 1, i }, pack(d:get("p" .. i)))
            end
            table.sort(want_keys)
            assert.same(want_keys, keys)
            assert.same({ n = 1, true }, pack(d:verify()))
            assert.equal("shmlock.race", trim(sh("ls -A '" .. dir .. "'")))
        end)
    end)

    describe("open() with create = false", function()
        it("attaches to an existing zone", function()
            local d = assert(shdict.open("there", { dir = dir, size = "64k" }))
            d:set("k", "v")
            local out = run_child(tmp, ([[
local shdict = require "resty.shmlock.shdict"
local d, err = shdict.open("there", { dir = %q, create = false })
print(d:get("k"), err)
]]):format(dir))
            assert.equal("v\tnil\n", out)
        end)

        it("returns nil, 'not found' and creates no file", function()
            assert.same({ n = 2, nil, "not found" },
                        pack(shdict.open("absent", { dir = dir,
                                                     create = false })))
            assert.same({ n = 2, nil, "not found" },
                        pack(shdict.open("absent", { dir = dir, size = "2m",
                                                     create = false })))
            assert.equal("", trim(sh("ls -A '" .. dir .. "'")))
        end)
    end)

    describe("open() of a zone of another size", function()
        it("says so in a third return value, and keeps the real size",
           function()
            local d = assert(shdict.open("sz", { dir = dir, size = "64k" }))
            local out = run_child(tmp, ([[
local shdict = require "resty.shmlock.shdict"
print(select("#", shdict.open("sz", { dir = %q, size = "1m" })))
local d, err, note = shdict.open("sz", { dir = %q, size = "1m" })
print(d:capacity(), err, note)
local _, _, none = shdict.open("sz", { dir = %q, size = "64k" })
local _, _, unasked = shdict.open("sz", { dir = %q })
print(none, unasked)
]]):format(dir, dir, dir, dir))
            assert.equal("3\n65536\tnil\tsize mismatch: the zone has "
                         .. "65536 bytes, not 1048576\nnil\tnil\n", out)
            -- the same in the process that opened it (its cached object)
            local same, err, note = shdict.open("sz", { dir = dir,
                                                       size = "32k" })
            assert.is_true(rawequal(d, same))
            assert.is_nil(err)
            assert.equal("size mismatch: the zone has 65536 bytes, not "
                         .. "32768", note)
            -- the asked size is compared after rounding up to 4 KiB
            assert.same({ n = 3, d, nil, nil },
                        pack(shdict.open("sz", { dir = dir,
                                                 size = 65536 - 100 })))
        end)
    end)

    describe("opts.mode and opts.group", function()
        local function stat(name)
            return trim(sh("stat -c '%a %U %G' '" .. zone_path(name) .. "'"))
        end

        it("creates the file with the mode asked, whatever the umask",
           function()
            local out = run_child(tmp, ([[
local shdict = require "resty.shmlock.shdict"
assert(shdict.open("m640", { dir = %q, size = "32k", mode = "0640" }))
assert(shdict.open("m660", { dir = %q, size = "32k", mode = 432 }))
print("ok")
]]):format(dir, dir), "umask 077;")
            assert.equal("ok\n", out)
            assert.equal("640", stat("m640"):match("^%d+"))
            assert.equal("660", stat("m660"):match("^%d+"))
        end)

        it("raises on a mode that others may write, or without owner rw",
           function()
            local others = " lets other users write the zone (share it "
                           .. "with a group instead: opts.group and mode 0660)"
            local nan = 'not a number from 0 to 0777 or an octal string '
                        .. 'like "0660"'
            local why = {
                ["0666"] = "0666" .. others, ["0602"] = "0602" .. others,
                ["0400"] = "0400 does not let the owner read and write",
                ["0460"] = "0460 does not let the owner read and write",
                ["0700"] = "0700 has an execute bit",
                [1023] = nan, rw = nan, [0.5] = nan, [-1] = nan,
            }
            for mode, reason in pairs(why) do
                assert.has_error(function()
                    shdict.open("bad_mode", { dir = dir, mode = mode })
                end, 'bad "opts.mode" argument: ' .. reason, tostring(mode))
            end
            assert.equal("", trim(sh("ls -A '" .. dir .. "'")))
        end)

        it("raises on a group that is neither a name nor a gid", function()
            for _, g in ipairs({ "", -1, 1.5, true }) do
                assert.has_error(function()
                    shdict.open("bad_group", { dir = dir, group = g })
                end, 'bad "opts.group" argument', tostring(g))
            end
        end)

        it("returns nil, 'unknown group \"NAME\"' for an unknown name",
           function()
            assert.same({ n = 2, nil, 'unknown group "no-such-group-x"' },
                        pack(shdict.open("g", { dir = dir,
                                                group = "no-such-group-x" })))
        end)

        it("gives a new zone file the group asked, by name or gid",
           function()
            if not is_root() then
                pending("needs root to give a file any group")
                return
            end
            assert(shdict.open("gname", { dir = dir, size = "32k",
                                          mode = "0660", group = "nogroup" }))
            assert(shdict.open("ggid", { dir = dir, size = "32k",
                                         group = 65534 }))
            assert.equal("660 root nogroup", stat("gname"))
            assert.equal("600 root nogroup", stat("ggid"))
        end)
    end)

    describe("a zone shared between root and nobody", function()
        -- nobody's modules and library: a copy it can read (the checkout
        -- may be a clone in a directory only root enters)
        local copy

        setup(function()
            if is_root() then
                copy = readable_copy.new()
            end
        end)

        teardown(function()
            if copy then
                copy:remove()
            end
        end)

        -- runs `code` as nobody:nogroup (setpriv), in a fresh LuaJIT
        local function as_nobody(code)
            return run_child(tmp, code, "setpriv --reuid=65534 --regid=65534 "
                                         .. "--clear-groups env", copy.env)
        end

        before_each(function()
            if not is_root() then
                return
            end
            -- nobody must reach the scripts and create files in dir
            sh("chmod 0755 '" .. tmp .. "' && chmod 1777 '" .. dir .. "'")
        end)

        local function open_script(name, opts)
            return ([[
local shdict = require "resty.shmlock.shdict"
local d, err = shdict.open(%q, { dir = %q, size = "64k"%s })
if not d then print(err) os.exit(0) end
d:incr("n", 1, 0)
print("opened", d:get("n"))
]]):format(name, dir, opts and (", " .. opts) or "")
        end

        it("root makes it 0660 group nogroup, nobody attaches naming "
           .. "the group", function()
            if not is_root() then
                pending("needs root")
                return
            end
            local d = assert(shdict.open("shared", {
                dir = dir, size = "64k", mode = "0660", group = "nogroup" }))
            d:set("n", 1)
            assert.equal("opened\t2\n",
                         as_nobody(open_script("shared",
                                               'group = "nogroup"')))
            assert.equal(2, d:get("n"))
            -- without naming the group, the group-writable file is refused
            assert.equal("zone file mode 0660 is group-writable by "
                         .. "nogroup, a group no one should trust: "
                         .. owner_hint("root") .. "\n",
                         as_nobody(open_script("shared")))
        end)

        it("nobody makes it, root attaches naming the group", function()
            if not is_root() then
                pending("needs root")
                return
            end
            assert.equal("opened\t1\n",
                         as_nobody(open_script("theirs",
                                               'mode = "0660", '
                                               .. 'group = "nogroup"')))
            assert.equal("660 nobody nogroup", trim(sh(
                "stat -c '%a %U %G' '" .. zone_path("theirs") .. "'")))
            assert.equal("zone file mode 0660 is group-writable by "
                         .. "nogroup, a group no one should trust: "
                         .. owner_hint("nobody") .. "\n",
                         run_child(tmp, open_script("theirs")))
            assert.equal("opened\t2\n",
                         run_child(tmp, open_script("theirs",
                                                    "group = 65534")))
        end)

        it("destroyed by a member of the group, is dead for its owner too",
           function()
            if not is_root() then
                pending("needs root")
                return
            end
            -- nobody's zone, shared with nogroup; root uses it, then
            -- destroys it: root's own mapping must see it destroyed
            as_nobody(open_script("gone", 'mode = "0660", group = "nogroup"'))
            local d = assert(shdict.open("gone", { dir = dir,
                                                   group = "nogroup" }))
            assert.equal(1, d:get("n"))
            assert.is_true(shdict.destroy("gone", { dir = dir }))
            assert.same({ n = 2, nil, "zone destroyed" }, pack(d:get("n")))
            assert.is_false(exists(zone_path("gone")))
        end)

        it("a member that may not unlink the name (sticky directory) "
           .. "leaves the zone alive, saying why", function()
            if not is_root() then
                pending("needs root")
                return
            end
            local d = assert(shdict.open("kept", {
                dir = dir, size = "64k", mode = "0660", group = "nogroup" }))
            d:set("n", 5)
            assert.equal('nil\tfailed to destroy zone "kept": Operation not '
                         .. "permitted\n", as_nobody(([[
local shdict = require "resty.shmlock.shdict"
print(shdict.destroy("kept", { dir = %q }))
]]):format(dir)))
            assert.equal(5, d:get("n"))
            assert.is_true(exists(zone_path("kept")))
            assert.equal("opened\t6\n",
                         as_nobody(open_script("kept", 'group = "nogroup"')))
        end)

        it("names the directory, its owner and mode when no zone file "
           .. "can be made there, and the fix", function()
            if not is_root() then
                pending("needs root")
                return
            end
            -- a directory nobody may not write (as /dev/shm at 0755): its
            -- owner and mode, and what to change
            local closed = tmp .. "/closed"
            sh("mkdir -p '" .. closed .. "' && chmod 0755 '" .. closed .. "'")
            assert.equal('failed to open zone "c": permission denied '
                         .. "opening zone file " .. closed .. "/shmlock.c: "
                         .. "the directory " .. closed .. " (owner root, "
                         .. "group root, mode 0755) does not let uid 65534 "
                         .. "(nobody) create files in it: run as a user who "
                         .. "may write there, make the directory writable "
                         .. "for this user (chmod 1777 " .. closed .. ", the "
                         .. "mode /dev/shm has), or use a directory it may "
                         .. "write ($SHMLOCK_DIR, or opts.dir)\n",
                         as_nobody(([[
local d, err = require("resty.shmlock.shdict").open("c", { dir = %q })
print(err)
]]):format(closed)))
        end)

        it("names each refusal's cause", function()
            if not is_root() then
                pending("needs root")
                return
            end
            -- nobody's 0600 zone: root does not trust another user's file;
            -- one left over (nginx's user changed, say) goes with shmlock
            -- destroy
            as_nobody(open_script("nob"))
            assert.equal("zone file owned by another user (uid 65534): "
                         .. owner_hint("nobody") .. "; a file left from an "
                         .. "earlier setup (nginx's user changed, say) goes "
                         .. "with `shmlock --dir " .. dir .. " destroy nob` "
                         .. "run as root or nobody, and the next open makes "
                         .. "the zone anew\n",
                         run_child(tmp, open_script("nob")))
            -- root's 0600 zone: nobody may not open it
            assert(shdict.open("mine", { dir = dir, size = "64k" }))
            assert.equal('failed to open zone "mine": permission denied '
                         .. "opening zone file " .. zone_path("mine")
                         .. " (owner uid 0, group root, mode 0600)\n",
                         as_nobody(open_script("mine")))
            -- a group nobody is not in
            assert.equal('failed to open zone "g0": Operation not '
                         .. "permitted: cannot give the zone file group "
                         .. "root\n",
                         as_nobody(open_script("g0", 'group = "root"')))
            assert.is_false(exists(zone_path("g0")))
            -- a group-writable zone of another group than the one named
            assert(shdict.open("rootgrp", { dir = dir, size = "64k",
                                            mode = "0660", group = 0 }))
            assert.equal('zone file mode 0660 is group-writable: pass '
                         .. 'opts.group = "root" to trust group root\n',
                         run_child(tmp, open_script("rootgrp",
                                                    'group = "nogroup"')))
        end)
    end)

    describe("set_logger()", function()
        after_each(function()
            shdict.set_logger(nil)
        end)

        it("receives a refused zone, at level error, with the cause",
           function()
            local got = {}
            shdict.set_logger(function(level, msg)
                got[#got + 1] = level .. ": " .. msg
            end)
            write_file(zone_path("junk"), garbage(40000))
            assert.same({ n = 2, nil, not_a_zone("junk") },
                        pack(shdict.open("junk", { dir = dir })))
            assert.same({ 'error: shmlock: zone "junk" refused: '
                          .. not_a_zone("junk") }, got)
            -- "not found" is an answer, not an event
            shdict.open("nothing", { dir = dir, create = false })
            assert.equal(1, #got)
            -- the same refusal again is not logged again; another cause is
            assert.same({ n = 2, nil, not_a_zone("junk") },
                        pack(shdict.open("junk", { dir = dir })))
            assert.equal(1, #got)
            sh("rm '" .. zone_path("junk") .. "' && mkdir '"
               .. zone_path("junk") .. "'")
            assert.is_nil((shdict.open("junk", { dir = dir })))
            assert.equal(2, #got)
        end)

        it("prints nothing by default", function()
            write_file(zone_path("junk"), garbage(40000))
            local out = run_child(tmp, ([[
local shdict = require "resty.shmlock.shdict"
print(shdict.open("junk", { dir = %q }))
]]):format(dir))
            assert.equal("nil\t" .. not_a_zone("junk") .. "\n", out)
        end)

        it("raises on a logger that is not a function", function()
            assert.has_error(function() shdict.set_logger("print") end,
                             'bad "logger" argument')
        end)
    end)

    describe("destroy()", function()
        it("returns true and removes the zone file", function()
            assert(shdict.open("gone", { dir = dir, size = "32k" }))
            assert.same({ n = 1, true },
                        pack(shdict.destroy("gone", { dir = dir })))
            assert.is_false(exists(zone_path("gone")))
        end)

        it("returns nil, 'not found' for a zone that does not exist",
           function()
            assert.same({ n = 2, nil, "not found" },
                        pack(shdict.destroy("never", { dir = dir })))
        end)

        it("raises on a directory that is not a string or holds a NUL "
           .. "byte, as open() does", function()
            -- the system would see the path cut at the NUL: tmp/zones
            local cut = dir .. "\0/elsewhere"
            assert(shdict.open("here", { dir = dir, size = "32k" }))
            for _, bad in ipairs({ cut, 42, true }) do
                assert.has_error(function()
                    shdict.open("here", { dir = bad, size = "32k" })
                end, 'bad "opts.dir" argument')
                assert.has_error(function()
                    shdict.destroy("here", { dir = bad })
                end, 'bad "opts.dir" argument')
            end
            assert.has_error(function() shdict.destroy("here", 42) end,
                             'bad "opts" argument')
            assert.is_true(exists(zone_path("here")))
            assert.same({ "shmlock.here" },
                        { trim(sh("ls -A '" .. dir .. "'")) })
        end)

        it("keeps the record of an opened zone when it could not destroy "
           .. "it: a lock still reaches a group zone by name", function()
            -- the zone directory stays locked (flock) by another open of
            -- it: destroy gives up; the zone is there, opened with
            -- opts.group, and resty_lock:new(name) must still use it
            local gid = tonumber(trim(sh("id -g")))
            local out = run_child(tmp, ([[
local ffi = require "ffi"
ffi.cdef "int open(const char *path, int flags); int flock(int fd, int op);"
ffi.cdef "int close(int fd);"
local shdict = require "resty.shmlock.shdict"
local resty_lock = require "resty.shmlock"
local d = assert(shdict.open("g", { size = "64k", mode = "0660",
                                    group = %d }))
local fd = ffi.C.open(os.getenv("SHMLOCK_DIR"), 0)
assert(fd >= 0 and ffi.C.flock(fd, 2) == 0)
print(shdict.destroy("g"))
print(shdict.opened("g") == d)
local lock, err = resty_lock:new("g")
print(lock and lock:lock("k"), err)
ffi.C.close(fd)
print(shdict.destroy("g"))
print(shdict.opened("g"))
]]):format(gid), "SHMLOCK_DIR='" .. dir .. "'")
            assert.equal("nil\tzone directory locked by another process\n"
                         .. "true\n0\tnil\ntrue\nnil\n", out)
        end)

        it("returns nil, 'bad zone name' for a bad name", function()
            assert.same({ n = 2, nil, "bad zone name" },
                        pack(shdict.destroy("../x", { dir = dir })))
            assert.same({ n = 2, nil, "bad zone name" },
                        pack(shdict.destroy("", { dir = dir })))
        end)

        it("lets open() create a fresh, empty zone, and the old object "
           .. "answers nil, 'zone destroyed'", function()
            local old = assert(shdict.open("phoenix", { dir = dir,
                                                        size = "64k" }))
            old:set("k", "old value")
            assert.same({ n = 1, true },
                        pack(shdict.destroy("phoenix", { dir = dir })))

            -- the old mapping refuses to act: nobody else will see it
            assert.same({ n = 2, nil, "zone destroyed" }, pack(old:get("k")))
            assert.same({ n = 3, false, "zone destroyed", false },
                        pack(old:set("k2", "lost")))
            assert.same({ n = 2, nil, "zone destroyed" },
                        pack(old:incr("n", 1, 0)))
            assert.same({ n = 2, nil, "zone destroyed" },
                        pack(old:get_keys(0)))
            assert.same({ n = 2, nil, "zone destroyed" },
                        pack(old:flush_expired()))
            assert.same({ n = 2, nil, "zone destroyed" },
                        pack(old:verify()))

            local new = assert(shdict.open("phoenix", { dir = dir,
                                                        size = "32k" }))
            assert.is_false(rawequal(old, new))
            assert.same({ n = 1, 32768 }, pack(new:capacity()))
            assert.same({}, new:get_keys(0))
            assert.same({ n = 1, nil }, pack(new:get("k")))
            assert.same({ n = 1, true }, pack(new:verify()))
            assert.is_true(rawequal(new, shdict.opened("phoenix", dir)))

            -- and another process attaching by name gets the new zone
            new:set("k3", "new")
            local out = run_child(tmp, child_script(dir, "phoenix", nil, [[
print(d:capacity(), d:get("k"), d:get("k3"))
]]))
            assert.equal("32768\tnil\tnew\n", out)
        end)
    end)
end)
