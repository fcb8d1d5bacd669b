"""Binomial trees, what ``torch.distributed`` broadcast and reduce do over gloo (and MPICH for
short messages): G's node is rank 0, every other node holding local models one rank, in the order
the task lists them; no rank knows the physical network.

Broadcast takes ceil(log2 n) rounds: in round j every rank below 2^j that has the model sends the
whole buffer to rank + 2^j. Reduce runs the same tree backwards, the largest strides first, each
rank summing its subtree's updates before it sends on. Every transfer follows the least-delay path
(SPFF's routes), and a rank forwards only once it has received everything (store and forward):
each round waits for the one before, and a rank's sends in different rounds go one after another.
"""

from __future__ import annotations

import networkx as nx

from fedmst.core.plan import Plan, Transfer
from fedmst.core.route import least_delay_paths
from fedmst.core.schedulers.base import LinkState, Scheduler
from fedmst.core.tasks import Task


def binomial_edges(n: int) -> list[tuple[int, int, int]]:
    """``(round, parent rank, child rank)`` of a binomial broadcast tree over ranks 0..n-1.

    >>> binomial_edges(5)
    [(0, 0, 1), (1, 0, 2), (1, 1, 3), (2, 0, 4)]
    """
    edges, stride, j = [], 1, 0
    while stride < n:
        edges += [(j, r, r + stride) for r in range(stride) if r + stride < n]
        stride, j = 2 * stride, j + 1
    return edges


class BinomialScheduler(Scheduler):
    """Binomial broadcast and reduce trees over the ranks (gloo's collectives), on least-delay
    paths, whole buffer per round, no in-network pipelining."""

    name = "binomial"

    def plan(self, graph: nx.Graph, task: Task, link_state: LinkState | None = None) -> Plan:
        ranks = list(dict.fromkeys((task.global_node, *task.local_nodes)))
        edges = binomial_edges(len(ranks))
        children: dict[int, list[int]] = {r: [] for r in range(len(ranks))}
        for _, parent, child in edges:
            children[parent].append(child)

        def below(rank: int) -> frozenset[int]:
            """The local models hosted on ``rank`` and every rank under it."""
            return frozenset(task.models_at(ranks[rank])).union(*(below(c) for c in children[rank]))

        paths = {parent: least_delay_paths(graph, ranks[parent]) for _, parent, _ in edges}
        rounds = max((j for j, _, _ in edges), default=-1) + 1
        broadcast, upload = [], []
        for j, parent, child in edges:
            path = tuple(paths[parent][ranks[child]])
            broadcast.append(Transfer("broadcast", path, below(child), step=j))
            upload.append(Transfer("upload", path[::-1], below(child), step=rounds - 1 - j))
        upload.sort(key=lambda t: t.step)
        return Plan(scheduler=self.name, task=task, transfers=tuple(broadcast + upload))
