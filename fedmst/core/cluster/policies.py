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
import random
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

from fedmst.core.cluster.jobs import Job, JobError
from fedmst.core.cluster.startup import set_up_s
from fedmst.core.contention import Profile, capacities, mean_iteration_s, simulate
from fedmst.core.plan import TRANSFER_PHASES, Plan, predicted_link_bytes
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
    start_at_s: float | None = field(default=None, compare=False)
    """Its first round begins no earlier than this (the network's seconds): a time shift, so that
    its communication takes turns with the running jobs' (Cassini's); None: once it is set up."""

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every slot's node, G's first (a node listed twice holds two of the job's slots)."""
        return (self.global_node, *self.local_nodes)


@dataclass(frozen=True)
class Running:
    """A job running now: where, since when (this time: a preempted job starts again), and how
    its weights travel."""

    job: Job
    placed: Placed
    start_s: float
    plan: Plan
    rounds_before: int = 0
    """Rounds it had finished in its runs before this one (a preemption stopped them)."""


@dataclass(frozen=True)
class ClusterView:
    """What a policy decides from: the network, the free slots per node, the time (the network's
    seconds), the command's seed, the jobs running now and those waiting, the rounds each job has
    finished, and two ways to look ahead: ``plan`` (how the scheduler would move a job's weights
    from a candidate placement, seeing the running jobs' links) and ``comm_s`` (that plan's
    broadcast and upload on links the other running jobs load too:
    :func:`fedmst.core.plan.loaded_phase_seconds`)."""

    graph: nx.Graph
    free: Mapping[str, int]
    now_s: float
    seed: int
    running: Mapping[str, Running] = field(default_factory=dict)
    slots: Mapping[str, int] = field(default_factory=dict)
    """Every node's slots, free or not (the cluster's capacity)."""
    plan: Callable[[Job, Placed], Plan] | None = None
    comm_s: Callable[[Plan], float] | None = None
    profile: Callable[[Job, Plan], Profile] | None = None
    """A job's round on a plan, as the fluid model runs it (:func:`fedmst.core.contention.profile_of`)."""
    waiting: Sequence[Job] = ()
    rounds_done: Mapping[str, int] = field(default_factory=dict)
    """Job -> rounds it has finished, before a preemption too (a job not listed: none)."""
    stopping: frozenset[str] = frozenset()
    """Running jobs a preemption has asked to stop at their next round boundary."""
    round_began: Mapping[str, float] = field(default_factory=dict)
    """Running job -> when its current round began (absent while it sets up)."""

    def remaining_rounds(self, job: Job) -> int:
        """Rounds ``job`` has still to run."""
        return max(0, (job.rounds or 1) - self.rounds_done.get(job.name, 0))

    def attained(self, job: Job) -> int:
        """The service ``job`` has had so far, in slot-rounds (its slots times the rounds it
        finished): what least-attained-service policies compare, whatever a round lasts."""
        return job.slots * self.rounds_done.get(job.name, 0)


SENSITIVE = 0.25
"""A job is network-sensitive when its plan would spend at least this share of a round moving
weights (:func:`network_share`): the delay placement waits for a consolidated placement only for
such a job, and the network preemption stops only jobs below it."""


def network_share(job: Job, placed: Placed, view: ClusterView) -> float:
    """The share of a round ``job`` would spend moving weights on ``placed``: its plan's broadcast
    and upload on the links the running jobs load (``comm_s``) against that plus its training. 1.0
    where the view cannot predict (no scheduler): then every job counts as sensitive.

    An FL job's sensitivity to the network is this share, not its model's size alone: a large
    model trained for long rounds waits less on the network than a small one trained briefly, and
    models placed on one node move nothing across links (share 0)."""
    return 1.0 if view.plan is None else plan_share(job, view.plan(job, placed), view)


def plan_share(job: Job, plan: Plan, view: ClusterView) -> float:
    """:func:`network_share` of ``job`` running ``plan``."""
    if view.comm_s is None:
        return 1.0
    comm = view.comm_s(plan)
    total = comm + (job.compute_s or 0.0)
    return comm / total if total > 0 else 0.0


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


class Smallest(Order):
    """Smallest job first: the fewest slots first (SJF-BCO's order, its jobs sorted by the GPUs they
    ask), arrival breaking ties."""

    def order(self, waiting: Sequence[Job], view: ClusterView) -> Sequence[Job]:
        return sorted(waiting, key=lambda j: (j.slots, j.submit_s))


class ShortestRemaining(Order):
    """Shortest remaining time first: the least work left first (the rounds it has still to run
    times its training per round), arrival breaking ties. It differs from ``sjf`` only for a job a
    preemption stopped part-way: it comes back with fewer rounds to run."""

    def order(self, waiting: Sequence[Job], view: ClusterView) -> Sequence[Job]:
        return sorted(waiting, key=lambda j: (view.remaining_rounds(j) * (j.compute_s or 0.0), j.submit_s))


class LeastAttained(Order):
    """Least attained service first (Tiresias' LAS): the least service had so far first
    (:meth:`ClusterView.attained`, slot-rounds), arrival breaking ties. It needs no job's length,
    which a cluster rarely knows; without preemption every waiting job has had none, so it is
    ``fifo``."""

    def order(self, waiting: Sequence[Job], view: ClusterView) -> Sequence[Job]:
        return sorted(waiting, key=lambda j: (view.attained(j), j.submit_s))


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
        best: tuple[float, int, tuple[int, str], Placed] | None = None
        for placed, plan in self._candidates(job, view, "network"):
            score = (view.comm_s(plan), sum(len(t.hops) for t in plan.transfers),  # type: ignore[misc]
                     node_order(placed.global_node), placed)
            if best is None or score[:3] < best[:3]:
                best = score
        return None if best is None else best[3]

    def _candidates(self, job: Job, view: ClusterView, name: str) -> list[tuple[Placed, Plan]]:
        """Each candidate placement (G on one of the :data:`CANDIDATES` freest nodes, the local
        models on the free slots nearest it) with the scheduler's plan for it; none where the
        free slots cannot hold the job."""
        if view.plan is None or view.comm_s is None:
            raise JobError(f"the {name} placement needs the cluster's scheduler and predictions")
        if sum(view.free.values()) < job.slots:
            return []
        if self._delays is None or self._delays[0] != id(view.graph):  # once per network
            self._delays = (id(view.graph), dict(nx.all_pairs_dijkstra_path_length(view.graph, weight="delay_s")))
        distance = self._delays[1]
        out = []
        for g in sorted(view.free, key=lambda n: (-view.free[n], node_order(n)))[:self.CANDIDATES]:
            free = dict(view.free)
            free[g] -= 1
            near = _free_slots(free, sorted(free, key=lambda n: (distance[g][n], node_order(n))))[:job.local_models]
            placed = Placed(g, tuple(near))
            out.append((placed, view.plan(job, placed)))
        return out


class Delay(Placement):
    """Delay scheduling for consolidation (seed 002: Sharma et al., 2024, after Zaharia et al.'s
    delay scheduling), with fedmst's own network sensitivity and auto-tuner.

    A job placed at level 0 has every model on one node; at level h, every model within h hops of
    G's node; past the last level (:data:`LEVELS`), anywhere (the free slots nearest G). A
    network-sensitive job takes the tightest level it can find among those its wait allows: it
    waits up to ``timers[0]`` for level 0, ``timers[1]`` more for level 1, ... A job is
    network-sensitive when its plan on the placement it could take now would spend at least
    :data:`SENSITIVE` of a round moving weights (:func:`network_share`); any other
    job is placed at once, as tight as the free slots allow now: waiting would save it little.

    The auto-tuner sets each level's timer from what waiting bought: twice the median wait of the
    last 20 jobs that waited and found that level (within :data:`MIN_S` and :data:`MAX_S`); each
    job that waited a level out and went on without it shortens that level's timer by a tenth. A
    job placed at once tells nothing about a timer. Every placement's level and the timers then
    are in jobs.csv's ``placement`` column.
    """

    LEVELS = 3
    INITIAL_S, MIN_S, MAX_S = 1.0, 0.05, 10.0

    def __init__(self) -> None:
        self.timers = [self.INITIAL_S] * self.LEVELS
        self._found: list[list[float]] = [[] for _ in range(self.LEVELS)]
        self._hops: tuple[int, dict[str, dict[str, int]]] | None = None
        self._sensitivity: dict[str, bool] = {}
        self._possible: dict[tuple[int, int], list[bool]] = {}

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
        key = (id(view.graph), job.slots)
        if key not in self._possible:  # the same for every job of that size on that cluster
            distance = self._distances(view.graph)
            self._possible[key] = [
                any(sum(view.slots.get(n, 0) for n, d in distance[g].items() if d <= level) >= job.slots
                    for g in view.slots) for level in range(self.LEVELS)]
        return [t if ok else 0.0 for t, ok in zip(self.timers, self._possible[key])]

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
            self._sensitivity[job.name] = network_share(job, placed, view) >= SENSITIVE
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
        return within(job, view.free, self._distances(view.graph), hops)


def within(job: Job, free: Mapping[str, int], distance: Mapping[str, Mapping[str, int]],
           hops: int | None) -> Placed | None:
    """``job`` on the ``free`` slots within ``hops`` hops (``distance``) of its G (None: anywhere),
    nearest first: of the G's that hold it, the one using the fewest nodes (then the freest, then
    node order); None where no G does.

    >>> import networkx as nx
    >>> d = dict(nx.all_pairs_shortest_path_length(nx.path_graph(["a", "b", "c"])))
    >>> within(Job("j", 0.0, 2), {"a": 1, "c": 2}, d, hops=1), within(Job("j", 0.0, 2), {"a": 1, "c": 2}, d, 2).nodes
    (None, ('c', 'c', 'a'))
    """
    best: tuple[tuple[int, int, tuple[int, str]], Placed] | None = None
    for g in sorted(free, key=lambda n: (-free[n], node_order(n))):
        left = dict(free)
        left[g] -= 1
        reach = [n for n, k in left.items() if k and (hops is None or distance[g][n] <= hops)]
        if sum(left[n] for n in reach) < job.local_models:
            continue  # too few slots within reach: no need to sort them
        near = sorted(reach, key=lambda n: (distance[g][n], -left[n], node_order(n)))
        slots = _free_slots(left, near)[:job.local_models]
        key = (len({g, *slots}), -free[g], node_order(g))
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


class SjfBco(Placement):
    """SJF-BCO (seed 003: Yu, Ji, Rajan and Liu, MobiHoc 2022), made online. The paper's offline
    algorithm sorts jobs by the GPUs they ask, smallest first; for a threshold kappa it places a job
    asking at most kappa by FA-FFP (fragment-aware first fit: onto nodes already partly busy, the
    fullest first, one node where one holds it) and a larger one by LBSGF (least-busy nodes first,
    on at most :data:`EXTRA_NODES` more nodes than an empty cluster would need); it predicts each
    job's execution with a contention term (split jobs sharing a node) and an overhead term (the
    nodes it spans), and keeps the kappa whose schedule's makespan is shortest.

    Here the cluster's queue replaces the paper's batch: at each decision every kappa (0 and each
    waiting job's size) places the waiting jobs, smallest first, on the free slots, and the kappa
    whose predicted makespan (the nodes' predicted busy-until, plus the work left waiting spread
    over every slot) is shortest decides where this job goes, or that it waits. A job's execution
    is its remaining rounds times its training plus its plan's broadcast and upload on links the
    running jobs load (``comm_s``: the overhead of the nodes it spans, measured on the network
    instead of counted), that communication times one plus the split jobs sharing its busiest
    node (the paper's contention term). The paper also bisects a limit on execution time; that
    bounds its offline schedule's makespan, and an online decision has no whole schedule to bound,
    so it is left out. Its baselines are ``pack`` (First-Fit) and ``random``.
    """

    EXTRA_NODES = 1

    def __init__(self) -> None:
        self._decided: tuple[object, dict[str, Placed | None]] | None = None
        self._comm: dict[tuple[str, float], float] = {}
        """A running job's round of communication, as predicted when it was first seen running."""

    def place(self, job: Job, view: ClusterView) -> Placed | None:
        # one decision per event places the whole queue: the jobs placed as it says leave the rest
        # of it valid (running and waiting, together, stay the same jobs until one arrives or ends)
        key = (view.now_s, frozenset(view.running) | {j.name for j in view.waiting} | {job.name})
        current = self._decided is not None and self._decided[0] == key and job.name in self._decided[1]
        decided = self._decided[1][job.name] if current else None  # type: ignore[index]
        if not current or (decided is not None and not self._fits(decided, view.free)):
            queue = list(view.waiting) if job in view.waiting else [*view.waiting, job]
            self._decided = (key, self._best(sorted(queue, key=lambda j: (j.slots, j.submit_s)), view))
            decided = self._decided[1].get(job.name)
        return decided

    @staticmethod
    def _fits(placed: Placed, free: Mapping[str, int]) -> bool:
        return all(placed.nodes.count(n) <= free.get(n, 0) for n in set(placed.nodes))

    def _best(self, queue: Sequence[Job], view: ClusterView) -> dict[str, Placed | None]:
        best: tuple[tuple[float, int, int], dict[str, Placed | None]] | None = None
        plans: dict[tuple[str, Placed], Plan] = {}
        plan = view.plan

        def planned(job: Job, placed: Placed) -> Plan:  # a job placed alike under several kappas: planned once
            if (job.name, placed) not in plans:
                assert plan is not None
                plans[(job.name, placed)] = plan(job, placed)
            return plans[(job.name, placed)]

        view = replace(view, plan=None if plan is None else planned)
        running = self._running(view)
        for kappa in sorted({0, *(j.slots for j in queue)}):
            placed, makespan = self._schedule(queue, view, kappa, running)
            # ties to the larger kappa: fragments filled first keep whole nodes for the large jobs to come
            score = (makespan, -sum(p is not None for p in placed.values()), -kappa)
            if best is None or score < best[0]:
                best = (score, placed)
        assert best is not None
        return best[1]

    def _running(self, view: ClusterView) -> tuple[dict[str, float], dict[str, int]]:
        """Each node's predicted busy-until and split jobs, from the jobs running on it."""
        busy_until = {n: view.now_s for n in view.slots}
        split_jobs = {n: 0 for n in view.slots}
        for run in view.running.values():
            key = (run.job.name, run.start_s)
            if key not in self._comm:  # once per run: every decision would cost a prediction per running job
                self._comm[key] = view.comm_s(run.plan) if view.comm_s is not None else 0.0
            end = view.now_s + view.remaining_rounds(run.job) * ((run.job.compute_s or 0.0) + self._comm[key])
            for n in set(run.placed.nodes):
                busy_until[n] = max(busy_until[n], end)
                split_jobs[n] += len(set(run.placed.nodes)) > 1
        return busy_until, split_jobs

    def _schedule(self, queue: Sequence[Job], view: ClusterView, kappa: int,
                  running: tuple[dict[str, float], dict[str, int]]) -> tuple[dict[str, Placed | None], float]:
        """Place ``queue`` in turn on the free slots with threshold ``kappa``; each job's placement
        (None: it waits), and the predicted makespan."""
        free = dict(view.free)
        busy_until, split_jobs = dict(running[0]), dict(running[1])
        out: dict[str, Placed | None] = {}
        waiting_work = 0.0
        for job in queue:
            nodes = self._fa_ffp(job, free, view.slots) if job.slots <= kappa else self._lbsgf(job, free, view.slots)
            if nodes is None:
                out[job.name] = None
                waiting_work += job.slots * view.remaining_rounds(job) * (job.compute_s or 0.0)
                continue
            g = max(dict.fromkeys(nodes), key=nodes.count)  # G with most of its models
            rest = list(nodes)
            rest.remove(g)
            placed = out[job.name] = Placed(g, tuple(rest))
            spans = set(nodes)
            contention = max(split_jobs[n] for n in spans) if len(spans) > 1 else 0
            plan = view.plan(job, placed) if view.plan is not None and len(spans) > 1 else None
            end = view.now_s + self._execution_s(job, plan, view, contention)
            for n in nodes:
                free[n] -= 1
            for n in spans:
                busy_until[n] = max(busy_until[n], end)
                split_jobs[n] += len(spans) > 1
        total = sum(view.slots.values()) or 1
        return out, max(busy_until.values(), default=view.now_s) + waiting_work / total

    @staticmethod
    def _execution_s(job: Job, plan: Plan | None, view: ClusterView, contention: int) -> float:
        comm = view.comm_s(plan) if plan is not None and view.comm_s is not None else 0.0
        return view.remaining_rounds(job) * ((job.compute_s or 0.0) + comm * (1 + contention))

    @staticmethod
    def _fa_ffp(job: Job, free: Mapping[str, int], slots: Mapping[str, int]) -> list[str] | None:
        """Fragment-aware first fit: the partly busy nodes first, the fewest free slots first, then
        the idle ones; one node where one holds the job, else filled in that order."""
        order = sorted((n for n in free if free[n] > 0),
                       key=lambda n: (free[n] == slots.get(n, 0), free[n], node_order(n)))
        one = next((n for n in order if free[n] >= job.slots), None)
        if one is not None:
            return [one] * job.slots
        nodes = _free_slots(free, order)[:job.slots]
        return nodes if len(nodes) == job.slots else None

    def _lbsgf(self, job: Job, free: Mapping[str, int], slots: Mapping[str, int]) -> list[str] | None:
        """Least-busy nodes first, on at most :data:`EXTRA_NODES` more nodes than the job needs on
        an empty cluster (its slots over the largest node's)."""
        order = sorted((n for n in free if free[n] > 0), key=lambda n: (-free[n], node_order(n)))
        nodes = _free_slots(free, order)[:job.slots]
        cap = -(-job.slots // max(slots.values(), default=1)) + self.EXTRA_NODES
        return nodes if len(nodes) == job.slots and len(set(nodes)) <= cap else None


class Cassini(Network):
    """Cassini (seed 004: Rajasekaran et al., NSDI 2024), for FL jobs: its placement and its time
    shift. Among candidate placements (G on a node with free slots, its local models on the free
    slots nearest it, as ``network`` builds them), prefer those whose links carry jobs whose
    communication can interleave with the new job's. On each link direction the candidate's plan
    shares with running jobs, each job's duty is the share of its round alone that direction
    spends on its bytes; duties that sum to at most 1 can take turns without slowing one another.
    A candidate is scored by its worst direction's excess over 1, then by its predicted broadcast
    and upload (``comm_s``), then hops, then node order.

    Then the shift: where the chosen placement shares links with running jobs, its first round is
    timed (``Placed.start_at_s``) so that its communication falls between theirs: each of
    :data:`SHIFTS` starts over one of its rounds, after its predicted set-up, is run on the fluid
    model for :data:`ROUNDS` rounds beside those jobs, each going on from when its current round
    began, and the start with the shortest mean round of them all wins (the earliest among equals).
    Jobs whose rounds differ in length drift apart again; Cassini's own jobs share one iteration
    time, FL jobs seldom do."""

    SHIFTS = 12
    ROUNDS = 3

    def place(self, job: Job, view: ClusterView) -> Placed | None:
        candidates = self._candidates(job, view, "cassini")
        duty: dict[tuple[str, str], float] = {}
        for run in view.running.values():
            for hop, share in self._duties(run.job, run.plan, view).items():
                duty[hop] = duty.get(hop, 0.0) + share
        best: tuple[tuple[float, float, int, tuple[int, str]], Placed, Plan] | None = None
        for placed, plan in candidates:
            mine = self._duties(job, plan, view)
            excess = max((duty.get(hop, 0.0) + share - 1.0 for hop, share in mine.items() if hop in duty), default=0.0)
            key = (max(0.0, excess), view.comm_s(plan), sum(len(t.hops) for t in plan.transfers),  # type: ignore[misc]
                   node_order(placed.global_node))
            if best is None or key < best[0]:
                best = (key, placed, plan)
        if best is None:
            return None
        _, placed, plan = best
        ready = view.now_s + set_up_s(plan, view.graph)
        start = self._shifted(job, plan, view, ready)
        return placed if start is None else replace(placed, start_at_s=start,
                                                    note=f"first round shifted {start - ready:.3g} s after set-up")

    def _shifted(self, job: Job, plan: Plan, view: ClusterView, ready: float) -> float | None:
        """When ``job``'s first round should begin on ``plan``, set up at ``ready`` (None: at once:
        no later start is better, it shares no link with a job whose round is under way, or there
        is no fluid model to ask)."""
        links = set(predicted_link_bytes(plan))
        sharing = [r for name, r in view.running.items() if name in view.round_began
                   and links & set(predicted_link_bytes(r.plan))]
        if not sharing or view.profile is None:
            return None
        mine = view.profile(job, plan)
        others = [view.profile(r.job, r.plan) for r in sharing]
        origin = min(view.round_began[r.job.name] for r in sharing)
        offsets = {r.job.name: view.round_began[r.job.name] - origin for r in sharing}
        rounds = {p.name: self.ROUNDS for p in (*others, mine)}
        capacity = capacities(view.graph)
        scores = []
        for i in range(self.SHIFTS):
            start = ready + mine.period_s * i / self.SHIFTS
            spans = simulate([*others, mine], {**offsets, job.name: start - origin}, rounds, capacity)
            scores.append((round(mean_iteration_s(spans), 9), start))
        best = min(scores)[1]
        return None if best == ready else best

    @staticmethod
    def _duties(job: Job, plan: Plan, view: ClusterView) -> dict[tuple[str, str], float]:
        """Link direction -> the share of ``job``'s round, as it runs alone, that the direction
        spends carrying the job's bytes: a round alone is its training and, per phase, its busiest
        direction's bytes at that direction's rate (Cassini profiles each job alone too)."""
        def seconds(hop: tuple[str, str], b: int) -> float:
            return b * 8 / (float(view.graph.edges[hop]["capacity_mbps"]) * 1e6)

        phases = [predicted_link_bytes(plan, phase) for phase in TRANSFER_PHASES]
        period = (job.compute_s or 0.0) + sum(max((seconds(h, b) for h, b in p.items()), default=0.0) for p in phases)
        if period <= 0:
            return {}
        return {hop: seconds(hop, b) / period for hop, b in predicted_link_bytes(plan).items()}


@dataclass(frozen=True)
class Evict:
    """Running jobs to stop at their next round boundary, so that a waiting job can run, and why
    (preemptions.csv says it)."""

    victims: tuple[str, ...]
    reason: str


class Preemption:
    """Which running jobs to stop so that a waiting job can run (subclass it). The loop asks for
    each job still waiting once the queue has been tried, in the order's order; the victims stop at
    their next round boundary (FL's natural checkpoint: the global model, the strategy's state and
    the round reached are kept), go back to the queue, and resume later, possibly on other nodes.
    The job they made room for is tried first once they have stopped."""

    def evict(self, job: Job, view: ClusterView) -> Evict | None:
        raise NotImplementedError

    def wake_at(self, waiting: Sequence[Job], view: ClusterView) -> float | None:
        """When to ask again though no job arrives or ends (None: only then), as
        :meth:`Placement.wake_at`: a preemption that lets jobs wait a while says when."""
        return None


class NoPreemption(Preemption):
    """A running job runs to its end."""

    def evict(self, job: Job, view: ClusterView) -> Evict | None:
        return None


def _stoppable(view: ClusterView) -> list[Running]:
    """The running jobs a preemption may stop: not stopping already, with a round finished in this
    run (every run gets somewhere, so jobs cannot stop one another for ever) and more than their
    current round left (one in its last round ends at the boundary anyway)."""
    return [run for name, run in view.running.items() if name not in view.stopping
            and view.rounds_done.get(name, 0) > run.rounds_before and view.remaining_rounds(run.job) > 1]


class LeastAttainedPreemption(Preemption):
    """Tiresias' discretised LAS: a job's priority queue is the number of :data:`THRESHOLDS` its
    attained service (slot-rounds, :meth:`ClusterView.attained`) has passed, fewer first. A waiting
    job stops running jobs of a lower-priority queue, those with the most service first, until the
    slots they free and the free ones hold it; none where they cannot. Jobs of one queue never stop
    each other, so two jobs do not take turns for ever."""

    THRESHOLDS = (16, 128)

    def level(self, job: Job, view: ClusterView) -> int:
        return sum(view.attained(job) >= t for t in self.THRESHOLDS)

    def evict(self, job: Job, view: ClusterView) -> Evict | None:
        mine = self.level(job, view)
        free = sum(view.free.values())
        victims: list[str] = []
        for run in sorted((r for r in _stoppable(view) if self.level(r.job, view) > mine),
                          key=lambda r: (-view.attained(r.job), -r.start_s)):
            if free >= job.slots:
                break
            victims.append(run.job.name)
            free += run.job.slots
        if free < job.slots or not victims:
            return None
        return Evict(tuple(victims), f"las: {job.name} in queue {mine}, the victims in lower queues")


class NetworkPreemption(Preemption):
    """Network-sensitive preemption (seed 002: Sharma et al., 2024): a network-sensitive job (its
    :func:`network_share` at least :data:`SENSITIVE` on the placement the free slots give it now,
    or where they cannot hold it, with one model per node) that cannot be consolidated on the free
    slots (every model within :data:`CONSOLIDATED` hops of its G) stops running jobs that are not
    network-sensitive: around the node where the fewest such jobs free enough slots (then the least
    service lost), those holding the most slots there first. A job that is not sensitive never
    stops another, and a sensitive one is never stopped."""

    CONSOLIDATED = 1

    def __init__(self) -> None:
        self._hops: tuple[int, dict[str, dict[str, int]]] | None = None
        self._sensitive: dict[str, bool] = {}

    def evict(self, job: Job, view: ClusterView) -> Evict | None:
        if self._hops is None or self._hops[0] != id(view.graph):
            self._hops = (id(view.graph), dict(nx.all_pairs_shortest_path_length(view.graph)))
        distance = self._hops[1]
        if self._sensitive.get(job.name) is False:
            return None
        others = [r for r in _stoppable(view)
                  if not self._is_sensitive(r.job, view, lambda r=r: plan_share(r.job, r.plan, view))]
        if not others or within(job, view.free, distance, self.CONSOLIDATED) is not None:
            return None  # nothing to stop, or it can be consolidated now: the placement's to take

        def apart() -> float:
            """Its share unconsolidated: on the free slots, or where they cannot hold it, one model
            per node nearest its G."""
            placed = within(job, view.free, distance, None) or within(
                job, {n: 1 for n, k in view.slots.items() if k}, distance, None)
            return 0.0 if placed is None else network_share(job, placed, view)

        if not self._is_sensitive(job, view, apart):
            return None
        best: tuple[tuple[int, int, tuple[int, str]], tuple[str, ...]] | None = None
        for g in (n for n in view.slots if view.slots[n]):
            near = {n for n, d in distance[g].items() if d <= self.CONSOLIDATED}
            room = sum(view.free.get(n, 0) for n in near)
            victims: list[Running] = []
            for run in sorted(others, key=lambda r: -sum(n in near for n in r.placed.nodes)):
                if room >= job.slots:
                    break
                held = sum(n in near for n in run.placed.nodes)
                if held:
                    victims.append(run)
                    room += held
            if room >= job.slots and victims:
                key = (len(victims), sum(view.attained(r.job) for r in victims), node_order(g))
                if best is None or key < best[0]:
                    best = (key, tuple(r.job.name for r in victims))
        if best is None:
            return None
        return Evict(best[1], f"network: {job.name} is network-sensitive and cannot be consolidated; "
                              "the victims are not")

    def _is_sensitive(self, job: Job, view: ClusterView, share: Callable[[], float]) -> bool:
        """Decided once per job, when it is first looked at (running, or waiting on the placement
        it would get): a job a preemption stopped keeps what it was, so two jobs never take turns
        stopping each other."""
        if job.name not in self._sensitive:
            self._sensitive[job.name] = share() >= SENSITIVE
        return self._sensitive[job.name]


ORDERS: Registry[type[Order]] = Registry(
    "queue order", "fedmst.orders", JobError,
    {"fifo": Fifo, "sjf": ShortestFirst, "smallest": Smallest, "srtf": ShortestRemaining, "las": LeastAttained},
    accepts=lambda obj: isinstance(obj, type) and issubclass(obj, Order),
    requirement="a subclass of fedmst.api.Order")
"""Queue orders by name (``--order``)."""
PLACEMENTS: Registry[type[Placement]] = Registry(
    "placement", "fedmst.placements", JobError,
    {"random": RandomSlots, "pack": Pack, "spread": Spread, "sjf-bco": SjfBco, "delay": Delay, "network": Network,
     "cassini": Cassini},
    accepts=lambda obj: isinstance(obj, type) and issubclass(obj, Placement),
    requirement="a subclass of fedmst.api.Placement")
"""Placements by name (``--placement``)."""
PREEMPTIONS: Registry[type[Preemption]] = Registry(
    "preemption", "fedmst.preemptions", JobError,
    {"none": NoPreemption, "las": LeastAttainedPreemption, "network": NetworkPreemption},
    accepts=lambda obj: isinstance(obj, type) and issubclass(obj, Preemption),
    requirement="a subclass of fedmst.api.Preemption")
"""Preemptions by name (``--preempt``)."""


__all__ = ["ORDERS", "PLACEMENTS", "PREEMPTIONS", "SENSITIVE", "Cassini", "ClusterView", "Delay", "Evict", "Fifo",
           "LeastAttained", "LeastAttainedPreemption", "Network", "NetworkPreemption", "NoPreemption", "Order", "Pack",
           "Placed", "Placement", "Preemption", "RandomSlots", "Running", "ShortestFirst", "ShortestRemaining",
           "SjfBco", "Smallest", "Spread", "network_share", "plan_share", "within"]
