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
from typing import TYPE_CHECKING, Mapping, Sequence

from fedmst.core.cluster.jobs import Job, JobError
from fedmst.plugins import Registry

if TYPE_CHECKING:
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
    seconds), the command's seed, and the jobs running now with where they run."""

    graph: nx.Graph
    free: Mapping[str, int]
    now_s: float
    seed: int
    running: Mapping[str, Placed] = field(default_factory=dict)


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
    "queue order", "fedmst.orders", JobError, {"fifo": Fifo},
    accepts=lambda obj: isinstance(obj, type) and issubclass(obj, Order),
    requirement="a subclass of fedmst.api.Order")
"""Queue orders by name (``--order``)."""
PLACEMENTS: Registry[type[Placement]] = Registry(
    "placement", "fedmst.placements", JobError, {"random": RandomSlots},
    accepts=lambda obj: isinstance(obj, type) and issubclass(obj, Placement),
    requirement="a subclass of fedmst.api.Placement")
"""Placements by name (``--placement``)."""


__all__ = ["ORDERS", "PLACEMENTS", "ClusterView", "Fifo", "Order", "Placed", "Placement", "RandomSlots"]
