# The nginx.conf of the README's "Using it in OpenResty" section, started
# as written (only listen, pid, logs, package path and temp paths rewritten
# for a test prefix), and its locations behave as the README says.
#
# Every other ```nginx block of the README, docs/*.md, CONTRIBUTING.md and
# bench/README.md must be an excerpt of that file (its lines, indentation
# aside, in a row), so that it runs here too, or be marked
# ```nginx fragment (see CONTRIBUTING.md, "Documentation").
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use ShmTest qw(parallel give_up);

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

my $t = ShmTest->new(workers => 2);

my $user = $> == 0 ? "user root root;\n" : '';
my @rewrite = (
    [ pid => qr/^pid .*;$/m,
      "pid {{PREFIX}}/logs/nginx.pid;\ndaemon off;\n$user" ],
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
$t->{full_config} = $conf;
$t->start;

$t->block("a miss loads the value, the next request hits",
    request => [ "GET /item?id=1", "GET /item?id=1" ],
    body    => [ "miss: value of 1\n", "hit: value of 1\n" ]);

subtest "concurrent misses on both workers: the value is loaded once" => sub {
    my @bodies = parallel(6, sub { $t->get("/item?id=2")->{body} });
    my @miss = grep { $_ eq "miss: value of 2\n" } @bodies;
    my @wait = grep { $_ eq "hit after wait: value of 2\n" } @bodies;
    is(scalar @miss, 1, "one request loaded the value");
    is(scalar @wait, 5, "the others waited and read the cache")
        or diag(explain \@bodies);
    $t->check_log("stampede", nested => 1);
};

$t->block("the cache: a miss runs the loader, then this worker's L1 answers",
    request => "GET /user?id=7",
    body    => "user 7 (hit level 3)\n");

subtest "the cache: concurrent misses on both workers run the loader once" => sub {
    my @bodies = parallel(6, sub { $t->get("/user?id=8")->{body} });
    my @loaded = grep { $_ eq "user 8 (hit level 3)\n" } @bodies;
    my @other = grep { /^user 8 \(hit level [12]\)\n\z/ } @bodies;
    is(scalar @loaded, 1, "one request ran the loader") or diag(explain \@bodies);
    is(scalar @other, 5, "the others got its value from the zone or L1");
    my @again = map { $t->get("/user?id=8")->{body} } 1 .. 4;
    is(scalar(grep { /^user 8 \(hit level [12]\)\n\z/ } @again), 4,
       "later requests hit") or diag(explain \@again);
    $t->check_log("cache", nested => 1);
};

$t->block("resty.shmlock over a lua_shared_dict",
    request => "GET /legacy",
    body    => "legacy lock: 0 1\n");

$t->block("trylock in log_by_lua",
    request => [ ("GET /logged") x 3 ],
    body    => "ok\n");

subtest "a LuaJIT process reads the cache nginx filled" => sub {
    my ($rc, $out) = $t->luajit(
        q{print(require("resty.shmlock.shdict").open("my_cache"):get("1"))});
    is($out, "value of 1\n", "luajit output");
};

$t->stop;
done_testing;
