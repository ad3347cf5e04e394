package ShmTest;

# A small Test::Nginx-like harness for lua-resty-shmlock, core Perl only.
#
# One ShmTest object is one nginx instance with its own prefix directory
# (conf/, logs/, tmp/) and its own zone directory, exported to nginx and to
# the LuaJIT processes a test starts as $SHMLOCK_DIR.  A test file builds
# the server from config snippets, then runs small named blocks:
#
#   my $t = ShmTest->new(workers => 2, http_config => '...', config => '...');
#   $t->start;
#   $t->block("the counter is shared",
#             request => "GET /t", status => 200, body => "1\n");
#
# Every block scans the part of error.log written since the previous block
# for [error], [alert], [crit], [emerg] and "stack traceback" entries, and
# fails on any the block did not declare in `error_log`.  The end of the
# file (after nginx has stopped) is scanned the same way.  nginx is always
# stopped: by stop(), by the END block, or on SIGINT/SIGTERM.
#
# Options of new(): workers (2), main_config (main context lines),
# http_config (http context), config (server context), reuseport (on when
# workers > 1, so that the kernel spreads connections over the workers),
# log_level (info), full_config (a whole nginx.conf instead of the template),
# user (the `user` directive's value, e.g. 'nobody nogroup': the workers run
# as that user; needs root).  As root, the zone directory is made 01777, as
# /dev/shm is, so that workers of another user can create zones in it.
#
# The template loads the lua module, sets lua_package_path to the checkout's
# lua/ (as root, to a readable copy of it: see $LUA_ROOT) ({{LUA_PATH}}) and
# starts the http context with the common preamble, an
# init_by_lua_block (run in the master; workers inherit what it made):
#
#     resty_lock = require "resty.shmlock"      -- a global, for handlers
#     T = { fmt = ... }    -- the test's state; T.fmt(...): the values
#                          -- tostring()ed, joined by spaces
#     T.zone = assert(require("resty.shmlock.shdict").open(ZONE, ZONE_OPTS))
#     ...                  -- the test's init_by_lua code
#
# Options for it: zone (ZONE: the name of a zone to open as T.zone),
# zone_opts (ZONE_OPTS: a Lua table constructor, e.g. '{ size = "2m" }'),
# init_by_lua (Lua code run after the lines above, in the same block, so a
# test adds to T or replaces anything), preamble => 0 (no init_by_lua_block
# at all: the test writes its own in http_config, or wants none, as with
# lua_code_cache off).
#
# Placeholders in config snippets and in LuaJIT code: {{PORT}}, {{PREFIX}},
# {{ZONE_DIR}}, {{REPO}}, {{LUA_PATH}}.
#
# nginx runs in the foreground (daemon off, master_process on) as a child
# of the test, so its pid is known and it can be reaped.  When the test
# runs as root, the template says `user root root;`, so that the test's
# LuaJIT processes (root) and the workers share zones as one user; the
# `user` option sets another (t/07, t/16: workers as nobody), and then
# luajit(..., as => USER) runs a LuaJIT process as the workers' user, as
# an operator runs tools beside nginx.  As non-root, no user directive is
# emitted: master and workers share the test's uid.

use strict;
use warnings;

use Test::More;
use HTTP::Tiny;
use File::Temp qw(tempdir);
use File::Spec;
use File::Basename qw(dirname);
use Cwd qw(abs_path);
use IO::Socket::INET;
use POSIX qw(WNOHANG);
use Time::HiRes qw(time sleep);
use Storable qw(nstore retrieve);

use Exporter 'import';
our @EXPORT_OK = qw(parallel hammer spawn give_up);

our $NGINX   = $ENV{TEST_NGINX_BINARY} || 'nginx';
our $LUAJIT  = $ENV{TEST_LUAJIT} || 'luajit';
our $MODULES = $ENV{TEST_NGINX_MODULES} || '/usr/lib/nginx/modules';
our $REPO    = abs_path(File::Spec->catdir(dirname(__FILE__), '..', '..'));
our $HTTP_TIMEOUT = 10;
our $START_TIMEOUT = 30;
our $STOP_TIMEOUT  = 30;

