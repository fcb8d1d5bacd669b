"""Faults, the pure half: parsing what to inject, and which tasks and local models remain."""

from __future__ import annotations

import networkx as nx
import pytest

from fedmst.errors import FedmstError
from fedmst.core.faults import LinkFailure, WorkerKill, parse_link_failure, parse_worker_kill, remaining_tasks
from fedmst.core.schedulers import schedule
from fedmst.core.tasks import Task


def ring(n: int = 5) -> nx.Graph:
    g = nx.cycle_graph([str(i) for i in range(n)])
    nx.set_edge_attributes(g, 100.0, "capacity_mbps")
    nx.set_edge_attributes(g, 0.001, "delay_s")
    g.graph["name"] = "ring"
    return g


def test_link_failure_forms() -> None:
    g = ring()
    assert parse_link_failure("0-4@2", g, rounds=3) == LinkFailure(("0", "4"), 2, None)
    assert parse_link_failure("4-0@1-3", g, rounds=3) == LinkFailure(("4", "0"), 1, 3)
    assert parse_link_failure("1-2@3-4", g, rounds=3).until == 4  # back up after the last round: allowed


@pytest.mark.parametrize("spec,fragment", [
    ("0-2@1", "'0-2' is not a link"),
    ("0-1", "give LINK@ROUND"),
    ("0-1@0", "round '0' is not one of 1..3"),
    ("0-1@4", "round '4' is not one of 1..3"),
    ("0-1@x", "round 'x'"),
    ("0-1@2-2", "must come back after round 2"),
    ("0-1@2-9", "round '9' is not one of 1..4"),
])
def test_bad_link_failures(spec: str, fragment: str) -> None:
    with pytest.raises(FedmstError, match=fragment.replace(".", r"\.")) as err:
        parse_link_failure(spec, ring(), rounds=3)
    assert spec in str(err.value)


def test_worker_kill_forms() -> None:
    assert parse_worker_kill("3@2", ring(), rounds=2) == WorkerKill("3", 2)
    with pytest.raises(FedmstError, match="node '9' is not in topology 'ring'"):
        parse_worker_kill("9@1", ring(), rounds=2)
    with pytest.raises(FedmstError, match="give NODE@ROUND"):
        parse_worker_kill("3", ring(), rounds=2)


TASK = Task(name="t", global_node="0", local_nodes=("1", "2", "2", "3"), model_bytes=1000)


def test_a_dead_worker_takes_its_local_models_out_and_keeps_the_others_names() -> None:
    (left,) = remaining_tasks(ring(), [TASK], dead_nodes=["2"])
    assert left.task.local_nodes == ("1", "3") and left.models == (0, 3)
    assert left.dropped == {1: "its worker on node 2 died", 2: "its worker on node 2 died"}


def test_links_down_cut_off_local_models() -> None:
    (left,) = remaining_tasks(ring(), [TASK], down_links=[("1", "2"), ("2", "3")])
    assert left.models == (0, 3) and set(left.dropped) == {1, 2}
    assert "cut off from G on node 0" in left.dropped[1]


def test_nothing_broken_keeps_the_task_as_it_is() -> None:
    (left,) = remaining_tasks(ring(), [TASK])
    assert left.task == TASK and left.models == (0, 1, 2, 3) and left.dropped == {}


def test_a_dead_global_model_or_no_local_model_left_is_an_error() -> None:
    with pytest.raises(FedmstError, match="held its global model"):
        remaining_tasks(ring(), [TASK], dead_nodes=["0"])
    with pytest.raises(FedmstError, match="no local model can take part"):
        remaining_tasks(ring(), [TASK], dead_nodes=["1", "2", "3"])


@pytest.mark.parametrize("scheduler", ["spff", "mst"])
def test_replanned_trees_avoid_down_links_and_dead_relays(scheduler: str) -> None:
    """On the ring, G at 0 and local models at 2 and 3: MST's tree runs 0-1-2-3 or 0-4-3-2;
    with 0-4 down and the ring's other side intact every path avoids 0-4."""
    from fedmst.core.faults import surviving_graph

    task = Task(name="t", global_node="0", local_nodes=("2", "3"), model_bytes=1000)
    g = surviving_graph(ring(), [("0", "4")], [])
    (left,) = remaining_tasks(ring(), [task], down_links=[("0", "4")])
    plan = schedule(g, left.task, scheduler)
    for t in plan.transfers:
        assert {"0", "4"} not in [set(h) for h in zip(t.path, t.path[1:])], t.path
    # a dead node neither relays nor forwards in the new plan
    g = surviving_graph(ring(), [], ["1"])
    (left,) = remaining_tasks(ring(), [task], dead_nodes=["1"])
    assert all("1" not in t.path for t in schedule(g, left.task, scheduler).transfers)
