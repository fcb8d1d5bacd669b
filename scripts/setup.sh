#!/usr/bin/env bash
# Set up fedmst on a fresh Debian/Ubuntu host, as root: system packages, a virtual environment in
# .venv, and fedmst installed editable. Safe to run again.
#
#   scripts/setup.sh         what runs, compares and sweeps need (the README's main job)
#   scripts/setup.sh --all   also what optional features and the tests need: tcpdump (--pcap), clang,
#                            libbpf-dev and bpftool (congestion controls and ECN marking in BPF), tmux
#                            (the tests of the live view), and fedmst's extras test, ray and flower
#   scripts/setup.sh --vision  also torchvision's models and datasets (--model torchvision:NAME, --dataset
#                            torchvision:NAME:ROOT) and local models on a GPU (--device cuda): PyPI's torch,
#                            CUDA's libraries included (about 5.5 GB, against 1.8 GB with the CPU build)
#   --venv DIR               set up the virtual environment DIR (relative to this checkout) instead of .venv
#                            (the tests keep one for --vision beside the CPU one); only .venv's fedmst is
#                            linked onto the PATH
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) -ne 0 ]]; then
    echo "setup.sh: run as root (Mininet needs it)" >&2
    exit 1
fi
all=no vision=no venv=.venv
while [[ $# -gt 0 ]]; do
    case $1 in
        --all) all=yes ;;
        --vision) vision=yes ;;
        --venv)
            [[ -n ${2:-} && ${2:-} != -* ]] || { echo "setup.sh: --venv needs a folder" >&2; exit 1; }
            venv=$2; shift ;;
        *) echo "setup.sh: unknown argument: $1 (the options are --all, --vision and --venv DIR)" >&2; exit 1 ;;
    esac
    shift
done
# "== what" lines; each step's time is printed when the next one starts, and at the end.
step() {
    [[ -n ${step_start:-} ]] && echo "   ($((SECONDS - step_start)) s)"
    step_start=$SECONDS
    [[ $# -eq 0 ]] || echo "== $*"
}

# mininet for mnexec, net-tools for Mininet's ifconfig, procps for sysctl, iptables for the delay
# lines' NFQUEUE rules, gcc, python3-dev and libnetfilter-queue-dev to build the compiled delay line
# and NetfilterQueue (pip builds it from source)
packages=(mininet net-tools iproute2 ethtool procps iputils-ping python3-dev gcc iptables libnetfilter-queue-dev)
wanted=()
if [[ $all == yes ]]; then
    packages+=(tcpdump clang libbpf-dev bpftool tmux)
    wanted+=(test ray flower)
fi
[[ $vision == yes ]] && wanted+=(vision)
extras=$(IFS=,; echo "${wanted[*]}")  # fedmst's extras, as pip takes them: test,ray,flower
step "python3-venv, then in the background: ${packages[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends python3 python3-venv >/dev/null
# the other packages while torch installs, which needs none of them (each takes a third of the time)
apt_log=$(mktemp)
apt-get install -y -qq --no-install-recommends "${packages[@]}" >"$apt_log" 2>&1 &
apt_pid=$!
# a step that fails meanwhile waits for apt-get (stopping it could leave dpkg half done), so nothing
# of this script runs on after it; the log goes in any case
trap 'wait "$apt_pid" 2>/dev/null; rm -f "$apt_log"' EXIT

step "virtual environment in $venv"
[[ -x $venv/bin/python ]] || python3 -m venv "$venv"
"$venv"/bin/pip install -q --upgrade pip  # Debian 12's pip 23.0 takes 10 s longer for the dependencies alone
# torch first and pinned. On a host without an NVIDIA GPU, the CPU build from PyTorch's own index when
# that answers: PyPI's torch for Linux brings CUDA's libraries, gigabytes more. TORCH_SPEC chooses
# another build or index. --vision leaves torch to the vision extra's torchvision, which pins the PyPI
# build it was made for (it does not import beside the CPU build).
# --no-compile: pip would byte-compile every module of every package, half of torch's install time;
# the step after the install compiles those that runs import
if [[ $vision == no ]]; then
    torch_spec=${TORCH_SPEC:-torch==2.13.0}
    cpu_index=https://download.pytorch.org/whl/cpu
    if [[ -z ${TORCH_SPEC:-} && ! -e /proc/driver/nvidia ]] && "$venv"/bin/python -c \
            "import urllib.request as r; r.urlopen('$cpu_index/torch/', timeout=5)" 2>/dev/null; then
        torch_spec="$torch_spec --index-url $cpu_index"
    fi
    step "torch ($torch_spec)"
    "$venv"/bin/pip install -q --no-compile $torch_spec
fi
step "waiting for the system packages"
if ! wait "$apt_pid"; then
    cat "$apt_log" >&2
    echo "setup.sh: apt-get install ${packages[*]} failed" >&2
    exit 1
fi
step "fedmst${extras:+[$extras]} and its dependencies"
"$venv"/bin/pip install -q --no-compile -e ".${extras:+[$extras]}"
# Written as pip would write them, whatever PYTHONDONTWRITEBYTECODE says: without them every process
# of every run would compile its modules again.
if [[ $all == yes ]]; then
    step "byte-compiling every installed module (the tests import from all of them)"
    # as under pip, a module that does not compile is left (torch ships some in a newer Python's syntax)
    env -u PYTHONDONTWRITEBYTECODE "$venv"/bin/python -m compileall -q -j 0 "$venv"/lib/python3*/site-packages \
        >/dev/null || true
else
    step "byte-compiling the modules a run imports (fedmst's, and what they import)"
    env -u PYTHONDONTWRITEBYTECODE "$venv"/bin/python - <<'END'
import importlib
import pkgutil

import fedmst

for module in pkgutil.walk_packages(fedmst.__path__, "fedmst."):
    if not module.name.endswith("__main__"):
        importlib.import_module(module.name)
importlib.import_module("mininet.net")  # imported when a network is built, not before
END
fi
step "the compiled delay line (fedmst/net/delayline.c, against libnetfilter_queue)"
"$venv"/bin/python - <<'END'
from fedmst.net.delayline import BuildError, build
try:
    print(build())
except BuildError as exc:  # runs still work, their delay lines in Python (each run says so)
    print(f"setup.sh: warning: the delay lines will run in Python: {exc}")
END

# `fedmst` on the PATH, as every command in README.md and docs/ is written: a link to this
# checkout's .venv/bin/fedmst (a link of another checkout is moved here; a file that is no link is left)
link=/usr/local/bin/fedmst
if [[ $venv != .venv ]]; then
    step
    echo "== ready in $SECONDS s: fedmst in $venv/bin/fedmst (not linked: that is .venv's)"
    exit 0
fi
if [[ -e $link && ! -L $link ]]; then
    echo "setup.sh: $link exists and is not a link, so it was left alone: run .venv/bin/fedmst, or" \
         "'source .venv/bin/activate' first" >&2
else
    ln -sfn "$PWD/.venv/bin/fedmst" "$link"
fi
step
echo "== ready in $SECONDS s: fedmst ($link -> $PWD/.venv/bin/fedmst)"
