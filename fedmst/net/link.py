"""One emulated physical link: its two veth ends, their shaping and delay, counters and changes.

A link u-v is a veth pair, one end in each node's host, on its own ``/30``. Direction u->v is sent
on u's end, where htb shapes it to the link's capacity (and netem, where it applies the delay,
holds it below htb's queues), and arrives on v's end, where a userspace delay line holds it
instead when the delay mode is ``userspace``: a packet is serialised by the sender's htb first
and then propagates. The graph's attributes are the run's, shared: a link never changes them and
keeps what a link trace set live in its own state instead.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection, Mapping, Sequence

import networkx as nx

from fedmst.core.plan import LinkDir
from fedmst.core.topology import node_order
from fedmst.errors import EmulationError
from fedmst.net import queues
from fedmst.net.delayline import DEFAULT_CAPACITY, LineSpec, choose, compiled_command, ingress_rules, write_control
from fedmst.net.processes import Process
from fedmst.net.shell import HostShell

LINK_NET = ipaddress.ip_network("10.0.0.0/10")
"""Every link's ``/30`` comes from here."""
_HTB_DROPS = re.compile(r"qdisc htb \S+ dev (\S+) root.*?\n Sent \d+ bytes \d+ pkt \(dropped (\d+)")


@dataclass(frozen=True)
class LinkEnd:
    """One node's end of a link: its interface and that interface's address."""

    node: str
    intf: str
    ip: str


@dataclass(frozen=True)
class LinkShaping:
    """How every link of a run is emulated: the delay mode, the senders' queue, the MTU, and
    the run's loss and jitter applied with the delay."""

    delay_mode: str
    queue: str
    mtu: int
    loss: float
    jitter_s: float

    def netem(self, delay_s: float, loss: float) -> str:
        """netem's arguments for a link direction: its delay, the run's jitter, and ``loss``."""
        netem = f"delay {delay_s * 1e3:.3f}ms"
        if self.jitter_s:
            netem += f" {self.jitter_s * 1e3:.3f}ms"
        if loss:
            netem += f" loss {loss * 100:.5f}"
        return netem


@dataclass(frozen=True)
class DelayLineProcess:
    """A running delay line: the process that serves it (a compiled one serves several), its log,
    and the line's own settings with its control and stats files."""

    proc: Process
    log: Path
    spec: LineSpec


