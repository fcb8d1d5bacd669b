"""Tasks on their own clocks: predicted timelines of tasks that share links, and the time shifts
that interleave their communication (Cassini, seed 004).

Each task runs its rounds back to back: broadcast, training (``compute_s``), upload, then the
next round's broadcast. A transfer phase is described by what the plans predict for it alone
(:class:`Demand`: its duration and the bytes it puts on each link direction). When phases of
several tasks overlap, :func:`simulate` shares each link direction among them as a fluid: a phase
alone asks ``bytes / duration`` of each link it crosses; where the asks exceed a link's capacity,
every phase on it gets the same fraction, and a phase advances at the pace of its most crowded link.

:func:`cassini_offsets` picks start offsets. Cassini builds an affinity graph of jobs and the links
they share, finds per link the time shifts that keep the jobs' communication apart, and walks the
graph to give each job one shift. Here the walk is the same (connected components of the affinity
graph; a task that shares no link with another keeps its offset, so interleaving costs nothing
where nothing contends), and the choice per task is made on the objective itself: tasks are placed
one by one, most communication first, each at the shift (out of a grid over its own period) that
minimises the component's predicted mean iteration time given the tasks placed before it. It weighs
overlap as it stretches phases, which the geometric overlap score of Cassini only approximates.

>>> a = Profile("A", broadcast=Demand(1.0, {("x", "y"): 100}), compute_s=2.0,
...             upload=Demand(1.0, {("y", "x"): 100}))
>>> b = Profile("B", broadcast=a.broadcast, compute_s=2.0, upload=a.upload)
>>> cap = {("x", "y"): 100.0, ("y", "x"): 100.0}
>>> round(mean_iteration_s(simulate([a, b], {"A": 0.0, "B": 0.0}, {"A": 3, "B": 3}, cap)), 2)
6.0
>>> shifts = cassini_offsets([a, b], {"A": 3, "B": 3}, cap)
>>> round(mean_iteration_s(simulate([a, b], shifts, {"A": 3, "B": 3}, cap)), 2)
4.0
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import mean
from typing import Mapping, Sequence

import networkx as nx

from fedmst.core.plan import Plan, predicted_phase_seconds
from fedmst.core.route import LinkDir
from fedmst.core.span import PhaseSpan
from fedmst.core.wire import DEFAULT_MTU
from fedmst.core.workload import link_state

ROUND_PHASES = ("broadcast", "train", "upload")
"""A round's phases in the order they run: the two transfer phases with training between."""


