"""Each host's clock against the coordinator's.

Agents time their phases on their host's monotonic clock, and a run's phases start at a moment
the coordinator names on its own. Hosts' monotonic clocks share no origin, so each host's offset
is estimated once, before the rounds, the way Cristian's algorithm does it: read the host's clock
between two readings of the coordinator's, and trust the reading with the shortest round trip,
whose half is the error bound: half a Ray call's round trip, a few hundred microseconds on a LAN
(300-600 here, on a loaded 2-core host), far more than the clocks drift apart in a run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable


@dataclass(frozen=True)
class ClockOffset:
    """How far a host's monotonic clock is ahead of the coordinator's, within ``error_s``."""

    offset_s: float
    error_s: float


def estimate(samples: Iterable[tuple[float, float, float]]) -> ClockOffset:
    """The offset from (sent, remote, received) readings: the remote reading against the middle of
    the shortest round trip, whose half bounds the error.

    >>> found = estimate([(0.0, 10.5, 1.0), (2.0, 12.2, 2.25)])
    >>> round(found.offset_s, 3), round(found.error_s, 3)
    (10.075, 0.125)
    """
    sent, remote, received = min(samples, key=lambda s: s[2] - s[0])
    return ClockOffset(remote - (sent + received) / 2, (received - sent) / 2)


def measure(read_remote: Callable[[], float], readings: int = 20) -> ClockOffset:
    """Estimate a host's offset from ``readings`` calls of ``read_remote`` (its monotonic clock)."""
    samples = []
    for _ in range(readings):
        sent = time.monotonic()
        remote = read_remote()
        samples.append((sent, remote, time.monotonic()))
    return estimate(samples)
