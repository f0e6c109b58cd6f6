#!/usr/bin/env bash
# Installs what the tests and the demo need on a fresh Debian machine (idempotent):
# nginx (the real workload the tests reload), util-linux's unshare/nsenter, tini, dumb-init
# and catatonit (real signal-forwarding inits), iproute-free.
set -euo pipefail

need=()
command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || need+=(nginx-light)
command -v unshare >/dev/null 2>&1 || need+=(util-linux)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
# Signal-forwarding inits the signal tests run as PID 1 (tests/signal_handling.rs).
for init in tini dumb-init catatonit; do
    command -v "$init" >/dev/null 2>&1 || need+=("$init")
done
if ((${#need[@]})); then
    echo "install-test-deps: apt-get install ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# Debian starts nginx as a service on install: the tests run their own instances.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet nginx 2>/dev/null; then
    systemctl stop nginx || true
fi
pkill -x nginx 2>/dev/null || true
