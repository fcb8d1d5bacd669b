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
    tasks = [p for p in profiles if rounds.get(p.name, 0) > 0]
    # per task: index of its current (round, phase), the phase's start, and the fraction left
    at = {p.name: -1 for p in tasks}
    begun = {p.name: 0.0 for p in tasks}
    left = {p.name: 0.0 for p in tasks}
    wake = {p.name: offsets.get(p.name, 0.0) + p.start_s for p in tasks}  # not started yet
    spans: list[PhaseSpan] = []
    by_name = {p.name: p for p in tasks}
    now = 0.0

    def demand(p: Profile, step: int) -> Demand | None:
        phase = ROUND_PHASES[step % 3]
        return None if phase == "train" else getattr(p, phase)

    def advance(name: str) -> None:
        """Task ``name`` starts its next phase now (or ends)."""
        p = by_name[name]
        at[name] += 1
        if at[name] >= 3 * rounds[name]:
            return
        begun[name] = now
        d = demand(p, at[name])
        left[name] = (d.seconds if d is not None else p.compute_s)

    while True:
        for name in [n for n, t in wake.items() if t <= now + 1e-12]:
            del wake[name]
            advance(name)
        running = [n for n in at if 0 <= at[n] < 3 * rounds[n] and n not in wake]
        if not running and not wake:
            return spans
        # the pace of each running phase: 1 for training; for a transfer, its most crowded link's share
        asks: dict[LinkDir, float] = {}
        for n in running:
            d = demand(by_name[n], at[n])
            if d is not None and d.seconds > 0:
                for hop, b in d.link_bytes.items():
                    asks[hop] = asks.get(hop, 0.0) + b / d.seconds
        pace = {}
        for n in running:
            d = demand(by_name[n], at[n])
            share = [min(1.0, capacity[hop] / asks[hop]) for hop in (d.link_bytes if d and d.seconds > 0 else ())
                     if asks[hop] > 0]
            pace[n] = min(share, default=1.0)
        # phase "left" is in seconds alone: it shrinks at its pace
        step = min([left[n] / pace[n] for n in running] + [t - now for t in wake.values()])
        now += max(step, 0.0)
        for n in running:
            left[n] -= step * pace[n]
            if left[n] <= 1e-9:
                r, phase = divmod(at[n], 3)
                spans.append(PhaseSpan(n, r + 1, ROUND_PHASES[phase], begun[n], now))
                advance(n)


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


__all__ = ["ROUND_PHASES", "Demand", "Profile", "capacities", "cassini_offsets", "iteration_times", "mean_iteration_s",
           "profile_of", "sharing_groups", "simulate"]
