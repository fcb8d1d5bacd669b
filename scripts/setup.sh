#!/usr/bin/env bash
# Set up fedmst on a fresh Debian/Ubuntu host, as root: system packages, a virtual environment in
# .venv, and fedmst installed editable with its test extras. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) -ne 0 ]]; then
    echo "setup.sh: run as root (Mininet needs it)" >&2
    exit 1
fi

echo "== system packages (mininet for mnexec, net-tools for Mininet's ifconfig, iproute2/tc, ethtool, sysctl, ping, tcpdump; tmux for the tests of the live view; clang, libbpf-dev and bpftool for the congestion controls and ECN marking in BPF; gcc and libnetfilter-queue-dev for the delay line)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# net-tools and procps by name: Mininet exits without ifconfig, fedmst configures hosts with sysctl
apt-get install -y -qq --no-install-recommends \
    mininet net-tools iproute2 ethtool procps iputils-ping python3 python3-venv python3-dev gcc \
    iptables libnetfilter-queue-dev tcpdump tmux clang libbpf-dev bpftool >/dev/null

echo "== virtual environment in .venv"
[[ -x .venv/bin/python ]] || python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
# torch first and pinned: the CPU build (set TORCH_SPEC to pick another build or index)
.venv/bin/pip install -q ${TORCH_SPEC:-torch==2.13.0}
.venv/bin/pip install -q -e '.[test,ray,flower]'
echo "== the compiled delay line (fedmst/net/delayline.c, against libnetfilter_queue)"
.venv/bin/python - <<'END'
from fedmst.net.delayline import BuildError, build
try:
    print(build())
except BuildError as exc:  # runs still work, their delay lines in Python (each run says so)
    print(f"setup.sh: warning: the delay lines will run in Python: {exc}")
END

# `fedmst` on the PATH, as every command in README.md and docs/ is written: a link to this
# checkout's .venv/bin/fedmst (a link of another checkout is moved here; a file that is no link is left)
link=/usr/local/bin/fedmst
if [[ -e $link && ! -L $link ]]; then
    echo "setup.sh: $link exists and is not a link, so it was left alone: run .venv/bin/fedmst, or" \
         "'source .venv/bin/activate' first" >&2
else
    ln -sfn "$PWD/.venv/bin/fedmst" "$link"
fi
echo "== ready: fedmst ($link -> $PWD/.venv/bin/fedmst)"
