"""A transfer's route: its ends and the link directions it crosses, from its node path.

Shared by the plan's :class:`~fedmst.core.plan.Transfer` and the agents' view of one
(:class:`fedmst.protocol.TransferSpec`); no imports, so the protocol stays light. Also the one
way routes are chosen on least delay (:func:`least_delay_paths`); networkx is imported there only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    import networkx as nx

LinkDir = tuple[str, str]
"""A link direction ``(u, v)``: bytes sent by u towards v."""


class Along:
    """Ends and hops of something that travels along ``path``.

    >>> class T(Along):
    ...     path = ("a", "b", "c")
    >>> T().src, T().dst, T().hops
    ('a', 'c', (('a', 'b'), ('b', 'c')))
    """

    path: tuple[str, ...]

    @property
    def src(self) -> str:
        return self.path[0]

    @property
    def dst(self) -> str:
        return self.path[-1]

    @property
    def hops(self) -> tuple[LinkDir, ...]:
        return tuple(zip(self.path, self.path[1:]))


def delay_ns(link: Mapping[str, Any]) -> int:
    """A link's ``delay_s`` in whole nanoseconds (0.2 m of fibre): sums of these are exact, so two
    routes of equal length tie exactly instead of by the rounding of summed floats.

    >>> delay_ns({"delay_s": 0.0105}), delay_ns({"delay_s": 2100 * 5e-6})
    (10500000, 10500000)
    """
    return round(float(link["delay_s"]) * 1e9)


def path_delay_ns(graph: nx.Graph, path: Sequence[str]) -> int:
    """Total propagation delay of ``path`` in nanoseconds (:func:`delay_ns` of each hop)."""
    return sum(delay_ns(graph.edges[u, v]) for u, v in zip(path, path[1:]))


def warm_elements(largest: int, chunk_elems: int, window: int) -> int:
    """The weights a connection moves before round 1 to warm it: its path's bandwidth-delay product
    ``window`` (bytes), at least one chunk, at most its ``largest`` transfer (elements). What agents
    move, and what a cluster's links carry for each job's set-up.

    >>> warm_elements(largest=4_000, chunk_elems=65_536, window=500_000)
    4000
    >>> warm_elements(largest=10**6, chunk_elems=1_000, window=500_000)
    125000
    """
    return min(largest, max(chunk_elems, window // 4))


def window_bytes(graph: nx.Graph, path: Sequence[str]) -> int:
    """The bytes a connection along ``path`` keeps in flight to fill it: its narrowest link's
    capacity times its round trip of propagation (the bandwidth-delay product). TCP's slow start
    grows the window by what is acknowledged, so a connection that has carried this much once
    sends at the path's rate from then on. The same at any time scale (capacity / N, delay x N).

    >>> import networkx as nx
    >>> g = nx.Graph([("a", "b", {"capacity_mbps": 10_000, "delay_s": 0.001}),
    ...               ("b", "c", {"capacity_mbps": 1_000, "delay_s": 0.001})])
    >>> window_bytes(g, ["a", "b", "c"])  # 1 Gbit/s x 4 ms
    500000
    """
    narrowest = min(float(graph.edges[u, v]["capacity_mbps"]) for u, v in zip(path, path[1:]))
    return round(narrowest * 1e6 / 8 * 2 * path_delay_ns(graph, path) / 1e9)


def route_cost(link: Mapping[str, Any], bound: int) -> int:
    """A link's cost on a least-delay route: delay first, then one per hop, as one exact integer
    (``bound`` exceeds any path's hop count: the graph's number of nodes).

    >>> route_cost({"delay_s": 0.001}, 10)
    10000001
    """
    return delay_ns(link) * bound + 1


def least_delay_paths(graph: nx.Graph, source: str) -> dict[str, list[str]]:
    """The least-delay path from ``source`` to every node it reaches, all from one path tree.

    Delays are compared exactly (:func:`delay_ns`) and equal delays go to the path with fewer hops;
    paths equal in both go by node order (Dijkstra on a copy whose nodes and adjacencies are
    sorted), so equal graphs give equal paths however they were built. Every scheduler and flow
    that routes on least delay routes here.

    >>> import networkx as nx
    >>> g = nx.Graph([("a", "b", {"delay_s": 0.1}), ("b", "c", {"delay_s": 0.7}), ("a", "c", {"delay_s": 0.8})])
    >>> least_delay_paths(g, "a")["c"]  # 0.1 + 0.7 < 0.8 in floats; a tie in fact, so one hop wins
    ['a', 'c']
    """
    import networkx as nx

    bound = graph.number_of_nodes()
    ordered = nx.Graph()
    ordered.add_nodes_from(sorted(graph.nodes))
    ordered.add_edges_from(
        (u, v, {"cost": route_cost(graph.edges[u, v], bound)})
        for u, v in sorted(tuple(sorted(e)) for e in graph.edges)
    )
    return nx.single_source_dijkstra_path(ordered, source, weight="cost")
