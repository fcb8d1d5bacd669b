"""Ring all-reduce, what NCCL and Horovod do for data-parallel jobs (and seed 003's SJF-BCO
schedules): the members (G's node and every local model's node) form a ring, the model is cut into
one segment per member, and

* **reduce-scatter**: in n - 1 steps each member hands one partial sum on to the next, adding its
  own updates to what it received, until every member holds one segment summed over everyone;
* **all-gather**: in n - 1 more steps each finished segment travels once round the ring.

Every member, not only G, ends the upload with the new global model, so the ring has nothing to
broadcast (all models start from the same seeded initial weights, as data-parallel ranks do). On
each ring link direction it moves 2 (n - 1) / n of the model, whatever n: cheap per link, but every
ring link is used, and each of the 2 (n - 1) steps waits for the one before.

The ring's order is a short travelling-salesman tour (Christofides) over the members, weighted by
the physical hops of their least-delay paths (SPFF's routes), which every ring transfer then
follows: a ring order that keeps physical hops low.
"""

from __future__ import annotations

from typing import Mapping

import networkx as nx

from fedmst.core.plan import Plan, Transfer, equal_segments
from fedmst.core.route import least_delay_paths
from fedmst.core.schedulers.base import LinkState, Scheduler
from fedmst.core.tasks import Task
from fedmst.errors import SchedulerError


def ring_order(paths: Mapping[str, Mapping[str, list[str]]], members: list[str]) -> list[str]:
    """The members in ring order, starting with the first, with few physical hops between
    neighbours (a Christofides tour on the lengths in hops of ``paths``, each member's least-delay
    paths to the others).

    >>> g = nx.cycle_graph(["a", "b", "c", "d"])
    >>> nx.set_edge_attributes(g, 0.001, "delay_s")
    >>> ring_order({m: least_delay_paths(g, m) for m in "abcd"}, ["a", "c", "b", "d"])
    ['a', 'd', 'c', 'b']
    """
    if len(members) <= 3:
        return list(members)
    closure = nx.Graph()
    closure.add_weighted_edges_from((u, v, len(paths[u][v]) - 1) for u in members for v in members if u < v)
    tour = nx.approximation.christofides(closure)[:-1]  # shortcut: each member once
    start = tour.index(members[0])
    return tour[start:] + tour[:start]


class RingScheduler(Scheduler):
    """Ring all-reduce among G's node and the local models' nodes (reduce-scatter, then
    all-gather, one segment per member), on least-delay paths; nothing to broadcast."""

    name = "ring"

    def plan(self, graph: nx.Graph, task: Task, link_state: LinkState | None = None) -> Plan:
        members = list(dict.fromkeys((task.global_node, *sorted(set(task.local_nodes)))))
        paths = {m: least_delay_paths(graph, m) for m in members}
        members = ring_order(paths, members)
        n = len(members)
        if n == 1:
            return Plan(scheduler=self.name, task=task, transfers=())
        segments = equal_segments(task.model_bytes, n)
        if len(segments) < n:
            raise SchedulerError(f"ring: a model of {task.model_bytes // 4} weights cannot be cut into {n} segments, "
                                 "one per ring member")
        hosted = [frozenset(task.models_at(m)) for m in members]
        hop = [tuple(paths[members[i]][members[(i + 1) % n]]) for i in range(n)]

        def models(first: int, count: int) -> frozenset[int]:
            """The updates hosted on ``count`` members from member ``first`` on, round the ring."""
            return frozenset().union(*(hosted[(first + j) % n] for j in range(count)))

        transfers = []
        for step in range(n - 1):  # member i hands on segment i - step, summed over members i - step .. i
            for i in range(n):
                s = (i - step) % n
                transfers.append(Transfer("upload", hop[i], models(s, step + 1), segments[s], step, "sum"))
        for step in range(n - 1):  # member i hands on finished segment i + 1 - step (finished at i - step)
            for i in range(n):
                s = (i + 1 - step) % n
                transfers.append(Transfer("upload", hop[i], models(i + 1, n - 1 - step), segments[s], n - 1 + step,
                                          "global"))
        return Plan(scheduler=self.name, task=task, transfers=tuple(transfers))