# The modules nginx and the LuaJIT processes load.  As root, from a copy
# of lua/ (and of the library) in a directory every user can read: workers
# and tools run as another user (nobody, www-data) must load them too, and
# the checkout may be a clone only root can enter (/root is 0700 on Debian).
our $LUA_ROOT = $> == 0 ? readable_copy() : $REPO;
our $LUA_PATH = "$LUA_ROOT/lua/?.lua;$LUA_ROOT/lua/?/init.lua;"
              . "/usr/share/lua/5.1/?.lua;/usr/share/lua/5.1/?/init.lua;;";

# A directory under /tmp (not $TMPDIR, which may be private), mode 0755,
# removed at exit, holding a copy of lua/ and libshmlock.so (which
# resty.shmlock.lib finds beside lua/) and of $SHMLOCK_LIB if set (the
# variable then names the copy); returns its path.
sub readable_copy {
    my $dir = tempdir('shmlock-lua-XXXXXX', DIR => '/tmp', CLEANUP => 1);
    my @files = grep { -e } "$REPO/libshmlock.so";
    if ($ENV{SHMLOCK_LIB}) {
        my $lib = $ENV{SHMLOCK_LIB};
        (my $name = $lib) =~ s{.*/}{};
        mkdir "$dir/lib" or die "mkdir $dir/lib: $!";
        system('cp', $lib, "$dir/lib/$name") == 0 or die "cp $lib: $?";
        $ENV{SHMLOCK_LIB} = "$dir/lib/$name";
    }
    system('cp', '-R', "$REPO/lua", @files, "$dir/") == 0
        or die "cp $REPO/lua to $dir: $?";
    system('chmod', '-R', 'a+rX', $dir) == 0 or die "chmod $dir: $?";
    chmod 0755, $dir or die "chmod $dir: $!";
    return $dir;
}

my @instances;      # every started ShmTest, stopped at exit
my @children;       # every background process, killed at exit
my $main_pid = $$;  # forked children must not run the cleanup

my $ERROR_RE = qr/\[(?:error|alert|crit|emerg)\]|stack traceback/;

