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
        "time scale 12: 100 Mbit/s links run at 8.33 Mbit/s; times are the network's"
        """
        speeds = sorted({float(c) for _, _, c in graph.edges(data="capacity_mbps")})
        shown = ", ".join(f"{c:g}" for c in speeds[:3]) + (", ..." if len(speeds) > 3 else "")
        slowed = ", ".join(f"{self.real_mbps(c):.3g}" for c in speeds[:3]) + (", ..." if len(speeds) > 3 else "")
        return f"time scale {self.factor:g}: {shown} Mbit/s links run at {slowed} Mbit/s; times are the network's"


REAL_TIME = TimeScale()
"""No slowing: the emulation runs at the network's own speed."""

__all__ = ["REAL_TIME", "TCP_RTO_MIN_S", "TimeScale"]
