# The nginx blocks of the docs that use Redis, run as written with
# Debian's lua-resty-redis (lua-nginx-redis, `require "nginx.redis"`):
# docs/redis.md's /report (the Redis lock) and docs/cache.md's fleet tier
# (init_worker_by_lua_block and its /user location), on 2 workers, with a
# redis-server started on a free loopback port (in place of 6379) and
# stopped here.  Only the port is rewritten; the fleet block's `server {`
# wrapper gives its location to the test's own server.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use IO::Socket::INET;
use POSIX qw(WNOHANG);
use Time::HiRes qw(time sleep);
use ShmTest;

my $root = "$FindBin::Bin/..";
my $REDIS = $ENV{REDIS_SERVER} || 'redis-server';
system("command -v $REDIS >/dev/null 2>&1") == 0
    or ShmTest::give_up("redis-server is not on the PATH (scripts/deps.sh installs it)");
-e '/usr/share/lua/5.1/nginx/redis.lua'
    or ShmTest::give_up("lua-nginx-redis is not installed (scripts/deps.sh installs it)");

sub slurp {
    my ($file) = @_;
    open my $fh, '<', $file or ShmTest::give_up("cannot read $file");
    local $/;
    return <$fh>;
}

# the ```nginx fragment block of $file that matches $re
sub block_of {
    my ($file, $re) = @_;
    my $text = slurp("$root/$file");
    while ($text =~ /^```nginx fragment\n(.*?)^```/msg) {
        my $block = $1;
        return $block if $block =~ $re;
    }
    ShmTest::give_up("no nginx block matching $re in $file");
}

my $rport = ShmTest::free_port();
my $redis_pid = fork // die "fork: $!";
if ($redis_pid == 0) {
    open STDOUT, '>', '/dev/null';
    exec($REDIS, '--port', $rport, '--bind', '127.0.0.1', '--save', '',
         '--appendonly', 'no', '--daemonize', 'no')
        or POSIX::_exit(127);
}
END {
    local $?;
    if ($redis_pid) {
        kill 'TERM', $redis_pid;
        my $deadline = time + 5;
        sleep 0.05 while waitpid($redis_pid, WNOHANG) == 0 && time < $deadline;
        kill 'KILL', $redis_pid if waitpid($redis_pid, WNOHANG) == 0;
    }
}
{
    my $deadline = time + 10;
    my $up;
    until ($up = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$rport")) {
        ShmTest::give_up("redis-server did not come up on port $rport")
            if time > $deadline || waitpid($redis_pid, WNOHANG) != 0;
        sleep 0.05;
    }
    close $up;
}

my $report = block_of("docs/redis.md", qr{^location /report \{}m);
my $fleet = block_of("docs/cache.md", qr{init_worker_by_lua_block});
s/\b6379\b/$rport/g for $report, $fleet;
my ($http, $server) = $fleet =~ /\A(.*?)^server \{\n(.*)^\}\n\z/ms
    or ShmTest::give_up("docs/cache.md's fleet block: no server { ... } at its end");

my $t = ShmTest->new(workers => 2, http_config => $http,
                     config => "$report\n$server");
$t->start;

$t->block("docs/redis.md: the Redis lock with nginx.redis",
    request => [ "GET /report", "GET /report" ],
    body    => [ "done, fence 1\n", "done, fence 2\n" ]);

$t->block("docs/cache.md: the fleet tier with nginx.redis, 2 workers",
    request => [ ("GET /user?id=42") x 6 ],
    body    => [ "user 42 3\n", (qr/^user 42 [12]\n\z/) x 5 ]);

$t->stop;
done_testing;