sub new {
    my ($class, %opts) = @_;
    my $self = bless {
        workers     => 2,
        main_config => '',
        http_config => '',
        config      => '',
        reuseport   => ($opts{workers} // 2) > 1,
        log_level   => 'info',
        %opts,
    }, $class;

    -e "$REPO/libshmlock.so" || $ENV{SHMLOCK_LIB}
        or give_up("$REPO/libshmlock.so is not built: run `make` first");

    $self->{prefix} = tempdir('shmlock-t-XXXXXX', TMPDIR => 1,
                              CLEANUP => !$ENV{TEST_KEEP});
    # Zones live on tmpfs as in production; fall back to the prefix.
    my $shm = (-d '/dev/shm' && -w '/dev/shm') ? '/dev/shm' : $self->{prefix};
    $self->{zone_dir} = tempdir('shmlock-zones-XXXXXX', DIR => $shm,
                                CLEANUP => !$ENV{TEST_KEEP});
    if ($> == 0) {
        chmod 01777, $self->{zone_dir} or die "chmod $self->{zone_dir}: $!";
    }
    for my $d (qw(conf logs tmp)) {
        mkdir "$self->{prefix}/$d" or die "mkdir $d: $!";
    }
    $self->{port} = free_port();
    $self->{error_log} = "$self->{prefix}/logs/error.log";
    $self->{log_offset} = 0;

    # nginx's master and every LuaJIT process the test starts inherit it.
    $ENV{SHMLOCK_DIR} = $self->{zone_dir};
    diag("prefix $self->{prefix}, zones $self->{zone_dir}") if $ENV{TEST_VERBOSE};
    return $self;
}

sub port     { $_[0]{port} }
sub prefix   { $_[0]{prefix} }
sub zone_dir { $_[0]{zone_dir} }
sub pid      { $_[0]{pid} }

# Ends the test file with a failure (the rest of it cannot run); unlike
# BAIL_OUT, prove goes on with the other files.  nginx is stopped by END.
sub give_up {
    my ($why) = @_;
    fail($why);
    done_testing();
    exit 1;
}

sub free_port {
    my $sock = IO::Socket::INET->new(
        LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'tcp',
        Listen => 1, ReuseAddr => 1,
    ) or die "cannot bind 127.0.0.1:0: $!";
    my $port = $sock->sockport;
    close $sock;
    return $port;
}

sub expand {
    my ($self, $text) = @_;
    my %v = (
        PORT     => $self->{port},
        PREFIX   => $self->{prefix},
        ZONE_DIR => $self->{zone_dir},
        REPO     => $REPO,
        LUA_PATH => $LUA_PATH,
    );
    $text =~ s/\{\{([A-Z_]+)\}\}/
        exists $v{$1} ? $v{$1} : die "unknown placeholder {{$1}}\n"/ge;
    return $text;
}

sub render {
    my ($self) = @_;
    my $p = $self->{prefix};
    if (defined $self->{full_config}) {     # a whole nginx.conf, as given
        return $self->write_conf($self->expand($self->{full_config}));
    }
    my $user = $> == 0 ? "user root root;\n" : '';
    if (defined $self->{user}) {
        $> == 0 or give_up("user => '$self->{user}' needs root");
        $user = "user $self->{user};\n";
    }
    my $reuseport = $self->{reuseport} ? ' reuseport' : '';
    my $conf = <<"EOF";
load_module $MODULES/ndk_http_module.so;
load_module $MODULES/ngx_http_lua_module.so;

${user}worker_processes $self->{workers};
daemon off;
master_process on;
pid $p/logs/nginx.pid;
error_log $p/logs/error.log $self->{log_level};
env SHMLOCK_DIR;
env SHMLOCK_LIB;

$self->{main_config}

events {
    worker_connections 1024;
}

http {
    access_log off;
    client_body_temp_path $p/tmp/client_body;
    proxy_temp_path       $p/tmp/proxy;
    fastcgi_temp_path     $p/tmp/fastcgi;
    uwsgi_temp_path       $p/tmp/uwsgi;
    scgi_temp_path        $p/tmp/scgi;
    default_type text/plain;

    lua_package_path "$LUA_PATH";

@{[ $self->preamble ]}
$self->{http_config}

    server {
        listen 127.0.0.1:$self->{port}$reuseport;
        server_name localhost;

$self->{config}
    }
}
EOF
    return $self->write_conf($self->expand($conf));
}

# The init_by_lua_block of the template (see the top of this file).
sub preamble {
    my ($self) = @_;
    return '' if defined $self->{preamble} && !$self->{preamble};
    my $zone = '';
    if (defined $self->{zone}) {
        my $opts = defined $self->{zone_opts} ? ", $self->{zone_opts}" : '';
        $zone = qq{        T.zone = assert(require("resty.shmlock.shdict")}
              . qq{.open("$self->{zone}"$opts))\n};
    }
    my $init = $self->{init_by_lua} // '';
    return <<"EOF";
    init_by_lua_block {
        resty_lock = require "resty.shmlock"
        T = {}
        function T.fmt(...)
            local n, t = select("#", ...), { ... }
            for i = 1, n do t[i] = tostring(t[i]) end
            return table.concat(t, " ", 1, n)
        end
$zone$init
    }
EOF
}

sub write_conf {
    my ($self, $conf) = @_;
    my $file = "$self->{prefix}/conf/nginx.conf";
    open my $fh, '>', $file or die "$file: $!";
    print $fh $conf;
    close $fh;
    return $file;
}

sub nginx_cmd {
    my ($self, @extra) = @_;
    return ($NGINX, '-p', "$self->{prefix}/", '-e', $self->{error_log},
            '-c', "$self->{prefix}/conf/nginx.conf", @extra);
}

# Starts nginx and waits until the port answers; BAIL_OUT on failure (the
# rest of the file cannot run without a server).
sub start {
    my ($self) = @_;
    $self->render;

    my $out = `@{[ join ' ', map { "'$_'" } $self->nginx_cmd('-t') ]} 2>&1`;
    if ($? != 0) {
        diag("nginx -t failed:\n$out");
        diag("error.log:\n" . $self->slurp_log);
        give_up("nginx -t failed");
    }

    $self->{log_offset} = -s $self->{error_log} || 0;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>>', "$self->{prefix}/logs/stdout.log";
        open STDERR, '>&', \*STDOUT;
        exec $self->nginx_cmd or POSIX::_exit(127);
    }
    $self->{pid} = $pid;
    push @instances, $self;

    my $deadline = time + $START_TIMEOUT;
    while (time < $deadline) {
        if (waitpid($pid, WNOHANG) == $pid) {
            delete $self->{pid};
            diag("nginx exited at startup (status $?):\n" . $self->slurp_log);
            give_up("nginx did not start");
        }
        my @workers = $self->worker_pids;
        if (@workers >= $self->{workers}
            && IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                     PeerPort => $self->{port}, Timeout => 1))
        {
            return $self;
        }
        sleep 0.05;
    }
    diag("nginx did not answer on port $self->{port}:\n" . $self->slurp_log);
    $self->stop;
    give_up("nginx did not start");
}

