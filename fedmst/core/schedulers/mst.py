"""MST, the poster's flexible scheduler: one Steiner tree joining G and the local models, with
in-path aggregation.

Links are weighed on an auxiliary graph by what one model costs to send over them (transfer
time plus latency), made cheaper where earlier tasks already load them. The cheapest tree
joining the terminals carries the weights: broadcast flows down it, upload flows up it, and
every node where branches meet sums the updates so that only one tensor leaves it.

Both phases use the same auxiliary weights: the direction a link will be used in depends on the
tree not yet built, so a link's load counts as the larger of its two directions. The upload
tree is therefore the broadcast tree reversed.
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any, Iterable, Mapping

import networkx as nx
from networkx.algorithms.approximation import steiner_tree as approx_steiner_tree

from fedmst.core.schedulers.base import LinkState, Scheduler
from fedmst.core.plan import Plan
from fedmst.core.tasks import Task


def load_discount(load: float, model_bytes: int) -> float:
    """Factor in (0, 1] on a link's weight when ``load`` bytes per round already cross it.

    The poster makes links cheaper where AI tasks already pass: an idle link keeps its whole
    weight, one already carrying a model's worth of bytes costs half, and so on.
    """
    return 1.0 / (1.0 + load / model_bytes)


def link_weight(link: Mapping[str, Any], model_bytes: int, load: float) -> float:
    """Auxiliary weight of a link: one model's transfer time plus its latency, discounted by load."""
    seconds = model_bytes * 8 / (float(link["capacity_mbps"]) * 1e6) + float(link["delay_s"])
    return seconds * load_discount(load, model_bytes)


def auxiliary_graph(graph: nx.Graph, task: Task, link_state: LinkState | None) -> nx.Graph:
    """Copy of ``graph`` whose edges carry ``weight`` = :func:`link_weight` for ``task``."""
    state = link_state or {}
    aux = nx.Graph()
    aux.add_nodes_from(graph.nodes)
    for u, v, link in graph.edges(data=True):
        load = max(state.get((u, v), 0.0), state.get((v, u), 0.0))
        aux.add_edge(u, v, weight=link_weight(link, task.model_bytes, load))
    return aux


def steiner_tree(aux: nx.Graph, root: str, terminals: Iterable[str]) -> nx.Graph:
    """The lightest of three trees joining ``root`` and ``terminals`` in ``aux``.

    Mehlhorn's and Kou's 2-approximations, and the union of shortest paths from ``root``; the
    last keeps the tree never heavier than the star of shortest paths SPFF would use. Earlier
    candidates win ties. Nodes are renamed to their sorted index first: Kou's algorithm iterates
    a set of terminals, and str hashes differ per process, so ties would break differently from
    run to run.
    """
    names = sorted(aux.nodes)
    index = {n: i for i, n in enumerate(names)}
    canon = nx.Graph()
    canon.add_nodes_from(range(len(names)))
    canon.add_weighted_edges_from(
        sorted((*sorted((index[u], index[v])), w) for u, v, w in aux.edges(data="weight"))
    )
    ends = sorted({index[root], *(index[t] for t in terminals)})
    paths = nx.single_source_dijkstra_path(canon, index[root], weight="weight")
    star = nx.Graph()
    star.add_weighted_edges_from(
        (u, v, canon.edges[u, v]["weight"]) for t in ends for u, v in pairwise(paths[t])
    )
    candidates = [approx_steiner_tree(canon, ends, weight="weight", method=m) for m in ("mehlhorn", "kou")]
    best = min([*candidates, star], key=lambda t: math.fsum(w for *_, w in t.edges(data="weight")))
    return nx.Graph((names[u], names[v]) for u, v in best.edges)


def overlay(tree: nx.Graph, task: Task) -> list[tuple[tuple[str, ...], frozenset[int]]]:
    """The tree rooted at G, compressed to (path from parent, models below) per overlay node.

    Overlay nodes are the terminals and the branch points (tree degree >= 3, where upload
    updates meet and get summed); the routers between two of them only forward. Listed
    parents first.
    """
    root = task.global_node
    parent = {child: up for up, child in nx.bfs_edges(tree, root, sort_neighbors=sorted)}
    below: dict[str, set[int]] = {n: set(task.models_at(n)) for n in tree}
    for n in reversed(list(parent)):
        below[parent[n]] |= below[n]
    stops = task.terminals | {n for n in tree if tree.degree(n) >= 3}
    out = []
    for n in parent:
        if n in stops:
            path = [n, parent[n]]
            while path[-1] not in stops:
                path.append(parent[path[-1]])
            out.append((tuple(reversed(path)), frozenset(below[n])))
    return out


def tree_plan(scheduler: str, tree: nx.Graph, task: Task) -> Plan:
    """The plan of a tree rooted at G: broadcast down it, upload up it, every branch point
    summing the updates that meet there (:func:`overlay`)."""
    return Plan.mirrored(scheduler, task, overlay(tree, task))


class MSTScheduler(Scheduler):
    """Steiner tree over load-aware link weights, aggregating wherever upload branches meet."""

    name = "mst"

    def plan(self, graph: nx.Graph, task: Task, link_state: LinkState | None = None) -> Plan:
        if task.terminals == {task.global_node}:
            return Plan(scheduler=self.name, task=task, transfers=())
        aux = auxiliary_graph(graph, task, link_state)
        return tree_plan(self.name, steiner_tree(aux, task.global_node, task.terminals), task)
