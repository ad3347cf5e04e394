# Workers that run as another user than root (`user nobody nogroup;`, the
# compiled default), beside root processes, as deployed:
#
# * the store rule: a name declared with lua_shared_dict is that dict, even
#   when a zone file of that name is left over (root's, 0600, which the
#   workers could not open anyway): the store never depends on leftover
#   files or on the workers' user; lock.store says which, logged once at
#   info;
# * a zone root makes for the workers on purpose (mode 0660, group nogroup)
#   in init_by_lua, locked in by name;
# * a zone a worker makes for root (mode 0660, group nogroup), which a root
#   LuaJIT process attaches by naming the group, and is refused without;
# * a worker refused root's private zone, with the cause in the answer and
#   at [error] in error.log;
# * a worker that may not create a zone file in its directory (0755, root's,
#   as /dev/shm on some hosts): the directory, its owner and mode, and the
#   fix in the answer;
# * init_by_lua after nginx's `user` changed: a zone file of the old
#   workers' user (www-data) is refused with how to remove it, and the
#   command it names does.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use ShmTest;

if ($> != 0) {
    plan skip_all => "needs root (nginx switches its workers to nobody)";
}

my $t = ShmTest->new(
    workers => 2,
    user => 'nobody nogroup',
    http_config => <<'EOF',
    lua_shared_dict both 1m;
EOF
    init_by_lua => <<'EOF',
        local shdict = require "resty.shmlock.shdict"
        -- made by root (the master) for the workers, on purpose
        T.team = assert(shdict.open("team", { size = "64k", mode = "0660",
                                              group = "nogroup" }))
        -- a zone of the workers' user before nginx's `user` changed
        T.left = select(2, shdict.open("left"))
        function T.uid()
            for line in io.lines("/proc/self/status") do
                local uid = line:match("^Uid:%s+(%d+)")
                if uid then return tonumber(uid) end
            end
        end
EOF
    config => <<'EOF',
        location = /whoami {
            content_by_lua_block { ngx.say(T.uid()) }
        }
        location = /both {
            content_by_lua_block {
                local lock = assert(resty_lock:new("both"))
                ngx.say(lock.store)
                ngx.say(T.fmt(lock:lock("k")))
                ngx.say("in ngx.shared.both: ", ngx.shared.both:get("k") ~= nil)
                ngx.say(T.fmt(lock:unlock()))
            }
        }
        location = /team {
            content_by_lua_block {
                local lock = assert(resty_lock:new("team"))
                ngx.say(lock.store)
                ngx.say(T.fmt(lock:lock("k")))
                ngx.say("in the zone: ", resty_lock.inspect(T.team, "k") ~= nil)
                ngx.say(T.fmt(lock:unlock()))
                ngx.say(T.fmt(T.team:incr("hits", 1, 0)))
            }
        }
        location = /make {
            content_by_lua_block {
                local shdict = require "resty.shmlock.shdict"
                local d = assert(shdict.open("wmade", { size = "64k",
                                 mode = "0660", group = "nogroup" }))
                ngx.say(T.fmt(d:set("k", "from a worker")))
            }
        }
        location = /closed {
            content_by_lua_block {
                local shdict = require "resty.shmlock.shdict"
                ngx.say(T.fmt(shdict.open("wz", { dir = "{{ZONE_DIR}}/closed" })))
            }
        }
        location = /leftover {
            content_by_lua_block { ngx.say(T.left) }
        }
        location = /rootonly {
            content_by_lua_block {
                local shdict = require "resty.shmlock.shdict"
                ngx.say(T.fmt(shdict.open("rootonly", { create = false })))
            }
        }
EOF
);

# left over by an earlier root script: zones named as the lua_shared_dict,
# and a private one
for my $name (qw(both rootonly)) {
    my ($rc, $out) = $t->luajit(qq{
        local d = assert(require("resty.shmlock.shdict").open("$name",
                                                             { size = "64k" }))
        print("made")});
    is($out, "made\n", "a root LuaJIT process made zone $name");
}
# the workers' directory for zone files is root's, 0755
mkdir $t->zone_dir . "/closed", 0755 or die "mkdir closed: $!";
chmod 0755, $t->zone_dir . "/closed";
# left by the workers of `user www-data;`, before the line changed
{
    my ($rc, $out) = $t->luajit(q{
        assert(require("resty.shmlock.shdict").open("left", { size = "64k" }))
        print("made")}, as => 'www-data');
    is($out, "made\n", "a www-data LuaJIT process made zone left");
}
$t->start;

