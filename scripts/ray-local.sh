#!/usr/bin/env bash
# A real Ray cluster of N nodes on this host, each offering one emulation slot, for
# `fedmst sweep --ray ADDRESS`; and its end.
#
#   bash scripts/ray-local.sh start N               # prints progress, then the address to use as its last line
#   bash scripts/ray-local.sh start N --namespaces  # each node in a network namespace of its own: N "hosts"
#   bash scripts/ray-local.sh stop                  # stops only the nodes this script started, then `fedmst clean`
#
# With --namespaces each node stands for a host of its own, for emulations that span hosts: node i runs
# in network namespace fmrayhI with address .(I+1) of $RAY_LOCAL_NET (default 172.30.250.0/24; the head is
# .1), and a bridge fmraybr in this host's namespace, with address .254, is the hosts' network (MTU
# $RAY_LOCAL_MTU, default 9000: VXLAN tunnels add 50 bytes to every emulated frame). Each node offers
# the cores of this host divided among them and keeps its runs' records apart, as a host of its own
# would ($RAY_LOCAL_DIR/stateI for FEDMST_STATE_DIR). Stop removes the namespaces and the bridge too,
# after `fedmst clean` inside each namespace.
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
NET=${RAY_LOCAL_NET:-172.30.250.0/24}  # fedmst.net.cleanup.RAY_LOCAL_NET: the namespaced hosts' network
MTU=${RAY_LOCAL_MTU:-9000}
NETNS=fmrayh     # + index: a namespaced node's network namespace
BRIDGE=fmraybr   # the hosts' network, in this host's namespace

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

alive_nodes() {  # how many nodes the cluster at $1:$PORT has alive
    .venv/bin/python - "$1" "$PORT" <<'EOF' 2>/dev/null || echo 0
import logging, sys
import ray
ray.init(address=f"{sys.argv[1]}:{sys.argv[2]}", logging_level=logging.ERROR, log_to_driver=False, configure_logging=False)
print(sum(1 for n in ray.nodes() if n["Alive"]))
EOF
}

start() {
    local n=${1:-} spaced=${2:-}
    [[ $n =~ ^[1-9][0-9]*$ ]] || die "start N [--namespaces]: N is how many nodes, 1 or more"
    [[ -z $spaced || $spaced == --namespaces ]] || die "start N [--namespaces]: unknown option $spaced"
    [[ $(id -u) -eq 0 ]] || die "run as root (the emulations it runs need it)"
    [[ -x $RAY ]] || die "$RAY not found: run bash scripts/setup.sh (it installs the ray extra)"
    [[ -z $(running) ]] || die "a cluster started here already runs (PIDs $(running | xargs)); stop it first"
    [[ -z $spaced || -z $(namespaces) ]] || die "namespaces of an earlier cluster are left ($(namespaces | xargs)): stop it first"
    [[ -z $spaced ]] || ! ip link show "$BRIDGE" >/dev/null 2>&1 || die "the bridge $BRIDGE of an earlier cluster is left: stop it first"
    mkdir -p "$DIR"
    rm -f "$DIR"/node*.pid
    # the head points Ray's address file at the cluster: keep what it held for stop to put back, once
    # `fedmst clean` has put back what a killed cluster of ours left there
    .venv/bin/fedmst clean >&2
    rm -f "$DIR/$SAVED"
    [[ ! -e $ADDRESS_FILE ]] || cp "$ADDRESS_FILE" "$DIR/$SAVED"
    local cpus ip head=127.0.0.1 i
    cpus=$(nproc)
    if [[ -n $spaced ]]; then
        cpus=$(( cpus / n > 0 ? cpus / n : 1 ))
        trap 'stop >/dev/null 2>&1' ERR  # a namespace or the bridge half made: take it all down again
        hosts_network "$n"
        trap - ERR
        head=$(address 0)
    fi
    local common=(--block --num-cpus "$cpus" --resources "$SLOT" --object-store-memory 200000000 --disable-usage-stats)
    echo "starting the head node on port $PORT${spaced:+ in namespace ${NETNS}0 ($head)}" >&2
    in_host 0 "$spaced" nohup "$RAY" start --head --port "$PORT" --node-ip-address "$head" --include-dashboard false \
        "${common[@]}" >"$DIR/node0.log" 2>&1 </dev/null &
    echo $! >"$DIR/node0.pid"
    for ((i = 1; i < n; i++)); do
        wait_for "$i" 120 "the head node" "$head"
        ip=$head
        [[ -z $spaced ]] || ip=$(address "$i")
        echo "starting node $i${spaced:+ in namespace $NETNS$i ($ip)}" >&2
        in_host "$i" "$spaced" nohup "$RAY" start --address "$head:$PORT" --node-ip-address "$ip" "${common[@]}" \
            >"$DIR/node$i.log" 2>&1 </dev/null &
        echo $! >"$DIR/node$i.pid"
    done
    wait_for "$n" 120 "all $n nodes" "$head"
    echo "ray cluster of $n node(s) up${spaced:+, each in a namespace of its own}, one emulation slot each; logs in $DIR" >&2
    echo "$head:$PORT"
}

