"""A run's state as it goes, for ``--live`` and ``fedmst watch``: ``live.json`` in the run folder.

The counter sampler reads every link direction's byte counter every 100 ms of the network's time
while a phase runs; :class:`LivePublisher` listens to it and, at most four times a second of the
host's time and at each phase's end (with that phase's last counters), replaces ``live.json``
(atomically: a reader never sees half a file) with the round and phase, each link direction's
rate now and its bytes in this phase against the plan's, the link directions that carry nothing
while their transfers are unfinished, and the host's CPU busy. The viewer
(:mod:`fedmst.views.live`) only reads that file, so a run shows the same in its own terminal and
in another one.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import psutil

from fedmst.core.route import LinkDir
from fedmst.errors import FedmstError

LIVE_FILE = "live.json"
PUBLISH_S = 0.25
"""Host seconds between two writes of ``live.json``."""
QUIET_S = 1.0
"""Network seconds a link direction with an unfinished transfer may carry nothing before it is
shown as quiet (what the stall watch looks for, long before it gives a phase up)."""


@dataclass(frozen=True)
class LinkNow:
    """One link direction now: its rate over the last sample (the network's bytes per second), its
    capacity, and the bytes it carried in this phase against what the plan puts on it."""

    src: str
    dst: str
    rate_bps: float
    capacity_bps: float
    phase_bytes: int
    planned_bytes: int


@dataclass(frozen=True)
class LiveStatus:
    """What ``live.json`` holds."""

    run_dir: str
    scheduler: str
    topology: str
    coordinator: int
    """The run's process: a watcher stops when it is gone, whatever the file says."""
    rounds: int
    round: int = 0
    phase: str = "setting up"
    t_s: float = 0.0
    """The network's seconds since the first round began."""
    time_scale: float = 1.0
    cpu_busy: float = 0.0
    links: tuple[LinkNow, ...] = ()
    """Every link direction, busiest first."""
    quiet: tuple[str, ...] = ()
    """``src->dst`` of the directions carrying nothing while a planned transfer on them is unfinished."""
    finished: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str, source: str = LIVE_FILE) -> LiveStatus:
        try:
            obj = json.loads(text)
            return cls(**{**obj, "links": tuple(LinkNow(**link) for link in obj.get("links", ())),
                          "quiet": tuple(obj.get("quiet", ()))})
        except (ValueError, TypeError, AttributeError) as exc:
            raise FedmstError(f"{source}: not a fedmst live state ({' '.join(str(exc).split())})") from None


def read_status(run_dir: Path) -> LiveStatus | None:
    """The run's live state, or None where it has none (yet)."""
    path = run_dir / LIVE_FILE
    try:
        return LiveStatus.from_json(path.read_text(), str(path))
    except FileNotFoundError:
        return None


