"""Optical transparency: plans over the electrical nodes, each of their links a lightpath.

An all-optical node (:func:`fedmst.core.topology.optical_nodes`) passes light through: it buffers,
relays, aggregates and computes nothing. So schedulers plan on the *transparent overlay*
(:func:`transparent_overlay`), the graph over the electrical nodes in which two of them are joined
by their physical link or by a lightpath whose inner nodes are all optical; :func:`expand` puts the
plan back on physical paths, and :func:`check_transparent` refuses a plan that starts, ends or sums
a transfer at an optical node. :func:`fedmst.core.schedulers.schedule` does this for every
scheduler, a user's plugin included, so none of them needs to know about optics.

>>> g = nx.Graph()
>>> g.add_edges_from([("a", "s"), ("s", "b")], capacity_mbps=100.0, delay_s=0.001)
>>> g.nodes["s"]["optical"] = True
>>> over = transparent_overlay(g)
>>> sorted(over.graph.nodes), over.graph.edges["a", "b"]["path"], over.graph.edges["a", "b"]["hops"]
(['a', 'b'], ('a', 's', 'b'), 2)
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any, Collection, Mapping, Sequence

import networkx as nx

from fedmst.core.plan import Plan
from fedmst.core.route import LinkDir, delay_ns, route_cost
from fedmst.core.tasks import Task
from fedmst.core.topology import optical_nodes
from fedmst.errors import SchedulerError

WHY = "light passes through it: no relay, aggregation or compute"
"""Why nothing of a plan may stop at an optical node, as every refusal says it."""


@dataclass(frozen=True)
class Overlay:
    """The transparent overlay of ``physical``: ``graph`` over its electrical nodes, each edge with
    ``capacity_mbps`` (the narrowest hop), ``delay_s`` (the sum), ``hops`` (physical hop count)
    and ``path`` (the physical path, from its lower-named end)."""

    graph: nx.Graph
    physical: nx.Graph

    def path(self, u: str, v: str) -> tuple[str, ...]:
        """The physical path of overlay edge ``u-v``, from ``u`` to ``v``."""
        path: tuple[str, ...] = self.graph.edges[u, v]["path"]
        return path if path[0] == u else path[::-1]

    def load(self, state: Mapping[LinkDir, float] | None) -> dict[LinkDir, float] | None:
        """Physical link state (bytes per round per link direction) on the overlay's edges: a
        lightpath carries what its busiest hop does, since it cannot go faster than that hop."""
        if state is None:
            return None
        return {(u, v): max(state.get(hop, 0.0) for hop in pairwise(self.path(u, v)))
                for a, b in self.graph.edges for u, v in ((a, b), (b, a))}


def spread(u: str, v: str, choices: int) -> int:
    """Which of ``choices`` equal paths the node pair ``u``, ``v`` takes: a stable hash of the pair
    (the same in every process, either order), so pairs spread over spines.

    >>> spread("l0", "l1", 2) == spread("l1", "l0", 2), spread("l0", "l1", 1)
    (True, 0)
    """
    return zlib.crc32("\0".join(sorted((u, v))).encode()) % choices


def _lightpaths(graph: nx.Graph, optical: frozenset[str]) -> dict[tuple[str, str], list[tuple[int, tuple[str, ...]]]]:
    """Every least-cost path (:func:`~fedmst.core.route.route_cost`) through each connected group
    of optical nodes between two electrical nodes next to it, with its cost, by sorted end pair."""
    bound = graph.number_of_nodes()
    out: dict[tuple[str, str], list[tuple[int, tuple[str, ...]]]] = {}
    for group in sorted(map(sorted, nx.connected_components(graph.subgraph(optical)))):
        ends = sorted({v for c in group for v in graph[c]} - optical)
        inside = [(a, b, route_cost(graph.edges[a, b], bound)) for a, b in graph.subgraph(group).edges]
        for i, u in enumerate(ends):
            light = nx.DiGraph()  # in at u, through optical nodes only, out at any other end
            light.add_weighted_edges_from([*inside, *((b, a, w) for a, b, w in inside)])
            light.add_weighted_edges_from(
                ((u, c) if v == u else (c, v)) + (route_cost(graph.edges[c, v], bound),)
                for c in group for v in graph[c] if v not in optical)
            for v in ends[i + 1:]:
                paths = sorted(map(tuple, nx.all_shortest_paths(light, u, v, weight="weight")))
                cost = nx.path_weight(light, list(paths[0]), "weight")
                out.setdefault((u, v), []).extend((cost, p) for p in paths)
    return out


def transparent_overlay(graph: nx.Graph) -> Overlay:
    """The graph over ``graph``'s electrical nodes, two of them joined by their physical link or,
    where light can pass between them through optical nodes only, by that lightpath; where both
    or several exist, the least delay (then fewest hops) wins, and equal ones go by :func:`spread`.
    Electrical nodes keep their attributes, physical links between them all of theirs.
    """
    optical = optical_nodes(graph)
    bound = graph.number_of_nodes()
    candidates = _lightpaths(graph, optical)
    for u, v in graph.edges:
        if u not in optical and v not in optical:
            a, b = sorted((u, v))
            candidates.setdefault((a, b), []).append((route_cost(graph.edges[u, v], bound), (a, b)))
    over = nx.Graph()
    over.add_nodes_from((n, data) for n, data in graph.nodes(data=True) if n not in optical)
    for (u, v), found in sorted(candidates.items()):
        least = min(cost for cost, _ in found)
        paths = sorted(p for cost, p in found if cost == least)
        path = paths[spread(u, v, len(paths))]
        over.add_edge(u, v, **_lightpath_link(graph, path))
    return Overlay(over, graph)


def _lightpath_link(graph: nx.Graph, path: tuple[str, ...]) -> dict[str, Any]:
    """The overlay edge's attributes for physical ``path``: a single link's own, else its narrowest
    capacity and summed delay (exact nanoseconds), with its hops and path either way."""
    links = [graph.edges[u, v] for u, v in pairwise(path)]
    own = dict(links[0]) if len(links) == 1 else {
        "capacity_mbps": min(float(e["capacity_mbps"]) for e in links),
        "delay_s": sum(delay_ns(e) for e in links) / 1e9}
    return {**own, "hops": len(links), "path": path}


def cut_loops(path: Sequence[str]) -> tuple[str, ...]:
    """``path`` with every loop cut out: from a node's first visit straight on from its last.

    >>> cut_loops(["l0", "s0", "l1", "s0", "l2"])
    ('l0', 's0', 'l2')
    """
    out: list[str] = []
    for node in path:
        if node in out:
            del out[out.index(node) + 1:]
        else:
            out.append(node)
    return tuple(out)


def expand(plan: Plan, overlay: Overlay) -> Plan:
    """``plan`` (over ``overlay``'s graph) on physical paths: each transfer's overlay hops become
    their lightpaths, loops cut (:func:`cut_loops`), so its ends, and what it carries, stay."""
    def physical(path: tuple[str, ...]) -> tuple[str, ...]:
        return cut_loops([path[0], *(n for u, v in pairwise(path) for n in overlay.path(u, v)[1:])])

    return replace(plan, transfers=tuple(replace(t, path=physical(t.path)) for t in plan.transfers))


def check_terminals(task: Task, optical: Collection[str]) -> None:
    """Raise :class:`SchedulerError` if G or a local model of ``task`` sits at an optical node."""
    placed = [("G", task.global_node), *((f"local model {i}", n) for i, n in enumerate(task.local_nodes))]
    for who, node in placed:
        if node in optical:
            raise SchedulerError(f"task {task.name!r}: {who} sits at optical node {node} ({WHY})")


def check_transparent(plan: Plan, optical: Collection[str]) -> None:
    """Raise :class:`SchedulerError`, in one line naming the node, unless no transfer of ``plan``
    starts or ends at an ``optical`` node (so none relays, sums or computes there) and none of its
    task's models sits at one.

    >>> from fedmst.core.plan import Transfer
    >>> t = Task("t", "l0", ("l1",), 8)
    >>> bad = Plan("mine", t, (Transfer("broadcast", ("l0", "s0"), frozenset({0})),))
    >>> check_transparent(bad, {"s0"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    fedmst.errors.SchedulerError: plan of 'mine' for task 't': broadcast transfer l0-s0 ends at optical node s0 (...)
    """
    check_terminals(plan.task, optical)
    for t in plan.transfers:
        for end, verb in ((t.src, "starts"), (t.dst, "ends")):
            if end in optical:
                raise SchedulerError(f"plan of {plan.scheduler!r} for task {plan.task.name!r}: {t.phase} transfer "
                                     f"{'-'.join(t.path)} {verb} at optical node {end} ({WHY})")


__all__ = ["WHY", "Overlay", "check_terminals", "check_transparent", "cut_loops", "expand", "spread",
           "transparent_overlay"]
