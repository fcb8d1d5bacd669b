"""The emulated network: one Mininet host per topology node, one shaped link per physical link.

Every host both forwards packets (a router) and runs that node's agent. Each overlay transfer
of a Plan gets its own pair of /32 endpoint addresses, and routes for exactly that pair are
installed hop by hop along the transfer's planned path (and back along it for ACKs), so every
transfer follows its physical path whatever else shares the nodes. The endpoint routes carry a
``src`` hint so that unbound sockets (gloo's connecting side) pick the flow's own address.

Segmentation offloads are off on every interface, so the interface byte counters count real
frames and match :mod:`fedmst.core.wire`'s arithmetic. The parts live beside it: hosts and their
shells (:mod:`fedmst.net.shell`, the only module that imports mininet), links (:mod:`fedmst.net.link`),
routes (:mod:`fedmst.net.routes`), background traffic (:mod:`fedmst.net.background`) and the
processes started in the hosts (:mod:`fedmst.net.processes`).
:class:`Emulation` is a context manager that always tears everything down. A node may be given
the network namespace of a process started elsewhere (a worker container); what runs there is
the worker backend's business, not this module's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterable, Mapping, Sequence

import networkx as nx

from fedmst.core.optical.slots import Frame
from fedmst.core.plan import LinkDir
from fedmst.core.topology import node_order
from fedmst.core.traffic import BackgroundFlow, flow_path
from fedmst.core.wire import DEFAULT_MTU
from fedmst.errors import EmulationError
from fedmst.net import queues
from fedmst.net.background import BackgroundTraffic
from fedmst.net.circuits import Circuit, CircuitClasses, HeldCircuits, SlotGates, wait_bound
from fedmst.net.cleanup import RUN_ID_LETTERS, RunState, host_name, probe_name
from fedmst.net.congestion import Transport
from fedmst.net.link import DelayLines, EmulatedLink, LinkShaping, plan_links
from fedmst.net.meeting import LocalMeeting
from fedmst.net.meters import LinkMeters
from fedmst.net.processes import HostProcesses, Process, cpu_seconds
from fedmst.net.routes import Flow, FlowRoutes
from fedmst.net.tcp import RunTcp
from fedmst.net.tunnels import HostShare, Tunnels
from fedmst.net.shell import (SLOW_START_AFTER_IDLE, HostShell, coordinator_batch, mininet_exits, raise_limits,
                              start_host)

__all__ = ["Capabilities", "Emulation", "Flow", "Process", "probe_capabilities",
           "require_tools", "resolve_delay_mode"]

IFNAMSIZ = 15
"""The longest interface name Linux takes."""
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
    ``rto_min_s`` is TCP's retransmission-timeout floor on every flow's routes (a slowed run's;
    None: the kernel's), ``transport`` TCP's congestion control on them (None: the host's
    default), with its ECN markers on every link sender where it marks; :attr:`tcp`
    (:mod:`fedmst.net.tcp`) holds what they counted after :meth:`close`. The emulation knows no
    time scale: a slowed run hands it a slowed graph. ``share`` makes it one host's part of an
    emulation placed on several (:mod:`fedmst.net.tunnels`): the nodes placed here, their links,
    and a tunnel end for each link to another host; ``run`` then carries the run's id.
    """

    def __init__(self, graph: nx.Graph, *, delay_mode: str = "auto", loss: float = 0.0,
                 jitter_s: float = 0.0, mtu: int = DEFAULT_MTU, netns: Mapping[str, int] | None = None,
                 capabilities: Capabilities | None = None, preload: Callable[[], None] | None = None,
                 changing: Iterable[tuple[str, str]] = (), run: RunState | None = None,
                 queue: str = "fifo", rto_min_s: float | None = None,
                 transport: Transport | None = None, share: HostShare | None = None) -> None:
        if not 0 <= loss < 1:
            raise EmulationError(f"loss must be a probability in [0, 1), got {loss}")
        if jitter_s < 0:
            raise EmulationError(f"jitter must not be negative, got {jitter_s} s")
        if queue not in queues.QUEUES:
            raise EmulationError(f"unknown queue {queue!r}: use one of {', '.join(queues.QUEUES)}")
        self.queue = queue
        self.netns = dict(netns or {})
        _check_names(graph, self.netns)
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
        self.shaping = LinkShaping(self.delay_mode, queue, mtu, loss, jitter_s)
        self.nodes: list[str] = sorted(graph.nodes, key=node_order)
        self.tunnels = Tunnels(share, mtu)
        self.here = [node for node in self.nodes if self.tunnels.local(node)]
        self.delay_stats: dict[str, dict[str, object]] = {}
        self.preload = preload
        self.changing = {frozenset(link) for link in changing}
        self._shells: dict[str, HostShell] = {}
        self._links: list[EmulatedLink] = []
        self._hops: dict[LinkDir, EmulatedLink] = {}
        """Each link direction's link, both directions of a link one after the other (those here)."""
        self._ports: dict[str, list[str]] = {n: [] for n in self.here}
        self._processes = HostProcesses()
        self._rto_min_s = rto_min_s
        self._routes: FlowRoutes | None = None
        self.tcp = RunTcp(transport, graph, mtu)
        self._background = BackgroundTraffic()
        self.meters = LinkMeters(self._shells, self._links, self._ports, self._background, self.tunnels)
        """What the links have carried so far (:mod:`fedmst.net.meters`)."""
        self.meeting = LocalMeeting()
        """Where the run's agents meet the coordinator and one another (:mod:`fedmst.net.meeting`)."""
        self._delay_lines = DelayLines(self._hops, self.tunnels.local)
        self._circuits, self._held = CircuitClasses(), HeldCircuits()
        self.gates = SlotGates()
        self.gate_counters: dict[str, int] = {}  # what the timeslot gates counted, once they stopped
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
            + ("" if self.capabilities.netem else " (this kernel has no sch_netem)")
            + ("" if self._delay_lines.implementation in ("", "compiled") else
               f"; its delay lines run in Python, at several times the CPU: {self._delay_lines.implementation}"),
            "off": "propagation delay NOT applied (--delay-mode off)",
        }[self.delay_mode]
        return {
            "bandwidth": True, "bandwidth_mechanism": "htb",
            "delay": self.delay_applied, "delay_mechanism": _MECHANISM[self.delay_mode],
            "loss": self.loss > 0, "loss_rate": self.loss, "jitter_s": self.jitter_s,
            "netem_available": self.capabilities.netem, "mtu": self.mtu, "note": note,
            **({"delay_line": self._delay_lines.implementation} if self.delay_mode == "userspace" else {}),
            **({"timeslot_gates": self.gate_counters} if self.gate_counters else {}),
            **self.tcp.terms(),
            "slow_start_after_idle": SLOW_START_AFTER_IDLE,
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
            self._processes.open(self._state, self.preload)
            self.tcp.start(self._state.id)
            self._routes = FlowRoutes(self.here, self._hops, lambda node, lines: self._shells[node].batch("ip", lines),
                                      rto_min_s=self._rto_min_s, congestion_control=self.tcp.congestion_control)
            with mininet_exits():
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
        assert self._state is not None
        raise_limits()
        for node in self.here:
            shell = start_host(node, self._state.host_name(self.nodes.index(node)), self.netns.get(node),
                               self._state.scratch)
            self._shells[node] = shell
            self._state.add(shell.pid)
            shell.prepare()
            shell.cmd(self.tcp.buffer_command())
        names = [self._state.host_name(i) for i in range(len(self.nodes))]
        planned = plan_links(self.graph, self.nodes, names, self.shaping, self.changing, self.tunnels.local)
        for link in planned:
            self._hops[(link.u, link.v)] = self._hops[(link.v, link.u)] = link
            if link.here:
                self._links.append(link)
                for node in link.here:
                    self._ports[node].append(link.ends[node].intf)
        pids = {node: shell.pid for node, shell in self._shells.items()}
        coordinator_batch(["ip", "-batch", "-"], self.tunnels.commands(self._links, pids, self._state.id, planned),
                          "making the links")
        for node, shell in self._shells.items():
            if self._ports[node]:
                mine = [link for link in self._links if node in link.ends]
                shell.batch("ip", [cmd for link in mine for cmd in link.ip_commands(node)])
                shell.batch("tc", [cmd for link in mine for cmd in link.tc_commands(node) + self.tcp.marking(
                    link.directions_from(node)[0], link.ends[node].intf, link.capacity_mbps)])
                shell.offloads_off(self._ports[node])
        if self.delay_mode == "userspace":
            self._delay_lines.start(self._shells, self.spawn, self.check, self._state.scratch / "delay-lines")

    def delay_line_pids(self) -> dict[str, int]:
        """The delay lines' processes by ``u->v`` (benchmarks account their CPU)."""
        return {f"{u}->{v}": line.proc.pid for (u, v), line in self._delay_lines.running()}

    def check(self) -> None:
        """Raise if a delay line has died (its link would otherwise stop or pass packets unseen), or
        a background flow's sink, or its sender before its time with an error."""
        dead = [(f"delay line of link {u}->{v}", line.proc, line.log) for (u, v), line in self._delay_lines.running()]
        for what, proc, log in dead + self._background.watched():
            if proc.poll() is not None:
                lines = [line for line in log.read_text().splitlines() if line.strip()] or ["(no output)"]
                raise EmulationError(f"{what} exited with code {proc.returncode}: {lines[-1]}")

    def close(self) -> None:
        """Stop every process started in the hosts, then the network, then unregister the run's
        congestion control. Safe to call twice."""
        self._processes.close()
        self.gate_counters = self.gates.counters()  # written as they stopped, read before the scratch goes
        try:
            self.tcp.read((hop, link.sender(*hop), self._shells[hop[0]].cmd)
                          for link in self._links for hop in link.directions if hop[0] in self._shells)
        finally:
            for node, shell in self._shells.items():
                shell.stop(self._ports[node] if node in self.netns else ())
            self._shells.clear()
            self.tcp.stop()
        self.delay_stats.update(self._delay_lines.close())
        if self._state is not None:
            if self._run is None:  # its own run: the caller's removes its record itself
                self._state.remove()
            self._state = None

    # routes and background traffic -----------------------------------------------------------
    def install_flows(self, paths: Mapping[str, Sequence[str]], *, background: bool = False) -> dict[str, Flow]:
        """Give each keyed path its two endpoint addresses and route it hop by hop (``background``:
        addresses whose bytes :meth:`LinkMeters.counters_and_background` counts)."""
        if self._routes is None:
            raise EmulationError("install_flows: the emulation is not running (use it inside `with`)")
        return self._routes.install(paths, background=background)

    def install_circuits(self, circuits: Sequence[Circuit], frame: Frame | None = None, owner: str = "") -> None:
        """Make ``circuits`` what ``owner`` (a run, a cluster's job) holds; give every circuit held its
        class on each hop, and each time-sliced one its gates on ``frame`` (host µs; None: the last)."""
        s = self.shaping
        sender = {hop: (hop[0], link.sender(*hop)) for hop, link in self._hops.items()}
        netem = {hop: s.netem(link.delay_s, s.loss) if s.delay_mode == "netem" else None
                 for hop, link in self._hops.items()}
        with self._held.lock:
            circuits, frame = self._held.hold(owner, circuits, frame), self._held.frame
            for node, lines in self._circuits.commands(circuits, sender, mtu=self.mtu, netem=netem).items():
                self._shells[node].batch("tc", lines)
            if frame is None or self._state is None:
                return
            scratch = self._state.scratch
            self.gates.install(
                circuits, sender, frame, scratch=scratch,
                start=lambda node, table: self.spawn(node, "fedmst.net.slotgate:main", SlotGates.argv(table), env={},
                                                     log=scratch / f"gate-{node}.log", name="gate", warm=False),
                rules=lambda node, lines: self._shells[node].iptables_restore(
                    ["\n".join(lines) + "\n"], f"installing the timeslot gate of node {node}"),
                bound=lambda node: wait_bound(node, self._shells[node].pid, self.check))

    def start_background(self, flows: Sequence[BackgroundFlow], start_at: float, log_dir: Path) -> None:
        """Route each flow on its least-delay path and start it (:mod:`fedmst.net.generator`):
        its sink now, its sender waiting until ``start_at`` (monotonic) plus the flow's start.
        The first call starts counting the background bytes that arrive on every link."""
        self._background.count_on(self._shells, self._ports)
        log_dir.mkdir(parents=True, exist_ok=True)
        keys = self._background.keys(len(flows))
        routes = self.install_flows({key: flow_path(self.graph, f) for key, f in zip(keys, flows)}, background=True)
        self._background.start(routes, flows, start_at, log_dir, self.spawn, self.mtu)
        self.check()

    def stop_background(self) -> dict[str, dict[str, float]]:
        """Stop every background sender and return what each sent (flow key -> sent bytes, seconds);
        the sinks stop with the emulation."""
        self.check()
        return self._background.stop()

    # link dynamics and faults ------------------------------------------------------------------
    def change_link(self, u: str, v: str, *, capacity_mbps: float | None = None, delay_s: float | None = None,
                    loss: float | None = None) -> None:
        """Change link u-v, both directions, live: htb's rate, and the delay or loss where netem or
        the delay line applies them (a link named in ``changing`` has a delay line to retune)."""
        self._hops[(u, v)].change(self._shells, u, capacity_mbps=capacity_mbps, delay_s=delay_s, loss=loss)

    def set_link(self, u: str, v: str, *, up: bool) -> int:
        """Take link u-v down for real (both interfaces), or bring it back up.

        Returns the bytes its two htb queues still held when it went down, which the kernel
        drops with them: the weights in flight that the failure lost (0 when bringing it up).
        The kernel also drops every route through the link; a re-plan installs new ones.
        """
        return self._hops[(u, v)].set_state(self._shells, u, up=up)

    # processes ------------------------------------------------------------------------------
    def popen(self, node: str, argv: Sequence[str], *, env: Mapping[str, str], log_file: IO[str]) -> subprocess.Popen:
        """Start a process inside ``node``'s host (``env`` is its whole environment); it is
        ended by :meth:`close`."""
        host = self._shells[node].host
        return self.track(host.popen(list(argv), env=dict(env), stdout=log_file,  # type: ignore[attr-defined]
                                     stderr=subprocess.STDOUT))

    def spawn(self, node: str | None, target: str, args: Sequence[str], *, env: Mapping[str, str], log: Path,
              name: str, warm: bool = True) -> Process:
        """Fork ``module:function(args)`` inside ``node``'s host (None: outside every host, as the
        compiled delay lines, which enter their hosts' namespaces themselves) from the fork server
        (``warm``: the one that ran ``preload``), with ``env`` added to its environment, its output
        appended to ``log`` and the process name ``fedmst-NAME``; it is ended by :meth:`close`."""
        if not self._shells:
            raise EmulationError("spawn: the emulation is not running (use it inside `with`)")
        netns = None if node is None else self._shells[node].pid
        return self._processes.spawn(netns, target, args, env=env, log=log, name=name, warm=warm)

    def track(self, proc: Process) -> Process:
        """Record a process started elsewhere (e.g. a ``docker exec`` client running an agent):
        :meth:`close` ends it, and after a SIGKILL ``fedmst clean`` does, if its name or command
        line is one of fedmst's (:func:`fedmst.net.cleanup.is_ours`). Returns ``proc``."""
        return self._processes.track(proc)

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds used so far by the processes started in the hosts, by kind (``agent``,
        ``delay``, ``send``, ``sink``; ``tracked`` for those started elsewhere, such as a container's
        ``docker exec`` client, whose agent's time is not seen here), and by the ``coordinator``:
        this process and its hosts' shells with the commands they ran (tc, ip, counter reads)."""
        shells = sum(cpu_seconds(shell.pid, children=True) for shell in self._shells.values())
        return {**self._processes.cpu_seconds(), "coordinator": cpu_seconds(os.getpid()) + shells}

    def sender_interface(self, u: str, v: str) -> str:
        """The interface link direction ``u``->``v`` is sent on (in ``u``'s host)."""
        for link in self._links:
            if {u, v} == set(link.ends):
                return link.sender(u, v)
        raise EmulationError(f"{u}-{v} is not a link of this emulation")

    def interfaces(self, node: str) -> list[str]:
        """``node``'s link interfaces, in the order its links were made."""
        return list(self._ports[node])

    def cmd(self, node: str, command: str) -> str:
        """Run a shell command inside ``node``'s host and return its output (tests, benchmarks)."""
        return self._shells[node].cmd(command)


def _check_names(graph: nx.Graph, netns: Mapping[str, int]) -> None:
    """Refuse, before anything is built, a ``netns`` naming an unknown node and interface names
    Linux cannot take."""
    unknown = sorted(set(netns) - set(graph.nodes), key=str)
    if unknown:
        raise EmulationError(f"netns names node(s) {', '.join(map(str, unknown))}, not in the topology")
    degree = max((d for _, d in graph.degree), default=1)
    longest = f"{host_name('x' * RUN_ID_LETTERS, len(graph) - 1)}-eth{degree - 1}"
    if len(longest) > IFNAMSIZ:
        raise EmulationError(f"{len(graph)} nodes, one with {degree} links, make interface names like "
                             f"{longest}: longer than Linux's {IFNAMSIZ} characters")

