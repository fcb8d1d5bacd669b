"""The cluster's policy points: in which order waiting jobs are tried (:class:`Order`), and where
a job's models go (:class:`Placement`). Each is a small class found by name in a registry, or as
``package.module:Class``, like schedulers and strategies; the event loop
(:mod:`fedmst.core.cluster.loop`) calls them whenever slots free or a job arrives.

The defaults are what a cluster with no policy does: first come, first served (``fifo``), and
seeded random placement among the free slots (``random``).

>>> import networkx as nx
>>> view = ClusterView(nx.path_graph(["a", "b"]), free={"a": 2, "b": 1}, now_s=0.0, seed=1)
>>> job = Job("j", 0.0, local_models=2)
>>> placed = PLACEMENTS.lookup("random")().place(job, view)
>>> sorted((placed.global_node, *placed.local_nodes))
['a', 'a', 'b']
>>> PLACEMENTS.lookup("random")().place(Job("big", 0.0, local_models=3), view) is None
True
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from fedmst.core.cluster.jobs import Job, JobError
from fedmst.core.plan import Plan
from fedmst.core.topology import node_order
from fedmst.plugins import Registry

import networkx as nx


@dataclass(frozen=True)
class Placed:
    """Where a job runs: G on ``global_node``, local model i on ``local_nodes[i]``; each takes a
    slot. ``note`` says why there, for jobs.csv (e.g. a delay placement's level and timers)."""

    global_node: str
    local_nodes: tuple[str, ...]
    note: str = field(default="", compare=False)

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every slot's node, G's first (a node listed twice holds two of the job's slots)."""
        return (self.global_node, *self.local_nodes)


@dataclass(frozen=True)
class ClusterView:
    """What a policy decides from: the network, the free slots per node, the time (the network's
    seconds), the command's seed, the jobs running now with where they run, and two ways to look
    ahead: ``plan`` (how the scheduler would move a job's weights from a candidate placement, seeing
    the running jobs' links) and ``comm_s`` (that plan's broadcast and upload on links the running
    jobs load too: :func:`fedmst.core.plan.loaded_phase_seconds`)."""

    graph: nx.Graph
    free: Mapping[str, int]
    now_s: float
    seed: int
    running: Mapping[str, Placed] = field(default_factory=dict)
    slots: Mapping[str, int] = field(default_factory=dict)
    """Every node's slots, free or not (the cluster's capacity)."""
    plan: Callable[[Job, Placed], Plan] | None = None
    comm_s: Callable[[Plan], float] | None = None


class Order:
    """In which order the waiting jobs are tried for placement (subclass it)."""

    def order(self, waiting: Sequence[Job], view: ClusterView) -> Sequence[Job]:
        raise NotImplementedError


class Placement:
    """Where a job's G and local models go, among the free slots; None: not now (subclass it)."""

    def place(self, job: Job, view: ClusterView) -> Placed | None:
        raise NotImplementedError

    def wake_at(self, waiting: Sequence[Job], view: ClusterView) -> float | None:
        """When to try the queue again though no job arrives or ends (None: only then); a
        placement that makes jobs wait on a timer says when the first runs out."""
        return None


class Fifo(Order):
    """First come, first served: by submission time (a trace's order among equal times). Every
    waiting job is tried in turn, so a small job may start while a larger one before it waits."""

    def order(self, waiting: Sequence[Job], view: ClusterView) -> Sequence[Job]:
        return sorted(waiting, key=lambda j: j.submit_s)


class ShortestFirst(Order):
    """Shortest job first: the least work asked first (rounds times training time per round,
    what it will hold its slots for at the least), arrival breaking ties. Small jobs stop waiting
    behind long ones; a long job may wait while short ones keep coming."""

    def order(self, waiting: Sequence[Job], view: ClusterView) -> Sequence[Job]:
        return sorted(waiting, key=lambda j: ((j.rounds or 1) * (j.compute_s or 0.0), j.submit_s))


def _free_slots(free: Mapping[str, int], nodes: Sequence[str]) -> list[str]:
    """Every free slot of ``nodes`` in that order, a node repeated once per free slot."""
    return [node for node in nodes for _ in range(free.get(node, 0))]


class Pack(Placement):
    """First fit (the baseline of SJF-BCO's paper): the job's slots taken node by node in the
    topology's order, G first, filling each node before the next. Jobs are consolidated, and
    the first nodes fill first."""

    def place(self, job: Job, view: ClusterView) -> Placed | None:
        slots = _free_slots(view.free, sorted(view.free, key=node_order))[:job.slots]
        return Placed(slots[0], tuple(slots[1:])) if len(slots) == job.slots else None


class Spread(Placement):
    """One model per node where it can: each round takes a slot on every node with one free, the
    nodes with the most free slots first, until the job has its slots. Jobs spread thin, their
    models far apart, and no node fills before the others."""

    def place(self, job: Job, view: ClusterView) -> Placed | None:
        free, slots = dict(view.free), []
        while len(slots) < job.slots and any(free.values()):
            for node in sorted((n for n in free if free[n]), key=lambda n: (-free[n], node_order(n))):
                if len(slots) < job.slots:
                    slots.append(node)
                    free[node] -= 1
        return Placed(slots[0], tuple(slots[1:])) if len(slots) == job.slots else None


class Network(Placement):
    """The poster's idea, for compute: choose where the models run together with how their
    weights travel. Each candidate puts G on a node with a free slot and the local models on the
    free slots nearest it (by propagation delay; :data:`CANDIDATES` candidates, the nodes with the
    most free slots first); the scheduler plans each, and the one whose broadcast and upload are
    predicted shortest on the links the running jobs load wins (fewer hops of its transfers, then
    node order, break ties)."""

    CANDIDATES = 8

    def __init__(self) -> None:
        self._delays: tuple[int, dict[str, dict[str, float]]] | None = None

    def place(self, job: Job, view: ClusterView) -> Placed | None:
        if view.plan is None or view.comm_s is None:
            raise JobError("the network placement needs the cluster's scheduler and predictions")
        if sum(view.free.values()) < job.slots:
            return None
        if self._delays is None or self._delays[0] != id(view.graph):  # once per network
            self._delays = (id(view.graph), dict(nx.all_pairs_dijkstra_path_length(view.graph, weight="delay_s")))
        distance = self._delays[1]
        best: tuple[float, int, tuple[int, str], Placed] | None = None
        for g in sorted(view.free, key=lambda n: (-view.free[n], node_order(n)))[:self.CANDIDATES]:
            free = dict(view.free)
            free[g] -= 1
            near = _free_slots(free, sorted(free, key=lambda n: (distance[g][n], node_order(n))))[:job.local_models]
            placed = Placed(g, tuple(near))
            plan = view.plan(job, placed)
            score = (view.comm_s(plan), sum(len(t.hops) for t in plan.transfers), node_order(g), placed)
            if best is None or score[:3] < best[:3]:
                best = score
        return None if best is None else best[3]


class Delay(Placement):
    """Delay scheduling for consolidation (seed 002: Sharma et al., 2024, after Zaharia et al.'s
    delay scheduling), with fedmst's own network sensitivity and auto-tuner.

    A job placed at level 0 has every model on one node; at level h, every model within h hops of
    G's node; past the last level (:data:`LEVELS`), anywhere (the free slots nearest G). A
    network-sensitive job takes the tightest level it can find among those its wait allows: it
    waits up to ``timers[0]`` for level 0, ``timers[1]`` more for level 1, ... A job is
    network-sensitive when its plan on the placement it could take now would spend at least
    :data:`SENSITIVE` of a round moving weights (``comm_s`` against its training time); any other
    job is placed at once, as tight as the free slots allow now: waiting would save it little.

    The auto-tuner sets each level's timer from what waiting bought: twice the median wait of the
    last 20 jobs that waited and found that level (within :data:`MIN_S` and :data:`MAX_S`); each
    job that waited a level out and went on without it shortens that level's timer by a tenth. A
    job placed at once tells nothing about a timer. Every placement's level and the timers then
    are in jobs.csv's ``placement`` column.
    """

    LEVELS = 3
    SENSITIVE = 0.25
    INITIAL_S, MIN_S, MAX_S = 1.0, 0.05, 10.0

    def __init__(self) -> None:
        self.timers = [self.INITIAL_S] * self.LEVELS
        self._found: list[list[float]] = [[] for _ in range(self.LEVELS)]
        self._hops: tuple[int, dict[str, dict[str, int]]] | None = None
        self._sensitivity: dict[str, bool] = {}

    def place(self, job: Job, view: ClusterView) -> Placed | None:
        anywhere = self._within(job, view, None)
        if anywhere is None:
            return None
        waited = view.now_s - job.submit_s
        sensitive = self._sensitive(job, anywhere, view)
        timers = self._timers(job, view)
        allowed = self._allowed(waited, timers) if sensitive else self.LEVELS
        for level in range(min(allowed + 1, self.LEVELS)):
            placed = self._within(job, view, level)
            if placed is not None:
                if waited > 0:
                    self._tune(level, waited)
                self._waited_out(level, waited, timers)
                how = f"level {level}" + ("" if sensitive else " (not network-sensitive)")
                return Placed(placed.global_node, placed.local_nodes, self._note(how, waited))
        if allowed < self.LEVELS:
            return None  # wait for a tighter level
        self._waited_out(self.LEVELS, waited, timers)
        return Placed(anywhere.global_node, anywhere.local_nodes,
                      self._note("anywhere" if sensitive else "anywhere (not network-sensitive)", waited))

    def wake_at(self, waiting: Sequence[Job], view: ClusterView) -> float | None:
        """When the first waiting job's timer runs out and it may take a looser level."""
        ends = []
        for job in waiting:
            timers = self._timers(job, view)
            level = self._allowed(view.now_s - job.submit_s, timers)
            if level < self.LEVELS:
                ends.append(job.submit_s + sum(timers[:level + 1]))
        return min(ends, default=None)

    def _timers(self, job: Job, view: ClusterView) -> list[float]:
        """The timers ``job`` waits on: none at a level the cluster could never give it (no node's
        neighbourhood of that many hops has as many slots, free or not)."""
        distance = self._distances(view.graph)
        possible = [any(sum(view.slots.get(n, 0) for n, d in distance[g].items() if d <= level) >= job.slots
                        for g in view.slots) for level in range(self.LEVELS)]
        return [t if ok else 0.0 for t, ok in zip(self.timers, possible)]

    def _allowed(self, waited: float, timers: Sequence[float]) -> int:
        """The loosest level a job may take after waiting ``waited``: 0 until its first timer runs out."""
        spent = 0.0
        for level, timer in enumerate(timers):
            spent += timer
            if waited < spent - 1e-9:  # at the timer's end (the loop wakes then) the next level is allowed
                return level
        return self.LEVELS

    def _waited_out(self, found: int, waited: float, timers: Sequence[float]) -> None:
        """Shorten the timers of the levels below ``found`` that the job waited out: waiting on
        them did not pay."""
        for level in range(found):
            if timers[level] and waited > sum(timers[:level + 1]) - 1e-9:
                self.timers[level] = max(self.MIN_S, 0.9 * self.timers[level])

    def _sensitive(self, job: Job, placed: Placed, view: ClusterView) -> bool:
        """Decided once, when the job is first tried (planning it at every event would cost more
        than the decision is worth)."""
        if job.name not in self._sensitivity:
            comm = view.comm_s(view.plan(job, placed)) if view.plan and view.comm_s else math.inf
            self._sensitivity[job.name] = comm >= self.SENSITIVE * (comm + (job.compute_s or 0.0))
        return self._sensitivity[job.name]

    def _tune(self, level: int, waited: float) -> None:
        found = self._found[level]
        found.append(waited)
        del found[:-20]
        self.timers[level] = min(self.MAX_S, max(self.MIN_S, 2 * sorted(found)[len(found) // 2]))

    def _note(self, how: str, waited: float) -> str:
        return f"{how} after {waited:.3g} s; timers " + " ".join(f"{t:.3g}" for t in self.timers)

    def _distances(self, graph: nx.Graph) -> dict[str, dict[str, int]]:
        """Hops between every two nodes, worked out once per network."""
        if self._hops is None or self._hops[0] != id(graph):
            self._hops = (id(graph), dict(nx.all_pairs_shortest_path_length(graph)))
        return self._hops[1]

    def _within(self, job: Job, view: ClusterView, hops: int | None) -> Placed | None:
        """The job on the free slots within ``hops`` of its G (None: anywhere), nearest first: of
        the G's that hold it, the one using the fewest nodes (then the freest, then node order)."""
        distance = self._distances(view.graph)
        best: tuple[tuple[int, int, tuple[int, str]], Placed] | None = None
        for g in sorted(view.free, key=lambda n: (-view.free[n], node_order(n))):
            free = dict(view.free)
            free[g] -= 1
            near = sorted((n for n in free if hops is None or distance[g][n] <= hops),
                          key=lambda n: (distance[g][n], -free[n], node_order(n)))
            slots = _free_slots(free, near)[:job.local_models]
            if len(slots) < job.local_models:
                continue
            key = (len({g, *slots}), -view.free[g], node_order(g))
            if best is None or key < best[0]:
                best = (key, Placed(g, tuple(slots)))
        return None if best is None else best[1]


class RandomSlots(Placement):
    """The job's slots drawn uniformly among the free ones, the first drawn holding G: seeded by
    the command's seed and the job, so the same trace places the same way on the same free slots."""

    def place(self, job: Job, view: ClusterView) -> Placed | None:
        free = [node for node in sorted(view.free) for _ in range(view.free[node])]
        if len(free) < job.slots:
            return None
        key = f"fedmst-cluster/random/{view.seed}/{job.name}".encode()
        drawn = random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big")).sample(free, job.slots)
        return Placed(drawn[0], tuple(drawn[1:]))


ORDERS: Registry[type[Order]] = Registry(
    "queue order", "fedmst.orders", JobError, {"fifo": Fifo, "sjf": ShortestFirst},
    accepts=lambda obj: isinstance(obj, type) and issubclass(obj, Order),
    requirement="a subclass of fedmst.api.Order")
"""Queue orders by name (``--order``)."""
PLACEMENTS: Registry[type[Placement]] = Registry(
    "placement", "fedmst.placements", JobError,
    {"random": RandomSlots, "pack": Pack, "spread": Spread, "network": Network, "delay": Delay},
    accepts=lambda obj: isinstance(obj, type) and issubclass(obj, Placement),
    requirement="a subclass of fedmst.api.Placement")
"""Placements by name (``--placement``)."""


__all__ = ["ORDERS", "PLACEMENTS", "ClusterView", "Delay", "Fifo", "Network", "Order", "Pack", "Placed", "Placement",
           "RandomSlots", "ShortestFirst", "Spread"]
