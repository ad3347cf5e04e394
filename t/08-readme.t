# The nginx.conf of the README's "Using it in OpenResty" section, started
# as written (only listen, pid, logs, package path and temp paths rewritten
# for a test prefix), and its locations behave as the README says, before
# and after `nginx -s reload`.  As root, it is started as systemd starts
# nginx: the master as root, the workers as the `user` directive's user
# (www-data), then again without that line (nginx's compiled default,
# nobody); its zones must work in every worker by name, their files be the
# workers' (a tool run as that user reads them, root's LuaJIT is refused),
# and a zone a tool of the workers' user made again be attached by the
# master at the next reload.
#
# Every other ```nginx block of the README, docs/*.md, CONTRIBUTING.md and
# bench/README.md must be an excerpt of that file (its lines, indentation
# aside, in a row), so that it runs here too, or be marked
# ```nginx fragment (see CONTRIBUTING.md, "Documentation").
#
# Every ```lua nginx block of those files (code for *_by_lua_block
# directives, in sections that start with a `-- <directive>` line) runs as
# written in a test nginx of 2 workers (as root, workers as nobody): its
# init sections at the http level, the others in one location, which says
# "ok" when the block has no content section; its requests must be
# answered without a 5xx and leave nothing at [error] or worse.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use ShmTest qw(parallel give_up);
use Time::HiRes qw(sleep);

my $root = "$FindBin::Bin/..";

sub slurp {
    my ($file) = @_;
    open my $fh, '<', $file or return undef;
    local $/;
    return <$fh>;
}

my $readme = slurp("$root/README.md") // give_up("cannot read README.md");
my ($section) = $readme =~ /^Using it in OpenResty\n=+\n(.*?)(?=^\S[^\n]*\n=+\n|\z)/ms
    or give_up("no 'Using it in OpenResty' section in README.md");
my ($conf) = $section =~ /^```nginx\n(.*?)^```/ms
    or give_up("no nginx.conf in the 'Using it in OpenResty' section");