my $left = $t->zone_dir . "/shmlock.left";
my $uid33 = (getpwnam 'www-data')[2];
$t->block("init_by_lua after nginx's user changed: the old user's zone is "
          . "refused, saying how to remove it",
    request   => "GET /leftover",
    body      => qq{zone file owned by another user (uid $uid33): run as }
               . qq{www-data (the zone's owner), or share the zone with a }
               . qq{group on purpose: create it with opts.group = "G" and }
               . qq{opts.mode = "0660", and attach with opts.group = "G"; a }
               . qq{file left from an earlier setup (nginx's user changed, }
               . qq{say) goes with `shmlock --dir } . $t->zone_dir
               . qq{ destroy left` run as root or www-data, and the next open }
               . qq{makes the zone anew\n},
    error_log => [ qr/\[error\].*shmlock: zone "left" refused: zone file owned by another user/ ]);

subtest "the command the refusal names removes the file" => sub {
    my $body = $t->get("/leftover")->{body};
    my ($cmd) = $body =~ /`(shmlock [^`]+)`/ or return fail("no command in: $body");
    $cmd =~ s{^shmlock}{$ShmTest::REPO/bin/shmlock};
    my $out = `$cmd 2>&1`;
    is($?, 0, "`$cmd` exits 0") or diag($out);
    ok(!-e $left, "the zone file is gone");
};

subtest "the workers run as nobody" => sub {
    for (1 .. 4) {
        is($t->get("/whoami")->{body}, "65534\n", "worker uid");
    }
};

$t->block("a lua_shared_dict name is that dict, whatever zone file is left",
    request => [ ("GET /both") x 4 ],
    body    => "ngx.shared\n0\nin ngx.shared.both: true\n1\n");

subtest "the choice is logged once per name and worker, at info" => sub {
    open my $fh, '<', $t->{error_log} or die "error.log: $!";
    my @lines = grep { /lock name "both" uses the lua_shared_dict "both"/ } <$fh>;
    ok(@lines >= 1 && @lines <= 2, "logged once per worker (2 workers)")
        or diag(scalar(@lines) . " lines:\n", @lines);
    like($lines[0] // '', qr/\[info\]/, "at info");
};

$t->block("a zone root made 0660 for group nogroup: the workers lock in it",
    request => [ ("GET /team") x 2 ],
    body    => [ "zone\n0\nin the zone: true\n1\n1 nil false\n",
                 "zone\n0\nin the zone: true\n1\n2 nil false\n" ]);

subtest "root's side of that zone sees the workers' counts" => sub {
    my ($rc, $out) = $t->luajit(q{
        local shdict = require "resty.shmlock.shdict"
        print(shdict.open("team", { create = false, group = "nogroup" })
                    :get("hits"))});
    is($out, "2\n", "root attaches it naming the group");
    ($rc, $out) = $t->luajit(q{
        local shdict = require "resty.shmlock.shdict"
        print(select(2, shdict.open("team", { create = false })))});
    like($out, qr/^zone file mode 0660 is group-writable/,
         "root must name the group it lets write (the master handed "
         . "the file to the workers' user)");
};

$t->block("a worker makes a zone for group nogroup",
    request => "GET /make",
    body    => "true nil false\n");

subtest "root attaches the worker's zone by naming its group, not without" => sub {
    my $file = $t->zone_dir . "/shmlock.wmade";
    my @st = stat $file;
    is(sprintf("%04o %d %d", $st[2] & 07777, $st[4], $st[5]),
       "0660 65534 65534", "mode 0660, owner nobody, group nogroup");
    my ($rc, $out) = $t->luajit(q{
        local shdict = require "resty.shmlock.shdict"
        print(select(2, shdict.open("wmade", { create = false })))});
    is($out, qq{zone file mode 0660 is group-writable by nogroup, a group }
             . qq{no one should trust: run as nobody (the zone's owner), or }
             . qq{share the zone with a group on purpose: create it with }
             . qq{opts.group = "G" and opts.mode = "0660", and attach with }
             . qq{opts.group = "G"\n}, "refused, naming why, never advising "
             . "to trust nogroup");
    ($rc, $out) = $t->luajit(q{
        local shdict = require "resty.shmlock.shdict"
        print(shdict.open("wmade", { create = false, group = "nogroup" })
                    :get("k"))});
    is($out, "from a worker\n", "attached with the group named");
};

my $path = $t->zone_dir . "/shmlock.rootonly";
$t->block("a worker is refused root's private zone, naming the cause",
    request   => "GET /rootonly",
    body      => qq{nil failed to open zone "rootonly": permission denied }
               . qq{opening zone file $path (owner uid 0, group root, }
               . qq{mode 0600)\n},
    error_log => [ qr/\[error\].*shmlock: zone "rootonly" refused: failed to open zone "rootonly": permission denied/ ]);

my $closed = $t->zone_dir . "/closed";
$t->block("a worker that may not create a zone file: the directory, its "
          . "owner and mode, and the fix",
    request   => "GET /closed",
    body      => qq{nil failed to open zone "wz": permission denied opening }
               . qq{zone file $closed/shmlock.wz: the directory $closed }
               . qq{(owner root, group root, mode 0755) does not let uid }
               . qq{65534 (nobody) create files in it: open the zone in }
               . qq{init_by_lua* (nginx's master makes it there and hands it }
               . qq{to the workers' user), make the directory writable for }
               . qq{this user (chmod 1777 $closed, the mode /dev/shm has), or }
               . qq{use a directory it may write (\$SHMLOCK_DIR, or opts.dir)\n},
    error_log => [ qr/\[error\].*shmlock: zone "wz" refused: failed to open zone "wz": permission denied opening zone file \Q$closed\E/ ]);

$t->stop;
done_testing;