class EmulatedLink:
    """Link ``u``-``v`` with ``capacity_mbps`` and ``delay_s``: its ends, and what was applied to it."""

    def __init__(self, ends: tuple[LinkEnd, LinkEnd], capacity_mbps: float, delay_s: float,
                 shaping: LinkShaping, *, changing: bool = False, here: frozenset[str] | None = None) -> None:
        self.ends = {end.node: end for end in ends}
        self.u, self.v = ends[0].node, ends[1].node
        self.here = frozenset(self.ends) if here is None else here
        """The ends on this host: both, or one where the link crosses hosts (:mod:`fedmst.net.tunnels`)."""
        self.capacity_mbps, self.delay_s = capacity_mbps, delay_s
        self.shaping = shaping
        self.changing = changing
        """Whether a link trace may change its delay or loss: it then gets delay lines even at zero delay."""
        self.delay_lines: dict[LinkDir, DelayLineProcess] = {}
        self._netem_now = (delay_s, shaping.loss)
        """The delay and loss netem applies now: a later change of one of them keeps the other."""

    @property
    def directions(self) -> tuple[LinkDir, LinkDir]:
        return self.directions_from(self.u)

    def directions_from(self, a: str) -> tuple[LinkDir, LinkDir]:
        """Both directions, the one leaving ``a`` first."""
        b = self.v if a == self.u else self.u
        return (a, b), (b, a)

    def sender(self, a: str, b: str) -> str:
        """The interface direction a->b is sent on (a's end)."""
        return self.ends[a].intf

    def next_hop(self, a: str, b: str) -> str:
        """The address a route from ``a`` to ``b`` goes via (b's end)."""
        return self.ends[b].ip

    # building -------------------------------------------------------------------------------
    def veth_command(self, pids: Mapping[str, int]) -> str:
        """The ``ip -batch`` line that makes the veth pair straight into the two namespaces."""
        a, b = (f"name {self.ends[n].intf} netns {pids[n]}" for n in (self.u, self.v))
        return f"link add {a} type veth peer {b}"

    def ip_commands(self, node: str) -> list[str]:
        """``node``'s end: its address, the run's MTU, up."""
        end = self.ends[node]
        return [f"addr add {end.ip}/30 dev {end.intf}", f"link set dev {end.intf} mtu {self.shaping.mtu} up"]

    def tc_commands(self, node: str) -> list[str]:
        """The ``tc`` commands of ``node``'s sending end: htb at the link's capacity (Mininet's
        shape, 15 kB burst) over the run's queues, netem below them when netem applies the delay."""
        s = self.shaping
        netem = s.netem(self.delay_s, s.loss) if s.delay_mode == "netem" else None
        return queues.shaping(self.ends[node].intf, self.capacity_mbps, queue=s.queue, mtu=s.mtu, netem=netem)

    def needs_delay_lines(self) -> bool:
        """Whether the userspace delay lines have anything to apply (or may have later)."""
        s = self.shaping
        return self.delay_s > 0 or bool(s.loss) or bool(s.jitter_s) or self.changing

    def delay_line(self, queue: int, seed: int, files: Path) -> LineSpec:
        """One direction's delay line (:mod:`fedmst.net.delayline`), with room for twice the frames
        a full link keeps in flight over its delay; its stats and control files are ``files``.json
        and ``files``.control."""
        s = self.shaping
        in_flight = self.capacity_mbps * 1e6 * (self.delay_s + s.jitter_s) / 8 / s.mtu
        return LineSpec(queue, self.delay_s, s.jitter_s, s.loss, max(DEFAULT_CAPACITY, 2 * int(in_flight) + 1), seed,
                        files.with_suffix(".json"), files.with_suffix(".control"))

    @property
    def crosses_hosts(self) -> bool:
        return len(self.here) == 1

    # measurement: each direction where its measuring end is on this host ----------------------
    def sent(self, tx: Mapping[str, int]) -> dict[LinkDir, int]:
        """Each direction's bytes, from interface -> bytes sent."""
        return {(a, b): tx[self.sender(a, b)] for a, b in self.directions if a in self.here}

    def arrived(self, received: Mapping[str, int]) -> dict[LinkDir, int]:
        """Each direction's bytes, from interface -> bytes counted arriving (zero where none)."""
        return {(a, b): received.get(self.sender(b, a), 0) for a, b in self.directions if b in self.here}

    def dropped(self, drops: Mapping[str, int]) -> dict[LinkDir, int]:
        """Each direction's htb drops, from interface -> drops."""
        return {(a, b): drops.get(self.sender(a, b), 0) for a, b in self.directions if a in self.here}

    # live changes ---------------------------------------------------------------------------
    def change(self, shells: Mapping[str, HostShell], first: str, *, capacity_mbps: float | None = None,
               delay_s: float | None = None, loss: float | None = None) -> None:
        """Change both directions live, ``first``'s first: htb's rate, and the delay or loss where
        netem or the delay lines apply them."""
        s = self.shaping
        retimed = delay_s is not None or loss is not None
        if retimed and s.delay_mode == "off":
            raise EmulationError(f"link {self.u}-{self.v}: delay and loss are not applied with delay mode off")
        netem = s.delay_mode == "netem" and retimed
        delay_now, loss_now = self._netem_now
        delay_now, loss_now = (delay_now if delay_s is None else delay_s, loss_now if loss is None else loss)
        for a, b in self.directions_from(first):
            intf, cmds = self.sender(a, b), []
            sends_here = a in self.here  # a link across hosts: each host changes what its end sends or receives
            if capacity_mbps is not None and sends_here:
                cmds += queues.rate_change(intf, capacity_mbps, queue=s.queue, mtu=s.mtu)
            if netem and sends_here:
                cmds += queues.netem_change(intf, s.netem(delay_now, loss_now), queue=s.queue)
            if cmds:
                shells[a].batch("tc", cmds)
            if s.delay_mode == "userspace" and retimed and b in self.here:
                self._retune(a, b, delay_s, loss)
        if netem:
            self._netem_now = (delay_now, loss_now)

    def _retune(self, a: str, b: str, delay_s: float | None, loss: float | None) -> None:
        """Tell direction a->b's delay line its new delay or loss (control file, then SIGUSR1)."""
        if (a, b) not in self.delay_lines:
            raise EmulationError(f"link {a}->{b} has no delay line to change (name it in `changing`)")
        line = self.delay_lines[(a, b)]
        assert line.spec.control is not None
        write_control(line.spec.control, delay_s, loss)
        line.proc.send_signal(signal.SIGUSR1)

    def set_state(self, shells: Mapping[str, HostShell], first: str, *, up: bool) -> int:
        """Take both ends down, ``first``'s first, or bring them back up. Returns the bytes the two htb queues still
        held when it went down, which the kernel drops with them (0 when bringing it up)."""
        lost = 0
        for a, b in self.directions_from(first):
            if a not in self.here:
                continue
            intf = self.sender(a, b)
            if not up:
                out = shells[a].cmd(f"tc -s qdisc show dev {intf}")
                lost += sum(int(n) for n in re.findall(r"backlog (\d+)b", out.split("qdisc", 2)[1]))
            shells[a].batch("ip", [f"link set dev {intf} {'up' if up else 'down'}"])
        return lost


