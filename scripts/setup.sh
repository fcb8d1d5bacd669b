#!/usr/bin/env bash
# Set up fedmst on a fresh Debian/Ubuntu host, as root: system packages, a virtual environment in
# .venv, and fedmst installed editable with its test extras. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) -ne 0 ]]; then
    echo "setup.sh: run as root (Mininet needs it)" >&2
    exit 1
fi

echo "== system packages (mininet for mnexec, iproute2/tc, ethtool, ping)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    mininet iproute2 ethtool iputils-ping python3 python3-venv python3-dev gcc \
    iptables libnetfilter-queue-dev >/dev/null

echo "== virtual environment in .venv"
[[ -x .venv/bin/python ]] || python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
# torch first and pinned: the CPU build (set TORCH_SPEC to pick another build or index)
.venv/bin/pip install -q ${TORCH_SPEC:-torch==2.13.0}
.venv/bin/pip install -q -e '.[test]'
echo "== ready: .venv/bin/fedmst"
