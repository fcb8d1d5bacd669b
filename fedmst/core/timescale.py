"""Virtual time: the emulation runs N times slower than the network it stands for.

A host runs out of CPU long before the links it emulates do when many transfers run at once or
the links are fast; then a phase measures the host, not the network. Time-warped emulation
(Gupta et al., "To Infinity and Beyond: Time-Warped Network Emulation", NSDI 2006) slows the
whole emulated world down instead: every capacity is divided by N and every delay multiplied by
N, so each packet has N times longer on the host, while every time the run measures, divided by
N, is the network's own. Bytes do not change.

:class:`TimeScale` is the one place that converts between the two clocks: the run's
configuration and every report speak the network's seconds and Mbit/s; only what reaches the
kernel, the delay lines, the background senders and the agents' timers is real.

>>> scale = TimeScale(4)
>>> scale.real_s(0.5), scale.network_s(2.0), scale.real_mbps(100.0)
(2.0, 0.5, 25.0)
>>> TimeScale().slowed
False
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Collection, Sequence

import networkx as nx

from fedmst.core.linktrace import LinkChange
from fedmst.core.plan import Phase, Plan
from fedmst.core.traffic import BackgroundFlow
from fedmst.core.wire import ETH_HEADER, wire_bytes

TCP_RTO_MIN_S = 0.2
"""Linux's floor on TCP's retransmission timeout (``TCP_RTO_MIN``): it does not follow the
slowed round-trip times by itself, so a slowed run raises it per route (``rto_min``)."""


@dataclass(frozen=True)
class TimeScale:
    """The emulation runs ``factor`` times slower than the network it reports on (1: real time)."""

    factor: float = 1.0

    @property
    def slowed(self) -> bool:
        return self.factor != 1.0

    def real_s(self, network_s: float) -> float:
        """How long ``network_s`` of the network lasts on the host."""
        return network_s * self.factor

    def network_s(self, real_s: float) -> float:
        """What ``real_s`` measured on the host is in the network's time."""
        return real_s / self.factor

    def real_mbps(self, network_mbps: float) -> float:
        """The rate the host carries for a network rate of ``network_mbps``."""
        return network_mbps / self.factor

    def rto_min_s(self) -> float | None:
        """TCP's retransmission-timeout floor for a slowed run's routes (None: leave the kernel's)."""
        return self.real_s(TCP_RTO_MIN_S) if self.slowed else None

    def graph(self, graph: nx.Graph) -> nx.Graph:
        """``graph`` as the host emulates it: capacities divided, propagation delays multiplied.

        >>> g = nx.Graph(); g.add_edge("a", "b", capacity_mbps=100.0, delay_s=0.001)
        >>> TimeScale(10).graph(g).edges["a", "b"]
        {'capacity_mbps': 10.0, 'delay_s': 0.01}
        >>> g.edges["a", "b"]["capacity_mbps"]  # the run's graph is left as it is
        100.0
        """
        slowed = graph.copy()
        for _, _, attrs in slowed.edges(data=True):
            attrs["capacity_mbps"] = self.real_mbps(float(attrs["capacity_mbps"]))
            attrs["delay_s"] = self.real_s(float(attrs["delay_s"]))
        return slowed

    def flow(self, flow: BackgroundFlow) -> BackgroundFlow:
        """A background flow as the host sends it: its rate divided, its start and end later.

        >>> TimeScale(2).flow(BackgroundFlow("a", "c", 20.0, start_s=1.0, end_s=3.0))
        BackgroundFlow(src='a', dst='c', mbps=10.0, protocol='udp', start_s=2.0, end_s=6.0)
        """
        return replace(flow, mbps=self.real_mbps(flow.mbps), start_s=self.real_s(flow.start_s),
                       end_s=None if flow.end_s is None else self.real_s(flow.end_s))

    def change(self, change: LinkChange) -> LinkChange:
        """A link trace's change as the host applies it: later, to a lower capacity, a longer delay.

        >>> TimeScale(5).change(LinkChange(2.0, ("a", "b"), capacity_mbps=50.0, delay_ms=4.0, loss=0.01))
        LinkChange(at_s=10.0, link=('a', 'b'), capacity_mbps=10.0, delay_ms=20.0, loss=0.01)
        """
        return replace(change, at_s=self.real_s(change.at_s),
                       capacity_mbps=None if change.capacity_mbps is None else self.real_mbps(change.capacity_mbps),
                       delay_ms=None if change.delay_ms is None else self.real_s(change.delay_ms))

    def describe(self, graph: nx.Graph) -> str:
        """One line for the console: what the host runs, and whose times the run reports.

        >>> g = nx.Graph(); g.add_edge("a", "b", capacity_mbps=100.0, delay_s=0.001)
        >>> TimeScale(12).describe(g)
        "time scale 12: 100 Mbit/s links run at 8.333 Mbit/s; times are the network's"
        """
        speeds = sorted({float(c) for _, _, c in graph.edges(data="capacity_mbps")})
        shown = ", ".join(f"{c:g}" for c in speeds[:3]) + (", ..." if len(speeds) > 3 else "")
        slowed = ", ".join(f"{self.real_mbps(c):.4g}" for c in speeds[:3]) + (", ..." if len(speeds) > 3 else "")
        return f"time scale {self.factor:g}: {shown} Mbit/s links run at {slowed} Mbit/s; times are the network's"