# QUIT, wait, KILL after a timeout; then scan the tail of error.log.
# The master is our child: until we reap it, its pid is not reused; once
# reaped, it may be anyone's (never signal it then).
sub stop {
    my ($self, %opts) = @_;
    my $pid = delete $self->{pid} or return;
    kill 'QUIT', $pid;
    my $deadline = time + $STOP_TIMEOUT;
    my $reaped = 0;
    while (time < $deadline) {
        if (waitpid($pid, WNOHANG) == $pid) {
            $reaped = 1;
            last;
        }
        sleep 0.05;
    }
    if (!$reaped) {
        diag("nginx $pid did not quit in ${STOP_TIMEOUT}s, killing it");
        # the workers first: once the master is gone, they are not its
        my @workers = $self->worker_pids_of($pid);
        kill 'KILL', $pid, @workers;
        waitpid($pid, 0);
    }
    @instances = grep { $_ != $self } @instances;
    $self->check_log('after nginx stopped', %opts) unless $opts{no_check};
}

# Pids of the live worker processes (children of the master).
sub worker_pids {
    my ($self) = @_;
    return () unless $self->{pid};
    return $self->worker_pids_of($self->{pid});
}

# true while PID is a process that has not exited (not a zombie)
sub process_alive {
    my ($pid) = @_;
    open my $fh, '<', "/proc/$pid/stat" or return 0;
    my $stat = <$fh> // return 0;
    my ($state) = $stat =~ /\)\s+(\S)/ or return 0;
    return $state ne 'Z' && $state ne 'X';
}

sub worker_pids_of {
    my ($self, $master) = @_;
    my @pids;
    opendir my $dh, '/proc' or return ();
    for my $p (grep { /^\d+$/ } readdir $dh) {
        open my $fh, '<', "/proc/$p/stat" or next;
        my $stat = <$fh> // next;
        # pid (comm) state ppid ...; comm may contain spaces
        my ($state, $ppid) = $stat =~ /\)\s+(\S)\s+(\d+)/ or next;
        next if $state eq 'Z';
        next unless $ppid == $master;
        open my $cf, '<', "/proc/$p/cmdline" or next;
        my $cmd = <$cf> // '';
        push @pids, $p + 0 if $cmd =~ /worker process/;
    }
    @pids = sort { $a <=> $b } @pids;
    return @pids;
}

# The uids the live workers run as (from /proc/PID/status), in pid order.
sub worker_uids {
    my ($self) = @_;
    my @uids;
    for my $p ($self->worker_pids) {
        open my $fh, '<', "/proc/$p/status" or next;
        while (my $line = <$fh>) {
            if ($line =~ /^Uid:\s+(\d+)\s+(\d+)/) {
                push @uids, $2 + 0;     # the effective uid
                last;
            }
        }
    }
    return @uids;
}

# `nginx -s reload` (HUP to the master), then wait until a full set of new
# workers is up and, unless wait_old => 0, the old ones have exited.
# Returns the new workers' pids.
sub reload {
    my ($self, %o) = @_;
    my %old = map { $_ => 1 } $self->worker_pids;
    my $out = `@{[ join ' ', map { "'$_'" } $self->nginx_cmd('-s', 'reload') ]} 2>&1`;
    die "nginx -s reload failed: $out" if $? != 0;
    my $wait_old = $o{wait_old} // 1;
    my $deadline = time + $START_TIMEOUT;
    while (time < $deadline) {
        my @all = $self->worker_pids;
        my @new = grep { !$old{$_} } @all;
        # (the old ones gone by their /proc/PID/stat, not by the list: an
        # exiting worker has an empty cmdline before it is a zombie, and
        # it still counts as alive for a lock it may hold or wait for)
        return @new if @new >= $self->{workers}
                       && (!$wait_old || !grep { process_alive($_) } keys %old);
        sleep 0.02;
    }
    die "reload: no new set of workers after ${START_TIMEOUT}s";
}

# ---------------------------------------------------------------------
# HTTP

sub http {
    return HTTP::Tiny->new(timeout => $HTTP_TIMEOUT, keep_alive => 0,
                           agent => 'shmlock-t');
}

