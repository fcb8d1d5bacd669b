#!/usr/bin/env bash
# Build fedmst's Docker worker image on a host that reaches no image registry, as root:
# Debian's docker.io and debootstrap, a dockerd of our own if none answers, a Debian bookworm base
# image made with debootstrap, every Python dependency as a wheel in build/wheels (from .venv, which
# scripts/setup.sh makes), then `docker build --network none`. Safe to run again; a second run only
# re-checks and rebuilds from the cache.
#
#   scripts/setup-docker.sh          set up and build (image: $FEDMST_IMAGE, default fedmst-worker)
#   scripts/setup-docker.sh --stop   stop the dockerd that this script started, and only that one
#
# FEDMST_BASE_IMAGE=NAME builds on an existing image instead of making one with debootstrap.
# TORCH_SPEC picks the torch build for the wheelhouse (default: the version scripts/setup.sh put in .venv).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${FEDMST_IMAGE:-fedmst-worker}
BASE_IMAGE=${FEDMST_BASE_IMAGE:-fedmst-base:bookworm}
PIDFILE=/run/fedmst-dockerd.pid
LOG=/var/log/fedmst-dockerd.log
WHEELS=build/wheels

die() { echo "setup-docker.sh: $*" >&2; exit 1; }
# "== what" lines; each step's time is printed when the next one starts.
step() {
    [[ -n ${step_start:-} ]] && echo "   ($((SECONDS - step_start)) s)"
    step_start=$SECONDS
    echo "== $*"
}
[[ $(id -u) -eq 0 ]] || die "run as root (dockerd and debootstrap need it)"

# The dockerd started below, if it is still running (its pid file names a live dockerd).
our_dockerd() {
    local pid
    [[ -f $PIDFILE ]] || return 1
    pid=$(<"$PIDFILE")
    [[ $pid =~ ^[0-9]+$ && $(cat "/proc/$pid/comm" 2>/dev/null) == dockerd ]] || return 1
    echo "$pid"
}

if [[ ${1:-} == --stop ]]; then
    if pid=$(our_dockerd); then
        echo "== stopping dockerd (pid $pid)"
        kill -TERM "$pid"
        for _ in $(seq 60); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.5
        done
        kill -0 "$pid" 2>/dev/null && die "dockerd (pid $pid) is still running 30 s after SIGTERM; see $LOG"
    else
        echo "== no dockerd started by this script is running"
    fi
    rm -f "$PIDFILE"
    exit 0
