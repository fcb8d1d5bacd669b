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
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from fedmst.core.cluster.jobs import Job, JobError
from fedmst.core.plan import Plan
from fedmst.core.topology import node_order
from fedmst.plugins import Registry

import networkx as nx


@dataclass(frozen=True)
class Placed:
    """Where a job runs: G on ``global_node``, local model i on ``local_nodes[i]``; each takes a slot."""

    global_node: str
    local_nodes: tuple[str, ...]

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
    predicted shortest on the links the running jobs load wins (fewer link bytes, then node
    order, break ties)."""

    CANDIDATES = 8

    def place(self, job: Job, view: ClusterView) -> Placed | None:
        if view.plan is None or view.comm_s is None:
            raise JobError("the network placement needs the cluster's scheduler and predictions")
        if sum(view.free.values()) < job.slots:
            return None
        distance = dict(nx.all_pairs_dijkstra_path_length(view.graph, weight="delay_s"))
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
    {"random": RandomSlots, "pack": Pack, "spread": Spread, "network": Network},
    accepts=lambda obj: isinstance(obj, type) and issubclass(obj, Placement),
    requirement="a subclass of fedmst.api.Placement")
"""Placements by name (``--placement``)."""


__all__ = ["ORDERS", "PLACEMENTS", "ClusterView", "Fifo", "Network", "Order", "Pack", "Placed", "Placement",
           "RandomSlots", "ShortestFirst", "Spread"]