def plan_links(graph: nx.Graph, nodes: Sequence[str], host_names: Sequence[str], shaping: LinkShaping,
               changing: Collection[frozenset[str]], here: Callable[[str], bool]) -> list[EmulatedLink]:
    """Every link of ``graph``, in one order every host of a run sees alike, with its two interfaces
    (``host_names[i]`` + ``-ethK``, K counting node ``nodes[i]``'s links) and the two addresses of its
    own ``/30``; ``here`` says which nodes run on this host. Whichever host builds it, a link
    gets the same names and addresses."""
    subnets = LINK_NET.subnets(new_prefix=30)
    ports = {node: 0 for node in nodes}
    links = []
    for u, v in sorted(graph.edges, key=lambda e: tuple(sorted(map(node_order, e)))):
        ips = (str(a) for a in list(next(subnets).hosts())[:2])
        ends = []
        for node, ip in zip((u, v), ips):
            ends.append(LinkEnd(node, f"{host_names[nodes.index(node)]}-eth{ports[node]}", ip))
            ports[node] += 1
        attrs = graph.edges[u, v]
        links.append(EmulatedLink((ends[0], ends[1]), float(attrs["capacity_mbps"]), float(attrs["delay_s"]),
                                  shaping, changing=frozenset((u, v)) in changing,
                                  here=frozenset(n for n in (u, v) if here(n))))
    return links


def htb_drops(shell: HostShell) -> dict[str, int]:
    """Packets each htb root of the host has dropped so far, by interface."""
    return {intf: int(n) for intf, n in _HTB_DROPS.findall(shell.cmd("tc -s qdisc show"))}



