#!/usr/bin/env bash
# `make bench`: lua-resty-shmlock against what users would pick instead,
# measured side by side in one run.  See bench/README.md.
#
#   bench/run.sh              full run (a few minutes)
#   BENCH_QUICK=1 bench/run.sh  fewer, shorter repetitions
#
# Environment:
#   BENCH_QUICK=1        quick mode
#   BENCH_RESULTS_DIR    where RESULTS.md and the PNGs go (default bench/)
#   BENCH_ONLY="1 3"     run only these sections (1..13; 5, 6, 7 and 11's
#                        nginx loops share nginx, as does 2's density count)
#   BENCH_KEEP=1         keep the work directory (raw data, nginx logs)
#   BENCH_COMMIT=...     what to call the code measured (default: git HEAD)
#
# Everything this script starts (redis-server, nginx, the benchmark's
# processes) is stopped when it ends, also on failure or Ctrl-C.  Traffic is
# loopback only; redis and nginx listen on free ports of 127.0.0.1.

set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$ROOT/bench
RESULTS_DIR=${BENCH_RESULTS_DIR:-$BENCH}
case $RESULTS_DIR in /*) ;; *) RESULTS_DIR=$PWD/$RESULTS_DIR ;; esac
ONLY=${BENCH_ONLY:-1 2 3 4 5 6 7 8 9 10 11 12 13}
export BENCH_SECTIONS=$ONLY
export BENCH_QUICK=${BENCH_QUICK:-0}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/shmlock-bench-XXXXXX")
ZONES=$(mktemp -d /dev/shm/shmlock-bench-XXXXXX 2>/dev/null \
        || mktemp -d "$WORK/zones-XXXXXX")
export SHMLOCK_DIR=$ZONES
export BENCH_OUT=$WORK/results.tsv
export BENCH_DATA=$WORK
export LUA_PATH="$ROOT/lua/?.lua;$BENCH/lib/?.lua;$ROOT/scripts/lua/?.lua;/usr/share/lua/5.1/?.lua;/usr/share/lua/5.1/?/init.lua;;"
MODULES=${BENCH_NGINX_MODULES:-/usr/lib/nginx/modules}

REDIS_PID=
NGINX_PID=
STEP_PID=
FAILED=()

log() { printf 'bench: %s\n' "$*" >&2; }

# children of a pid (nginx workers), from /proc
children_of() {
    local parent=$1 p stat state ppid rest
    for p in /proc/[0-9]*; do
        stat=$(cat "$p/stat" 2>/dev/null) || continue
        read -r state ppid rest <<< "${stat##*) }"
        if [ "$ppid" = "$parent" ]; then echo "${p#/proc/}"; fi
    done
}

# stop_pid pid signal: signal, wait up to 10 s, then SIGKILL the pid and
# the children it had (nginx workers)
stop_pid() {
    local pid=$1 sig=$2 i kids
    [ -n "$pid" ] || return 0
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    kids=$(children_of "$pid")
    kill "-$sig" "$pid" 2>/dev/null || true
    for i in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "pid $pid did not stop on SIG$sig: killing it and its children"
        kill -KILL "$pid" 2>/dev/null || true
        for i in $kids; do kill -KILL "$i" 2>/dev/null || true; done
    fi
    wait "$pid" 2>/dev/null || true
}

# step cmd...: runs a benchmark program in its own process group, in the
# background so that a signal reaches our trap at once (bash defers traps
# while a foreground child runs, and luajit handles SIGINT itself); the
# trap then kills the whole group (the program, its forked processes,
# wrk).
step() {
    setsid "$@" &
    STEP_PID=$!
    local rc=0
    wait "$STEP_PID" || rc=$?
    STEP_PID=
    return $rc
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$STEP_PID" ]; then
        kill -KILL -- "-$STEP_PID" 2>/dev/null || kill -KILL "$STEP_PID" 2>/dev/null || true
        wait "$STEP_PID" 2>/dev/null || true
    fi
    stop_pid "$NGINX_PID" QUIT
    stop_pid "$REDIS_PID" TERM
    NGINX_PID= REDIS_PID=
    rm -rf "$ZONES"
    if [ "${BENCH_KEEP:-0}" = 1 ]; then
        log "work directory kept: $WORK"
    else
        rm -rf "$WORK"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

free_port() {
    perl -MIO::Socket::INET -e 'my $s = IO::Socket::INET->new(
        LocalAddr => "127.0.0.1", LocalPort => 0, Proto => "tcp",
        Listen => 1, ReuseAddr => 1) or die "bind: $!\n";
        print $s->sockport, "\n"'
}

wants() { case " $ONLY " in *" $1 "*) return 0;; esac; return 1; }

# section NAME cmd...: runs a section; a failure is recorded, the run goes on
section() {
    local name=$1
    shift
    log "section $name"
    if ! "$@"; then
        log "section $name FAILED"
        FAILED+=("$name")
    fi
}

need() {
    local missing=() c
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || missing+=("$c")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        log "missing commands: ${missing[*]} (run scripts/deps.sh)"
        exit 1
    fi
}

need luajit nginx wrk redis-server redis-cli gnuplot perl cc setsid valgrind
[ -f "$ROOT/libshmlock.so" ] || { log "libshmlock.so not built: run make"; exit 1; }

# ---- the machine ----

describe_machine() {
    local cpu
    cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
    [ -n "$cpu" ] || cpu=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1)
    {
        echo "date	$(date -u '+%Y-%m-%d %H:%M UTC')"
        if [ -n "${BENCH_COMMIT:-}" ]; then
            echo "commit	$BENCH_COMMIT"
        elif git -C "$ROOT" rev-parse --short HEAD >/dev/null 2>&1; then
            echo "commit	$(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- src lua || echo ' (src/ or lua/ modified)')"
        fi
        echo "mode	$([ "$BENCH_QUICK" = 1 ] && echo 'quick (BENCH_QUICK=1)' || echo full)"
        echo "nproc	$(nproc)"
        echo "cpu	$cpu"
        echo "kernel	$(uname -sr)"
        echo "luajit	$(luajit -v | head -n 1)"
        echo "nginx	$(nginx -v 2>&1 | head -n 1)"
        echo "lua module	$(dpkg-query -W -f='libnginx-mod-http-lua ${Version}, lua-resty-core ' libnginx-mod-http-lua 2>/dev/null)$(dpkg-query -W -f='${Version}' lua-resty-core 2>/dev/null)"
        echo "redis	$(redis-server --version | head -n 1)"
        echo "wrk	$(wrk -v 2>&1 | head -n 1)"
        echo "cc	$(cc --version | head -n 1)"
        echo "load at start	$(cut -d' ' -f1-3 /proc/loadavg)"
    } > "$WORK/machine.tsv"
}

describe_machine
: > "$BENCH_OUT"

log "building the C floors"
cc -O2 -Wall -Wextra -o "$WORK/floor_cas" "$BENCH/floor_cas.c"
cc -O2 -Wall -Wextra -o "$WORK/floor_futex" "$BENCH/floor_futex.c"
# LuaJIT's fixed random seed for the instruction counts (section 10)
cc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$WORK/fixed_random.so" \
    "$BENCH/fixed_random.c" -ldl
export INSTR_PRELOAD=$WORK/fixed_random.so

REPS=7; SECS=0.25
[ "$BENCH_QUICK" = 1 ] && { REPS=3; SECS=0.05; }

cd "$BENCH"

# ---- (1) uncontended ----

start_redis() {
    local port i
    port=$(free_port)
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --daemonize no --dir "$WORK" --logfile "$WORK/redis.log" &
    REDIS_PID=$!
    for i in $(seq 100); do
        if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then
            export BENCH_REDIS_PORT=$port
            return 0
        fi
        kill -0 "$REDIS_PID" 2>/dev/null || break
        sleep 0.1
    done
    log "redis-server did not start:"; cat "$WORK/redis.log" >&2 || true
    return 1
}

uncontended() {
    step "$WORK/floor_cas" "$REPS" "$SECS" > "$WORK/floor_cas.out" || return 1
    cat "$WORK/floor_cas.out"
    cat "$WORK/floor_cas.out" >> "$BENCH_OUT"
    start_redis || unset BENCH_REDIS_PORT
    local rc=0
    step luajit uncontended.lua || rc=$?
    stop_pid "$REDIS_PID" TERM
    REDIS_PID=
    return $rc
}

wants 1 && section "1 uncontended" uncontended
wants 2 && section "2 dict size" step luajit dict_size.lua
wants 3 && section "3 handoff" step luajit handoff.lua "$WORK/floor_futex"
wants 4 && section "4 fairness" step luajit fairness.lua
# (with a Redis, the cache's L1 hit with opts.redis too)
cache_l1() {
    start_redis || unset BENCH_REDIS_PORT
    local rc=0
    step luajit cache_l1.lua || rc=$?
    stop_pid "$REDIS_PID" TERM
    REDIS_PID=
    return $rc
}
wants 8 && section "8 cache L1 hit" cache_l1
wants 9 && section "9 contended" step luajit contended.lua
# (the cache's L1 hit with opts.redis reads Redis once, in its warm-up)
instructions() {
    start_redis || unset BENCH_REDIS_PORT
    local rc=0
    step luajit instructions.lua || rc=$?
    stop_pid "$REDIS_PID" TERM
    REDIS_PID=
    return $rc
}

wants 10 && section "10 instructions" instructions
wants 11 && section "11 semaphore handoff" \
    step luajit handoff.lua "$WORK/floor_futex" semaphore
wants 12 && section "12 fleet" step luajit fleet.lua
wants 13 && section "13 redis lock" step luajit redis_lock.lua

# ---- (5) and (6) inside nginx ----

nginx_run() {
    local workers=$1 prefix=$WORK/nginx-w$1 port user='' i rc=0
    port=$(free_port)
    mkdir -p "$prefix/conf" "$prefix/logs" "$prefix/tmp"
    # as root the workers would switch to nobody: keep our uid (zones 0600)
    [ "$(id -u)" = 0 ] && user='user root root;'
    sed -e "s|@MODULES@|$MODULES|g" -e "s|@USER@|$user|g" \
        -e "s|@WORKERS@|$workers|g" -e "s|@PREFIX@|$prefix|g" \
        -e "s|@PORT@|$port|g" \
        -e "s|@LUA_PATH@|$ROOT/lua/?.lua;$BENCH/lib/?.lua;$BENCH/nginx/?.lua;/usr/share/lua/5.1/?.lua;/usr/share/lua/5.1/?/init.lua;;|g" \
        "$BENCH/nginx/nginx.conf.in" > "$prefix/conf/nginx.conf"

    nginx -p "$prefix/" -e "$prefix/logs/error.log" -c "$prefix/conf/nginx.conf" \
        > "$prefix/logs/stdout.log" 2>&1 &
    NGINX_PID=$!
    for i in $(seq 100); do
        perl -MIO::Socket::INET -e 'exit !IO::Socket::INET->new(
            PeerAddr => "127.0.0.1", PeerPort => $ARGV[0], Timeout => 1)' \
            "$port" 2>/dev/null && break
        kill -0 "$NGINX_PID" 2>/dev/null || break
        sleep 0.1
    done
    if ! kill -0 "$NGINX_PID" 2>/dev/null; then
        log "nginx did not start:"; cat "$prefix/logs/error.log" >&2 || true
        NGINX_PID=
        return 1
    fi

    step luajit nginx_bench.lua "$port" "$workers" "$BENCH/nginx/wrk_report.lua" || rc=$?

    stop_pid "$NGINX_PID" QUIT
    NGINX_PID=
    if grep -E '\[(error|alert|crit|emerg)\]' "$prefix/logs/error.log" >&2; then
        log "nginx ($workers workers) logged errors (above)"
        rc=1
    fi
    return $rc
}

# (section 2's count of what a 10 MiB store holds needs ngx.shared.DICT:
# it runs in the 1-worker nginx)
if wants 2 || wants 5 || wants 6 || wants 11; then
    section "2+5+6+11 nginx, 1 worker" nginx_run 1
fi
if wants 5 || wants 6 || wants 7 || wants 11; then
    section "5+6+7+11 nginx, 2 workers" nginx_run 2
fi

echo "load at end	$(cut -d' ' -f1-3 /proc/loadavg)" >> "$WORK/machine.tsv"

# ---- report and plots ----

mkdir -p "$RESULTS_DIR"
step luajit report.lua "$WORK" "$RESULTS_DIR" "${FAILED[*]:-}"
# a plot is drawn only when its section ran
have_size=0; have_handoff=0
grep -q '^size	' "$BENCH_OUT" && have_size=1
grep -q '^handoff	' "$BENCH_OUT" && have_handoff=1
(cd "$WORK" && gnuplot -e "outdir='$RESULTS_DIR'; have_size=$have_size; have_handoff=$have_handoff" "$BENCH/plots.gp") \
    || { log "gnuplot failed"; FAILED+=("plots"); }
log "wrote $RESULTS_DIR/RESULTS.md$([ $have_handoff = 1 ] && echo ", $RESULTS_DIR/handoff.png")$([ $have_size = 1 ] && echo ", $RESULTS_DIR/size.png")"

if [ "${#FAILED[@]}" -gt 0 ]; then
    log "failed sections: ${FAILED[*]}"
    exit 1
fi
