"""SPFF, the fixed baseline: a star of end-to-end connections between G and every local model.

Each local model gets its own connection along the shortest path (by propagation delay) from
G, once each way, and only G aggregates. This is what a scheduler without in-path aggregation
does, and what the MST scheduler is measured against.
"""

from __future__ import annotations

import networkx as nx

from fedmst.core.schedulers.base import LinkState, Scheduler
from fedmst.core.plan import Plan, Transfer
from fedmst.core.tasks import Task


def shortest_paths_from(graph: nx.Graph, source: str) -> dict[str, list[str]]:
    """Least-delay path from ``source`` to every node, one path tree for all of them.

    Dijkstra breaks ties by the order it meets neighbours, so it runs on a copy whose nodes and
    adjacencies are sorted: equal graphs give equal paths however they were built.
    """
    ordered = nx.Graph()
    ordered.add_nodes_from(sorted(graph.nodes))
    ordered.add_edges_from(
        (u, v, {"delay_s": graph.edges[u, v]["delay_s"]})
        for u, v in sorted(tuple(sorted(e)) for e in graph.edges)
    )
    return nx.single_source_dijkstra_path(ordered, source, weight="delay_s")


class SPFFScheduler(Scheduler):
    """Shortest path star: one broadcast and one upload connection per local model."""

    name = "spff"

    def plan(self, graph: nx.Graph, task: Task, link_state: LinkState | None = None) -> Plan:
        paths = shortest_paths_from(graph, task.global_node)
        remote = [(i, tuple(paths[n])) for i, n in enumerate(task.local_nodes) if n != task.global_node]
        broadcast = [Transfer("broadcast", path, frozenset({i})) for i, path in remote]
        upload = [Transfer("upload", path[::-1], frozenset({i})) for i, path in remote]
        return Plan(scheduler=self.name, task=task, transfers=tuple(broadcast + upload))
