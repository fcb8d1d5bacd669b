"""Faults, the pure half: parsing what to inject, and which tasks and local models remain."""

from __future__ import annotations

from typing import Callable

import networkx as nx
import pytest

from fedmst.errors import FedmstError
from fedmst.core.faults import (LinkFailure, WorkerKill, check_strike_offset, parse_link_failure, parse_slow_node,
                                parse_worker_kill, remaining_tasks)
from fedmst.core.schedulers import schedule
from fedmst.core.tasks import Task
from fedmst.core.topology import load_topology


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


@pytest.mark.parametrize("parse,spec", [(lambda s, g: parse_worker_kill(s, g, rounds=2), "--kill-worker s0@1"),
                                        (parse_slow_node, "--slow-node s0:2")])
def test_a_fault_on_an_all_optical_node_is_refused(parse: Callable[[str, nx.Graph], object], spec: str) -> None:
    """A spine of a fabric runs no worker: killing or slowing one is refused in one line (a
    re-plan would drop the whole spine while the emulated one kept forwarding)."""
    fabric = load_topology("spine-leaf:2,2,1")
    with pytest.raises(FedmstError, match=f"^{spec}: node 's0' is all-optical: no worker runs there$"):
        parse(spec.split()[1], fabric)
    assert parse_slow_node("l0:2", fabric) == ("l0", 2.0)  # a leaf (electronic) may be slow or die
    assert parse_worker_kill("h0_0@1", fabric, rounds=2) == WorkerKill("h0_0", 1)


def test_an_offset_past_the_predicted_broadcast_is_refused_where_the_plan_is_the_rounds_own() -> None:
    """``@R+S`` strikes S seconds into round R's broadcast, or at its end if it is over sooner:
    an S the plan predicts past the end is refused, naming the prediction; an S inside passes;
    after a re-plan (a fault at the round's start, or a worker killed in an earlier training) the
    prediction is another plan's, so it is not judged."""
    late = LinkFailure(("10", "11"), 1, after_s=99.0)
    with pytest.raises(FedmstError, match=r"^--fail-link 10-11@1\+99: mst's plan predicts round 1's broadcast to be "
                                          r"over after 0\.1 s, so 99 s into it the link would fail at its end; give "
                                          r"an offset below 0\.1 s \(10-11@1: at the round's start\)$"):
        check_strike_offset([late], [], 0.1, "mst")
    with pytest.raises(FedmstError, match=r"^--kill-worker 7@2\+0\.5: spff's plan .* below 0\.4 s \(7@2: during"):
        check_strike_offset([], [WorkerKill("7", 2, after_s=0.5)], 0.4, "spff")
    check_strike_offset([LinkFailure(("10", "11"), 1, after_s=0.09)], [], 0.1, "mst")  # inside: struck under it
    check_strike_offset([LinkFailure(("10", "11"), 1, after_s=0.05), late], [], 0.1, "mst")  # the first re-plans
    check_strike_offset([LinkFailure(("1", "2"), 1), late], [], 0.1, "mst")  # re-planned at the round's start
    check_strike_offset([replace_round(late, 2)], [WorkerKill("3", 1)], 0.1, "mst")  # re-planned in round 1
    with pytest.raises(FedmstError, match=r"^--fail-link 10-11@2\+99: "):  # a kill in round 2's training comes later
        check_strike_offset([replace_round(late, 2)], [WorkerKill("3", 2)], 0.1, "mst")


def replace_round(failure: LinkFailure, round_: int) -> LinkFailure:
    return LinkFailure(failure.link, round_, failure.until, failure.after_s)


def test_a_run_refuses_a_fault_after_its_predicted_broadcast_before_any_network() -> None:
    from fedmst.run.config import RunConfig
    from fedmst.run.prepare import Host, resolve

    host = Host(delay_mode="userspace", netem_available=False)
    config = RunConfig(topology="line3", model="mlp", rounds=1, time_scale="1", fail_links=("a-b@1+99",))
    with pytest.raises(FedmstError, match=r"^--fail-link a-b@1\+99: spff's plan predicts round 1's broadcast to be "
                                          r"over after 0\.\d+ s, so 99 s"):
        resolve(config, ["spff", "mst"], host)
    assert len(resolve(RunConfig(topology="line3", model="mlp", rounds=1, time_scale="1",
                                 fail_links=("a-b@1+0.01",)), ["spff", "mst"], host)) == 2


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