# request("GET /t"), request("POST /t", $body), request(GET => "/t")
# Returns { status, body, headers, start, end, elapsed }.
sub request {
    my ($self, $req, $body) = @_;
    my ($method, $uri);
    if ($req =~ m{^([A-Z]+)\s+(/\S*)$}) {
        ($method, $uri) = ($1, $2);
    } else {
        ($method, $uri) = ($req, $body);
        $body = $_[3];
    }
    my $url = "http://127.0.0.1:$self->{port}$uri";
    my $start = time;
    my $res = http()->request($method, $url,
                              defined $body ? { content => $body } : {});
    my $end = time;
    return {
        status  => $res->{status},
        body    => $res->{content},
        headers => $res->{headers},
        reason  => $res->{reason},
        start   => $start,
        end     => $end,
        elapsed => $end - $start,
    };
}

sub get  { my ($self, $uri) = @_; $self->request("GET $uri") }
sub post { my ($self, $uri, $body) = @_; $self->request("POST $uri", $body) }

# ---------------------------------------------------------------------
# Blocks

# $t->block($name, request => "GET /t" | [requests...], body => "..." |
#           qr/.../ | [per request], status => 200, headers => {..},
#           error_log => [qr/.../ | "substring"], no_error_log => [...],
#           max_time => seconds, timeout => seconds)
# timeout: the client's, for a request that does much work (default
# $HTTP_TIMEOUT): a loaded machine must not fail a request that is slow,
# not stuck.
# Returns the last response.
sub block {
    my ($self, $name, %b) = @_;
    local $HTTP_TIMEOUT = $b{timeout} // $HTTP_TIMEOUT;
    my @reqs = ref $b{request} eq 'ARRAY' ? @{ $b{request} } : ($b{request});
    my @bodies = ref $b{body} eq 'ARRAY' ? @{ $b{body} } : (($b{body}) x @reqs);
    my $status = $b{status} // 200;
    my $res;
    subtest $name => sub {
        for my $i (0 .. $#reqs) {
            my ($req, $payload) = ref $reqs[$i] ? @{ $reqs[$i] } : ($reqs[$i]);
            $res = $self->request($req, $payload);
            my $what = @reqs > 1 ? "$req (request $i)" : $req;
            is($res->{status}, $status, "$what: status")
                or diag($res->{body});
            my $want = $bodies[$i];
            if (ref $want eq 'Regexp') {
                like($res->{body}, $want, "$what: body");
            } elsif (defined $want) {
                is($res->{body}, $want, "$what: body");
            }
            for my $h (sort keys %{ $b{headers} || {} }) {
                my $w = $b{headers}{$h};
                my $got = $res->{headers}{lc $h};
                ref $w eq 'Regexp' ? like($got, $w, "$what: header $h")
                                   : is($got, $w, "$what: header $h");
            }
            if (defined $b{max_time}) {
                cmp_ok($res->{elapsed}, '<', $b{max_time},
                       "$what: answered in < $b{max_time}s");
            }
        }
        $self->check_log($name, error_log => $b{error_log},
                         no_error_log => $b{no_error_log}, nested => 1);
    };
    return $res;
}

# Checks error.log from the last checked offset: every expected pattern
# must appear (waited for up to `wait` seconds: log_by_lua and timers write
# after the response), every error entry must match an expected pattern,
# no `no_error_log` pattern may appear.
sub check_log {
    my ($self, $name, %o) = @_;
    my @expect = @{ $o{error_log} || [] };
    my @forbid = @{ $o{no_error_log} || [] };
    my $wait = $o{wait} // 5;
    my $deadline = time + $wait;

    my @entries;
    while (1) {
        @entries = $self->log_entries($self->{log_offset});
        my @missing = grep { my $p = $_; !grep { match($_, $p) } @entries }
                      @expect;
        last unless @missing && time < $deadline;
        sleep 0.05;
    }
    $self->{log_offset} = $self->{log_end};

    my $run = sub {
        for my $p (@expect) {
            ok((grep { match($_, $p) } @entries),
               "error.log has " . (ref $p ? $p : "\"$p\""));
        }
        for my $p (@forbid) {
            my @hits = grep { match($_, $p) } @entries;
            ok(!@hits, "error.log has no " . (ref $p ? $p : "\"$p\""))
                or diag(join '', @hits);
        }
        my @bad = grep {
            my $e = $_;
            $e =~ $ERROR_RE && !grep { match($e, $_) } @expect
        } @entries;
        ok(!@bad, "$name: no unexpected [error]/[alert]/[crit] in error.log")
            or diag(join '', @bad);
    };
    $o{nested} ? $run->() : subtest("error.log: $name" => $run);
}

