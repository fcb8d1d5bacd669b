"""hier: two-level aggregation, the hierarchy FL frameworks offer (Flower #2212, FedML's
hierarchical cross-silo).

The local models' nodes are grouped into regions around regional aggregators chosen from the
whole topology by k-medoids on path delay (about the square root of the number of local-model
nodes, so regions are neither single nodes nor one big star). Broadcast: G sends the model once to
each aggregator, which sends it on to each node of its region. Upload: each node sends its update
to its aggregator, which sums the region's updates with its own and sends one tensor to G, which
sums the regions'. Every hop between two of these is its own end-to-end connection along the
least-delay path: no aggregation in the network besides the aggregators, unlike ``mst``.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import networkx as nx

from fedmst.core.plan import Plan
from fedmst.core.route import least_delay_paths, path_delay_ns
from fedmst.core.schedulers.base import LinkState, Scheduler
from fedmst.core.tasks import Task
from fedmst.core.topology import node_order


def k_medoids(dist: Mapping[str, Mapping[str, float]], points: Mapping[str, int], candidates: Sequence[str],
              k: int) -> list[str]:
    """``k`` medoids among ``candidates`` minimising the weighted distance from each point to its
    nearest medoid (PAM: greedy build, then swaps while one helps; ties to the earlier candidate).

    >>> d = {a: {b: abs(int(a) - int(b)) for b in "0123456789"} for a in "0123456789"}
    >>> k_medoids(d, {"0": 1, "1": 1, "8": 1, "9": 1}, list("0123456789"), 2)
    ['1', '8']
    """
    def cost(medoids: Sequence[str]) -> float:
        return math.fsum(w * min(dist[p][m] for m in medoids) for p, w in points.items())

    medoids: list[str] = []
    for _ in range(min(k, len(candidates))):
        medoids.append(min((c for c in candidates if c not in medoids), key=lambda c: cost([*medoids, c])))
    improved = True
    while improved:
        improved = False
        best = cost(medoids)
        for i in range(len(medoids)):
            for c in candidates:
                if c in medoids:
                    continue
                trial = [*medoids[:i], c, *medoids[i + 1:]]
                if cost(trial) < best - 1e-12:
                    medoids, best, improved = trial, cost(trial), True
    return sorted(medoids, key=node_order)


def regions(graph: nx.Graph, task: Task) -> dict[str, list[str]]:
    """Regional aggregator -> the local-model nodes it serves (G's own node is served by G)."""
    nodes = sorted({n for n in task.local_nodes if n != task.global_node}, key=node_order)
    if not nodes:
        return {}
    dist = {n: {m: path_delay_ns(graph, path) for m, path in least_delay_paths(graph, n).items()} for n in nodes}
    weight = {n: len(task.models_at(n)) for n in nodes}
    medoids = k_medoids(dist, weight, sorted(graph.nodes, key=node_order), max(1, round(math.sqrt(len(nodes)))))
    out: dict[str, list[str]] = {m: [] for m in medoids}
    for n in nodes:
        out[min(medoids, key=lambda m: (dist[n][m], node_order(m)))].append(n)
    return {m: members for m, members in out.items() if members}


class HierScheduler(Scheduler):
    """Two levels: G to regional aggregators (k-medoids on delay), aggregators to their regions."""

    name = "hier"

    def plan(self, graph: nx.Graph, task: Task, link_state: LinkState | None = None) -> Plan:
        from_g = least_delay_paths(graph, task.global_node)
        hops: list[tuple[tuple[str, ...], frozenset[int]]] = []  # (path from parent, models below), parents first
        for aggregator, members in regions(graph, task).items():
            below = frozenset(i for n in members for i in task.models_at(n))
            if aggregator != task.global_node:
                hops.append((tuple(from_g[aggregator]), below))
            from_aggregator = least_delay_paths(graph, aggregator)
            hops += [(tuple(from_aggregator[n]), frozenset(task.models_at(n))) for n in members if n != aggregator]
        return Plan.mirrored(self.name, task, hops)