@dataclass(frozen=True)
class PhaseLoad:
    """What one transfer phase of a run asks of the host: its predicted length (the network's
    seconds), its transfers, the packets its weights and their ACKs put on the links (one per
    link they cross), the weights' bytes the agents move (each transfer's payload sent at its
    source and received, relayed or summed, at its destination), in all and at the busiest node,
    and the shortest link delay it crosses."""

    seconds: float
    transfers: int
    packets: float
    agent_bytes: float = 0.0
    busiest_agent_bytes: float = 0.0
    shortest_delay_s: float = math.inf
    """The shortest propagation delay of the links with delay lines its transfers cross (the network's seconds)."""


ACKS_PER_PACKET = 0.5
"""A receiver acknowledges every second full segment: half a packet back for every one sent."""


def phase_load(plans: Sequence[Plan], phase: Phase, seconds: float, *, mtu: int,
               graph: nx.Graph | None = None, on: Collection[str] | None = None) -> PhaseLoad:
    """What ``plans``' ``phase``, predicted to last ``seconds``, asks of the host (on ``graph``,
    whose links' ``delay_s`` give the shortest delay crossed that a delay line holds; without it,
    none is known); ``on``: of the host that holds only these nodes (one host of a run spread over
    several: the weights its nodes' agents move, the packets its links' receiving ends take with
    their delay lines, the transfers that start or end there).

    >>> from fedmst.core.plan import Plan, Transfer
    >>> from fedmst.core.tasks import Task
    >>> task = Task("t", "a", ("c",), 1_000_000)
    >>> chain = Plan("x", task, (Transfer("broadcast", ("a", "b"), frozenset({0})),
    ...                          Transfer("broadcast", ("b", "c"), frozenset({0}))))
    >>> g = nx.Graph(); g.add_edge("a", "b", delay_s=0.002); g.add_edge("b", "c", delay_s=0.0005)
    >>> load = phase_load([chain], "broadcast", 0.1, mtu=1500, graph=g)
    >>> load.transfers, round(load.packets), load.agent_bytes, load.busiest_agent_bytes, load.shortest_delay_s
    (2, 2072, 4000000.0, 2000000.0, 0.0005)
    >>> here = phase_load([chain], "broadcast", 0.1, mtu=1500, graph=g, on={"c"})  # a host holding c alone
    >>> here.transfers, round(here.packets), here.agent_bytes, here.shortest_delay_s
    (1, 1036, 1000000.0, 0.0005)
    """
    moved: dict[str, float] = defaultdict(float)
    frames = 0.0
    transfers = 0
    delays = [math.inf]
    for plan in plans:
        for t in plan.phase(phase):
            payload = t.payload(plan.task.model_bytes)
            ends = [n for n in (t.src, t.dst) if on is None or n in on]
            for n in ends:
                moved[n] += payload
            transfers += bool(ends)
            hops = [(u, v) for u, v in t.hops if on is None or v in on]
            frames += wire_bytes(payload, mtu) / (mtu + ETH_HEADER) * len(hops)
            if graph is not None:  # of the links with delay lines
                delays += [d for u, v in hops if (d := float(graph.edges[u, v]["delay_s"])) >= DELAY_LINE_FLOOR_S]
    return PhaseLoad(seconds=seconds, transfers=transfers,
                     packets=frames * (1 + ACKS_PER_PACKET), agent_bytes=sum(moved.values()),
                     busiest_agent_bytes=max(moved.values(), default=0.0), shortest_delay_s=min(delays))


