"""When a transfer has stalled: its bytes stopped moving, not merely slowed down.

How long one chunk waits says nothing about a link: on a link shared by hundreds of transfers (the
poster's 30 tasks x 15 local models keep queues full for a minute under SPFF) a chunk may wait
many seconds and still arrive. So the coordinator judges by the link counters, which only it
sees: a transfer has stalled when

- it is still under way (its receiver has not marked its last chunk in),
- its sender has had all it must send for at least ``stall_s`` (every transfer it forwards or
  sums, and every earlier step at its source, has arrived, see :func:`fedmst.core.plan.waits_on`):
  a relay waiting on a slow upstream is not stalled, its upstream is judged instead,
- and a link direction on its path has carried no byte at all, from any transfer, for ``stall_s``.

A busy link always moves; a link that is down, or a path that lost its route, does not. Pure: the
engine feeds it counter readings and arrival marks, each with the time it was taken.

>>> from fedmst.protocol import TaskSpec, TransferSpec
>>> down = TransferSpec("t-000-broadcast", "broadcast", ("g", "r", "a"), (0,), "10.0.0.1", "10.0.0.2", None, 0,
...                     "global", "t-c000", 0)
>>> task = TaskSpec("t", "g", ("a",), 0, (0,), (down,))
>>> watch = StallWatch([task], "broadcast", stall_s=2.0, start=0.0)
>>> watch.observe(0.0, {("g", "r"): 0, ("r", "a"): 0})
>>> watch.observe(3.0, {("g", "r"): 5000, ("r", "a"): 0})
>>> print(watch.stalled(3.0))
transfer t-000-broadcast stalled: link r->a on its path carried nothing for 3.0 s
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from fedmst.core.plan import LinkDir, waits_on
from fedmst.protocol import TaskSpec


@dataclass(frozen=True)
class Stall:
    transfer: str
    hop: LinkDir
    idle_s: float
    at: float
    """When it was found (the clock of the readings)."""

    def __str__(self) -> str:
        u, v = self.hop
        return f"transfer {self.transfer} stalled: link {u}->{v} on its path carried nothing for {self.idle_s:.1f} s"


class StallWatch:
    """Watches one transfer phase of every task for a stalled transfer."""

    def __init__(self, tasks: Sequence[TaskSpec], phase: str, *, stall_s: float, start: float) -> None:
        self.stall_s, self.start = stall_s, start
        self.hops: dict[str, tuple[LinkDir, ...]] = {}
        self.waits: dict[str, list[str]] = {}
        for task in tasks:
            transfers = [t for t in task.transfers if t.phase == phase]
            for t in transfers:
                self.hops[t.key] = t.hops
                self.waits[t.key] = [f.key for f in waits_on(t, transfers)]
        self.arrived: dict[str, float] = {}
        self.moved: dict[LinkDir, float] = {}
        """Link direction -> the last reading that found its counter higher than the one before."""
        self._last: dict[LinkDir, int] = {}

    def observe(self, now: float, counters: Mapping[LinkDir, int]) -> None:
        """Take a reading of every link direction's byte counter."""
        for hop, n in counters.items():
            if hop in self._last and n != self._last[hop]:
                self.moved[hop] = now
        self._last = dict(counters)

    def arrive(self, keys: Iterable[str], now: float) -> None:
        """Transfers whose receivers marked their last chunk in (seen at ``now``)."""
        for key in keys:
            self.arrived.setdefault(key, now)

    @property
    def pending(self) -> list[str]:
        return [key for key in self.hops if key not in self.arrived]

    def ready_since(self, key: str) -> float | None:
        """Since when ``key``'s sender has had everything it must send; None while a transfer it
        forwards or sums is still under way."""
        times = [self.arrived.get(f) for f in self.waits[key]]
        if any(t is None for t in times):
            return None
        return max([self.start, *(t for t in times if t is not None)])

    def stalled(self, now: float) -> Stall | None:
        """The first stalled transfer, or None."""
        for key in self.pending:
            ready = self.ready_since(key)
            if ready is None or now - ready < self.stall_s:
                continue
            for hop in self.hops[key]:
                idle = now - max(ready, self.moved.get(hop, self.start))
                if idle >= self.stall_s:
                    return Stall(key, hop, idle, now)
        return None
