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

from dataclasses import dataclass, replace
from typing import Sequence

import networkx as nx

from fedmst.core.linktrace import LinkChange
from fedmst.core.traffic import BackgroundFlow

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
    seconds), its transfers, and the packets its weights and their ACKs put on the links."""

    seconds: float
    transfers: int
    packets: float


@dataclass(frozen=True)
class HostCosts:
    """The host's CPU seconds per transfer (the agents' set-up of one, whatever its size) and per
    packet on a link (each passes a delay line at its receiver, and the kernel's forwarding), as
    measured on a host where one emulated link carried ``ceiling_mbps``."""

    per_transfer_s: float
    per_packet_s: float
    ceiling_mbps: float

    def on_host(self, ceiling_mbps: float | None) -> HostCosts:
        """These costs on a host whose link ceiling is ``ceiling_mbps`` (a faster host forwards and
        wakes faster; None: not known, the costs as measured).

        >>> HostCosts(0.002, 3e-5, 1000.0).on_host(2000.0)
        HostCosts(per_transfer_s=0.001, per_packet_s=1.5e-05, ceiling_mbps=2000.0)
        """
        if not ceiling_mbps:
            return self
        faster = ceiling_mbps / self.ceiling_mbps
        return HostCosts(self.per_transfer_s / faster, self.per_packet_s / faster, ceiling_mbps)


MEASURED_COSTS = {
    "compiled": HostCosts(per_transfer_s=0.002, per_packet_s=2e-5, ceiling_mbps=2130.0),
    "python": HostCosts(per_transfer_s=0.0015, per_packet_s=3e-5, ceiling_mbps=2546.0),
}
"""By the delay line a run has, ``scripts/bench_dataplane.py`` on the 2-core development machine
(docs/time-scale.md), with that boot's link ceiling: the agents' CPU per transfer at the poster's
scale (2.0-3.1 ms on 2026-11-26, where 2.0 ms kept every phase of the default sweep within 5% of
its prediction; 1.9-2.6 ms at scales 8 and 16 on 2026-11-27, with the idle loops slowed; 1.5-1.9
ms on 2026-11-25) and the delay lines' per packet (the compiled line's 11-26 µs and the Python
line's 14-44 µs; since they release nothing early, 13-33 µs and 28-83 µs on 2026-11-27, the
compiled line's 19-21 µs at the poster's point; the README's main job, run three times at scale 1, had
its phases within 7% of their prediction but SPFF's broadcast once, 11% over with 78 packets
lost to its star's queues)."""
PACKET_BUSY = 0.8
"""Above this share of the host's CPUs for the packets, a phase's bulk transfers slow down."""
TRANSFER_BUSY = 0.15
"""Above this share for the transfers' own costs, many small transfers queue for the CPU and
each one's latency grows (measured: the poster's point kept 1.3x its prediction at 57-88% busy)."""
LINK_SHARE = 0.5
"""The most of one emulated link's ceiling a slowed link may ask for."""
MAX_AUTO = 512


def pick_scale(phases: Sequence[PhaseLoad], costs: HostCosts, *, cores: int, fastest_mbps: float,
               ceiling_mbps: float | None) -> tuple[int, str]:
    """The time scale a run needs so that its host keeps up, with the reason (for the console):
    the smallest power of two at which, in every transfer phase, the packets take at most
    :data:`PACKET_BUSY` of the host's ``cores``, the transfers' fixed costs at most
    :data:`TRANSFER_BUSY`, and the ``fastest_mbps`` link at most :data:`LINK_SHARE` of the
    ``ceiling_mbps`` one emulated link carries (None: not known). 1 where the host keeps up.

    >>> costs = MEASURED_COSTS["compiled"]
    >>> bulk = PhaseLoad(seconds=1.61, transfers=8, packets=84_000)  # the README's main job, SPFF
    >>> pick_scale([bulk], costs, cores=2, fastest_mbps=100, ceiling_mbps=2130)
    (1, 'the host keeps up')
    >>> many = PhaseLoad(seconds=0.144, transfers=450, packets=23_000)  # 30 tasks of 15 local models
    >>> pick_scale([many], costs, cores=2, fastest_mbps=100, ceiling_mbps=2130)
    (32, "450 transfers' fixed costs in 0.144 s")
    >>> pick_scale([bulk], costs, cores=2, fastest_mbps=10_000, ceiling_mbps=2130)
    (16, '10000 Mbit/s links against 2130 Mbit/s one link carries here')
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
    if ceiling_mbps:
        needs.append((fastest_mbps / (LINK_SHARE * ceiling_mbps),
                      f"{fastest_mbps:g} Mbit/s links against {ceiling_mbps:g} Mbit/s one link carries here"))
    need, why = max(needs)
    scale = 1
    while scale < min(need, MAX_AUTO):
        scale *= 2
    return scale, why


REAL_TIME = TimeScale()
"""No slowing: the emulation runs at the network's own speed."""

__all__ = ["MEASURED_COSTS", "REAL_TIME", "TCP_RTO_MIN_S", "HostCosts", "PhaseLoad", "TimeScale", "pick_scale"]
