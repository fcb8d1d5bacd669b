"""The emulated network: one Mininet host per topology node, one shaped link per physical link.

Every host both forwards packets (a router) and runs that node's agent. Each overlay transfer
of a Plan gets its own pair of /32 endpoint addresses, and routes for exactly that pair are
installed hop by hop along the transfer's planned path (and back along it for ACKs), so every
transfer follows its physical path whatever else shares the nodes. The endpoint routes carry a
``src`` hint so that unbound sockets (gloo's connecting side) pick the flow's own address.

Segmentation offloads are off on every interface, so the interface byte counters count real
frames and match :mod:`fedmst.core.wire`'s arithmetic. This is the only module that imports mininet.
:class:`Emulation` is a context manager that always tears everything down. A node may be given
the network namespace of a process started elsewhere (a worker container); what runs there is
the worker backend's business, not this module's.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
import time
import shutil
import signal
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterable, Iterator, Mapping, Protocol, Sequence

import networkx as nx

from fedmst.net import queues
from fedmst.net.cleanup import RUN_ID_LETTERS, RunState, host_name, probe_name
from fedmst.net.forkserver import ForkServer
from fedmst.errors import EmulationError
from fedmst.core.plan import LinkDir
from fedmst.core.traffic import BackgroundFlow, flow_path
from fedmst.core.topology import node_order
from fedmst.core.wire import DEFAULT_MTU

log = logging.getLogger(__name__)

IFNAMSIZ = 15
"""The longest interface name Linux takes."""
LINK_NET = ipaddress.ip_network("10.0.0.0/10")
FLOW_NET = ipaddress.ip_network("10.128.0.0/9")
BACKGROUND_NET = ipaddress.ip_network("10.64.0.0/10")
"""Background flows' endpoints: one iptables rule per receiving interface counts what they put on a link."""
BACKGROUND_PORT = 5201
_HARMLESS_TC = ("quantum of class", "Consider r2q change")
_END = "@@fedmst-end@@"
_BACKGROUND_RULE = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+--\s+(\S+)\s+\*\s+" + re.escape(str(BACKGROUND_NET)),
                              re.MULTILINE)
"""A counting rule (no target) of ``iptables -t raw -L PREROUTING -v -x -n``: packets, bytes, in-interface."""
_ETH_HEADER = 14
_HTB_DROPS = re.compile(r"qdisc htb \S+ dev (\S+) root.*?\n Sent \d+ bytes \d+ pkt \(dropped (\d+)")
_OFFLOADS = ("tcp-segmentation-offload", "generic-segmentation-offload", "generic-receive-offload")
"""What ``ethtool -K IF tso off gso off gro off`` switches off, as ``ethtool -k`` names it."""
_TOOLS = [
    ("ip", "iproute2"), ("tc", "iproute2"), ("mnexec", "mininet"), ("ethtool", "ethtool"),
    # Mininet's own: Node.setup exits unless `which` finds mnexec and ifconfig; every host is a
    # bash whose set-up runs stty; Mininet() counts cores with grep
    ("ifconfig", "net-tools"), ("which", "debianutils"), ("bash", "bash"), ("stty", "coreutils"),
    ("grep", "grep"),
    # fedmst's set-up of every host
    ("sysctl", "procps"),
]
"""Every external program an emulation runs, with the Debian package that installs it."""


@dataclass(frozen=True)
class Flow:
    """One transfer's route: the physical path and the two endpoint addresses it owns."""

    key: str
    path: tuple[str, ...]
    src_addr: str
    dst_addr: str