in_host() {  # become a command in node $1's namespace where $2 says the nodes have their own, else here (run it in &)
    local i=$1 spaced=$2
    shift 2
    if [[ -n $spaced ]]; then exec ip netns exec "$NETNS$i" env FEDMST_STATE_DIR="$DIR/state$i" "$@"; else exec "$@"; fi
}

address() {  # node $1's address on the hosts' network: .($1 + 1) of $NET
    .venv/bin/python -c 'import ipaddress, sys; print(ipaddress.ip_network(sys.argv[1])[int(sys.argv[2]) + 1])' "$NET" "$1"
}

hosts_network() {  # $1 namespaces joined by a bridge in this host's namespace, which has address .254
    local n=$1 i prefix=${NET#*/} bridge
    bridge=$(.venv/bin/python -c 'import ipaddress, sys; print(ipaddress.ip_network(sys.argv[1])[254])' "$NET")
    echo "making $n namespaces ${NETNS}0..$NETNS$((n - 1)) on a bridge $BRIDGE ($NET, MTU $MTU)" >&2
    ip link add "$BRIDGE" mtu "$MTU" type bridge
    ip addr add "$bridge/$prefix" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for ((i = 0; i < n; i++)); do
        ip netns add "$NETNS$i"
        ip link add "${BRIDGE}$i" mtu "$MTU" type veth peer name mgmt0 mtu "$MTU" netns "$NETNS$i"
        ip link set "${BRIDGE}$i" master "$BRIDGE" up
        ip -n "$NETNS$i" addr add "$(address "$i")/$prefix" dev mgmt0
        ip -n "$NETNS$i" link set mgmt0 up
        ip -n "$NETNS$i" link set lo up
    done
}

namespaces() {  # the namespaces of a cluster of this script
    ip netns list | awk '{print $1}' | grep -E "^$NETNS[0-9]+$" || true
}

wait_for() {  # wait until $1 nodes are alive, at most $2 seconds, asking the head at $4
    local want=$1 limit=$2 what=$3 head=$4 t
    for ((t = 0; t < limit; t += 2)); do
        [[ $(alive_nodes "$head") -ge $want ]] && return 0
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
    # a point interrupted by the stop cleans up after itself; one killed outright leaves a record (in
    # the namespace of its host, where its interfaces are); and Ray's address file gets back what it held
    # before start
    local ns i said left
    for ns in $(namespaces); do
        i=${ns#"$NETNS"}
        said=$(ip netns exec "$ns" env FEDMST_STATE_DIR="$DIR/state$i" .venv/bin/fedmst clean 2>&1) || true
        echo "$said" >&2
        left=$(ip netns pids "$ns" | xargs)
        # not ours to end (the nodes and everything under them are gone by now): say so, and the namespace
        # lives on until they end
        [[ -z $left ]] || echo "ray-local.sh: processes still in $ns (PIDs $left), not started by this script: left alone" >&2
        ip netns del "$ns" || true
        # a run still live there keeps its record, for a later `fedmst clean` with FEDMST_STATE_DIR=$DIR/state$i
        [[ $said == *": live ("* ]] || rm -rf "${DIR:?}/state$i"
    done
    ! ip link show "$BRIDGE" >/dev/null 2>&1 || ip link del "$BRIDGE"
    .venv/bin/fedmst clean >&2
}

case ${1:-} in
    start) start "${2:-}" "${3:-}" ;;
    stop) stop ;;
    *) die "usage: ray-local.sh start N [--namespaces] | stop" ;;
esac
