-- The Lua code blocks of the documentation run as written.
--
-- Every fenced block of README.md, docs/*.md, bench/README.md and
-- CONTRIBUTING.md whose info string starts with `lua` is one of:
--
--   ```lua            runnable: run here by `luajit` with this checkout's
--                     modules; it must exit 0, write nothing to stderr,
--                     and print exactly what its `--> ...` comments say,
--                     one line per comment, in order (runs of blanks
--                     compare equal, so print's tabs may be written as
--                     spaces).  Every block runs twice, as a reader who
--                     tries them all and then tries them again would: all
--                     of them in order, then all of them again, in one
--                     working directory and one $SHMLOCK_DIR (both fresh
--                     when the spec starts, then left as the blocks leave
--                     them), so that a block whose output depends on what
--                     ran before (its own earlier run, or another block
--                     using the same zone name) fails.  A block that
--                     requires "redis" (lua-redis) gets the spec's private
--                     redis-server (spec/helpers/redis_server.lua), its
--                     port in place of 6379, empty when the spec starts
--                     and then kept, as a reader's would be.
--   ```lua fragment   not runnable as it stands (a piece of a larger
--                     program): it is only compiled, so it stays Lua.
--   ```lua nginx      code for nginx's *_by_lua_block directives, in
--                     sections that each start with a `-- <directive>`
--                     line (`-- access_by_lua_block`): t/08-readme.t runs
--                     them in a test nginx; here each section is compiled.
--
-- Any other info string on a lua fence fails, so that a typo cannot turn a
-- block into one that nobody runs.  nginx blocks are t/08-readme.t's.
--
-- Also: every relative link of those files points at a file that exists
-- and, for a #fragment into a markdown file, at one of its headings (as
-- GitHub makes anchors of them).

local DOCS = { "README.md", "CONTRIBUTING.md", "bench/README.md" }

local checkout = require "helpers.checkout"

local ROOT = checkout.ROOT
local sh, read_file, write_file = checkout.sh, checkout.read_file,
                                  checkout.write_file

local function quote(s)
    return "'" .. s:gsub("'", "'\\''") .. "'"
end

local function squeeze(s)
    return (s:gsub("%s+", " "):gsub("^ ", ""):gsub(" $", ""))
end

-- docs/*.md, sorted
local function doc_files()
    local files = {}
    for _, f in ipairs(DOCS) do
        files[#files + 1] = f
    end
    for f in sh("cd " .. quote(ROOT) .. " && ls docs/*.md 2>/dev/null")
             :gmatch("[^\n]+") do
        files[#files + 1] = f
    end
    return files
end

-- the fenced blocks of one markdown file: { file, line, heading, info,
-- code }, info being the fence's info string ("lua", "lua fragment", ...)
local function blocks_of(file)
    local text = assert(read_file(ROOT .. "/" .. file), "cannot read " .. file)
    local blocks, cur, heading, prev = {}, nil, "(top)", nil
    local n = 0
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
        n = n + 1
        if cur then
            if line:match("^```%s*$") then
                cur.code = table.concat(cur.lines, "\n") .. "\n"
                blocks[#blocks + 1] = cur
                cur = nil
            else
                cur.lines[#cur.lines + 1] = line
            end
        else
            local info = line:match("^```(.*)$")
            if info then
                cur = { file = file, line = n, heading = heading,
                        info = squeeze(info), lines = {} }
            elseif line:match("^[=-]+$") and prev and prev:match("%S") then
                heading = prev
            elseif line:match("^#+ ") then
                heading = line:gsub("^#+ ", "")
            end
        end
        prev = line
    end
    assert(not cur, file .. ":" .. (cur and cur.line or 0)
                    .. ": a code block is not closed")
    return blocks
end

-- the sections of a ```lua nginx block, as fragments: one per
-- `-- <directive>` line (t/08-readme.t's split); code before the first
-- such line is an error
local function nginx_sections(b)
    local sections, cur = {}, nil
    local n = b.line
    for line in b.code:gmatch("([^\n]*)\n") do
        n = n + 1
        local directive = line:match("^%-%- ([%w_]+_by_lua_block)")
        if directive then
            cur = { file = b.file, line = n, heading = b.heading .. ", "
                    .. directive, lines = {} }
            sections[#sections + 1] = cur
        elseif not cur then
            assert(not line:match("%S"), b.file .. ":" .. n .. ": a lua "
                   .. "nginx block starts with a -- <directive> line")
        else
            cur.lines[#cur.lines + 1] = line
        end
    end
    assert(#sections > 0, b.file .. ":" .. b.line .. ": no section")
    for _, sec in ipairs(sections) do
        sec.code = table.concat(sec.lines, "\n") .. "\n"
    end
    return sections
end

local function lua_blocks()
    local runnable, fragments = {}, {}
    for _, file in ipairs(doc_files()) do
        for _, b in ipairs(blocks_of(file)) do
            local lang, rest = b.info:match("^(%S*)%s*(.-)$")
            if lang == "lua" then
                if rest == "" then
                    runnable[#runnable + 1] = b
                elseif rest == "fragment" then
                    fragments[#fragments + 1] = b
                elseif rest == "nginx" then
                    for _, sec in ipairs(nginx_sections(b)) do
                        fragments[#fragments + 1] = sec
                    end
                else
                    error(b.file .. ":" .. b.line .. ": unknown info string "
                          .. "'" .. b.info .. "' (lua, lua fragment or lua "
                          .. "nginx)")
                end
            end
        end
    end
    return runnable, fragments
end

-- what the block's `--> ...` comments say it prints, one line each
local function expected_output(code)
    local lines = {}
    for line in code:gmatch("[^\n]*") do
        local out = line:match("%-%->%s?(.*)$")
        if out then
            lines[#lines + 1] = squeeze(out)
        end
    end
    return lines
end

-- the text of a markdown file without its fenced blocks
local function prose_of(file)
    local text = read_file(ROOT .. "/" .. file)
    if not text then
        return nil
    end
    local out, fenced = {}, false
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
        if line:match("^```") then
            fenced = not fenced
            out[#out + 1] = ""
        else
            out[#out + 1] = fenced and "" or line
        end
    end
    return table.concat(out, "\n")
end

-- GitHub's anchors of a markdown file's headings (a repeated heading gets
-- -1, -2, ...)
local function anchors_of(file)
    local prose = prose_of(file)
    if not prose then
        return nil
    end
    local anchors, seen, prev = {}, {}, nil
    local function add(title)
        local slug = title:lower():gsub("[^%w%s%-_]", ""):gsub("%s", "-")
        local n = seen[slug]
        seen[slug] = (n or 0) + 1
        anchors[n and (slug .. "-" .. n) or slug] = true
    end
    for line in (prose .. "\n"):gmatch("([^\n]*)\n") do
        if line:match("^[=-]+$") and prev and prev:match("%S")
           and not prev:match("^[*|]") then
            add(prev)
        elseif line:match("^#+ ") then
            add((line:gsub("^#+ ", "")))
        end
        prev = line
    end
    return anchors
end

local function dirname(path)
    return path:match("^(.*)/[^/]*$") or ""
end

-- a/b/../c -> a/c
local function normalise(path)
    local parts = {}
    for part in path:gmatch("[^/]+") do
        if part == ".." and #parts > 0 and parts[#parts] ~= ".." then
            parts[#parts] = nil
        elseif part ~= "." then
            parts[#parts + 1] = part
        end
    end
    return table.concat(parts, "/")
end

-- every relative link of the docs: { file, target, problem }
local function broken_links()
    local broken = {}
    for _, file in ipairs(doc_files()) do
        local prose = assert(prose_of(file))
        prose = prose:gsub("`[^`\n]*`", "")
        for link in prose:gmatch("%]%(([^)%s]+)%)") do
            if not link:match("^%a+:") then
                local path, anchor = link:match("^([^#]*)#?(.*)$")
                local target = path == "" and file
                    or normalise((dirname(file) ~= "" and dirname(file) .. "/"
                                  or "") .. path)
                local exists = os.rename(ROOT .. "/" .. target,
                                         ROOT .. "/" .. target)
                if not exists then
                    broken[#broken + 1] = file .. ": " .. link .. ": no such file"
                elseif anchor ~= "" then
                    local anchors = target:match("%.md$") and anchors_of(target)
                    if not (anchors and anchors[anchor]) then
                        broken[#broken + 1] = file .. ": " .. link
                                              .. ": no such heading"
                    end
                end
            end
        end
    end
    return broken
end

local redis_server      -- started for the first block that needs it

-- the one working directory and zone directory of every run (see the top)
local work

local function run_block(b)
    if not work then
        work = sh("mktemp -d /tmp/shmlock-docs.XXXXXX"):gsub("%s+$", "")
        assert(work ~= "", "mktemp failed")
        local made = os.execute("mkdir " .. quote(work .. "/zones"))
        assert(made == 0 or made == true, "mkdir failed")
    end
    local code = b.code
    if code:find("require%s*%(?%s*[\"']redis[\"']") then
        if not redis_server then
            redis_server = require("helpers.redis_server").start()
        end
        code = code:gsub("6379", tostring(redis_server.port))
    end
    write_file(work .. "/block.lua", code)
    local cmd = table.concat({
        "cd " .. quote(work) .. " &&",
        "env SHMLOCK_DIR=" .. quote(work .. "/zones"),
        "LUA_PATH=" .. quote(checkout.LUA_PATH),
        "timeout -s KILL 60 luajit block.lua >out 2>err; echo $?",
    }, " ")
    local status = tonumber(sh(cmd))
    local out = read_file(work .. "/out") or ""
    local err = read_file(work .. "/err") or ""
    os.remove(work .. "/block.lua")
    os.remove(work .. "/out")
    os.remove(work .. "/err")
    return status, out, err
end

describe("the documentation's Lua blocks", function()
    local runnable, fragments = lua_blocks()

    teardown(function()
        if redis_server then
            redis_server:destroy()
        end
        if work then
            os.execute("rm -rf " .. quote(work))
        end
    end)

    it("are found: README.md and every page under docs/ have some", function()
        local seen = {}
        for _, b in ipairs(runnable) do
            seen[b.file] = true
        end
        for _, f in ipairs(doc_files()) do
            if f == "README.md" or f:match("^docs/") then
                local text = read_file(ROOT .. "/" .. f)
                if text:find("\n```lua\n", 1, true) then
                    assert.is_true(seen[f], f .. " has runnable blocks")
                end
            end
        end
        assert.truthy(seen["README.md"], "README.md has runnable blocks")
        print(("docs: %d runnable Lua blocks, %d fragments")
              :format(#runnable, #fragments))
    end)

    it("list every function in the README as its page writes it", function()
        -- README's "API at a glance": one text block per module page, the
        -- page's `**syntax:**` lines, all of them, in their order
        local readme = assert(read_file(ROOT .. "/README.md"))
        local glance = readme:match("\nAPI at a glance\n=+\n(.-)\n[^\n]+\n=+\n")
        assert.is_string(glance, "README.md has no \"API at a glance\"")
        local pages = 0
        for page, block in glance:gmatch("%]%((docs/[%w_]+%.md)%):%s*```text\n(.-)\n```") do
            pages = pages + 1
            local want = {}
            for line in assert(read_file(ROOT .. "/" .. page))
                        :gmatch("%*%*syntax:%*%* `([^`]+)`") do
                want[#want + 1] = line
            end
            local got = {}
            for line in block:gmatch("[^\n]+") do
                got[#got + 1] = line
            end
            assert.is_true(#want > 0, page .. " has no syntax: line")
            assert.same(want, got, "README.md's list for " .. page)
        end
        -- every page that has syntax: lines is listed
        local with_syntax = 0
        for _, f in ipairs(doc_files()) do
            if f:match("^docs/") and assert(read_file(ROOT .. "/" .. f))
                                    :find("**syntax:**", 1, true) then
                with_syntax = with_syntax + 1
            end
        end
        assert.equal(with_syntax, pages)
    end)

    it("link to files and headings that exist", function()
        assert.are.same({}, broken_links())
    end)

    for _, b in ipairs(fragments) do
        it(("%s:%d (%s) is a fragment that compiles"):format(
            b.file, b.line, b.heading), function()
            local f, err = loadstring(b.code, "=" .. b.file .. ":" .. b.line)
            assert(f, err)
        end)
    end

    -- all of them, then all of them again (see the top)
    for pass = 1, 2 do
      for _, b in ipairs(runnable) do
        it(("%s:%d (%s) runs and prints what its --> comments say%s")
           :format(b.file, b.line, b.heading,
                   pass == 1 and "" or ", again after every block ran"),
           function()
            local status, out, err = run_block(b)
            assert.are.equal("", err, "stderr of the block")
            assert.are.equal(0, status, "exit status of the block")
            local got = {}
            for line in out:gmatch("([^\n]*)\n") do
                got[#got + 1] = squeeze(line)
            end
            -- as text, so that a failure shows every line
            assert.are.equal(table.concat(expected_output(b.code), "\n"),
                             table.concat(got, "\n"))
        end)
      end
    end
end)


-- Figures the prose repeats, read from where the code defines them: the
-- zone layout and the other numbered constants of src/shmlock.h that the
-- text names (`SHMLOCK_WATCH_MS`), and the test index of CONTRIBUTING.md.
describe("the documentation's figures", function()
    local header = assert(read_file(ROOT .. "/src/shmlock.h"))
    local function constant(name)
        local v = header:match("SHMLOCK_" .. name .. "%s*=%s*(%d+)")
        assert(v, "SHMLOCK_" .. name .. " not found in src/shmlock.h")
        return tonumber(v)
    end
    local files = doc_files()
    files[#files + 1] = "CHANGELOG.md"
    files[#files + 1] = "src/README.md"

    it("name the zone layout the code is at", function()
        local layout = constant("LAYOUT")
        local wrong = {}
        for _, f in ipairs(files) do
            local text = assert(read_file(ROOT .. "/" .. f))
            for pat in ("[Ll]ayout (%d+)|[Ll]ayout is (%d+)|[Ll]ayout (%d+)%)")
                       :gmatch("[^|]+") do
                for n in text:gmatch(pat) do
                    if tonumber(n) ~= layout then
                        wrong[#wrong + 1] = f .. ": layout " .. n
                    end
                end
            end
        end
        assert.same({}, wrong)
    end)

    it("give the values of the constants they name", function()
        local wrong = {}
        for _, f in ipairs(files) do
            local text = assert(read_file(ROOT .. "/" .. f))
            -- "100 ms (`SHMLOCK_WATCH_MS`)", "**100 ms** (`SHMLOCK_WATCH_MS`)"
            for n, name in text:gmatch("(%d+) ms%**%s+%(`SHMLOCK_([%u_]+)`%)")
            do
                if tonumber(n) ~= constant(name) then
                    wrong[#wrong + 1] = f .. ": " .. n .. " ms for SHMLOCK_"
                                        .. name
                end
            end
        end
        assert.same({}, wrong)
    end)

    it("index every spec and nginx test in CONTRIBUTING.md", function()
        local text = assert(read_file(ROOT .. "/CONTRIBUTING.md"))
        local missing = {}
        for f in sh("cd " .. quote(ROOT) .. " && ls spec/*_spec.lua t/*.t")
                 :gmatch("[^\n]+") do
            local n = f:match("^spec/(%d+)%-") or f:match("^t/(%d+)%-")
            if not (text:find("`" .. n .. "`", 1, true)
                    or text:find("(`" .. n .. "`", 1, true)) then
                missing[#missing + 1] = f
            end
        end
        for f in sh("cd " .. quote(ROOT) .. " && ls spec/every_lua/*.lua "
                    .. "spec/user/*.lua"):gmatch("[^\n]+") do
            if not text:find(f:match("[^/]+$"), 1, true) then
                missing[#missing + 1] = f
            end
        end
        assert.same({}, missing)
    end)
end)


-- The README's main command, `make demo` (demo/stampede.lua, here with few
-- processes and short queries): it writes its output where git ignores it
-- (demo/out/), so a checkout stays as clean as it was.  Before, its plot
-- overwrote the committed demo/stampede.png.
describe("make demo", function()
    local git = "git -C " .. quote(ROOT)
    local in_git = sh(git .. " rev-parse --is-inside-work-tree 2>/dev/null")
                   :match("true")

    it("leaves the checkout's files as they were", function()
        if not in_git then
            pending("not a git checkout")
            return
        end
        local status = git .. " status --porcelain --untracked-files=all"
        local before = sh(status)
        local out = sh("cd " .. quote(ROOT) .. " && timeout -s KILL 120 "
                       .. "luajit demo/stampede.lua -n 4 --ms 20 --slots 2 "
                       .. "2>&1; echo \"exit $?\"")
        assert.matches("exit 0\n$", out, out)
        local png = out:match("\nplot:%s+(%S+)")
        assert.is_string(png, out)
        assert.truthy(io.open(ROOT .. "/" .. png), ROOT .. "/" .. png)
        assert.are.equal(before, sh(status))
    end)
end)