fi
[[ $# -eq 0 ]] || die "unknown argument: $1 (the only option is --stop)"

step "system packages (docker.io, debootstrap)"
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends docker.io debootstrap >/dev/null \
        2> >(grep -v 'delaying package configuration, since apt-utils is not installed' >&2)
fi

step "docker daemon"
if docker info >/dev/null 2>&1; then
    echo "   already running"
else
    # No iptables rules, no docker0 bridge, no ip_forward change: the host's network stays exactly
    # as it was (Mininet runs here too). Containers and builds therefore use --network none.
    setsid dockerd --pidfile "$PIDFILE" --iptables=false --ip-forward=false --bridge=none \
        >>"$LOG" 2>&1 </dev/null &
    started=$!
    for _ in $(seq 120); do
        docker info >/dev/null 2>&1 && break
        kill -0 "$started" 2>/dev/null || { tail -n 20 "$LOG" >&2; die "dockerd exited; log: $LOG"; }
        sleep 0.5
    done
    docker info >/dev/null 2>&1 || { tail -n 20 "$LOG" >&2; die "dockerd did not answer within 60 s; log: $LOG"; }
    echo "   started dockerd (pid $started, log $LOG, stop with: $0 --stop)"
fi

step "base image $BASE_IMAGE"
if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    echo "   present"
elif [[ -n ${FEDMST_BASE_IMAGE:-} ]]; then
    die "FEDMST_BASE_IMAGE=$BASE_IMAGE is not an image here (see: docker images)"
else
    echo "   debootstrap bookworm (minbase, python3, python3-venv)"
    ROOTFS=$(mktemp -d /var/tmp/fedmst-rootfs.XXXXXX)
    # --one-file-system: should debootstrap die with /proc or /sys still mounted in the rootfs,
    # the clean-up must not descend into them.
    trap 'rm -rf --one-file-system "$ROOTFS"' EXIT
    debootstrap --variant=minbase --include=python3,python3-venv bookworm "$ROOTFS" \
        >"$ROOTFS.log" 2>&1 || { tail -n 20 "$ROOTFS.log" >&2; die "debootstrap failed; log: $ROOTFS.log"; }
    rm -f "$ROOTFS.log"
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
    tar -C "$ROOTFS" -c . | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
    rm -rf --one-file-system "$ROOTFS"
    trap - EXIT
fi

step "wheelhouse $WHEELS (from .venv's pip)"
[[ -x .venv/bin/pip ]] || die ".venv is missing: run scripts/setup.sh first"
# fedmst's own dependencies and its build backend (the image builds fedmst itself from source).
mapfile -t build_requires < <(.venv/bin/python -c \
    'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))')
# (pip's warnings about this machine's local index directories are filtered out: noise.)
# the workers run the torch the host's .venv runs (its version, without a local label such as +cpu)
torch_spec=${TORCH_SPEC:-torch==$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("torch").split("+")[0])')}
.venv/bin/pip wheel -q --wheel-dir "$WHEELS" . "$torch_spec" "${build_requires[@]}" \
    2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
rm -f "$WHEELS"/fedmst-*.whl
# The image is Python 3.11 on glibc: every wheel must be pure Python, cp311 or stable-ABI (abi3) for
# x86_64 Linux, and torch exactly one CPU build (no CUDA wheels).
shopt -s nullglob
wheels=("$WHEELS"/*.whl) torches=("$WHEELS"/torch-*.whl) cuda=("$WHEELS"/nvidia*.whl)
shopt -u nullglob
bad=$(printf '%s\n' "${wheels[@]##*/}" |
    grep -Ev -- '-(py3|py2\.py3)-none-(any|.*linux.*x86_64)\.whl$|-(cp311-cp311|cp3([2-9]|10|11)-abi3)-.*linux.*x86_64\.whl$' || true)
[[ -z $bad ]] || die "wheels the image cannot install: $bad"
torch=${torches[*]##*/}
[[ ${#torches[@]} -eq 1 && $torch == torch-*+cpu-cp311-* ]] || die "want one CPU torch wheel for cp311, got: ${torch:-none}"
[[ ${#cuda[@]} -eq 0 ]] || die "CUDA wheels in $WHEELS: torch is not the CPU build"
echo "   ${#wheels[@]} wheels, $(du -sh "$WHEELS" | cut -f1), $torch"

step "image $IMAGE (docker build --network none on $BASE_IMAGE)"
mkdir -p build
# The classic builder unless told otherwise: Debian's dockerd 20.10 has it, and a docker 23+ client
# without the buildx plugin (none is packaged for bookworm) cannot use BuildKit at all. Its cache
# of the "deps" stage is an untagged image: `docker image prune` drops it and the next build
# reinstalls the dependencies (slower, still offline). The Dockerfile also builds under BuildKit.
replaced=$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)
if ! DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0} docker build --network none --build-arg BASE="$BASE_IMAGE" -t "$IMAGE" . \
    >build/docker-build.log 2>&1; then
    tail -n 30 build/docker-build.log >&2
    die "docker build failed; log: build/docker-build.log"
fi
# the image this build replaced would stay behind untagged, 1.4 GB a rebuild (its layers that the
# new image shares stay)
if [[ -n $replaced && $replaced != "$(docker image inspect -f '{{.Id}}' "$IMAGE")" ]]; then
    docker image rm "$replaced" >/dev/null 2>&1 || echo "   the image this replaced ($replaced) is in use: left"
fi
docker run --rm --network none --cap-drop ALL --security-opt no-new-privileges "$IMAGE" \
    python -c 'import fedmst.workers.agent, torch; print("   torch", torch.__version__, "imports in the image")'
step "ready: $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.2f GB", $1/1e9}'), $SECONDS s in all)"
