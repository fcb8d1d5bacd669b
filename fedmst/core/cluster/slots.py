"""Compute on the topology: the slots each node offers, and which job holds each one when.

A slot is one unit of compute (an accelerator, or a worker process): a running job holds one
per local model and one for its G, from its start to its end. A node declares its slots in the
topology (``{"id": "3", "slots": 4}``, GraphML attribute ``slots``); ``--slots N`` gives N to
every node that declares none; a node with 0 is a pure network node (a router, a ROADM) that
forwards but never hosts a model.

>>> import networkx as nx
>>> g = nx.path_graph(["a", "b", "c"])
>>> g.nodes["b"]["slots"] = 0
>>> node_slots(g, default=2)
{'a': 2, 'b': 0, 'c': 2}
>>> held = Occupancy({"a": 2, "c": 1})
>>> held.take("j1", ("a", "a"), at_s=0.0)
>>> held.free, held.release("j1", at_s=5.0)
({'c': 1}, None)
>>> [(s.node, s.slot, s.job, s.from_s, s.to_s) for s in held.intervals]
[('a', 0, 'j1', 0.0, 5.0), ('a', 1, 'j1', 0.0, 5.0)]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

from fedmst.core.cluster.jobs import JobError

if TYPE_CHECKING:
    import networkx as nx


def node_slots(graph: nx.Graph, default: int) -> dict[str, int]:
    """Every node's slots: what it declares, else ``default`` (``--slots``, checked with the
    options), and none on an all-optical node; a cluster with no slot at all is refused."""
    from fedmst.core.topology import optical_nodes  # networkx, loaded only once a graph exists

    optical = optical_nodes(graph)
    slots = {str(n): 0 if n in optical else int(graph.nodes[n].get("slots", default)) for n in graph}
    if not any(slots.values()):
        raise JobError(f"topology {graph.graph.get('name', '?')!r}: no node has a slot, so no job can run "
                       "(give --slots N, or declare slots on its nodes)")
    return slots


@dataclass(frozen=True)
class SlotInterval:
    """One row of slots.csv: ``job`` held slot ``slot`` of ``node`` from ``from_s`` to ``to_s``."""

    node: str
    slot: int
    job: str
    from_s: float
    to_s: float


class Occupancy:
    """Which slots are free, which job holds the others, and every interval held so far."""

    def __init__(self, slots: Mapping[str, int]) -> None:
        self.slots = dict(slots)
        self._holder: dict[tuple[str, int], tuple[str, float]] = {}
        self.intervals: list[SlotInterval] = []

    @property
    def free(self) -> dict[str, int]:
        """Free slots per node (nodes with none left out)."""
        held: dict[str, int] = {}
        for node, _ in self._holder:
            held[node] = held.get(node, 0) + 1
        return {n: s - held.get(n, 0) for n, s in self.slots.items() if s - held.get(n, 0) > 0}

    @property
    def total(self) -> int:
        return sum(self.slots.values())

    def take(self, job: str, nodes: Sequence[str], at_s: float) -> None:
        """``job`` takes one slot on each of ``nodes`` (a node listed twice gives two), its lowest free ones."""
        for node in nodes:
            slot = next((i for i in range(self.slots.get(node, 0)) if (node, i) not in self._holder), None)
            if slot is None:
                raise JobError(f"job {job}: node {node} has no free slot (a placement gave more than it has)")
            self._holder[(node, slot)] = (job, at_s)

    def release(self, job: str, at_s: float) -> None:
        """Free every slot ``job`` holds, recording the intervals it held them."""
        for key, (holder, since) in list(self._holder.items()):
            if holder == job:
                del self._holder[key]
                self.intervals.append(SlotInterval(key[0], key[1], job, since, at_s))


__all__ = ["Occupancy", "SlotInterval", "node_slots"]
