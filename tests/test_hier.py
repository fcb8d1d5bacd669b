"""hier: regions by k-medoids on delay, one transfer per hop of the two-level tree (the shared
scheduler contract checks its plans too)."""

from __future__ import annotations

import networkx as nx

from fedmst.core.plan import predicted_link_bytes
from fedmst.core.schedulers import schedule
from fedmst.core.schedulers.hier import regions
from fedmst.core.tasks import Task
from fedmst.core.wire import wire_bytes

M = 100_000


def two_clusters() -> nx.Graph:
    """G on g, 5 ms from hub ha, itself 5 ms from hub hb; three leaves 0.1 ms from each hub."""
    g = nx.Graph()
    g.add_edge("g", "ha", delay_s=0.005, capacity_mbps=100.0)
    g.add_edge("ha", "hb", delay_s=0.005, capacity_mbps=100.0)
    for hub, leaves in (("ha", "a1 a2 a3"), ("hb", "b1 b2 b3")):
        for leaf in leaves.split():
            g.add_edge(hub, leaf, delay_s=0.0001, capacity_mbps=100.0)
    return g


def test_each_cluster_gets_its_hub_as_aggregator() -> None:
    task = Task("t", "g", ("a1", "a2", "a3", "b1", "b2", "b3"), M)
    assert regions(two_clusters(), task) == {"ha": ["a1", "a2", "a3"], "hb": ["b1", "b2", "b3"]}


def test_the_plan_is_two_stars_aggregating_at_the_hubs() -> None:
    graph = two_clusters()
    plan = schedule(graph, Task("t", "g", ("a1", "a2", "a3", "b1", "b2", "b3"), M), "hier")
    broadcast = sorted((t.path, sorted(t.models)) for t in plan.phase("broadcast"))
    assert broadcast == sorted([(("g", "ha"), [0, 1, 2]), (("g", "ha", "hb"), [3, 4, 5]),
                                (("ha", "a1"), [0]), (("ha", "a2"), [1]), (("ha", "a3"), [2]),
                                (("hb", "b1"), [3]), (("hb", "b2"), [4]), (("hb", "b3"), [5])])
    assert plan.aggregation_nodes == {"g", "ha", "hb"}
    # g-ha carries the model once for each region (no in-network aggregation besides the hubs)
    assert predicted_link_bytes(plan)[("g", "ha")] == 2 * wire_bytes(M)
    assert predicted_link_bytes(plan)[("ha", "g")] == 2 * wire_bytes(M)


def test_models_on_gs_node_need_no_transfer() -> None:
    plan = schedule(two_clusters(), Task("t", "g", ("g", "g"), M), "hier")
    assert plan.transfers == ()