class DelayLines:
    """The userspace delay lines of every link direction u->v that has a delay to apply (or may
    get one), each holding packets at v's ingress interface: one process per direction."""

    def __init__(self, hops: Mapping[LinkDir, EmulatedLink], here: Callable[[str], bool] = lambda node: True) -> None:
        self._hops = hops
        self._here = here
        """Which nodes run on this host: a line holds packets at its receiver, so it runs where that does."""
        self._scratch: Path | None = None
        self.implementation = ""
        """``compiled``, or ``python (why the compiled line could not be built)``, once started."""

    def start(self, shells: Mapping[str, HostShell], spawn: Callable[..., Process],
              check: Callable[[], None], scratch: Path) -> None:
        """Start every line (``spawn``: :meth:`fedmst.net.emulation.Emulation.spawn`), install the
        rules that feed them and return once all have bound their queues (``check`` raises if one
        died). Compiled lines run as one process per core, each serving a share of the lines in
        their hosts' namespaces (a wake-up then releases the due packets of many lines); Python ones
        as one process per line, in its host. Their files go in ``scratch`` (a folder of the run's,
        which a dead run's clean-up removes)."""
        self._scratch = scratch
        scratch.mkdir(exist_ok=True)
        program, self.implementation = choose()
        rules: dict[str, list[tuple[str, int]]] = {}
        lines: list[tuple[LinkDir, EmulatedLink, LineSpec]] = []
        for seed, (u, v) in enumerate(sorted(self._hops, key=_hop_order)):
            link = self._hops[(u, v)]
            if link.needs_delay_lines() and self._here(v):
                queue = len(rules.setdefault(v, []))
                rules[v].append((link.sender(v, u), queue))
                lines.append(((u, v), link, link.delay_line(queue, seed, scratch / f"{u}-{v}")))
        if program is None:
            for (u, v), link, spec in lines:
                log = scratch / f"{u}-{v}.log"
                proc = spawn(v, "fedmst.net.delayline:main", spec.options(), env={}, log=log, name="delay", warm=False)
                link.delay_lines[(u, v)] = DelayLineProcess(proc, log, spec)
        else:
            processes = min(len(lines), os.cpu_count() or 1)
            for i in range(processes):
                share = lines[i::processes]
                log = scratch / f"lines{i}.log"
                served = [(f"/proc/{shells[v].pid}/ns/net", spec) for (_, v), _, spec in share]
                proc = spawn(None, "fedmst.net.delayline:run_compiled", compiled_command(program, served), env={},
                             log=log, name="delay", warm=False)
                for hop, link, spec in share:
                    link.delay_lines[hop] = DelayLineProcess(proc, log, spec)
        # one iptables-restore per node (while the lines start); nothing crosses a link before they bind
        for node, node_rules in rules.items():
            shells[node].iptables_restore([ingress_rules(node_rules)], f"installing the delay lines of node {node}")
        _wait_for_queues(shells, {node: len(node_rules) - 1 for node, node_rules in rules.items()}, check)

    def running(self) -> list[tuple[LinkDir, DelayLineProcess]]:
        """Every delay line by its link direction, in the order they were started."""
        lines = {hop: line for link in set(self._hops.values()) for hop, line in link.delay_lines.items()}
        return sorted(lines.items(), key=lambda item: _hop_order(item[0]))

    def close(self) -> dict[str, dict[str, object]]:
        """Forget the (stopped) lines and return what each wrote when it stopped, by ``u->v``."""
        stats: dict[str, dict[str, object]] = {}
        for (u, v), line in self.running():
            written = line.spec.stats
            if written is not None and written.exists():
                stats[f"{u}->{v}"] = json.loads(written.read_text())
        for link in self._hops.values():
            link.delay_lines.clear()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
        return stats


def _wait_for_queues(shells: Mapping[str, HostShell], last_queue: Mapping[str, int], check: Callable[[], None],
                     timeout_s: float = 60.0) -> None:
    """Return once every delay line has bound its queue: until then the kernel drops packets."""
    deadline = time.monotonic() + timeout_s
    for node, last in last_queue.items():
        table = Path(f"/proc/{shells[node].pid}/net/netfilter/nfnetlink_queue")
        while True:
            check()
            bound = {int(line.split()[0]) for line in table.read_text().splitlines()} if table.exists() else set()
            if set(range(last + 1)) <= bound:
                break
            if time.monotonic() > deadline:
                raise EmulationError(f"delay lines on node {node} did not bind their queues in {timeout_s:.0f} s")
            time.sleep(0.05)


def _hop_order(hop: LinkDir) -> tuple[object, object]:
    return node_order(hop[0]), node_order(hop[1])