@dataclass(frozen=True)
class Demand:
    """A transfer phase as its plan predicts it alone: ``seconds`` and wire bytes per link direction."""

    seconds: float
    link_bytes: Mapping[LinkDir, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Profile:
    """One task's round: broadcast, ``compute_s`` of training, upload."""

    name: str
    broadcast: Demand
    compute_s: float
    upload: Demand
    start_s: float = 0.0

    @property
    def period_s(self) -> float:
        """One round alone."""
        return self.broadcast.seconds + self.compute_s + self.upload.seconds

    @property
    def links(self) -> frozenset[LinkDir]:
        return frozenset(self.broadcast.link_bytes) | frozenset(self.upload.link_bytes)


def profile_of(plan: Plan, graph: nx.Graph, *, compute_s: float, start_s: float = 0.0, chunk_bytes: int,
               with_delay: bool, mtu: int = DEFAULT_MTU) -> Profile:
    """``plan``'s task as :func:`simulate` sees it: each transfer phase as the plan predicts it alone."""
    def demand(phase: str) -> Demand:
        seconds = predicted_phase_seconds(plan, graph, phase, chunk_bytes=chunk_bytes, with_delay=with_delay, mtu=mtu)
        return Demand(seconds, {hop: float(b) for hop, b in link_state((plan,), phase=phase, mtu=mtu).items()})

    return Profile(plan.task.name, broadcast=demand("broadcast"), compute_s=compute_s, upload=demand("upload"),
                   start_s=start_s)


def capacities(graph: nx.Graph) -> dict[LinkDir, float]:
    """Bytes per second of every link direction of ``graph``."""
    out = {}
    for u, v, cap in graph.edges(data="capacity_mbps"):
        out[(u, v)] = out[(v, u)] = float(cap) * 1e6 / 8
    return out


def simulate(profiles: Sequence[Profile], offsets: Mapping[str, float], rounds: Mapping[str, int],
             capacity: Mapping[LinkDir, float]) -> list[PhaseSpan]:
    """The predicted timeline of ``profiles`` running ``rounds`` each, task T from ``offsets[T]``
    (plus its ``start_s``), sharing links as fluids (see the module's docstring)."""
    fluid = Fluid(capacity)
    for p in profiles:
        fluid.add(p, rounds.get(p.name, 0), offsets.get(p.name, 0.0) + p.start_s)
    spans: list[PhaseSpan] = []
    while fluid.busy:
        spans += fluid.advance()
    return spans


class Fluid:
    """Tasks on their own clocks sharing links as fluids (see the module's docstring), advanced
    from one event to the next, so that tasks can join while others run: :func:`simulate` adds
    them all at once; a cluster (:mod:`fedmst.core.cluster.simulate`) adds each job as it starts.

    >>> a = Profile("A", broadcast=Demand(1.0, {("x", "y"): 100}), compute_s=2.0, upload=Demand(1.0, {}))
    >>> fluid = Fluid({("x", "y"): 100.0})
    >>> fluid.add(a, rounds=1, at_s=0.0)
    >>> [(s.phase, s.end_s) for s in fluid.advance(until_s=2.5)], fluid.now
    ([('broadcast', 1.0)], 2.5)
    >>> [(s.phase, s.end_s) for s in fluid.advance()], fluid.ended, fluid.busy
    ([('train', 3.0), ('upload', 4.0)], ['A'], False)
    """

    def __init__(self, capacity: Mapping[LinkDir, float]) -> None:
        self.capacity = capacity
        self.now = 0.0
        self.ended: list[str] = []
        """The tasks that finished their last phase in the last :meth:`advance`."""
        self._profile: dict[str, Profile] = {}
        self._rounds: dict[str, int] = {}
        self._at: dict[str, int] = {}  # index of the task's current (round, phase)
        self._begun: dict[str, float] = {}
        self._left: dict[str, float] = {}  # of the current phase, in seconds alone
        self._wake: dict[str, float] = {}  # tasks not started yet

    @property
    def busy(self) -> bool:
        """Whether any task is running or waiting to start."""
        return bool(self._at)

    def add(self, profile: Profile, rounds: int, at_s: float) -> None:
        """``profile``'s task runs ``rounds`` rounds from ``at_s`` (not before now)."""
        if rounds <= 0:
            return
        name = profile.name
        self._profile[name], self._rounds[name], self._at[name] = profile, rounds, -1
        self._wake[name] = max(at_s, self.now)

    def stop(self, name: str) -> None:
        """Task ``name`` ends when its current round does (at once where it has not begun one).

        >>> a = Profile("A", broadcast=Demand(1.0, {}), compute_s=1.0, upload=Demand(1.0, {}))
        >>> fluid = Fluid({})
        >>> fluid.add(a, rounds=5, at_s=0.0)
        >>> _ = fluid.advance(until_s=4.0); fluid.stop("A")
        >>> [(s.round, s.phase) for s in fluid.advance()][-1], fluid.now
        ((2, 'upload'), 6.0)
        """
        if name in self._wake:
            self._rounds[name] = 0
            self._wake[name] = self.now
        elif name in self._at:
            self._rounds[name] = self._at[name] // 3 + 1

    def _demand(self, name: str) -> Demand | None:
        phase = ROUND_PHASES[self._at[name] % 3]
        return None if phase == "train" else getattr(self._profile[name], phase)

    def _next_phase(self, name: str) -> None:
        """Task ``name`` starts its next phase now, or ends."""
        self._at[name] += 1
        if self._at[name] >= 3 * self._rounds[name]:
            for table in (self._profile, self._rounds, self._at, self._begun, self._left):
                table.pop(name, None)
            self.ended.append(name)
            return
        self._begun[name] = self.now
        d = self._demand(name)
        self._left[name] = d.seconds if d is not None else self._profile[name].compute_s

    def advance(self, until_s: float | None = None) -> list[PhaseSpan]:
        """Run to the first moment a task ends, or to ``until_s`` if that comes first (None: no
        limit); return the phases that finished on the way. :attr:`ended` names the tasks that ended."""
        self.ended = []
        spans: list[PhaseSpan] = []
        while True:
            for name in [n for n, t in self._wake.items() if t <= self.now + 1e-12]:
                del self._wake[name]
                self._next_phase(name)
            running = [n for n in self._at if n not in self._wake]
            if self.ended:
                return spans
            if not running and not self._wake:  # idle: time passes to ``until_s``
                self.now = max(self.now, until_s if until_s is not None else self.now)
                return spans
            # the pace of each running phase: 1 for training; for a transfer, its most crowded link's share
            demands = {n: self._demand(n) for n in running}
            asks: dict[LinkDir, float] = {}
            for d in demands.values():
                if d is not None and d.seconds > 0:
                    for hop, b in d.link_bytes.items():
                        asks[hop] = asks.get(hop, 0.0) + b / d.seconds
            pace = {}
            for n, d in demands.items():
                hops = d.link_bytes if d and d.seconds > 0 else ()
                share = [min(1.0, self.capacity[hop] / asks[hop]) for hop in hops if asks[hop] > 0]
                pace[n] = min(share, default=1.0)
            # a phase's "left" is in seconds alone: it shrinks at its pace
            step = min([self._left[n] / pace[n] for n in running] + [t - self.now for t in self._wake.values()])
            if until_s is not None and self.now + step > until_s:
                step = until_s - self.now
                if step <= 0:
                    return spans
                self.now = until_s
                for n in running:
                    self._left[n] -= step * pace[n]
                return spans
            self.now += max(step, 0.0)
            for n in running:
                self._left[n] -= step * pace[n]
                if self._left[n] <= 1e-9:
                    r, phase = divmod(self._at[n], 3)
                    spans.append(PhaseSpan(n, r + 1, ROUND_PHASES[phase], self._begun[n], self.now))
                    self._next_phase(n)


def iteration_times(spans: Sequence[PhaseSpan]) -> dict[tuple[str, int], float]:
    """(task, round) -> seconds from its broadcast's start to its upload's end."""
    start = {(s.task, s.round): s.start_s for s in spans if s.phase == "broadcast"}
    return {(s.task, s.round): s.end_s - start[(s.task, s.round)] for s in spans if s.phase == "upload"}


def mean_iteration_s(spans: Sequence[PhaseSpan]) -> float:
    """Mean iteration time over every task and round of a timeline."""
    return mean(iteration_times(spans).values())


def sharing_groups(profiles: Sequence[Profile]) -> list[list[Profile]]:
    """The connected components of the affinity graph (tasks joined by a link direction both
    cross), each in the order given."""
    graph = nx.Graph()
    graph.add_nodes_from(p.name for p in profiles)
    owners: dict[LinkDir, list[str]] = {}
    for p in profiles:
        for hop in p.links:
            owners.setdefault(hop, []).append(p.name)
    for names in owners.values():
        nx.add_path(graph, names)
    by_name = {p.name: p for p in profiles}
    order = {p.name: i for i, p in enumerate(profiles)}
    return [[by_name[n] for n in sorted(c, key=order.get)] for c in nx.connected_components(graph)]


def cassini_offsets(profiles: Sequence[Profile], rounds: Mapping[str, int], capacity: Mapping[LinkDir, float],
                    *, grid: int = 48) -> dict[str, float]:
    """Start offsets (added to each task's ``start_s``) that interleave the communication of
    tasks sharing links; 0.0 for a task that shares none (see the module's docstring)."""
    offsets = {p.name: 0.0 for p in profiles}
    for group in sharing_groups(profiles):
        if len(group) < 2:
            continue
        order = sorted(group, key=lambda p: -(p.broadcast.seconds + p.upload.seconds))
        placed = [order[0]]
        for p in order[1:]:
            scores = [mean_iteration_s(simulate([*placed, p], {**offsets, p.name: p.period_s * j / grid},
                                                rounds, capacity)) for j in range(grid)]
            offsets[p.name] = p.period_s * _middle_of_best(scores) / grid
            placed.append(p)
    return offsets


def _middle_of_best(scores: Sequence[float], *, tolerance: float = 1e-6) -> int:
    """The grid index to use: 0 when no shift is as good as any, else the middle of the longest
    run of consecutive best scores, so that a real phase a little longer or shorter than predicted
    still misses its neighbours (the edge of the run is where they just touch).

    >>> _middle_of_best([3.0, 2.0, 2.0, 2.0, 2.5])
    2
    >>> _middle_of_best([2.0, 2.0, 3.0])
    0
    """
    best = min(scores)
    good = [s <= best * (1 + tolerance) for s in scores]
    if good[0]:
        return 0
    runs: list[tuple[int, int]] = []  # (length, first index)
    for j, ok in enumerate(good):
        if ok and (j == 0 or not good[j - 1]):
            runs.append((0, j))
        if ok:
            runs[-1] = (runs[-1][0] + 1, runs[-1][1])
    length, first = max(runs, key=lambda r: (r[0], -r[1]))
    return first + (length - 1) // 2


__all__ = ["ROUND_PHASES", "Demand", "Fluid", "Profile", "capacities", "cassini_offsets", "iteration_times",
           "mean_iteration_s",
           "profile_of", "sharing_groups", "simulate"]
