#!/usr/bin/env bash
# Installs what the hosts bed (tests/hosts/bed.py) runs: sshd, SLURM 22.05 (slurmctld, slurmd,
# the client commands) and munge, from Debian's archive. Idempotent and quiet: a no-op when all
# are installed. The distribution's own services are never started: the bed runs its own
# daemons with its own config files, inside its own network namespaces.
set -euo pipefail

PACKAGES=(openssh-server slurmd slurmctld slurm-client munge)
# systemd units of those packages, kept from starting at boot on a machine that boots systemd
UNITS=(ssh.service ssh.socket munge.service slurmd.service slurmctld.service)

missing=()
for package in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "${package}" 2>/dev/null || true)
  [ "${status}" = "install ok installed" ] || missing+=("${package}")
done
[ "${#missing[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "install.sh: run as root to install: ${missing[*]}" >&2
  exit 1
fi

# policy-rc.d answering 101 tells invoke-rc.d / deb-systemd-invoke not to start anything;
# ours only when none is there already (a container often has its own), and removed after.
policy=/usr/sbin/policy-rc.d
if [ ! -e "${policy}" ]; then
  printf '#!/bin/sh\nexit 101\n' >"${policy}"
  chmod 0755 "${policy}"
  trap 'rm -f "${policy}"' EXIT
fi

export DEBIAN_FRONTEND=noninteractive
install() {
  apt-get install -y -qq --no-install-recommends -o Dpkg::Use-Pty=0 "${missing[@]}" >/dev/null
}
# the package lists may be missing or stale (a fresh container): refresh once and retry
if ! install 2>/dev/null; then
  apt-get update -qq >/dev/null
  install
fi

if command -v systemctl >/dev/null 2>&1; then
  for unit in "${UNITS[@]}"; do
    systemctl disable --quiet "${unit}" >/dev/null 2>&1 || true
    # stop only where systemd runs (a booted machine); a container has nothing to stop
    if [ -d /run/systemd/system ]; then
      systemctl stop "${unit}" >/dev/null 2>&1 || true
    fi
  done
fi