@dataclass
class LivePublisher:
    """Turns the sampler's counter readings into ``live.json``.

    ``planned(round, phase)``: the bytes the plans put on each link direction in that phase.
    """

    out: Path
    base: LiveStatus
    capacity_bps: Mapping[LinkDir, float]
    planned: Callable[[int, str], Mapping[LinkDir, int]]
    _key: tuple[int, str] | None = None
    _start: dict[LinkDir, int] = field(default_factory=dict)
    _last: tuple[float, dict[LinkDir, int]] | None = None
    """The latest reading (the network's seconds, counters), written or not."""
    _rates: dict[LinkDir, float] = field(default_factory=dict)
    _moved: dict[LinkDir, float] = field(default_factory=dict)
    _cpu: float = 0.0
    _written: float = 0.0
    _broken: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        psutil.cpu_percent(None)  # the first call only starts the count
        with self._lock:
            self._write(self.base)

    def observe(self, t_s: float, round_: int, phase: str, counters: Mapping[LinkDir, int],
                final: bool = False) -> None:
        """One sample: ``counters`` read at ``t_s`` (the network's seconds) in ``round_``'s ``phase``.
        Written at most every ``PUBLISH_S``, except ``final``, the reading that ends the phase: it
        is always written, so the frame a phase (and the run) ends on holds the phase's last counters."""
        with self._lock:
            if (round_, phase) != self._key:
                self._key, self._start, self._last = (round_, phase), dict(counters), None
                self._moved = {hop: t_s for hop in counters}
            self._rates = {hop: 0.0 for hop in counters}
            if self._last is not None and t_s > self._last[0]:
                then, before = self._last
                self._rates = {hop: (n - before.get(hop, n)) / (t_s - then) for hop, n in counters.items()}
                self._moved.update({hop: t_s for hop, n in counters.items() if n != before.get(hop, n)})
            self._last = (t_s, dict(counters))
            now = time.monotonic()
            if not final and self._written and now - self._written < PUBLISH_S:
                return
            self._cpu = psutil.cpu_percent(None) / 100
            self._write(self._status())
            self._written = now

    def finish(self, outcome: str = "finished") -> None:
        """The run is over: say so (a watcher exits), keeping the links of the latest reading (not
        the latest written: a reading the throttle skipped is still the run's last word)."""
        with self._lock:
            last = self._status()
            self._write(replace(last, phase=outcome, finished=True, links=tuple(
                replace(link, rate_bps=0.0) for link in last.links), quiet=()))

    def _status(self) -> LiveStatus:
        """The live state of the latest reading (the base one before any; the caller holds the lock)."""
        if self._key is None or self._last is None:
            return self.base
        (round_, phase), (t_s, counters) = self._key, self._last
        planned = self.planned(round_, phase)
        links = tuple(sorted((LinkNow(u, v, self._rates[u, v], self.capacity_bps.get((u, v), 0.0),
                                      n - self._start.get((u, v), n), int(planned.get((u, v), 0)))
                              for (u, v), n in counters.items()),
                             key=lambda link: (-link.rate_bps, -link.phase_bytes)))
        quiet = tuple(f"{link.src}->{link.dst}" for link in links
                      if link.planned_bytes and link.phase_bytes < 0.99 * link.planned_bytes
                      and t_s - self._moved.get((link.src, link.dst), t_s) >= QUIET_S)
        return replace(self.base, round=round_, phase=phase, t_s=t_s, cpu_busy=self._cpu, links=links, quiet=quiet)

    def _write(self, status: LiveStatus) -> None:
        """Replace ``live.json`` (the caller holds the lock, so one temporary name serves). The live
        view is a window on the run, never a reason to stop it: a folder that cannot be written
        ends the publishing, and the run finds out for itself when it next writes its results."""
        if self._broken:
            return
        try:
            _replace(self.out / LIVE_FILE, status.to_json())
        except OSError:
            self._broken = True


def base_status(out: Path, resolved: Any) -> LiveStatus:
    """The live state of ``resolved`` (a :class:`~fedmst.run.prepare.ResolvedRun`) before its
    first round, written by this process."""
    config = resolved.config
    return LiveStatus(run_dir=str(out), scheduler=config.scheduler, topology=resolved.graph.graph["name"],
                      coordinator=os.getpid(), rounds=config.rounds, time_scale=resolved.time_scale)


def begin(out: Path, resolved: Any) -> None:
    """Say in ``out`` that this process runs ``resolved`` and is setting up: a watcher started now
    follows this run, not the one an earlier ``live.json`` there was left by."""
    try:
        _replace(out / LIVE_FILE, base_status(out, resolved).to_json())
    except OSError:
        pass  # the run reports its folder itself


def end(out: Path, resolved: Any, outcome: str) -> None:
    """Say in ``out`` that a run that ended before its session began (``failed`` or ``interrupted``
    while its network was built) is over, so that a watcher stops."""
    try:
        _replace(out / LIVE_FILE, replace(base_status(out, resolved), phase=outcome, finished=True).to_json())
    except OSError:
        pass  # as in begin


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def as_rows(status: LiveStatus, most: int = 10) -> list[dict[str, Any]]:
    """The busiest link directions of ``status`` (at most ``most``; every quiet one too), as the
    viewer shows them: name, Mbit/s, share of capacity, MB in this phase and planned."""
    quiet = set(status.quiet)
    shown = [link for i, link in enumerate(status.links)
             if i < most and (link.rate_bps > 0 or link.phase_bytes > 0) or f"{link.src}->{link.dst}" in quiet]
    return [{"direction": f"{link.src}->{link.dst}", "mbps": link.rate_bps * 8 / 1e6,
             "share": link.rate_bps * 8 / link.capacity_bps if link.capacity_bps else 0.0,
             "phase_mb": link.phase_bytes / 1e6, "planned_mb": link.planned_bytes / 1e6,
             "quiet": f"{link.src}->{link.dst}" in quiet} for link in shown]