class Process(Protocol):
    """What the emulation needs of a process it started: a :class:`subprocess.Popen` or a
    :class:`fedmst.net.forkserver.Forked`."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...
    def send_signal(self, signum: int) -> None: ...


@dataclass(frozen=True)
class Capabilities:
    """What the kernel can emulate, found by trying, not by reading version numbers."""

    netem: bool


_MECHANISM = {"netem": "netem", "userspace": "nfqueue-delay-line", "off": "none"}


def resolve_delay_mode(requested: str, capabilities: Capabilities) -> str:
    """``auto`` becomes netem where the kernel has it and the userspace delay line elsewhere
    (``requested`` is one of ``--delay-mode``'s choices, checked by :mod:`fedmst.run.config`).

    >>> resolve_delay_mode("auto", Capabilities(netem=False))
    'userspace'
    """
    if requested == "auto":
        return "netem" if capabilities.netem else "userspace"
    if requested == "netem" and not capabilities.netem:
        raise EmulationError("--delay-mode netem: this kernel has no sch_netem; use auto or userspace")
    return requested


def require_tools(delay_mode: str = "off", *, join_netns: bool = False, background: bool = False) -> None:
    """Fail early, in one line, when the host lacks what the emulation needs: Mininet itself
    would only ``exit(1)`` half-way through, or its hosts would silently skip a command."""
    if os.geteuid() != 0:
        raise EmulationError("fedmst needs root to create network namespaces: run it as root")
    tools = list(_TOOLS)
    if delay_mode == "userspace" or background:  # delay lines' NFQUEUE rules; counting background bytes
        tools.append(("iptables", "iptables"))
    if join_netns:
        tools.append(("nsenter", "util-linux"))
    for tool, package in tools:
        if shutil.which(tool) is None:
            raise EmulationError(f"{tool} not found on PATH: install Debian's {package} package")


def probe_capabilities() -> Capabilities:
    """Try netem on a throw-away dummy interface and remove it again."""
    probe = probe_name()
    run = lambda *a: subprocess.run(a, capture_output=True, text=True)  # noqa: E731
    created = run("ip", "link", "add", probe, "type", "dummy").returncode == 0
    try:
        ok = created and run("tc", "qdisc", "add", "dev", probe, "root", "netem", "delay", "1ms").returncode == 0
    finally:
        if created:
            run("ip", "link", "del", probe)
    return Capabilities(netem=ok)


class Emulation:
    """A running emulated network for ``graph``; use as ``with Emulation(graph) as emu:``.

    Every link is shaped to its capacity by htb. ``delay_mode`` (see :func:`resolve_delay_mode`)
    says how each link's ``delay_s``, and ``loss``/``jitter_s`` if given, are applied: by netem,
    or by one userspace delay line per link direction held at the receiver's ingress, so a packet
    is serialised by the sender's htb first and then propagates. Every interface gets ``mtu``.
    ``netns`` maps a node to a running process (a worker container's) whose network namespace
    that node's host joins instead of getting a new one; whoever started it removes it.
    ``capabilities`` are the kernel's when the caller probed them already (probing creates an
    interface, so a command does it once). Processes in the hosts (:meth:`spawn`) are forked from
    one :class:`~fedmst.net.forkserver.ForkServer`, which runs ``preload`` first (the agents' warm-up).
    ``changing`` names links whose delay or loss :meth:`change_link` may change later: with the
    userspace delay line they get one even at zero delay. A host's shell serves one command at a
    time (a lock per host), so a link trace can change links while the engine reads counters.
    ``run`` is the run the emulation belongs to (its id names the hosts, its state file records
    the processes); without one it claims its own. ``queue`` is how each link direction's sender
    queues (:mod:`fedmst.net.queues`): one FIFO, or one queue per transfer served in turn.
    """

    def __init__(self, graph: nx.Graph, *, delay_mode: str = "auto", loss: float = 0.0,
                 jitter_s: float = 0.0, mtu: int = DEFAULT_MTU, netns: Mapping[str, int] | None = None,
                 capabilities: Capabilities | None = None, preload: Callable[[], None] | None = None,
                 changing: Iterable[tuple[str, str]] = (), run: RunState | None = None,
                 queue: str = "fifo") -> None:
        if not 0 <= loss < 1:
            raise EmulationError(f"loss must be a probability in [0, 1), got {loss}")
        if jitter_s < 0:
            raise EmulationError(f"jitter must not be negative, got {jitter_s} s")
        if queue not in queues.QUEUES:
            raise EmulationError(f"unknown queue {queue!r}: use one of {', '.join(queues.QUEUES)}")
        self.queue = queue
        self.netns = dict(netns or {})
        unknown = sorted(set(self.netns) - set(graph.nodes), key=str)
        if unknown:
            raise EmulationError(f"netns names node(s) {', '.join(map(str, unknown))}, not in the topology")
        degree = max((d for _, d in graph.degree), default=1)
        longest = f"{host_name('x' * RUN_ID_LETTERS, len(graph) - 1)}-eth{degree - 1}"
        if len(longest) > IFNAMSIZ:
            raise EmulationError(f"{len(graph)} nodes, one with {degree} links, make interface names like "
                                 f"{longest}: longer than Linux's {IFNAMSIZ} characters")
        self.graph = graph
        self.mtu = mtu
        if capabilities is None:
            require_tools()  # probing the kernel already runs ip and tc as root
            capabilities = probe_capabilities()
        self.capabilities = capabilities
        self.delay_mode = resolve_delay_mode(delay_mode, self.capabilities)
        self.delay_applied = self.delay_mode != "off"
        if not self.delay_applied and (loss or jitter_s):
            raise EmulationError("loss and jitter are applied with the delay: not with delay mode off")
        self.loss, self.jitter_s = loss, jitter_s
        self.nodes: list[str] = sorted(graph.nodes, key=node_order)
        self.delay_stats: dict[str, dict[str, object]] = {}
        self._hosts: dict[str, object] = {}
        self._intf: dict[LinkDir, str] = {}
        self._ports: dict[str, list[str]] = {n: [] for n in self.nodes}
        self._peer_ip: dict[LinkDir, str] = {}
        self.preload = preload
        self._forks: ForkServer | None = None
        self._line_forks: ForkServer | None = None
        self._procs: list[Process] = []
        self._lines: dict[LinkDir, tuple[Process, Path]] = {}
        self._scratch: Path | None = None
        self.changing = {frozenset(link) for link in changing}
        self._netem_now: dict[frozenset[str], tuple[float, float]] = {}
        """The delay and loss a link trace left on each link netem applies (the graph is the run's,
        shared: never changed here): a later change of one of them keeps the other."""
        self._shell_locks = {n: threading.Lock() for n in self.nodes}
        self._flow_hosts = FLOW_NET.hosts()
        self._background_hosts = BACKGROUND_NET.hosts()
        self._counting_background = False
        self._background: list[tuple[str, Process, Path]] = []
        self._sinks: list[tuple[str, Process, Path]] = []
        self._run = run
        self._state: RunState | None = None

    @property
    def run_id(self) -> str:
        """The id of the run this emulation belongs to, in its hosts' and interfaces' names."""
        if self._state is None:
            raise EmulationError("run_id: the emulation is not running (use it inside `with`)")
        return self._state.id

    def emulated(self) -> dict[str, object]:
        """The ``emulated`` object of summary.json: what was really applied to the links."""
        note = {
            "netem": "propagation delay applied by netem",
            "userspace": "propagation delay applied by fedmst's NFQUEUE delay line at each receiver's ingress"
            + ("" if self.capabilities.netem else " (this kernel has no sch_netem)"),
            "off": "propagation delay NOT applied (--delay-mode off)",
        }[self.delay_mode]
        return {
            "bandwidth": True, "bandwidth_mechanism": "htb",
            "delay": self.delay_applied, "delay_mechanism": _MECHANISM[self.delay_mode],
            "loss": self.loss > 0, "loss_rate": self.loss, "jitter_s": self.jitter_s,
            "netem_available": self.capabilities.netem, "mtu": self.mtu, "note": note,
        }

    # life cycle -----------------------------------------------------------------------------
    def __enter__(self) -> "Emulation":
        require_tools(self.delay_mode, join_netns=bool(self.netns))
        for node, pid in self.netns.items():
            if not Path(f"/proc/{pid}/ns/net").exists():
                raise EmulationError(f"node {node}: process {pid}, whose network namespace it should join, "
                                     "is not running")
        self._state = self._run or RunState()
        try:
            # before Mininet opens anything a child could inherit; the delay lines' server is a
            # fresh interpreter: they need neither torch nor the agents' warm-up
            self._forks, self._line_forks = ForkServer(self.preload), ForkServer(fresh=True)
            self._state.add(self._forks.pid)
            self._state.add(self._line_forks.pid)
            with _mininet_exits():
                self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _build(self) -> None:
        """Mininet's hosts (a shell in a namespace each), then every link in a handful of batched
        commands: one ``ip -batch`` makes all veth pairs straight into their namespaces, and each
        host gets one ``ip -batch`` (addresses, MTU, up), one ``tc -batch`` (htb, netem) and one
        script of ethtool calls. Mininet's own TCLink ran about 300 commands one by one for
        NSFNET (1.3 s), and skipped htb without a word above 1 Gbit/s."""
        from mininet.node import Host
        from mininet.util import fixLimits

        fixLimits()  # what Mininet() did first: 16 MB TCP buffers, a longer backlog, more open files

        class _ContainerHost(Host):  # type: ignore[misc]
            """A host whose shell joins a running container's network namespace instead of
            creating one, so the veth ends made for the shell's PID land in the container."""

            def __init__(self, name: str, netns_pid: int, **params: object) -> None:
                self.netns_pid = netns_pid
                super().__init__(name, **params)

            def _popen(self, cmd: list[str], **params: object) -> subprocess.Popen:
                if self.shell is None and cmd[:2] == ["mnexec", "-cdn"]:
                    cmd = ["mnexec", "-cd", "nsenter", f"--net=/proc/{self.netns_pid}/ns/net", *cmd[2:]]
                return super()._popen(cmd, **params)

        assert self._state is not None
        for i, node in enumerate(self.nodes):
            if node in self.netns:
                host = _ContainerHost(self._state.host_name(i), netns_pid=self.netns[node])
            else:
                host = Host(self._state.host_name(i))
            self._hosts[node] = host
            self._state.add(host.shell.pid)
            # before any interface exists: no IPv6 chatter on the measured links, forward packets
            host.cmd(
                "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1"
                " net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0"
                "; ip link set lo up"
            )
        pairs, ip_cmds, tc_cmds = [], {n: [] for n in self.nodes}, {n: [] for n in self.nodes}
        subnets = LINK_NET.subnets(new_prefix=30)
        for u, v in sorted(self.graph.edges, key=lambda e: tuple(sorted(map(node_order, e)))):
            net_ = next(subnets)
            ip_u, ip_v = (str(a) for a in list(net_.hosts())[:2])
            ends = []
            for a, b, ip in ((u, v, ip_u), (v, u, ip_v)):
                intf = f"{self._state.host_name(self.nodes.index(a))}-eth{len(self._ports[a])}"
                self._ports[a].append(intf)
                self._intf[(a, b)] = intf
                ends.append(f"name {intf} netns {self._hosts[a].pid}")
                ip_cmds[a] += [f"addr add {ip}/30 dev {intf}", f"link set dev {intf} mtu {self.mtu} up"]
                tc_cmds[a] += self._shaping(intf, self.graph.edges[u, v])
            pairs.append(f"link add {ends[0]} type veth peer {ends[1]}")
            self._peer_ip[(u, v)], self._peer_ip[(v, u)] = ip_v, ip_u
        _batch(["ip", "-batch", "-"], pairs, "making the links")
        for node in self.nodes:
            if self._ports[node]:
                self._ip_batch(node, ip_cmds[node])
                self._host_batch(node, "tc", tc_cmds[node])
                self._offloads_off(node, self._ports[node])
        if self.delay_mode == "userspace":
            self._start_delay_lines()

    def _shaping(self, intf: str, attrs: Mapping[str, object]) -> list[str]:
        """The ``tc`` commands of one sending interface: htb at the link's capacity (Mininet's
        shape, 15 kB burst) over the run's queues, netem below them when netem applies the delay."""
        netem = self._netem(float(attrs["delay_s"]), self.loss) if self.delay_mode == "netem" else None  # type: ignore[arg-type]
        return queues.shaping(intf, float(attrs["capacity_mbps"]), queue=self.queue, mtu=self.mtu,  # type: ignore[arg-type]
                              netem=netem)

    def _netem(self, delay_s: float, loss: float) -> str:
        """netem's arguments for a link direction: its delay, the run's jitter, and ``loss``."""
        netem = f"delay {delay_s * 1e3:.3f}ms"
        if self.jitter_s:
            netem += f" {self.jitter_s * 1e3:.3f}ms"
        if loss:
            netem += f" loss {loss * 100:.5f}"
        return netem

    def _iptables_restore(self, node: str, lines: Sequence[str], what: str) -> None:
        """Add ``lines`` (``iptables-restore`` input) to ``node``'s rules, keeping those there."""
        out = self._on_file(node, lines, "iptables-restore --noflush {} 2>&1; echo rc=$?").strip()
        if not out.endswith("rc=0"):
            raise EmulationError(f"{what} failed: {_first_line(out)}")

    def _offloads_off(self, node: str, intfs: Sequence[str]) -> None:
        """Switch off segmentation offloads and check they are off: with one still on, the
        counters would count super-frames, not the frames that crossed the link."""
        out = self._script(node, [f"ethtool -K {i} tso off gso off gro off 2>&1 >/dev/null; echo rc=$?; "
                                  f"ethtool -k {i} 2>&1; echo {_END}" for i in intfs])
        reports = out.split(_END)
        if len(reports) != len(intfs) + 1:
            raise EmulationError(f"switching off segmentation offloads on node {node} failed: {_first_line(out)}")
        for intf, report in zip(intfs, reports):
            reason = _offload_failure(report.lstrip("\r\n"))
            if reason:
                raise EmulationError(f"switching off segmentation offloads on node {node}, interface {intf}, "
                                     f"failed: {reason}")

    def _start_delay_lines(self) -> None:
        """One delay line per link direction u->v, holding packets at v's ingress interface."""
        from fedmst.net.delayline import DEFAULT_CAPACITY, ingress_rules

        self._scratch = Path(tempfile.mkdtemp(prefix="fedmst-delay-"))
        queues: dict[str, list[tuple[str, int]]] = {}
        for seed, (u, v) in enumerate(sorted(self._intf, key=lambda h: (node_order(h[0]), node_order(h[1])))):
            delay = float(self.graph.edges[u, v]["delay_s"])
            if delay <= 0 and not self.loss and not self.jitter_s and frozenset((u, v)) not in self.changing:
                continue
            queue = len(queues.setdefault(v, []))
            queues[v].append((self._intf[(v, u)], queue))
            log = self._scratch / f"{u}-{v}.log"
            # room for twice the frames a full link keeps in flight over its delay
            in_flight = float(self.graph.edges[u, v]["capacity_mbps"]) * 1e6 * (delay + self.jitter_s) / 8 / self.mtu
            capacity = max(DEFAULT_CAPACITY, 2 * int(in_flight) + 1)
            args = ["--queue", str(queue), "--capacity", str(capacity),
                    "--delay-ms", f"{delay * 1e3:.6f}", "--jitter-ms", f"{self.jitter_s * 1e3:.6f}",
                    "--loss", str(self.loss), "--seed", str(seed), "--stats", str(log.with_suffix(".json")),
                    "--control", str(log.with_suffix(".control"))]
            self._lines[(u, v)] = (self.spawn(v, "fedmst.net.delayline:main", args, env={}, log=log, name="delay",
                                               warm=False), log)
        # one iptables-restore per node (while the lines start); nothing crosses a link before they bind
        for node, rules in queues.items():
            self._iptables_restore(node, [ingress_rules(rules)], f"installing the delay lines of node {node}")
        self._wait_for_queues({node: len(rules) - 1 for node, rules in queues.items()})

    def _wait_for_queues(self, queues: Mapping[str, int], timeout_s: float = 60.0) -> None:
        """Return once every delay line has bound its queue: until then the kernel drops packets."""
        deadline = time.monotonic() + timeout_s
        for node, last in queues.items():
            table = Path(f"/proc/{self._hosts[node].pid}/net/netfilter/nfnetlink_queue")
            while True:
                self.check()
                bound = {int(line.split()[0]) for line in table.read_text().splitlines()} if table.exists() else set()
                if set(range(last + 1)) <= bound:
                    break
                if time.monotonic() > deadline:
                    raise EmulationError(f"delay lines on node {node} did not bind their queues in {timeout_s:.0f} s")
                time.sleep(0.05)

    def check(self) -> None:
        """Raise if a delay line has died (its link would otherwise stop or pass packets unseen), or
        a background flow's sink, or its sender before its time with an error."""
        dead = [(f"delay line of link {u}->{v}", proc, log) for (u, v), (proc, log) in self._lines.items()]
        dead += [(f"background flow {key}'s sink", proc, log) for key, proc, log in self._sinks]
        dead += [(f"background flow {key}'s sender", proc, stats.with_suffix(".log"))
                 for key, proc, stats in self._background if proc.poll()]
        for what, proc, log in dead:
            if proc.poll() is not None:
                lines = [line for line in log.read_text().splitlines() if line.strip()] or ["(no output)"]
                raise EmulationError(f"{what} exited with code {proc.returncode}: {lines[-1]}")

    def close(self) -> None:
        """Stop every process started in the hosts, then the network. Safe to call twice."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()
        for forks in (self._forks, self._line_forks):
            if forks is not None:
                forks.close()
        self._forks = self._line_forks = None
        if self._hosts:
            for node, host in self._hosts.items():
                try:
                    if node in self.netns and self._ports[node]:  # a container's namespace outlives the shell
                        self._script(node, [f"ip link del dev {i}" for i in self._ports[node]])
                    # the last process in a host's namespace: with it go the namespace and its veth
                    # ends (and so both ends of each link), without one `ip link del` per interface
                    host.terminate()
                except (Exception, SystemExit) as exc:  # noqa: BLE001 - teardown must finish; report what failed
                    log.warning("stopping host %s failed: %s", host, exc)
                _reap(host)
            self._hosts.clear()
        for (u, v), (_, line_log) in self._lines.items():
            stats = line_log.with_suffix(".json")
            if stats.exists():
                self.delay_stats[f"{u}->{v}"] = json.loads(stats.read_text())
        self._lines.clear()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
        if self._state is not None:
            if self._run is None:  # its own run: the caller's removes its record itself
                self._state.remove()
            self._state = None

    # routes --------------------------------------------------------------------------------
    def install_flows(self, paths: Mapping[str, Sequence[str]], *, background: bool = False) -> dict[str, Flow]:
        """Give each keyed path its two endpoint addresses and route it hop by hop (``background``:
        addresses from :data:`BACKGROUND_NET`, whose bytes :meth:`counters_and_background` counts)."""
        pool = self._background_hosts if background else self._flow_hosts
        flows: dict[str, Flow] = {}
        cmds: dict[str, list[str]] = {n: [] for n in self.nodes}
        for key, path in paths.items():
            path = tuple(path)
            for hop in zip(path, path[1:]):
                if hop not in self._intf:
                    raise EmulationError(f"flow {key}: path {path} uses missing link {hop[0]}-{hop[1]}")
            a, b = str(next(pool)), str(next(pool))
            flows[key] = Flow(key=key, path=path, src_addr=a, dst_addr=b)
            cmds[path[0]].append(f"addr add {a}/32 dev lo")
            cmds[path[-1]].append(f"addr add {b}/32 dev lo")
            for j, node in enumerate(path):
                if j + 1 < len(path):
                    src = f" src {a}" if j == 0 else ""
                    cmds[node].append(f"route add {b}/32 via {self._peer_ip[(node, path[j + 1])]}{src}")
                if j > 0:
                    src = f" src {b}" if j == len(path) - 1 else ""
                    cmds[node].append(f"route add {a}/32 via {self._peer_ip[(node, path[j - 1])]}{src}")
        for node, lines in cmds.items():
            if lines:
                self._ip_batch(node, lines)
        return flows

    def _on_file(self, node: str, lines: Iterable[str], command: str) -> str:
        """Write ``lines`` to a file and run ``command`` (``{}`` standing for the file's path)
        inside ``node``'s host; return its output. A file, because the host's terminal cuts a
        command line at 4,095 characters, and so that one process reads every line."""
        with tempfile.NamedTemporaryFile("w", prefix="fedmst-") as lines_file:
            lines_file.write("\n".join(lines) + "\n")
            lines_file.flush()
            with self._shell_locks[node]:
                return str(self._hosts[node].cmd(command.format(lines_file.name)))

    def _script(self, node: str, lines: Iterable[str]) -> str:
        """Run ``lines`` as one shell script inside ``node``'s host and return its output."""
        return self._on_file(node, lines, "sh {}")

    def _ip_batch(self, node: str, lines: Iterable[str]) -> None:
        self._host_batch(node, "ip", lines)

    def _host_batch(self, node: str, tool: str, lines: Iterable[str]) -> None:
        """Run ``tool -batch`` with ``lines`` inside ``node``'s host: one process for them all."""
        out = self._on_file(node, lines, f"{tool} -batch {{}} 2>&1; echo rc=$?").strip()
        if not out.endswith("rc=0"):
            errors = [line for line in out.splitlines()[:-1]
                      if line.strip() and not any(h in line for h in _HARMLESS_TC)]
            raise EmulationError(f"configuring node {node} failed ({tool}): {(errors or out.splitlines())[0]}")

    # background traffic ----------------------------------------------------------------------
    def start_background(self, flows: Sequence[BackgroundFlow], start_at: float, log_dir: Path) -> None:
        """Route each flow on its least-delay path and start it (:mod:`fedmst.net.generator`):
        its sink now, its sender waiting until ``start_at`` (monotonic) plus the flow's start.

        The first call adds, on every link interface, a rule that counts the background packets
        arriving there: what crossed the link (a packet the sender's queue dropped never arrives),
        counted first thing at ingress, before a delay line may drop it as lost, as the sender's
        interface counter counted it."""
        if not self._counting_background:
            for node in self.nodes:
                if self._ports[node]:
                    rules = [f"-I PREROUTING 1 -i {i} -s {BACKGROUND_NET}" for i in self._ports[node]]
                    self._iptables_restore(node, ["*raw", *rules, "COMMIT"],
                                           f"counting background traffic on node {node}")
            self._counting_background = True
        log_dir.mkdir(parents=True, exist_ok=True)
        routes = self.install_flows({f"bg{len(self._background) + i}": flow_path(self.graph, f)
                                     for i, f in enumerate(flows)}, background=True)
        for (key, route), flow in zip(routes.items(), flows):
            end = "inf" if flow.end_s is None else repr(start_at + flow.end_s)
            sink_log = log_dir / f"{key}-sink.log"
            sink = self.spawn(flow.dst, "fedmst.net.generator:sink", [flow.protocol, route.dst_addr,
                                                                      str(BACKGROUND_PORT)],
                              env={}, log=sink_log, name=f"sink{key[2:]}", warm=False)
            self._sinks.append((key, sink, sink_log))
            stats = log_dir / f"{key}.json"
            sender = self.spawn(flow.src, "fedmst.net.generator:send",
                                [flow.protocol, route.src_addr, route.dst_addr, str(BACKGROUND_PORT), repr(flow.mbps),
                                 str(self.mtu), repr(start_at + flow.start_s), end, str(stats)],
                                env={}, log=log_dir / f"{key}.log", name=f"send{key[2:]}", warm=False)
            self._background.append((key, sender, stats))
        self.check()

    def stop_background(self) -> dict[str, dict[str, float]]:
        """Stop every background sender and return what each sent (flow key -> sent bytes, seconds);
        the sinks stop with the emulation."""
        self.check()
        for _, sender, _ in self._background:
            if sender.poll() is None:
                sender.terminate()
        out = {}
        for key, sender, stats in self._background:
            try:
                sender.wait(timeout=5)
                out[key] = json.loads(stats.read_text())
            except (subprocess.TimeoutExpired, OSError, ValueError) as exc:
                raise EmulationError(f"background flow {key}: its sender left no record of what it sent "
                                     f"({exc})") from None
        self._background.clear()
        return out

    def counters_and_background(self) -> tuple[dict[LinkDir, int], dict[LinkDir, int]]:
        """:meth:`counters` and, read with them, the bytes of background traffic (frames, Ethernet
        header included, as the interface counters count them) each link direction has carried so
        far (zeros before any flow was started). Each host's two readings are taken one right after
        the other, every host at once (a thread each), so that weight bytes (the first less the
        second) are never a reading's few milliseconds of background traffic off."""
        if not self._counting_background:
            return self.counters(), {hop: 0 for hop in self._intf}

        def read(node: str) -> tuple[dict[str, int], dict[str, int]]:
            out = self.cmd(node, "iptables -t raw -L PREROUTING -v -x -n")
            tx = _read_tx_bytes(Path(f"/proc/{self._hosts[node].pid}/net/dev"))
            return tx, {intf: int(size) + _ETH_HEADER * int(pkts) for pkts, size, intf in _BACKGROUND_RULE.findall(out)}

        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            parts = list(pool.map(read, [n for n in self.nodes if self._ports[n]]))
        tx = {intf: n for part, _ in parts for intf, n in part.items()}
        arrived = {intf: n for _, part in parts for intf, n in part.items()}
        # link direction u->v: sent on u's interface, counted arriving on v's
        return ({hop: tx[intf] for hop, intf in self._intf.items()},
                {(u, v): arrived.get(self._intf[(v, u)], 0) for u, v in self._intf})

    # link dynamics -------------------------------------------------------------------------
    def change_link(self, u: str, v: str, *, capacity_mbps: float | None = None, delay_s: float | None = None,
                    loss: float | None = None) -> None:
        """Change link u-v, both directions, live: htb's rate, and the delay or loss where netem or
        the delay line applies them (a link named in ``changing`` has a delay line to retune)."""
        if (delay_s is not None or loss is not None) and not self.delay_applied:
            raise EmulationError(f"link {u}-{v}: delay and loss are not applied with delay mode off")
        netem = self.delay_mode == "netem" and (delay_s is not None or loss is not None)
        delay_now, loss_now = self._netem_now.get(frozenset((u, v)), (float(self.graph.edges[u, v]["delay_s"]),
                                                                      self.loss))
        delay_now, loss_now = (delay_now if delay_s is None else delay_s, loss_now if loss is None else loss)
        for a, b in ((u, v), (v, u)):
            intf, cmds = self._intf[(a, b)], []
            if capacity_mbps is not None:
                cmds += queues.rate_change(intf, capacity_mbps, queue=self.queue, mtu=self.mtu)
            if netem:
                cmds += queues.netem_change(intf, self._netem(delay_now, loss_now), queue=self.queue)
            if cmds:
                self._host_batch(a, "tc", cmds)
            if self.delay_mode == "userspace" and (delay_s is not None or loss is not None):
                if (a, b) not in self._lines:
                    raise EmulationError(f"link {a}->{b} has no delay line to change (name it in `changing`)")
                proc, log = self._lines[(a, b)]
                control = log.with_suffix(".control")
                control.write_text(json.dumps({"delay_ms": None if delay_s is None else delay_s * 1e3, "loss": loss}))
                proc.send_signal(signal.SIGUSR1)
        if netem:
            self._netem_now[frozenset((u, v))] = (delay_now, loss_now)

    # faults --------------------------------------------------------------------------------
    def set_link(self, u: str, v: str, *, up: bool) -> int:
        """Take link u-v down for real (both interfaces), or bring it back up.

        Returns the bytes its two htb queues still held when it went down, which the kernel
        drops with them: the weights in flight that the failure lost (0 when bringing it up).
        The kernel also drops every route through the link; a re-plan installs new ones.
        """
        lost = 0
        for a, b in ((u, v), (v, u)):
            intf = self._intf[(a, b)]
            if not up:
                out = self.cmd(a, f"tc -s qdisc show dev {intf}")
                lost += sum(int(n) for n in re.findall(r"backlog (\d+)b", out.split("qdisc", 2)[1]))
            self._ip_batch(a, [f"link set dev {intf} {'up' if up else 'down'}"])
        return lost

    # measurement -----------------------------------------------------------------------------
    def counters(self) -> dict[LinkDir, int]:
        """Bytes each link direction has carried so far: the sender interface's tx counter."""
        tx: dict[str, int] = {}
        for host in self._hosts.values():
            tx.update(_read_tx_bytes(Path(f"/proc/{host.pid}/net/dev")))
        return {hop: tx[intf] for hop, intf in self._intf.items()}

    def queue_drops(self) -> dict[LinkDir, int]:
        """Packets each link direction's htb queue has dropped so far: congestion at its sender."""
        drops: dict[str, int] = {}
        for node in self.nodes:
            out = self.cmd(node, "tc -s qdisc show")
            drops.update((intf, int(n)) for intf, n in _HTB_DROPS.findall(out))
        return {hop: drops.get(intf, 0) for hop, intf in self._intf.items()}

    def tcp_retransmits(self) -> int:
        """TCP segments all hosts have retransmitted so far (each namespace's /proc/net/snmp)."""
        total = 0
        for host in self._hosts.values():
            tcp = [line.split()[1:] for line in Path(f"/proc/{host.pid}/net/snmp").read_text().splitlines()
                   if line.startswith("Tcp:")]
            total += int(dict(zip(tcp[0], tcp[1]))["RetransSegs"])
        return total

    # processes ------------------------------------------------------------------------------
    def popen(self, node: str, argv: Sequence[str], *, env: Mapping[str, str], log_file: IO[str]) -> subprocess.Popen:
        """Start a process inside ``node``'s host (``env`` is its whole environment); it is
        ended by :meth:`close`."""
        return self.track(self._hosts[node].popen(list(argv), env=dict(env), stdout=log_file,
                                                  stderr=subprocess.STDOUT))

    def spawn(self, node: str, target: str, args: Sequence[str], *, env: Mapping[str, str], log: Path,
              name: str, warm: bool = True) -> Process:
        """Fork ``module:function(args)`` inside ``node``'s host from the fork server (``warm``: the
        one that ran ``preload``), with ``env`` added to its environment, its output appended to
        ``log`` and the process name ``fedmst-NAME``; it is ended by :meth:`close`."""
        forks = self._forks if warm else self._line_forks
        if forks is None:
            raise EmulationError("spawn: the emulation is not running (use it inside `with`)")
        return self.track(forks.spawn(self._hosts[node].pid, target, args, env=env, log=log, name=name))

    def track(self, proc: Process) -> Process:
        """Record a process started elsewhere (e.g. a ``docker exec`` client running an agent):
        :meth:`close` ends it, and after a SIGKILL ``fedmst clean`` does, if its name or command
        line is one of fedmst's (:func:`fedmst.net.cleanup.is_ours`). Returns ``proc``."""
        if self._state is None:
            raise EmulationError("track: the emulation is not running (use it inside `with`)")
        self._procs.append(proc)
        self._state.add(proc.pid)
        return proc

    def interfaces(self, node: str) -> list[str]:
        """``node``'s link interfaces, in the order its links were made."""
        return list(self._ports[node])

    def cmd(self, node: str, command: str) -> str:
        """Run a shell command inside ``node``'s host and return its output (tests, benchmarks)."""
        with self._shell_locks[node]:
            return str(self._hosts[node].cmd(command))


def _batch(argv: Sequence[str], lines: Sequence[str], what: str) -> None:
    """Run a ``-batch -`` command in the coordinator's namespace with ``lines`` on its stdin."""
    done = subprocess.run(argv, input="\n".join(lines) + "\n", capture_output=True, text=True)
    if done.returncode != 0:
        said = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        where = next((f" ({line})" for line in said[1:] if line.startswith("Command failed")), "")
        raise EmulationError(f"{what} failed: {(said or ['(no output)'])[0]}{where}")


def _offload_failure(out: str) -> str | None:
    """Why the offloads are not all off, from ``ethtool -K ...; echo rc=$?; ethtool -k``; None if they are.

    >>> _offload_failure("netlink error: Operation not permitted\\nrc=1\\n")
    'netlink error: Operation not permitted'
    >>> print(_offload_failure("rc=0\\ntcp-segmentation-offload: on\\ngeneric-segmentation-offload: off\\n"))
    tcp-segmentation-offload is still on
    """
    errors, _, features = out.partition("rc=")
    code, _, features = features.partition("\n")
    if code.strip() != "0":
        return _first_line(errors) if errors.strip() else f"ethtool exited with code {code.strip() or '?'}"
    state = dict(line.split(":", 1) for line in features.splitlines() if ":" in line)
    for feature in _OFFLOADS:
        value = state.get(feature, "").split()
        if not value:
            return f"ethtool -k does not list {feature}: {_first_line(features)}"
        if value[0] != "off":
            return f"{feature} is still {value[0]}"
    return None


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "(no output)")


class _MininetLog(logging.Handler):
    """Keeps what Mininet logs as an error: its only word on why it calls ``exit(1)``."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def reason(self) -> str:
        """All messages as one line, without Mininet's ``***`` markers."""
        words = " ".join(" ".join(self.messages).replace("***", " ").split())
        return words.removeprefix("Error: ").strip()


@contextmanager
def _mininet_exits() -> Iterator[None]:
    """Turn Mininet giving up (``exit(1)``, i.e. SystemExit) into one EmulationError with the
    reason it logged; its console output stays silent."""
    from mininet.log import lg

    lg.setLogLevel("critical")  # Mininet's console handler: silent
    lg.setLevel(logging.ERROR)  # ... while its errors still reach ours
    getattr(lg, "_cache", {}).clear()  # lg is not in logging's registry, so setLevel leaves its cache stale
    handler = _MininetLog()
    lg.addHandler(handler)
    try:
        yield
    except SystemExit as exc:
        raise EmulationError(f"Mininet gave up: {handler.reason() or f'it called exit({exc.code})'}") from None
    finally:
        lg.removeHandler(handler)


def _read_tx_bytes(path: Path) -> dict[str, int]:
    out = {}
    for line in path.read_text().splitlines()[2:]:
        name, _, fields = line.partition(":")
        out[name.strip()] = int(fields.split()[8])
    return out


def _reap(host: object) -> None:
    """Wait for a stopped Mininet host's shell so no zombie or namespace outlives the run."""
    shell = getattr(host, "shell", None)
    if shell is not None and shell.poll() is None:
        shell.kill()
        shell.wait()
