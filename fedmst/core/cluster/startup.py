"""How long a placed job takes to start: its agents started, every connection opened and warmed,
before its first round. The simulator waits it out; a policy that times a job's first round (a
time shift) counts it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedmst.core.plan import Plan

if TYPE_CHECKING:
    import networkx as nx


SET_UP_RTTS = 5.0
"""A job's set-up (its agents started, every connection opened and warmed) lasts this many round
trips of its longest path: measured 4.7 to 5.5 on NSFNET's paths of 15 to 72 ms at time scale 8,
where the host's part is an eighth of the network's (docs/cluster.md). A TCP handshake, gloo's
exchange of its pair addresses, and the warming transfer's slow start are each round trips."""


def set_up_s(plan: Plan, graph: nx.Graph) -> float:
    """How long ``plan``'s job takes to set up before its first round (:data:`SET_UP_RTTS`).

    >>> import networkx as nx
    >>> from fedmst.core.plan import Transfer
    >>> from fedmst.core.tasks import Task
    >>> g = nx.path_graph(["a", "b", "c"])
    >>> nx.set_edge_attributes(g, 0.01, "delay_s")
    >>> plan = Plan("x", Task("t", "a", ("c",), 8), (Transfer("broadcast", ("a", "b", "c"), frozenset({0})),))
    >>> round(set_up_s(plan, g), 3)
    0.2
    """
    return SET_UP_RTTS * max((2 * sum(graph.edges[u, v]["delay_s"] for u, v in t.hops) for t in plan.transfers),
                             default=0.0)


__all__ = ["SET_UP_RTTS", "set_up_s"]
