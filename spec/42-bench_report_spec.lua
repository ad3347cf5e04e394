-- bench/report.lua, the writer of bench/RESULTS.md, on a made-up run: every
-- section that ran is written, and every target it checks is in the
-- targets table, met or not (section 9's 32-process rows were measured
-- and never written, so RESULTS.md did not check its targets).

local checkout = require "helpers.checkout"
local fixture = require "helpers.fixture"

local ROOT = checkout.ROOT
local read_file, write_file = checkout.read_file, checkout.write_file

describe("bench/report.lua", function()
    local fx = fixture.new()

    -- RESULTS.md of a run whose results.tsv holds these lines
    local function report(lines)
        local work = fx.dir .. "/work"
        local out = fx.dir .. "/out"
        assert(os.execute("mkdir -p '" .. work .. "' '" .. out .. "'") == 0)
        write_file(work .. "/machine.tsv", "date\t2026-01-01 00:00 UTC\n")
        write_file(work .. "/results.tsv", table.concat(lines, "\n") .. "\n")
        local cmd = ("cd '%s/bench' && LUA_PATH='%s/bench/lib/?.lua;;' "
                     .. "luajit report.lua '%s' '%s' '' > /dev/null")
                    :format(ROOT, ROOT, work, out)
        assert.is_true(os.execute(cmd) == 0, cmd)
        return assert(read_file(out .. "/RESULTS.md"))
    end

    -- the targets table's row whose name starts with `name`
    local function target_row(md, name)
        for line in md:gmatch("[^\n]+") do
            if line:sub(1, 2 + #name) == "| " .. name then
                return line
            end
        end
    end

    it("writes section 9 and checks its targets against flock(2)", function()
        local md = report({
            "contended\tshmlock_rate\tacq/s\t26000\t25000\t27000\t3\t"
                .. "32 processes, 3 s, hold 20 us, think 20 us",
            "contended\tflock_rate\tacq/s\t20000\t19000\t21000\t3\tx",
            "contended\tshmlock_cpu\tus/acq\t30\t29\t31\t3\tx",
            "contended\tflock_cpu\tus/acq\t40\t39\t41\t3\tx",
            "contended\tshmlock_csw\tcsw/acq\t0.2\t0.1\t0.3\t3\tx",
            "contended\tflock_csw\tcsw/acq\t0.24\t0.2\t0.3\t3\tx",
        })
        assert.truthy(md:find("\n## 9%. 32 processes on one key"))
        assert.truthy(md:find("| resty.shmlock | 26 k (25 k – 27 k)",
                              1, true), md)
        local rate = target_row(md, "32 processes on one key (section 9): "
                                    .. "acquisitions/s")
        assert.truthy(rate and rate:find("| 1.30× (", 1, true), rate)
        assert.truthy(rate:find("**yes**", 1, true))
        local cpu = target_row(md, "32 processes on one key (section 9): CPU")
        assert.truthy(cpu and cpu:find("**yes**", 1, true), cpu)
    end)

    it("checks what a 10 MiB store holds against ngx.shared.DICT", function()
        local md = report({
            "density\tsmall_ours\tentries\t142502\t142502\t142502\t1\tx",
            "density\tsmall_ngx\tentries\t81375\t81375\t81375\t1\tx",
        })
        local row = target_row(md, "small entries")
        assert.truthy(row and row:find("| 1.75× (", 1, true), row)
        assert.truthy(row:find("**yes**", 1, true))
        assert.truthy(md:find("| 8 to 16-byte strings | 142502 | 81375 | "
                              .. "1.75× |", 1, true))
    end)

    it("checks the cache's L1 hit against the unchecked one by "
       .. "instructions, with and without opts.redis", function()
        local md = report({
            "instr\tcache_hit\tIr\t254\t254\t254\t1\tx",
            "instr\tcache_hit_fleet\tIr\t270\t270\t270\t1\tx",
            "instr\tcache_hit_unchecked\tIr\t202\t202\t202\t1\tx",
        })
        local plain = target_row(md, "the cache's coherent L1 hit vs an "
                                     .. "unchecked L1 hit, instructions")
        assert.truthy(plain and plain:find("**yes**", 1, true), plain)
        local fleet = target_row(md, "the cache's coherent L1 hit with "
                                     .. "`opts.redis` vs an unchecked L1 "
                                     .. "hit, instructions")
        assert.truthy(fleet and fleet:find("**no**", 1, true), fleet)
    end)
end)
