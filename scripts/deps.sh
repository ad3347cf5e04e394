#!/usr/bin/env bash
# Installs the Debian packages lua-resty-shmlock builds, tests, benchmarks
# and demonstrates with.  Idempotent: when everything is installed it only
# checks, and `apt-get update` runs only when something is missing.  Never
# prompts and never reads stdin, so it runs unattended in CI.
#
# Debian's nginx and redis-server packages start system services when they
# are installed.  Our tests start their own nginx and redis on free
# loopback ports, so we keep the packaged services from starting during the
# install, and make sure the packaged nginx is neither running nor enabled
# on port 80 afterwards.

set -euo pipefail

# luajit2 is OpenResty's LuaJIT branch (the one nginx's lua module is built
# against).  Never add Debian's `luajit` or `libluajit-5.1-dev`: they
# conflict with luajit2 and libluajit2-5.1-dev.
PACKAGES=(
    build-essential
    luajit2
    libluajit2-5.1-dev
    lua-busted
    luarocks
    nginx
    libnginx-mod-http-lua
    lua-resty-core
    lua-resty-lrucache
    redis-server
    lua-redis
    lua-socket
    lua-posix
    gnuplot-nox
    valgrind
    wrk
    perl
)

log() {
    printf 'deps: %s\n' "$*" >&2
}

installed() {
    [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        log "need root to run: $*"
        exit 1
    fi
}

# Keep services from starting while packages are installed (the Debian
# way: policy-rc.d answering 101).  An existing policy is left alone.
POLICY=/usr/sbin/policy-rc.d
OUR_POLICY=

block_service_starts() {
    if [ ! -e "$POLICY" ]; then
        as_root sh -c "printf '#!/bin/sh\nexit 101\n' > $POLICY && chmod 0755 $POLICY"
        OUR_POLICY=1
    fi
}

unblock_service_starts() {
    if [ -n "$OUR_POLICY" ]; then
        as_root rm -f "$POLICY"
        OUR_POLICY=
    fi
}

install_missing() {
    local missing=() p

    for p in "${PACKAGES[@]}"; do
        installed "$p" || missing+=("$p")
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        log "all ${#PACKAGES[@]} packages present"
        return 0
    fi

    log "installing: ${missing[*]}"
    block_service_starts
    trap unblock_service_starts EXIT

    export DEBIAN_FRONTEND=noninteractive
    as_root env DEBIAN_FRONTEND=noninteractive \
        apt-get update -q </dev/null
    as_root env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends \
        -o Dpkg::Options::=--force-confdef \
        -o Dpkg::Options::=--force-confold \
        "${missing[@]}" </dev/null

    unblock_service_starts
    trap - EXIT

    for p in "${missing[@]}"; do
        if ! installed "$p"; then
            log "package $p did not install"
            exit 1
        fi
    done
}

# The packaged nginx service listens on port 80 with Debian's config; we
# never use it.  Stop it if it runs and keep it from starting at boot.
quiet_system_nginx() {
    local pid

    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        if systemctl is-active --quiet nginx 2>/dev/null; then
            log "stopping the system nginx service"
            as_root systemctl stop nginx || true
        fi
        if systemctl is-enabled --quiet nginx 2>/dev/null; then
            log "disabling the system nginx service"
            as_root systemctl disable nginx >/dev/null 2>&1 || true
        fi
        return 0
    fi

    # sysvinit (containers, CI): the pid file tells whether it runs
    if [ -r /run/nginx.pid ]; then
        pid=$(cat /run/nginx.pid 2>/dev/null || true)
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            log "stopping the system nginx service (pid $pid)"
            as_root /usr/sbin/nginx -s quit </dev/null 2>/dev/null \
                || as_root kill "$pid" || true
        fi
    fi
    if ls /etc/rc[2345].d/S*nginx >/dev/null 2>&1 \
        && command -v update-rc.d >/dev/null 2>&1
    then
        log "disabling the system nginx service at boot"
        as_root update-rc.d nginx disable >/dev/null 2>&1 || true
    fi
}

install_missing
quiet_system_nginx