subtest "the docs' other nginx blocks are excerpts of the nginx.conf" => sub {
    my @conf = map { s/^\s+//r } split /\n/, $conf;
    my ($excerpts, $fragments) = (0, 0);
    for my $file ("README.md", "CONTRIBUTING.md", "bench/README.md",
                  map { s{^\Q$root\E/}{}r } sort glob("$root/docs/*.md")) {
        my $text = slurp("$root/$file") // next;
        while ($text =~ /^```(nginx[^\n]*)\n(.*?)^```/msg) {
            my ($info, $block) = ($1, $2);
            my $line = 1 + (() = substr($text, 0, $-[0]) =~ /\n/g);
            next if $block eq "$conf";
            if ($info =~ /^nginx\s+fragment\s*$/) {
                $fragments++;
                next;
            }
            is($info, "nginx", "$file:$line: info string 'nginx' or 'nginx fragment'")
                or next;
            my @lines = map { s/^\s+//r } split /\n/, $block;
            my $found = 0;
            for my $i (0 .. @conf - @lines) {
                next if grep { $conf[$i + $_] ne $lines[$_] } 0 .. $#lines;
                $found = 1;
                last;
            }
            ok($found, "$file:$line: an excerpt of the README's nginx.conf");
            $excerpts++;
        }
    }
    ok($excerpts >= 1, "the README's synopsis shows an excerpt");
    diag("docs: the nginx.conf, $excerpts excerpts of it, $fragments fragments")
        if $ENV{TEST_VERBOSE};
};

my $root_run = $> == 0;

# the ```lua nginx blocks: [ "file:line", { directive => code } ]
sub lua_nginx_blocks {
    my @blocks;
    for my $file ("README.md", "CONTRIBUTING.md", "bench/README.md",
                  map { s{^\Q$root\E/}{}r } sort glob("$root/docs/*.md")) {
        my $text = slurp("$root/$file") // next;
        while ($text =~ /^```lua\s+nginx\s*\n(.*?)^```/msg) {
            my $block = $1;
            my $line = 1 + (() = substr($text, 0, $-[0]) =~ /\n/g);
            my (%code, $cur);
            for (split /\n/, $block) {
                if (/^-- (\w+_by_lua_block)\b/) {
                    $cur = $1;
                    $code{$cur} = '';
                } elsif (defined $cur) {
                    $code{$cur} .= "$_\n";
                }
            }
            push @blocks, [ "$file:$line", \%code ];
        }
    }
    return @blocks;
}

subtest "the docs' lua nginx blocks run as written" => sub {
    my @blocks = lua_nginx_blocks();
    ok(@blocks >= 1, "docs/semaphore.md's limit.conn recipe is one");
    for my $b (@blocks) {
        my ($where, $code) = @$b;
        my %code = %$code;
        my %http = map { $_ => 1 } qw(init_by_lua_block init_worker_by_lua_block);
        my @unknown = grep { !/^(init|init_worker|set|rewrite|access|content|header_filter|body_filter|log)_by_lua_block$/ }
                      keys %code;
        is_deeply(\@unknown, [], "$where: sections of known directives");
        my $http = join '', map { "    $_ {\n$code{$_}    }\n" }
                            grep { $code{$_} } sort keys %http;
        $code{content_by_lua_block} //= qq{ngx.say("ok")\n};
        my $location = join '', map { "            $_ {\n$code{$_}            }\n" }
                                grep { !$http{$_} } sort keys %code;
        my $t = ShmTest->new(
            workers => 2, preamble => 0,
            ($root_run ? (user => 'nobody nogroup') : ()),
            http_config => $http,
            config => "        location = /doc {\n$location        }\n");
        $t->start;
        subtest "$where" => sub {
            for my $i (1 .. 4) {
                my $res = $t->get("/doc");
                cmp_ok($res->{status}, '<', 500, "request $i: no 5xx")
                    or diag($res->{body});
            }
            $t->check_log("$where", nested => 1);
        };
        $t->stop;
    }
};

my @rewrite = (
    [ pid => qr/^pid .*;$/m, "pid {{PREFIX}}/logs/nginx.pid;\ndaemon off;" ],
    [ worker_processes => qr/^worker_processes .*;$/m, "worker_processes 2;" ],
    [ error_log => qr/^error_log .*;$/m,
      "error_log {{PREFIX}}/logs/error.log info;" ],
    [ lua_package_path => qr/^\s*lua_package_path .*;$/m,
      qq{    lua_package_path "{{LUA_PATH}}";} ],
    [ listen => qr/^\s*listen 8080;$/m,
      "        listen 127.0.0.1:{{PORT}} reuseport;" ],
    [ http => qr/^http \{$/m, join("\n    ", "http {",
        "access_log off;",
        "client_body_temp_path {{PREFIX}}/tmp/client_body;",
        "proxy_temp_path {{PREFIX}}/tmp/proxy;",
        "fastcgi_temp_path {{PREFIX}}/tmp/fastcgi;",
        "uwsgi_temp_path {{PREFIX}}/tmp/uwsgi;",
        "scgi_temp_path {{PREFIX}}/tmp/scgi;") ],
);
for my $r (@rewrite) {
    my ($what, $re, $with) = @$r;
    ok($conf =~ s/$re/$with/, "the example's $what line, rewritten for the test")
        or give_up("the README's nginx.conf changed shape");
}
my ($user) = $conf =~ /^user (\S+);$/m
    or give_up("the README's nginx.conf has no `user` line");

# the README's config as it is; as root, also without its `user` line
my @runs = ([ "user $user", $conf, $user ]);
if ($root_run) {
    (my $default = $conf) =~ s/^user \S+;\n//m;
    push @runs, [ "no user directive", $default, "nobody" ];
}

# the README's locations; $r makes this round's keys
sub exercise {
    my ($t, $r) = @_;
    $t->block("a miss loads the value, the next request hits",
        request => [ "GET /item?id=${r}1", "GET /item?id=${r}1" ],
        body    => [ "miss: value of ${r}1\n", "hit: value of ${r}1\n" ]);

    subtest "concurrent misses on both workers: the value is loaded once" => sub {
        my @bodies = parallel(6, sub { $t->get("/item?id=${r}2")->{body} });
        my @miss = grep { $_ eq "miss: value of ${r}2\n" } @bodies;
        # (a request that arrives after the 0.2 s load, as a loaded
        # machine may start one, finds the value without waiting)
        my @hit = grep { /^(?:hit after wait|hit): value of ${r}2\n\z/ }
                  @bodies;
        is(scalar @miss, 1, "one request loaded the value");
        is(scalar @hit, 5, "the others read the cache, waiting for the load "
                           . "or after it") or diag(explain \@bodies);
        $t->check_log("stampede", nested => 1);
    };

    $t->block("the cache: a miss runs the loader, then this worker's L1 answers",
        request => "GET /user?id=${r}7",
        body    => "user ${r}7 (hit level 3)\n");

    subtest "the cache: concurrent misses on both workers run the loader once" => sub {
        my @bodies = parallel(6, sub { $t->get("/user?id=${r}8")->{body} });
        my @loaded = grep { $_ eq "user ${r}8 (hit level 3)\n" } @bodies;
        my @other = grep { /^user ${r}8 \(hit level [12]\)\n\z/ } @bodies;
        is(scalar @loaded, 1, "one request ran the loader") or diag(explain \@bodies);
        is(scalar @other, 5, "the others got its value from the zone or L1");
        my @again = map { $t->get("/user?id=${r}8")->{body} } 1 .. 4;
        is(scalar(grep { /^user ${r}8 \(hit level [12]\)\n\z/ } @again), 4,
           "later requests hit") or diag(explain \@again);
        $t->check_log("cache", nested => 1);
    };

    $t->block("resty.shmlock over a lua_shared_dict",
        request => "GET /legacy",
        body    => "legacy lock: 0 1\n");

    $t->block("trylock in log_by_lua",
        request => [ ("GET /logged") x 3 ],
        body    => "ok\n");
}

# a LuaJIT process as the workers' user (as root), or as ourselves
sub tool {
    my ($t, $as, $code) = @_;
    return $t->luajit($code, $root_run ? (as => $as) : ());
}

for my $run (@runs) {
    my ($label, $config, $as) = @$run;
    subtest "the README's nginx.conf, $label" => sub {
        my $t = ShmTest->new(workers => 2);
        $t->{full_config} = $config;
        $t->start;
        my $uid = $root_run ? (getpwnam $as)[2] : $>;

        subtest "the workers run as $as" => sub {
            is_deeply([ $t->worker_uids ], [ $uid, $uid ], "their uids");
        } if $root_run;

        exercise($t, "a");

        subtest "the zone files are the workers'" => sub {
            for my $name (qw(my_cache my_locks)) {
                my @st = stat($t->zone_dir . "/shmlock.$name");
                is(sprintf("%04o %d", $st[2] & 07777, $st[4]),
                   sprintf("0600 %d", $uid), "$name: mode and owner");
            }
        };

        subtest "a LuaJIT process of the workers' user reads the cache nginx filled" => sub {
            my ($rc, $out) = tool($t, $as,
                q{print(require("resty.shmlock.shdict").open("my_cache"):get("a1"))});
            is($out, "value of a1\n", "luajit output");
        };

        subtest "root's LuaJIT is refused the workers' zone, naming the owner" => sub {
            my ($rc, $out) = $t->luajit(q{print(select(2,
                require("resty.shmlock.shdict").open("my_cache")))});
            like($out, qr/^zone file owned by another user \(uid $uid\)/,
                 "refused");
        } if $root_run;

        subtest "a tool of the workers' user makes my_locks anew" => sub {
            my ($rc, $out) = tool($t, $as, q{
                local shdict = require "resty.shmlock.shdict"
                assert(shdict.destroy("my_locks"))
                local d = assert(shdict.open("my_locks", { size = "64k" }))
                print(d:capacity())});
            is($out, "65536\n", "a 64k zone in its place");
        };

        $t->block("the workers lock in the new zone",
            request => "GET /item?id=b1", body => "miss: value of b1\n");

        my @new = $t->reload;
        subtest "after nginx -s reload" => sub {
            is(scalar @new, 2, "two new workers");
            is_deeply([ $t->worker_uids ], [ $uid, $uid ], "their uids")
                if $root_run;
            $t->check_log("reload", nested => 1);
        };

        exercise($t, "c");

        subtest "the master attached the zone the tool made" => sub {
            my ($rc, $out) = tool($t, $as, q{
                local d = require("resty.shmlock.shdict").open("my_locks")
                print(d:capacity())});
            is($out, "65536\n", "still the tool's 64k zone");
        };

        $t->stop;
    };
}

done_testing;