sub match {
    my ($text, $p) = @_;
    return ref $p eq 'Regexp' ? $text =~ $p : index($text, $p) >= 0;
}

# error.log entries from $offset: an entry starts with a timestamp, the
# lines after it (Lua tracebacks) belong to it.
sub log_entries {
    my ($self, $offset) = @_;
    open my $fh, '<', $self->{error_log} or return ();
    seek $fh, $offset, 0;
    my @entries;
    while (my $line = <$fh>) {
        if ($line =~ m{^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d } || !@entries) {
            push @entries, $line;
        } else {
            $entries[-1] .= $line;
        }
    }
    $self->{log_end} = tell $fh;
    return @entries;
}

sub slurp_log {
    my ($self) = @_;
    my $text = '';
    for my $f ($self->{error_log}, "$self->{prefix}/logs/stdout.log") {
        open my $fh, '<', $f or next;
        local $/;
        $text .= "--- $f\n" . (<$fh> // '');
    }
    return $text;
}

# ---------------------------------------------------------------------
# LuaJIT processes sharing the zones (same SHMLOCK_DIR, the checkout's
# modules and libshmlock.so)

sub luajit_env {
    my ($self) = @_;
    return (LUA_PATH => $LUA_PATH, SHMLOCK_DIR => $self->{zone_dir});
}

# Runs a LuaJIT chunk to completion (bounded); returns (exit code, output).
sub luajit {
    my ($self, $code, %o) = @_;
    my $p = $self->luajit_bg($code, %o);
    return $p->finish($o{timeout} // 20);
}

# Starts a LuaJIT chunk in the background; returns a ShmTest::Proc.
# as => USER: run it as that user (and its groups; the test must be root).
sub luajit_bg {
    my ($self, $code, %o) = @_;
    $code = $self->expand($code);
    my $out = File::Temp->new(DIR => $self->{prefix}, SUFFIX => '.out');
    my %env = $self->luajit_env;
    my @as;
    if (defined $o{as}) {
        $> == 0 or give_up("luajit(as => '$o{as}') needs root");
        my (undef, undef, $uid, $gid) = getpwnam($o{as})
            or give_up("no user $o{as}");
        @as = ('setpriv', "--reuid=$uid", "--regid=$gid", '--init-groups',
               '--');
    }
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        @ENV{ keys %env } = values %env;
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', $out->filename;
        open STDERR, '>&', \*STDOUT;
        $| = 1;
        exec @as, $LUAJIT, '-e', $code or POSIX::_exit(127);
    }
    my $proc = bless { pid => $pid, out => $out }, 'ShmTest::Proc';
    push @children, $proc;
    return $proc;
}

# A file a LuaJIT holder can poll for (its name: "{{PREFIX}}/flag-NAME").
sub flag_path { my ($self, $n) = @_; "$self->{prefix}/flag-$n" }

sub set_flag {
    my ($self, $n) = @_;
    open my $fh, '>', $self->flag_path($n) or die "flag $n: $!";
    close $fh;
}

# Lua helper code for LuaJIT chunks: sleep_ms(ms), wait_flag(name, secs),
# now() (seconds, ms resolution).
sub lua_prelude {
    return <<'EOF';
local ffi = require "ffi"
ffi.cdef[[ int usleep(unsigned int usec); ]]
local function sleep_ms(ms) ffi.C.usleep(ms * 1000) end
local function wait_flag(name, secs)
    local path = "{{PREFIX}}/flag-" .. name
    for _ = 1, secs * 100 do
        local f = io.open(path)
        if f then f:close() return true end
        sleep_ms(10)
    end
    return false
end
io.stdout:setvbuf("no")
EOF
}

# ---------------------------------------------------------------------
# Client processes

# spawn(sub { ... return $scalar_or_ref }) runs the sub in a forked child;
# $h->join($timeout) returns its return value (Storable).
sub spawn {
    my ($code) = @_;
    my $tmp = File::Temp->new(SUFFIX => '.res');
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        my $ret = eval { $code->() };
        $ret = { error => $@ } if $@;
        nstore(\$ret, $tmp->filename);
        POSIX::_exit(0);    # skip END blocks: they belong to the parent
    }
    my $proc = bless { pid => $pid, res => $tmp }, 'ShmTest::Proc';
    push @children, $proc;
    return $proc;
}

