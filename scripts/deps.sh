#!/usr/bin/env bash
# Installs the Debian packages lua-resty-shmlock builds, tests, benchmarks
# and demonstrates with.  Idempotent: when everything is installed it only
# checks, and `apt-get update` runs only when something is missing.  Never
# prompts and never reads stdin, so it runs unattended in CI.
#
# It installs what is missing and touches nothing else on the machine.
# Debian's nginx and redis-server packages start their system services when
# they are installed, and enable them at boot (nginx on port 80, redis on
# 6379).  The tests start their own nginx and redis on free loopback ports
# and never use those services, so for a package this script installs:
#   - the service is kept from starting during the install (a policy-rc.d
#     answering 101, the Debian way; an existing policy-rc.d is left alone,
#     and then a service it let start is stopped after the install);
#   - the service is disabled at boot, so that it does not appear at the
#     next reboot either.
# A service whose package was installed before is left exactly as it was:
# running or stopped, enabled or disabled.

set -euo pipefail

# luajit2 is OpenResty's LuaJIT branch (the one nginx's lua module is built
# against).  Never add Debian's `luajit` or `libluajit-5.1-dev`: they
# conflict with luajit2 and libluajit2-5.1-dev.
# lua5.1 … lua5.4 and their headers: the C module (src/lua/) is built for each
# Lua ABI, and `make test` runs the specs under every one of them.
PACKAGES=(
    build-essential
    luajit2
    libluajit2-5.1-dev
    lua5.1
    lua5.2
    lua5.3
    lua5.4
    liblua5.1-0-dev
    liblua5.2-dev
    liblua5.3-dev
    liblua5.4-dev
    lua-busted
    luarocks
    nginx
    libnginx-mod-http-lua
    lua-resty-core
    lua-resty-lrucache
    redis-server
    lua-redis
    lua-nginx-redis
    lua-nginx-redis-connector
    lua-socket
    lua-posix
    lua-check
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

# The system services of packages this run installs (service, the package
# that ships it), and which of them were not installed before the run.
SERVICES=(nginx:nginx-common redis-server:redis-server)
NEW_SERVICES=()

note_new_services() {
    local entry
    for entry in "${SERVICES[@]}"; do
        installed "${entry#*:}" || NEW_SERVICES+=("$entry")
    done
}

# Stops (if it runs) and disables at boot a service this run installed.
quiet_new_service() {
    local svc=$1

    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        if systemctl is-active --quiet "$svc" 2>/dev/null; then
            log "stopping the $svc service it installed"
            as_root systemctl stop "$svc" || true
        fi
        if systemctl is-enabled --quiet "$svc" 2>/dev/null; then
            log "disabling at boot the $svc service it installed"
            as_root systemctl disable "$svc" >/dev/null 2>&1 || true
        fi
        return 0
    fi

    # sysvinit (containers, CI)
    if [ -x "/etc/init.d/$svc" ] \
        && "/etc/init.d/$svc" status >/dev/null 2>&1 </dev/null
    then
        log "stopping the $svc service it installed"
        as_root "/etc/init.d/$svc" stop >/dev/null 2>&1 </dev/null || true
    fi
    if ls /etc/rc[2345].d/S*"$svc" >/dev/null 2>&1 \
        && command -v update-rc.d >/dev/null 2>&1
    then
        log "disabling at boot the $svc service it installed"
        as_root update-rc.d "$svc" disable >/dev/null 2>&1 || true
    fi
}

note_new_services
install_missing
for entry in ${NEW_SERVICES[@]+"${NEW_SERVICES[@]}"}; do
    if installed "${entry#*:}"; then
        quiet_new_service "${entry%%:*}"
    fi
done
