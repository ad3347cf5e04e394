package ShmRedis;

# A private redis-server for the nginx tests of the Redis lock and
# semaphore: on a free 127.0.0.1 port, no persistence, in the foreground
# as a child of the test (so its pid stays ours until we reap it), stopped
# at exit.  Gives up (ShmTest::give_up) where redis-server or Debian's
# lua-resty-redis (lua-nginx-redis) is missing.
#
#   use ShmRedis;
#   my $redis = ShmRedis->start;        # $redis->port
#   $redis->cli("CLIENT", "LIST")      # one command, its reply's text
#   $redis->stop;                        # (END does it too)

use strict;
use warnings;
use IO::Socket::INET;
use POSIX qw(WNOHANG);
use Time::HiRes qw(time sleep);
use ShmTest;

my @servers;

sub start {
    my ($class) = @_;
    my $bin = $ENV{REDIS_SERVER} || 'redis-server';
    system("command -v $bin >/dev/null 2>&1") == 0
        or ShmTest::give_up("redis-server is not on the PATH (scripts/deps.sh installs it)");
    -e '/usr/share/lua/5.1/nginx/redis.lua'
        or ShmTest::give_up("lua-nginx-redis is not installed (scripts/deps.sh installs it)");
    my $port = ShmTest::free_port();
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>', '/dev/null';
        exec($bin, '--port', $port, '--bind', '127.0.0.1', '--save', '',
             '--appendonly', 'no', '--daemonize', 'no')
            or POSIX::_exit(127);
    }
    my $self = bless { port => $port, pid => $pid }, $class;
    push @servers, $self;
    my $deadline = time + 10;
    until (my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port")) {
        ShmTest::give_up("redis-server did not come up on port $port")
            if time > $deadline || waitpid($pid, WNOHANG) != 0;
        sleep 0.05;
    }
    return $self;
}

sub port { $_[0]{port} }

# one command in Redis's inline form; the reply as text (arrays flattened,
# one element a line)
sub cli {
    my ($self, @words) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$self->{port}",
                                  Timeout => 5) or die "redis: $!";
    print $s join(' ', @words), "\r\n";
    my $out = _reply($s);
    close $s;
    return $out;
}

sub _reply {
    my ($s) = @_;
    my $line = <$s> // die "redis: no reply";
    $line =~ s/\r\n\z//;
    my ($t, $rest) = (substr($line, 0, 1), substr($line, 1));
    return $rest if $t eq '+' || $t eq ':' || $t eq '-';
    if ($t eq '$') {
        return undef if $rest < 0;
        my $data = '';
        read($s, $data, $rest + 2);
        return substr($data, 0, $rest);
    }
    if ($t eq '*') {
        return join "\n", map { _reply($s) // '' } 1 .. $rest;
    }
    die "redis: bad reply $line";
}

sub stop {
    my ($self) = @_;
    my $pid = delete $self->{pid} or return;
    kill 'TERM', $pid;
    my $deadline = time + 5;
    sleep 0.05 while waitpid($pid, WNOHANG) == 0 && time < $deadline;
    if (waitpid($pid, WNOHANG) == 0) {
        kill 'KILL', $pid;
        waitpid($pid, 0);
    }
}

END {
    local $?;
    $_->stop for @servers;
}

1;
