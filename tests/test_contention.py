"""Tasks on their own clocks, predicted: the fluid timeline and Cassini's time shifts (pure)."""

from __future__ import annotations

import networkx as nx
import pytest

from fedmst.core.contention import (Demand, Profile, capacities, cassini_offsets, iteration_times, mean_iteration_s,
                                    profile_of, sharing_groups, simulate)
from fedmst.core.plan import predicted_phase_seconds
from fedmst.core.schedulers import schedule
from fedmst.core.tasks import Task
from fedmst.core.topology import load_topology
from fedmst.core.workload import link_state

X, Y = ("x", "y"), ("y", "x")
CAP = {X: 100.0, Y: 100.0, ("p", "q"): 100.0, ("q", "p"): 100.0}


def task(name: str, hop: tuple[str, str] = X, back: tuple[str, str] = Y, compute: float = 2.0,
         seconds: float = 1.0, start: float = 0.0) -> Profile:
    """A task whose broadcast fills ``hop`` for ``seconds`` alone and whose upload fills ``back``."""
    return Profile(name, Demand(seconds, {hop: 100.0 * seconds}), compute, Demand(seconds, {back: 100.0 * seconds}),
                   start_s=start)


def test_a_task_alone_runs_its_period_round_after_round() -> None:
    spans = simulate([task("A")], {}, {"A": 3}, CAP)
    assert [s.phase for s in spans] == ["broadcast", "train", "upload"] * 3
    assert [s.end_s for s in spans][-1] == pytest.approx(12.0)
    assert all(a.end_s == pytest.approx(b.start_s) for a, b in zip(spans, spans[1:]))
    assert list(iteration_times(spans).values()) == pytest.approx([4.0] * 3)


def test_two_tasks_in_step_share_the_link_and_take_twice_as_long_to_communicate() -> None:
    spans = simulate([task("A"), task("B")], {}, {"A": 2, "B": 2}, CAP)
    assert mean_iteration_s(spans) == pytest.approx(6.0)
    assert [s.end_s - s.start_s for s in spans if s.phase != "train"] == pytest.approx([2.0] * 8)


def test_tasks_on_other_links_do_not_slow_each_other() -> None:
    spans = simulate([task("A"), task("B", ("p", "q"), ("q", "p"))], {}, {"A": 2, "B": 2}, CAP)
    assert mean_iteration_s(spans) == pytest.approx(4.0)


def test_a_link_with_room_for_both_does_not_slow_either() -> None:
    spans = simulate([task("A"), task("B")], {}, {"A": 2, "B": 2}, {X: 200.0, Y: 200.0})
    assert mean_iteration_s(spans) == pytest.approx(4.0)


def test_offsets_and_start_times_delay_the_start_only() -> None:
    spans = simulate([task("A", start=1.0)], {"A": 0.5}, {"A": 1}, CAP)
    assert spans[0].start_s == pytest.approx(1.5)
    assert iteration_times(spans)[("A", 1)] == pytest.approx(4.0)


def test_tasks_may_run_different_numbers_of_rounds() -> None:
    spans = simulate([task("A"), task("B")], {}, {"A": 1, "B": 3}, CAP)
    assert max(s.round for s in spans if s.task == "A") == 1
    assert max(s.round for s in spans if s.task == "B") == 3
    assert iteration_times(spans)[("B", 3)] == pytest.approx(4.0)  # alone once A is done


def test_cassini_shifts_a_contending_task_so_communication_interleaves() -> None:
    a, b = task("A"), task("B")
    offsets = cassini_offsets([a, b], {"A": 4, "B": 4}, CAP)
    assert offsets["A"] == 0.0 and 0 < offsets["B"] < b.period_s
    assert mean_iteration_s(simulate([a, b], offsets, {"A": 4, "B": 4}, CAP)) == pytest.approx(4.0)


def test_cassini_leaves_tasks_that_share_no_link_alone() -> None:
    profiles = [task("A"), task("B", ("p", "q"), ("q", "p"))]
    assert cassini_offsets(profiles, {"A": 3, "B": 3}, CAP) == {"A": 0.0, "B": 0.0}


def test_cassini_never_predicts_worse_than_no_shift() -> None:
    profiles = [task("A", compute=0.5), task("B", compute=0.5, seconds=0.7), task("C", compute=1.0)]
    rounds = {p.name: 5 for p in profiles}
    offsets = cassini_offsets(profiles, rounds, CAP)
    assert mean_iteration_s(simulate(profiles, offsets, rounds, CAP)) <= mean_iteration_s(
        simulate(profiles, {}, rounds, CAP)) + 1e-9


def test_sharing_groups_are_the_affinity_graphs_components() -> None:
    groups = sharing_groups([task("A"), task("B", ("p", "q"), ("q", "p")), task("C", Y, X)])
    assert sorted([p.name for p in g] for g in groups) == [["A", "C"], ["B"]]


def test_profile_of_a_plan_is_its_prediction_alone() -> None:
    graph = load_topology("line3")
    plan = schedule(graph, Task("t", "a", ("b", "c"), 1_000_000), "mst")
    profile = profile_of(plan, graph, compute_s=0.8, chunk_bytes=256 * 1024, with_delay=True)
    assert profile.broadcast.seconds == pytest.approx(
        predicted_phase_seconds(plan, graph, "broadcast", chunk_bytes=256 * 1024, with_delay=True))
    assert dict(profile.upload.link_bytes) == pytest.approx(link_state((plan,), phase="upload"))
    assert profile.period_s == pytest.approx(profile.broadcast.seconds + 0.8 + profile.upload.seconds)


def test_capacities_are_bytes_per_second_both_ways() -> None:
    g = nx.Graph()
    g.add_edge("a", "b", capacity_mbps=8.0)
    assert capacities(g) == {("a", "b"): 1e6, ("b", "a"): 1e6}
