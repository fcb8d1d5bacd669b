#!/usr/bin/env bash
# A real Ray cluster of N nodes on this host, each offering one emulation slot, for
# `fedmst sweep --ray ADDRESS`; and its end.
#
#   bash scripts/ray-local.sh start N   # prints progress, then the address to use as its last line
#   bash scripts/ray-local.sh stop      # stops only the nodes this script started, then `fedmst clean`
#
# Each node is a `ray start --block` process (the head first) whose PID is kept in $RAY_LOCAL_DIR
# (default /run/fedmst-ray); a PID counts only while its command line is still that `ray start`
# (not a later process given the PID). It takes its Ray processes down when it gets SIGTERM; stop
# also waits for those processes (its descendants, listed before the TERM, each with its start
# time), KILLs what is left of them after 60 s, and then runs `fedmst clean`: nothing by name.
# While the cluster runs, Ray's address file (/tmp/ray/ray_current_cluster, which a plain ray.init()
# on this host joins) names it; start keeps what the file held before in $RAY_LOCAL_DIR and stop's
# `fedmst clean` puts that back (or removes the file), as it does after a killed cluster.
# Run as root from the repository, after scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${RAY_LOCAL_DIR:-/run/fedmst-ray}
PORT=${RAY_LOCAL_PORT:-6390}
RAY=.venv/bin/ray
SLOT='{"fedmst_emulation": 1}'
ADDRESS_FILE=${RAY_TMPDIR:-${TMPDIR:-/tmp}}/ray/ray_current_cluster  # Ray's temp folder, as Ray finds it
SAVED=ray_current_cluster.before  # in $DIR; fedmst.net.cleanup.SAVED_RAY_ADDRESS

# With RAY_AUTH_MODE unset, Ray decides token authentication per process: `ray start --head` turns it
# on once a token exists (~/.ray/auth_token, which any local ray.init(), Flower's simulation included,
# writes), while `ray start --address` and ray.init(address=...) leave it off, so the head would refuse
# its own nodes and the probe below. RAY_AUTH_MODE is the one setting all of them honour: the user's,
# else disabled, as for Ray's clients given an address; `fedmst sweep --ray` sets the same.
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}

die() { echo "ray-local.sh: $*" >&2; exit 1; }

running() {  # the PIDs of nodes this script started that still run
    local f
    for f in "$DIR"/node*.pid; do
        [[ -e $f ]] || continue
        local pid cmd
        pid=$(<"$f")
        # a node that ends between the listing and this read is simply not running: the redirection's own
        # error goes to the group's stderr, which is silenced (a plain 2>/dev/null would come after it)
        cmd=$({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null || true)
        if [[ $cmd == *"ray start "*"--block"* ]]; then echo "$pid"; fi
    done
}

started_at() {  # a process's start time (clock ticks after boot), empty once it is gone
    cut -d')' -f2 "/proc/$1/stat" 2>/dev/null | awk '{print $20}'
}

tree() {  # "PID:START" of every descendant of the given PIDs
    local p kid
    for p in "$@"; do
        for kid in $(ps -o pid= --ppid "$p"); do
            echo "$kid:$(started_at "$kid")"
            tree "$kid"
        done
    done
}

left() {  # those of the given "PID:START" still running as the same process
    local entry
    for entry in "$@"; do
        [[ $(started_at "${entry%%:*}") == "${entry#*:}" ]] && echo "${entry%%:*}"
    done
    return 0
}

alive_nodes() {  # how many nodes the cluster at 127.0.0.1:$PORT has alive
    .venv/bin/python - "$PORT" <<'EOF' 2>/dev/null || echo 0
import logging, sys
import ray
ray.init(address=f"127.0.0.1:{sys.argv[1]}", logging_level=logging.ERROR, log_to_driver=False, configure_logging=False)
print(sum(1 for n in ray.nodes() if n["Alive"]))
EOF
}

start() {
    local n=${1:-}
    [[ $n =~ ^[1-9][0-9]*$ ]] || die "start N: N is how many nodes, 1 or more"
    [[ $(id -u) -eq 0 ]] || die "run as root (the emulations it runs need it)"
    [[ -x $RAY ]] || die "$RAY not found: run bash scripts/setup.sh (it installs the ray extra)"
    [[ -z $(running) ]] || die "a cluster started here already runs (PIDs $(running | xargs)); stop it first"
    mkdir -p "$DIR"
    rm -f "$DIR"/node*.pid
    # the head points Ray's address file at the cluster: keep what it held for stop to put back, once
    # `fedmst clean` has put back what a killed cluster of ours left there
    .venv/bin/fedmst clean >&2
    rm -f "$DIR/$SAVED"
    [[ ! -e $ADDRESS_FILE ]] || cp "$ADDRESS_FILE" "$DIR/$SAVED"
    local common=(--block --node-ip-address 127.0.0.1 --num-cpus "$(nproc)" --resources "$SLOT" --object-store-memory 200000000
                  --disable-usage-stats)
    echo "starting the head node on port $PORT" >&2
    nohup "$RAY" start --head --port "$PORT" --include-dashboard false "${common[@]}" \
        >"$DIR/node0.log" 2>&1 </dev/null &
    echo $! >"$DIR/node0.pid"
    local i
    for ((i = 1; i < n; i++)); do
        wait_for "$i" 120 "the head node"
        echo "starting node $i" >&2
        nohup "$RAY" start --address "127.0.0.1:$PORT" "${common[@]}" >"$DIR/node$i.log" 2>&1 </dev/null &
        echo $! >"$DIR/node$i.pid"
    done
    wait_for "$n" 120 "all $n nodes"
    echo "ray cluster of $n node(s) up, one emulation slot each; logs in $DIR" >&2
    echo "127.0.0.1:$PORT"
}

wait_for() {  # wait until $1 nodes are alive, at most $2 seconds
    local want=$1 limit=$2 what=$3 t
    for ((t = 0; t < limit; t += 2)); do
        [[ $(alive_nodes) -ge $want ]] && return 0
        [[ $(running | wc -l) -ge $(ls "$DIR"/node*.pid | wc -l) ]] || break
        sleep 2
    done
    stop >/dev/null 2>&1 || true
    die "$what did not come up (see $DIR/node*.log)"
}

stop() {
    local pids procs=()
    pids=$(running | xargs)
    if [[ -n $pids ]]; then
        echo "stopping ray nodes (PIDs $pids)" >&2
        # shellcheck disable=SC2086
        mapfile -t procs < <(tree $pids)
        # shellcheck disable=SC2086
        kill -TERM $pids
        local t
        for ((t = 0; t < 60; t++)); do
            [[ -z $(running) && -z $(left "${procs[@]}") ]] && break
            sleep 1
        done
        pids="$(running | xargs) $(left "${procs[@]}" | xargs)"
        # shellcheck disable=SC2086
        [[ -z ${pids// /} ]] || { echo "killing what is left of them (PIDs $pids)" >&2; kill -KILL $pids 2>/dev/null || true; }
    fi
    rm -f "$DIR"/node*.pid
    # a point interrupted by the stop cleans up after itself; one killed outright leaves a record;
    # and Ray's address file gets back what it held before start
    .venv/bin/fedmst clean >&2
}

case ${1:-} in
    start) start "${2:-}" ;;
    stop) stop ;;
    *) die "usage: ray-local.sh start N | stop" ;;
esac
