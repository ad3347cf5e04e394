-- The documentation's maps and lists match the tree (issue 33, point 6):
-- a file added, moved or removed fails here until the page that lists it
-- says so.
--
--   * docs/design.md's Lua file map names every Lua file under lua/, and
--     every file it names exists;
--   * src/README.md's layer list names every file of src/ and src/lua/,
--     and every file it names exists (scripts/check-layers.sh checks the
--     include order over the same list);
--   * the README's module table and the first line of
--     lua/resty/shmlock/version.lua name every public module (a module
--     with a _VERSION), and the public modules are the pages' modules;
--   * the README's and docs/README.md's lists of pages link every page of
--     docs/;
--   * the command's commands (cli/args.lua) are each in the README's list,
--     docs/cli.md and the manual page;
--   * CONTRIBUTING.md's package list is scripts/deps.sh's.

local checkout = require "helpers.checkout"

local ROOT = checkout.ROOT
local sh, read_file = checkout.sh, checkout.read_file

local function lines_of(cmd)
    local out = {}
    for line in sh("cd '" .. ROOT .. "' && " .. cmd):gmatch("[^\n]+") do
        out[#out + 1] = line
    end
    table.sort(out)
    return out
end

local function text(path)
    return assert(read_file(ROOT .. "/" .. path), "cannot read " .. path)
end

local function exists(path)
    local f = io.open(ROOT .. "/" .. path, "rb")
    if f then
        f:close()
        return true
    end
    return false
end

-- the backquoted paths of a text that match a pattern, as a set
local function named(t, pattern)
    local set = {}
    for p in t:gmatch("`([^`\n]+)`") do
        if p:match(pattern) then
            set[p] = true
        end
    end
    return set
end

-- what of list set lacks, and what of set is not in list
local function compare(list, set)
    local missing, extra, in_list = {}, {}, {}
    for _, v in ipairs(list) do
        in_list[v] = true
        if not set[v] then
            missing[#missing + 1] = v
        end
    end
    for v in pairs(set) do
        if not in_list[v] then
            extra[#extra + 1] = v
        end
    end
    table.sort(extra)
    return missing, extra
end


describe("the documentation's maps", function()
    it("docs/design.md's Lua file map names every Lua file, and only them",
       function()
        local files = lines_of("find lua -name '*.lua'")
        local missing, extra = compare(files, named(text("docs/design.md"),
                                                    "^lua/.*%.lua$"))
        assert.same({}, missing)
        local gone = {}
        for _, p in ipairs(extra) do
            if not exists(p) then
                gone[#gone + 1] = p
            end
        end
        assert.same({}, gone)
    end)

    it("src/README.md's layer list names every file of src/ and src/lua/",
       function()
        local files = lines_of("ls src/*.c src/*.h src/lua/*.c src/lua/*.h "
                               .. "| sed 's|^src/||'")
        local list = {}
        for line in text("src/README.md"):gmatch("[^\n]+") do
            if line:match("^%d+%. ") then
                for p in line:gmatch("`([%w_/]+%.[ch])`") do
                    list[p] = true
                end
            end
        end
        local missing, extra = compare(files, list)
        assert.same({}, missing)
        assert.same({}, extra)
    end)
end)


describe("the documentation's lists", function()
    -- the public modules: those with a _VERSION, but for an internal one
    -- that makes another's table (shdict/zones.lua: resty.shmlock.shdict)
    local function public_modules()
        local out = {}
        for _, f in ipairs(lines_of("grep -rl '_VERSION = version' lua")) do
            if f == "lua/resty/shmlock/shdict/zones.lua" then
                out[#out + 1] = "resty.shmlock.shdict"
            elseif not text(f):match("^[^\n]*%(internal%)") then
                out[#out + 1] = f:gsub("^lua/", ""):gsub("%.lua$", "")
                                 :gsub("/", ".")
            else
                error(f .. ": an internal module with a _VERSION")
            end
        end
        table.sort(out)
        return out
    end

    it("name every public module: the README's table, version.lua",
       function()
        local mods = public_modules()
        assert.is_true(#mods >= 7)
        local readme = named(text("README.md"), "^resty%.shmlock[%w_.]*$")
        local version = text("lua/resty/shmlock/version.lua")
        local lacking = {}
        for _, m in ipairs(mods) do
            if not readme[m] then
                lacking[#lacking + 1] = "README.md: " .. m
            end
            if not version:find(m .. "[,)]") then
                lacking[#lacking + 1] = "version.lua: " .. m
            end
        end
        assert.same({}, lacking)
    end)

    it("link every page of docs/: the README and docs/README.md", function()
        local pages = lines_of("ls docs/*.md | sed 's|^docs/||'")
        local readme, index = text("README.md"), text("docs/README.md")
        local lacking = {}
        for _, p in ipairs(pages) do
            if p ~= "README.md" then
                if not readme:find("(docs/" .. p .. ")", 1, true) then
                    lacking[#lacking + 1] = "README.md: " .. p
                end
                if not index:find("(" .. p .. ")", 1, true) then
                    lacking[#lacking + 1] = "docs/README.md: " .. p
                end
            end
        end
        assert.same({}, lacking)
    end)

    it("name every command of shmlock: the README, docs/cli.md, shmlock(1)",
       function()
        local args = text("lua/resty/shmlock/cli/args.lua")
        local body = args:match("local COMMANDS = (%b{})")
        assert(body, "cli/args.lua: no COMMANDS table")
        local commands = {}
        for name in body:gmatch("\n%s+([%w_]+) = {") do
            commands[#commands + 1] = name
        end
        assert.is_true(#commands >= 9)
        local readme, cli = text("README.md"), text("docs/cli.md")
        local man = text("docs/shmlock.1")
        local lacking = {}
        for _, c in ipairs(commands) do
            if not readme:find("`" .. c .. "`", 1, true) then
                lacking[#lacking + 1] = "README.md: " .. c
            end
            if not cli:find("shmlock " .. c, 1, true)
               and not cli:find("`" .. c .. "`", 1, true)
            then
                lacking[#lacking + 1] = "docs/cli.md: " .. c
            end
            if not man:find("\\fB" .. c .. "\\f", 1, true)
               and not man:find("\n.B " .. c .. "\n", 1, true)
               and not man:find("\n.BI " .. c .. " ", 1, true)
            then
                lacking[#lacking + 1] = "docs/shmlock.1: " .. c
            end
        end
        assert.same({}, lacking)
    end)

    it("give CONTRIBUTING.md's package list as scripts/deps.sh installs it",
       function()
        local deps = text("scripts/deps.sh"):match("PACKAGES=%((.-)%)")
        assert(deps, "scripts/deps.sh: no PACKAGES")
        local packages = {}
        for p in deps:gmatch("[%w][%w.+-]*") do
            packages[#packages + 1] = p
        end
        local contributing = text("CONTRIBUTING.md")
        local list = contributing:match("installs the Debian packages the "
                                        .. "project needs (%b())")
        assert(list, "CONTRIBUTING.md: no package list")
        local listed = {}
        for p in list:gmatch("[%w][%w.+-]*") do
            listed[p] = true
        end
        local missing = compare(packages, listed)
        assert.same({}, missing)
    end)
end)
