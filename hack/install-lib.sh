#!/usr/bin/env bash
# Sourced by hack/install-test-deps.sh and hack/install-manifest-tools.sh: installs
# Debian packages the scripts need, and nothing else on the host.
#
#   apt_install PKG...   apt-get update, then apt-get install PKG... without
#                        starting any service the packages ship (see below). As
#                        root on a Debian-like machine; otherwise prints the exact
#                        command to run and fails.

# apt_install PKG...
apt_install() {
  local cmd="apt-get update && apt-get install -y --no-install-recommends $*"
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "$(basename "$0"): needs $* (no apt-get here: install them with your package manager)" >&2
    return 1
  fi
  if [[ $(id -u) -ne 0 ]]; then
    echo "$(basename "$0"): needs $*; run: sudo sh -c '$cmd'" >&2
    return 1
  fi
  echo "$(basename "$0"): $cmd" >&2
  # Debian's maintainer scripts start a package's service on install (nginx would take
  # port 80). They ask invoke-rc.d / deb-systemd-invoke, which ask /usr/sbin/policy-rc.d
  # first: exit 101 means "action forbidden" (init-system-helpers, README.policy-rc.d).
  # Install one for the length of this apt-get only, and only if the machine has none
  # (an existing policy is the administrator's and stays as it is).
  local policy=/usr/sbin/policy-rc.d ours=false rc=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\n# Temporary, from %s: start no service during this install.\nexit 101\n' "$0" >"$policy"
    chmod 0755 "$policy"
    ours=true
  fi
  DEBIAN_FRONTEND=noninteractive apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null \
    || rc=$?
  if $ours; then rm -f "$policy"; fi
  return "$rc"
}