@dataclass(frozen=True)
class HostCosts:
    """The host's CPU seconds per transfer (the agents' set-up of one, whatever its size), per
    packet on a link (each passes a delay line at its receiver, and the kernel's forwarding) and
    per byte of weights an agent moves (sends, receives, relays or sums: gloo's copies and the
    agent's chunk by chunk handling), as measured on a host where one emulated link carried
    ``ceiling_mbps``."""

    per_transfer_s: float
    per_packet_s: float
    per_agent_byte_s: float
    ceiling_mbps: float

    def on_host(self, ceiling_mbps: float | None) -> HostCosts:
        """These costs on a host whose link ceiling is ``ceiling_mbps``: higher where it carries
        less than the host they were measured on, never lower (None: not known, the costs as
        measured). A ceiling above the reference's is no sign that agents and wake-ups cost less:
        one boot of the development machine measured 4,719 Mbit/s, twice the reference, and the
        phases that costs scaled down by it let through ran up to 1.76 times their prediction.

        >>> HostCosts(0.002, 3e-5, 5e-9, 1000.0).on_host(500.0)
        HostCosts(per_transfer_s=0.004, per_packet_s=6e-05, per_agent_byte_s=1e-08, ceiling_mbps=500.0)
        >>> HostCosts(0.002, 3e-5, 5e-9, 1000.0).on_host(2000.0).per_packet_s
        3e-05
        """
        if not ceiling_mbps or ceiling_mbps >= self.ceiling_mbps:
            return self
        slower = self.ceiling_mbps / ceiling_mbps
        return HostCosts(self.per_transfer_s * slower, self.per_packet_s * slower, self.per_agent_byte_s * slower,
                         ceiling_mbps)


MEASURED_COSTS = {
    "compiled": HostCosts(per_transfer_s=0.0015, per_packet_s=2e-5, per_agent_byte_s=5e-9, ceiling_mbps=2130.0),
    "python": HostCosts(per_transfer_s=0.0015, per_packet_s=3e-5, per_agent_byte_s=5e-9, ceiling_mbps=2546.0),
}
"""By the delay line a run has, ``scripts/bench_dataplane.py`` on the 2-core development machine
(docs/time-scale.md), with that boot's link ceiling: the agents' CPU per transfer at the poster's
scale (2.0-3.1 ms on 2026-11-26; 1.9-2.6 ms at scales 8 and 16 on 2026-11-27, with the idle loops
slowed; 1.1-1.5 ms at scales 8 to 32 later that day, ``scripts/bench_timescale.py``'s poster cases;
1.5-1.9 ms on 2026-11-25) and the delay lines' per packet (the compiled line's 11-26 µs and the Python
line's 14-44 µs; since they release nothing early, 13-33 µs and 28-83 µs on 2026-11-27, the
compiled line's 19-21 µs at the poster's point). Per byte an agent moves, ``scripts/bench_timescale.py``
on 2026-11-27: the agents' CPU over the bytes they sent and received in a phase, 2.3-5.3 ns in
bulk phases (forwarding least, summing most), 5.0-5.6 ns in a 10 Gbit/s line's upload."""
PACKET_BUSY = 0.8
"""Above this share of the host's CPUs for the packets, a phase's bulk transfers slow down."""
TRANSFER_BUSY = 0.15
"""Above this share for the transfers' own costs, many small transfers queue for the CPU and
each one's latency grows (measured: the poster's point kept 1.3x its prediction at 57-88% busy)."""
AGENT_BUSY = 0.3
"""Above this share for the agents' handling of the weights' bytes, a phase slows down although
the host is far from busy: relays receive, sum and forward chunk by chunk on the phase's critical
path, and each waits for a core (docs/time-scale.md: a 10 Gbit/s line's upload at 35% took 1.24x
its prediction, NSFNET's MST phases at 29% 1.03x)."""
LINK_SHARE = 0.5
"""The most of one emulated link's ceiling a slowed link may ask for."""
DELAY_LINE_FLOOR_S = 1e-4
"""A delay line releases a packet up to about 0.1 ms late, so a link shorter than that (a fabric's
2 km fibre is 10 µs) gets none: the kernel's own forwarding latency, tens of µs, stands closer to
its delay than a line would (:func:`without_delay_lines`). The network's seconds: a slowed run
does not give it one either."""


