"""MST, the poster's flexible scheduler: one Steiner tree joining G and the local models, with
in-path aggregation.

Links are weighed on an auxiliary graph "according to bandwidth consumption and latency (if AI
tasks pass through the link)", in that order. Every tree link carries the model once per phase,
so a tree's bandwidth consumption is its number of links: each link weighs 1, plus a tie-break
worth less than one link in all, the time one model takes on it (its transfer time with the load
earlier tasks already put on it, plus its propagation delay). So ``mst`` never buys latency with
bytes, and among trees of equal size it takes the one whose links are least loaded and shortest.
(``mst-latency`` weighs links by that time alone: it may use more links to save delay, and its name
says so wherever a run is reported.) The cheapest of four trees carries the weights: Mehlhorn's
and Kou's Steiner approximations, the shortest-path tree on the same weights, and SPFF's own
least-delay paths joined into a tree, so that ``mst`` never plans more link bytes than ``spff``.
Broadcast flows down it, upload flows up it, and every node where branches meet sums the updates
so that only one tensor leaves it.

Load does not make a link cheaper: lightpaths are never shared between tasks, so a loaded link
costs the same bytes and more time. Both phases use the same weights: the direction a link will
be used in depends on the tree not yet built, so a link's load counts as the larger of its two
directions. The upload tree is therefore the broadcast tree reversed.
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any, Iterable, Mapping

import networkx as nx
from networkx.algorithms.approximation import steiner_tree as approx_steiner_tree

from fedmst.core.schedulers.base import LinkState, Scheduler
from fedmst.core.plan import Plan
from fedmst.core.route import least_delay_paths
from fedmst.core.tasks import Task


def link_seconds(link: Mapping[str, Any], model_bytes: int, load: float) -> float:
    """Time one model takes on a link that already carries ``load`` bytes per round: its transfer
    behind that load, plus the propagation delay.

    >>> link_seconds({"capacity_mbps": 100.0, "delay_s": 0.002}, 1_000_000, 1_000_000)
    0.162
    """
    return (model_bytes + load) * 8 / (float(link["capacity_mbps"]) * 1e6) + float(link["delay_s"])


def auxiliary_graph(graph: nx.Graph, task: Task, link_state: LinkState | None, *, latency: bool = False) -> nx.Graph:
    """Copy of ``graph`` whose edges carry ``weight``: one per link plus :func:`link_seconds` scaled
    so that all links' seconds together weigh less than one link (bytes first, then time); with
    ``latency``, the seconds alone. A lightpath of the transparent overlay weighs its physical
    ``hops``, as each of them carries the bytes."""
    state = link_state or {}
    seconds = {(u, v): link_seconds(link, task.model_bytes, max(state.get((u, v), 0.0), state.get((v, u), 0.0)))
               for u, v, link in graph.edges(data=True)}
    tie = 1.0 / (1.0 + math.fsum(seconds.values()))
    aux = nx.Graph()
    aux.add_nodes_from(graph.nodes)
    aux.add_weighted_edges_from((u, v, s if latency else float(graph.edges[u, v].get("hops", 1)) + tie * s)
                                for (u, v), s in seconds.items())
    return aux


def steiner_tree(aux: nx.Graph, root: str, terminals: Iterable[str],
                 also: Iterable[nx.Graph] = ()) -> nx.Graph:
    """The lightest tree joining ``root`` and ``terminals`` in ``aux`` among Mehlhorn's and Kou's
    2-approximations, the union of shortest paths from ``root``, and the trees in ``also``.
    Earlier candidates win ties. Nodes are renamed to their sorted index first: Kou's algorithm
    iterates a set of terminals, and str hashes differ per process, so ties would break
    differently from run to run.
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
    others = [nx.Graph((index[u], index[v], {"weight": canon.edges[index[u], index[v]]["weight"]})
                       for u, v in tree.edges) for tree in also]
    candidates = [approx_steiner_tree(canon, ends, weight="weight", method=m) for m in ("mehlhorn", "kou")]
    best = min([*candidates, star, *others], key=lambda t: math.fsum(w for *_, w in t.edges(data="weight")))
    return nx.Graph((names[u], names[v]) for u, v in best.edges)


def spff_tree(graph: nx.Graph, task: Task) -> nx.Graph:
    """SPFF's least-delay paths from G to the local models, joined: a tree (they come from one
    shortest-path tree) no larger than SPFF's star, which sends a copy along each path."""
    paths = least_delay_paths(graph, task.global_node)
    return nx.Graph(hop for node in task.terminals for hop in pairwise(paths[node]))


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
    """Steiner tree with the fewest links (approximately; never more than SPFF's), least loaded
    and shortest among equals, aggregating wherever upload branches meet."""

    name = "mst"
    latency = False

    def plan(self, graph: nx.Graph, task: Task, link_state: LinkState | None = None) -> Plan:
        if task.terminals == {task.global_node}:
            return Plan(scheduler=self.name, task=task, transfers=())
        aux = auxiliary_graph(graph, task, link_state, latency=self.latency)
        tree = steiner_tree(aux, task.global_node, task.terminals, also=[spff_tree(graph, task)])
        return tree_plan(self.name, tree, task)


class MSTLatencyScheduler(MSTScheduler):
    """MST on time alone (transfer behind the load, plus delay): may use more links, and so more
    bytes, than ``mst`` or ``spff`` to save delay."""

    name = "mst-latency"
    latency = True
