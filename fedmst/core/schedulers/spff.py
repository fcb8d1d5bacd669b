"""SPFF, the fixed baseline: a star of end-to-end connections between G and every local model.

Each local model gets its own connection along the shortest path (by propagation delay, equal
delays to fewer hops: :func:`fedmst.core.route.least_delay_paths`) from G, once each way, and
only G aggregates. This is what a scheduler without in-path aggregation does, and what the MST
scheduler is measured against.
"""

from __future__ import annotations

import networkx as nx

from fedmst.core.plan import Plan, Transfer
from fedmst.core.route import least_delay_paths
from fedmst.core.schedulers.base import LinkState, Scheduler
from fedmst.core.tasks import Task


class SPFFScheduler(Scheduler):
    """Shortest path star: one broadcast and one upload connection per local model."""

    name = "spff"

    def plan(self, graph: nx.Graph, task: Task, link_state: LinkState | None = None) -> Plan:
        paths = least_delay_paths(graph, task.global_node)
        remote = [(i, tuple(paths[n])) for i, n in enumerate(task.local_nodes) if n != task.global_node]
        broadcast = [Transfer("broadcast", path, frozenset({i})) for i, path in remote]
        upload = [Transfer("upload", path[::-1], frozenset({i})) for i, path in remote]
        return Plan(scheduler=self.name, task=task, transfers=tuple(broadcast + upload))