def without_delay_lines(graph: nx.Graph) -> list[tuple[str, str]]:
    """The links of ``graph`` too short for a delay line (:data:`DELAY_LINE_FLOOR_S`), which run
    with no delay of their own.

    >>> g = nx.Graph(); g.add_edge("l0", "s0", delay_s=1e-5); g.add_edge("s0", "l1", delay_s=0.002)
    >>> without_delay_lines(g)
    [('l0', 's0')]
    """
    return [(u, v) for u, v, d in graph.edges(data="delay_s") if 0 < float(d) < DELAY_LINE_FLOOR_S]


SHORTEST_DELAY_S = 1e-3
"""The shortest link delay, on the host's clock, that the delay lines hold faithfully: they release a
packet up to about 0.1 ms late on an idle host (more on a busy one), so a shorter link runs with
a longer and more variable delay than it stands for, and flows that share a FIFO link split it by
their distorted round trips rather than evenly. Measured on Geant2012 under hier (shortest link
0.275 ms), whose broadcast waits on the slowest of four flows sharing a link: on an idle 16-core
host 0.93-1.24 times its prediction at scale 1 and 1.00-1.15 at 2, 0.93-0.95 at 4; on the 2-core
host 0.93-1.16 at 2 and 0.93-1.01 at 4 (docs/time-scale.md)."""
ONE_AGENT_CORE = 1
"""An agent moves its weights on one core at a time (gloo's copies and its chunk loop): a relay's
bytes must fit one core whatever the host has."""
MAX_AUTO = 512


def pick_scale(phases: Sequence[PhaseLoad], costs: HostCosts, *, cores: int, fastest_mbps: float,
               ceiling_mbps: float | None, delay_lines: bool = True) -> tuple[int, str]:
    """The time scale a run needs so that its host keeps up, with the reason (for the console):
    the smallest power of two at which, in every transfer phase, the packets take at most
    :data:`PACKET_BUSY` of the host's ``cores``, the transfers' fixed costs at most
    :data:`TRANSFER_BUSY`, the agents' handling of the weights at most :data:`AGENT_BUSY` (of the
    ``cores`` for all of them, and of one core for the busiest agent), the shortest link delay
    crossed is at least :data:`SHORTEST_DELAY_S` on the host's clock where ``delay_lines`` apply
    the delays, and the ``fastest_mbps`` link at most :data:`LINK_SHARE` of the ``ceiling_mbps``
    one emulated link carries (None: not known). 1 where the host keeps up.

    >>> costs = MEASURED_COSTS["compiled"]
    >>> bulk = PhaseLoad(seconds=0.614, transfers=8, packets=42_007, agent_bytes=72.1e6)  # README's job, MST
    >>> pick_scale([bulk], costs, cores=2, fastest_mbps=100, ceiling_mbps=2130)
    (1, 'the host keeps up')
    >>> many = PhaseLoad(seconds=0.144, transfers=450, packets=23_000)  # 30 tasks of 15 local models
    >>> pick_scale([many], costs, cores=2, fastest_mbps=100, ceiling_mbps=2130)
    (16, "450 transfers' fixed costs in 0.144 s")
    >>> line = PhaseLoad(seconds=0.0403, transfers=2, packets=93_695, agent_bytes=181e6,  # 10 Gbit/s, mlp-xl
    ...                  busiest_agent_bytes=90.4e6)
    >>> pick_scale([line], costs, cores=2, fastest_mbps=10_000, ceiling_mbps=2130)
    (64, '181 MB through the agents in 0.0403 s')
    >>> pick_scale([line], costs, cores=16, fastest_mbps=10_000, ceiling_mbps=2130)  # a relay has one core
    (64, '90.4 MB through one agent in 0.0403 s')
    >>> geant = PhaseLoad(seconds=1.77, transfers=16, packets=196_034, shortest_delay_s=0.000275)
    >>> pick_scale([geant], costs, cores=16, fastest_mbps=100, ceiling_mbps=2130)
    (4, '0.275 ms links against the delay lines')
    """
    needs = [(1.0, "the host keeps up")]
    for p in phases:
        if p.seconds <= 0:
            continue
        budget = cores * p.seconds
        needs.append((p.packets * costs.per_packet_s / (PACKET_BUSY * budget),
                      f"{p.packets:,.0f} packets in {p.seconds:.3g} s"))
        needs.append((p.transfers * costs.per_transfer_s / (TRANSFER_BUSY * budget),
                      f"{p.transfers} transfers' fixed costs in {p.seconds:.3g} s"))
        needs.append((p.agent_bytes * costs.per_agent_byte_s / (AGENT_BUSY * budget),
                      f"{p.agent_bytes / 1e6:,.0f} MB through the agents in {p.seconds:.3g} s"))
        needs.append((p.busiest_agent_bytes * costs.per_agent_byte_s / (AGENT_BUSY * ONE_AGENT_CORE * p.seconds),
                      f"{p.busiest_agent_bytes / 1e6:,.3g} MB through one agent in {p.seconds:.3g} s"))
        if delay_lines and p.shortest_delay_s > 0:
            needs.append((SHORTEST_DELAY_S / p.shortest_delay_s,
                          f"{p.shortest_delay_s * 1e3:.3g} ms links against the delay lines"))
    if ceiling_mbps:
        needs.append((fastest_mbps / (LINK_SHARE * ceiling_mbps),
                      f"{fastest_mbps:g} Mbit/s links against {ceiling_mbps:g} Mbit/s one link carries here"))
    need, why = max(needs)
    return power_of_two(min(need, MAX_AUTO)), why


