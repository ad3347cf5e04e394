# The nginx.conf of the README's "Using it in OpenResty" section, started
# as written (only listen, pid, logs, package path and temp paths rewritten
# for a test prefix), and its locations behave as the README says.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use ShmTest qw(parallel give_up);

# README.md once the section is merged there, t/README-openresty.md before
my $conf;
for my $file ("$FindBin::Bin/../README.md", "$FindBin::Bin/README-openresty.md") {
    open my $fh, '<', $file or next;
    my $text = do { local $/; <$fh> };
    my ($section) = $text =~ /^Using it in OpenResty\n=+\n(.*?)(?=^\S[^\n]*\n=+\n|\z)/ms
        or next;
    ($conf) = $section =~ /^```nginx\n(.*?)^```/ms and last;
}
defined $conf or give_up("no nginx.conf in a 'Using it in OpenResty' section");

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