# parallel($n, sub { my $i = shift; ... }) → list of the subs' returns.
sub parallel {
    my ($n, $code, %o) = @_;
    my @procs = map { my $i = $_; spawn(sub { $code->($i) }) } 0 .. $n - 1;
    return map { $_->join($o{timeout} // 60) } @procs;
}

# hammer($t, $clients, $requests, $path): $clients processes each GET
# $path $requests times, from a location that answers "PID WAITED\n"
# (the worker's pid; whether its lock waited, true or false).  Returns
# (the count of such answers with status 200, {pid => count}, how many
# waited, [every other answer or error]).
sub hammer {
    my ($t, $clients, $requests, $path) = @_;
    my @res = parallel($clients, sub {
        my @out;
        for (1 .. $requests) {
            my $r = $t->get($path);
            push @out, "$r->{status} $r->{body}";
        }
        return \@out;
    });
    my ($ok, $waited, %pids, @bad) = (0, 0);
    for my $r (@res) {
        if (ref $r ne 'ARRAY') { push @bad, $r->{error}; next }
        for my $line (@$r) {
            if ($line =~ /^200 (\d+) (true|false)\n\z/) {
                $ok++;
                $pids{$1}++;
                $waited++ if $2 eq 'true';
            } else {
                push @bad, $line;
            }
        }
    }
    return ($ok, \%pids, $waited, \@bad);
}

sub cleanup {
    return unless $$ == $main_pid;
    for my $p (@children) {
        $p->kill_it;
    }
    @children = ();
    for my $t (@instances) {
        $t->stop(no_check => 1);
    }
    @instances = ();
}

END {
    local $?;
    cleanup();
}

$SIG{INT} = $SIG{TERM} = sub { cleanup(); exit 1 };


package ShmTest::Proc;

use POSIX qw(WNOHANG);
use Time::HiRes qw(time sleep);
use Storable qw(retrieve);

sub pid { $_[0]{pid} }

sub output {
    my ($self) = @_;
    open my $fh, '<', $self->{out}->filename or return '';
    local $/;
    return <$fh> // '';
}

# Waits for the output to match $re; returns the match ($1 if the pattern
# captures), or undef (with a diagnostic) on exit or timeout.
sub wait_for {
    my ($self, $re, $timeout) = @_;
    my $deadline = time + ($timeout // 10);
    while (time < $deadline) {
        my $out = $self->output;
        return $1 // $& if $out =~ $re;
        if ($self->reap) {
            $out = $self->output;
            return $1 // $& if $out =~ $re;
            Test::More::diag("process $self->{pid} exited ($self->{status}) "
                             . "before printing $re:\n$out");
            return undef;
        }
        sleep 0.01;
    }
    Test::More::diag("process $self->{pid} did not print $re in time:\n"
                     . $self->output);
    return undef;
}

sub reap {
    my ($self) = @_;
    return 1 if defined $self->{status};
    if (waitpid($self->{pid}, WNOHANG) == $self->{pid}) {
        $self->{status} = $?;
        return 1;
    }
    return 0;
}

sub wait_exit {
    my ($self, $timeout) = @_;
    my $deadline = time + $timeout;
    until ($self->reap) {
        if (time >= $deadline) {
            $self->kill_it;
            $self->{status} = -1;
            $self->{timed_out} = 1;
            last;
        }
        sleep 0.01;
    }
}

# LuaJIT process: (exit code, output); -1 on timeout (killed).
sub finish {
    my ($self, $timeout) = @_;
    $self->wait_exit($timeout // 20);
    my $code = $self->{status} == -1 ? -1 : $self->{status} >> 8;
    return ($code, $self->output);
}

# spawned sub: its return value.
sub join {
    my ($self, $timeout) = @_;
    $self->wait_exit($timeout // 60);
    return { error => "timed out" } if $self->{timed_out};
    my $r = eval { retrieve($self->{res}->filename) };
    return $r ? $$r : { error => "no result (status $self->{status})" };
}

sub kill_it {
    my ($self) = @_;
    return if defined $self->{status};
    kill 'KILL', $self->{pid};
    waitpid($self->{pid}, 0);
    $self->{status} //= $?;
}

1;