def power_of_two(need: float) -> int:
    """The smallest power of two at least ``need`` (1 for anything up to 1): the scales auto picks.

    >>> power_of_two(0.3), power_of_two(1.0), power_of_two(2.000001), power_of_two(16)
    (1, 1, 4, 16)
    """
    scale = 1
    while scale < need:
        scale *= 2
    return scale


HOST_BOUND_RATIO = 1.2
"""A transfer phase that takes more than this times its prediction ..."""
HOST_BOUND_CORES = 0.9
"""... while the host's CPUs were busy for at least this many cores' worth on average is reported
as bound by the host: a slow phase on an idle host is TCP's or the plan's (a loss, a rendezvous),
one on a busy host its CPUs' (one core's worth covers a single relay or line that cannot keep up)."""
SATURATED = 0.95
"""A transfer phase with the host's CPUs at least this busy is bound by the host whatever its
prediction says: it ran as fast as the host could, and a prediction it beat was too pessimistic
(a ring's synchronous steps on Geant2012 measured 0.83x at 98% busy, 0.42x slowed twice)."""


def keeps_up_at(factor: float, ratio: float, busy: float, *, cores: int) -> int | None:
    """The time scale at which a transfer phase that ran at ``factor`` and took ``ratio`` times its
    prediction with the host's ``cores`` CPUs ``busy`` (0-1) would have kept up; None where the
    host did not bind it (:data:`HOST_BOUND_RATIO` with :data:`HOST_BOUND_CORES`, or :data:`SATURATED`).

    The phase's CPU time (``busy`` x ``cores`` x its real length) spread over the prediction's real
    length at the new scale takes at most :data:`PACKET_BUSY` of the cores, and the scale at least
    doubles: a phase bound by one process's core is less busy than its host.

    >>> keeps_up_at(1, ratio=1.64, busy=0.87, cores=2)  # Geant2012 under MST in real time
    2
    >>> keeps_up_at(1, ratio=8.0, busy=0.99, cores=2)  # the poster's point in real time
    16
    >>> keeps_up_at(16, ratio=1.15, busy=0.5, cores=2) is None  # within the rule
    True
    >>> keeps_up_at(8, ratio=1.5, busy=0.2, cores=2) is None  # an idle host: not the host's doing
    True
    >>> keeps_up_at(1, ratio=0.83, busy=0.98, cores=2)  # faster than predicted, on saturated CPUs
    2
    """
    if busy < SATURATED and (ratio <= HOST_BOUND_RATIO or busy * cores < HOST_BOUND_CORES):
        return None
    return power_of_two(max(2 * factor, factor * ratio * busy / PACKET_BUSY))


REAL_TIME = TimeScale()
"""No slowing: the emulation runs at the network's own speed."""

__all__ = ["DELAY_LINE_FLOOR_S", "HOST_BOUND_CORES", "HOST_BOUND_RATIO", "MEASURED_COSTS", "REAL_TIME", "SATURATED",
           "SHORTEST_DELAY_S", "TCP_RTO_MIN_S", "HostCosts", "PhaseLoad", "TimeScale", "keeps_up_at", "phase_load",
           "pick_scale", "power_of_two", "without_delay_lines"]
