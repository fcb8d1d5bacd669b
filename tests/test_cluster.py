"""The cluster's pure half: slots on the topology, the policies, the event loop, the fluid model
joined by jobs as they start, and the simulate back end, without any network."""

from __future__ import annotations

import csv
import json
import os
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import networkx as nx
import pytest

from fedmst.core.cluster.jobs import Job, JobError
from fedmst.core.cluster.loop import Cluster, Ended, Outcome, planner, run_cluster
from fedmst.core.cluster.policies import (ORDERS, PLACEMENTS, PREEMPTIONS, ClusterView, Order, Placed, Placement,
                                          RandomSlots)
from fedmst.core.cluster.simulate import SimulatedRunner
from fedmst.core.cluster.slots import Occupancy, SlotInterval, node_slots
from fedmst.core.contention import Demand, Fluid, Profile, simulate
from fedmst.core.topology import load_topology
from fedmst.errors import FedmstError, TopologyError


def _topology(tmp_path: Path, nodes: list[object], suffix: str = ".json") -> Path:
    path = tmp_path / f"t{suffix}"
    path.write_text(json.dumps({"capacity_mbps": 100, "nodes": nodes,
                                "links": [{"a": "a", "b": "b"}, {"a": "b", "b": "c"}]}))
    return path


def test_a_topology_declares_slots_per_node(tmp_path: Path) -> None:
    g = load_topology(str(_topology(tmp_path, [{"id": "a", "slots": 4}, {"id": "b", "slots": 0}, "c"])))
    assert node_slots(g, default=2) == {"a": 4, "b": 0, "c": 2}


def test_a_gpu_cluster_declares_its_gpus_as_slots(tmp_path: Path) -> None:
    g = load_topology(str(_topology(tmp_path, [{"id": "a", "gpus": 8}, {"id": "b", "gpus": 0}, "c"])))
    assert node_slots(g, default=2) == {"a": 8, "b": 0, "c": 2}
    assert g.nodes["a"]["gpus"] == 8 and "gpus" not in g.nodes["c"]


def test_graphml_nodes_declare_slots(tmp_path: Path) -> None:
    g = nx.Graph()
    g.add_node("a", slots=3)
    g.add_node("b", gpus=4)
    g.add_node("c")
    g.add_edge("a", "b", capacity_mbps=10.0)
    g.add_edge("b", "c", capacity_mbps=10.0)
    nx.write_graphml(g, tmp_path / "g.graphml")
    assert node_slots(load_topology(str(tmp_path / "g.graphml")), default=1) == {"a": 3, "b": 4, "c": 1}


@pytest.mark.parametrize("node,fragment", [
    ({"id": "a", "slots": -1}, "node a: slots -1 is not a whole number of 0 or more"),
    ({"id": "a", "slots": 1.5}, "node a: slots 1.5 is not a whole number"),
    ({"id": "a", "slots": "2"}, "node a: slots '2' is not a whole number"),
    ({"id": "a", "gpus": -4}, "node a: gpus -4 is not a whole number of 0 or more"),
    ({"id": "a", "gpus": 4, "slots": 4}, "node a: give slots or gpus, not both"),
    ({"id": "a", "cores": 2}, "unknown key(s) cores"),
    ({"slots": 2}, "has no 'id'"),
])
def test_bad_slots_in_a_topology_are_refused(tmp_path: Path, node: object, fragment: str) -> None:
    with pytest.raises(TopologyError) as err:
        load_topology(str(_topology(tmp_path, [node, "b", "c"])))
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_a_cluster_without_a_slot_is_refused() -> None:
    g = nx.path_graph(["a", "b"])
    with pytest.raises(JobError, match="no node has a slot"):
        node_slots(g, default=0)


def test_occupancy_never_gives_a_slot_twice() -> None:
    held = Occupancy({"a": 1, "b": 2})
    held.take("j1", ("b", "a"), at_s=0.0)
    with pytest.raises(JobError, match="node a has no free slot"):
        held.take("j2", ("a",), at_s=1.0)
    held.release("j1", at_s=2.0)
    held.take("j2", ("a",), at_s=2.0)
    assert held.free == {"b": 2}
    assert sorted((s.node, s.slot, s.job) for s in held.intervals) == [("a", 0, "j1"), ("b", 0, "j1")]


def test_random_placement_draws_only_free_slots_and_is_seeded() -> None:
    g = nx.path_graph([str(i) for i in range(6)])
    free = {"0": 1, "2": 3, "5": 1}
    view = ClusterView(g, free=free, now_s=0.0, seed=4)
    for k in range(1, 5):
        placed = RandomSlots().place(Job(f"j{k}", 0.0, k), view)
        assert placed is not None
        used = list(placed.nodes)
        assert all(used.count(n) <= free[n] for n in used) and len(used) == k + 1
        assert placed == RandomSlots().place(Job(f"j{k}", 0.0, k), view)
    assert RandomSlots().place(Job("j", 0.0, 5), view) is None
    other = {RandomSlots().place(Job("j2", 0.0, 2), ClusterView(g, free, 0.0, seed)) for seed in range(20)}
    assert len(other) > 1


def _profile(name: str, rng: random.Random) -> Profile:
    hops = [("x", "y"), ("y", "z"), ("y", "x")]
    def demand() -> Demand:
        return Demand(rng.uniform(0.1, 1.0), {h: rng.uniform(10, 200) for h in rng.sample(hops, rng.randint(1, 3))})
    return Profile(name, broadcast=demand(), compute_s=rng.uniform(0, 2), upload=demand())


@pytest.mark.parametrize("seed", range(5))
def test_the_fluid_model_joined_job_by_job_gives_the_batch_timeline(seed: int) -> None:
    """Adding each task when the clock reaches its start (as a cluster does) predicts the same
    timeline as :func:`simulate` given every task at once."""
    rng = random.Random(seed)
    profiles = [_profile(f"t{i}", rng) for i in range(5)]
    offsets = {p.name: rng.uniform(0, 3) for p in profiles}
    rounds = {p.name: rng.randint(1, 3) for p in profiles}
    capacity = {("x", "y"): 100.0, ("y", "z"): 150.0, ("y", "x"): 80.0}
    batch = simulate(profiles, offsets, rounds, capacity)
    fluid, joined = Fluid(capacity), []
    for p in sorted(profiles, key=lambda p: offsets[p.name]):
        joined += fluid.advance(until_s=offsets[p.name])
        assert fluid.now == pytest.approx(offsets[p.name]) or fluid.now < offsets[p.name]
        fluid.add(p, rounds[p.name], offsets[p.name])
    while fluid.busy:
        joined += fluid.advance()
    key = lambda s: (s.task, s.round, s.phase)  # noqa: E731
    assert len(joined) == len(batch) == sum(3 * r for r in rounds.values())
    for a, b in zip(sorted(joined, key=key), sorted(batch, key=key)):
        assert key(a) == key(b) and a.start_s == pytest.approx(b.start_s) and a.end_s == pytest.approx(b.end_s)


def _ring(n: int, slots: int = 1) -> nx.Graph:
    g = nx.cycle_graph([str(i) for i in range(n)])
    nx.set_edge_attributes(g, 100.0, "capacity_mbps")
    nx.set_edge_attributes(g, 0.001, "delay_s")
    g.graph["name"] = f"ring{n}"
    return g


def _simulated(graph: nx.Graph, jobs: list[Job], train_s: float = 1.0, **cluster: object) -> list[Ended]:
    runner = SimulatedRunner(graph, train_s=lambda job: train_s, chunk_bytes=1 << 18, with_delay=True)
    history = run_cluster(jobs, Cluster(graph, node_slots(graph, 1), seed=3, **cluster),  # type: ignore[arg-type]
                          runner, planner(graph, "mst", model_bytes=lambda job: 100_000))
    _no_slot_twice(history.slots)
    return history.ended


def _no_slot_twice(intervals: list[SlotInterval]) -> None:
    by: dict[tuple[str, int], list[SlotInterval]] = {}
    for s in intervals:
        by.setdefault((s.node, s.slot), []).append(s)
    for held in by.values():
        held.sort(key=lambda s: s.from_s)
        for a, b in zip(held, held[1:]):
            assert a.to_s <= b.from_s + 1e-9, (a, b)


def test_jobs_wait_for_slots_and_each_life_adds_up() -> None:
    g = _ring(6)
    jobs = [Job(f"j{i}", 0.2 * i, local_models=2, rounds=2) for i in range(6)]
    ended = _simulated(g, jobs)
    assert sorted(e.job.name for e in ended) == [j.name for j in jobs]
    assert all(e.status == "finished" and e.outcome is not None and e.outcome.rounds == 2 for e in ended)
    assert any(e.queue_s and e.queue_s > 0.5 for e in ended), [e.queue_s for e in ended]
    for e in ended:
        assert e.start_s is not None and e.start_s >= e.job.submit_s
        assert e.jct_s == pytest.approx(e.end_s - e.job.submit_s)
        assert e.end_s - e.start_s >= 2 * 1.0  # two rounds of a second's training at least
        assert len(e.slots) == e.job.slots and {s.job for s in e.slots} == {e.job.name}
    # at most two jobs of three slots fit six slots at once
    starts = sorted((e.start_s, e.end_s) for e in ended)
    for t, _ in starts:
        assert sum(1 for s, f in starts if s <= t < f) <= 2  # type: ignore[operator]


def test_a_job_larger_than_the_cluster_is_rejected_and_the_others_run() -> None:
    ended = _simulated(_ring(4), [Job("big", 0.0, local_models=4, rounds=1), Job("ok", 0.5, 1, rounds=1)])
    big, ok = sorted(ended, key=lambda e: e.job.name)
    assert big.status == "rejected" and big.start_s is None
    assert "asks 5 slots" in big.reason and "cluster's 4" in big.reason
    assert ok.status == "finished"


def test_the_queue_is_tried_in_the_orders_order() -> None:
    class Newest(Order):
        def order(self, waiting, view):  # type: ignore[no-untyped-def]
            return sorted(waiting, key=lambda j: -j.submit_s)

    g = _ring(3)  # one job of two slots at a time
    jobs = [Job("first", 0.0, 1, rounds=1), Job("a", 0.1, 1, rounds=1), Job("b", 0.2, 1, rounds=1)]
    fifo = [e.job.name for e in _simulated(g, jobs)]
    newest = [e.job.name for e in _simulated(g, jobs, order=Newest())]
    assert fifo == ["first", "a", "b"] and newest == ["first", "b", "a"]


def test_a_placement_that_never_places_leaves_its_jobs_rejected_not_stuck() -> None:
    class Never(Placement):
        def place(self, job, view):  # type: ignore[no-untyped-def]
            return None

    ended = _simulated(_ring(3), [Job("j", 0.0, 1, rounds=1)], placement=Never())
    assert [(e.status, "did not place it" in e.reason) for e in ended] == [("rejected", True)]


def test_a_jobs_plan_sees_the_running_jobs_links() -> None:
    """Each placed job is planned with the running jobs' bytes as link state, as a workload's tasks are."""
    seen: list[int] = []
    g = _ring(6)
    base = planner(g, "mst", model_bytes=lambda job: 1000)

    def plan(job, placed, running):  # type: ignore[no-untyped-def]
        seen.append(len(running))
        return base(job, placed, running)

    runner = SimulatedRunner(g, train_s=lambda job: 5.0, chunk_bytes=1 << 18, with_delay=False)
    run_cluster([Job("a", 0.0, 1, rounds=1), Job("b", 1.0, 1, rounds=1)], Cluster(g, node_slots(g, 1), 1),
                runner, plan)
    assert seen == [0, 1]


def test_the_registries_know_the_defaults_and_refuse_unknown_names() -> None:
    assert ORDERS.names() == ("fifo", "las", "sjf", "smallest", "srtf")
    assert PLACEMENTS.names() == ("cassini", "delay", "network", "pack", "random", "sjf-bco", "spread")
    assert PREEMPTIONS.names() == ("las", "network", "none")
    with pytest.raises(JobError, match="unknown placement 'nope'; choose one of: cassini, delay, network, pack, "
                                       "random, sjf-bco, spread"):
        PLACEMENTS.lookup("nope")


def test_simulated_jobs_report_rounds_bytes_and_communication() -> None:
    g = _ring(5)
    (e,) = _simulated(g, [Job("j", 0.0, 2, rounds=3)], train_s=0.5)
    out = e.outcome
    assert isinstance(out, Outcome) and out.rounds == 3 and len(out.spans) == 9
    assert out.link_bytes > 3 * 2 * 100_000  # every round, broadcast and upload, on at least one hop each
    assert 0 < out.comm_s < e.end_s - (e.start_s or 0.0) - 3 * 0.5 + 1e-9
    assert out.setup_s == pytest.approx(5 * 2 * 0.002)  # five round trips of its longest path, two hops
    assert out.mean_round_s == pytest.approx((e.end_s - (e.start_s or 0.0) - out.setup_s) / 3)
    assert isinstance(e.placed, Placed) and len(e.placed.local_nodes) == 2


@pytest.mark.parametrize("gives,fragment", [
    (lambda job: Placed("0", ()), "placed 0 local models of job j, which has 1"),
    (lambda job: ("0", ("1",)), "gave ('0', ('1',)) for job j: give a Placed or None"),
    (lambda job: Placed("0", ("0",)), "put 2 of job j's models on node '0', which has 1 free slot(s)"),
    (lambda job: Placed("zz", ("1",)), "on node 'zz', which has 0 free slot(s)"),
    (lambda job: 1 / 0, "placement Plugin raised ZeroDivisionError: division by zero"),
])
def test_a_placement_plugins_mistake_is_one_line(gives, fragment: str) -> None:  # type: ignore[no-untyped-def]
    class Plugin(Placement):
        def place(self, job, view):  # type: ignore[no-untyped-def]
            return gives(job)

    with pytest.raises(JobError) as err:
        _simulated(_ring(3), [Job("j", 0.0, 1, rounds=1)], placement=Plugin())
    assert fragment in str(err.value) and "\n" not in str(err.value)


def _view(graph: nx.Graph, free: dict[str, int], **more: object) -> ClusterView:
    return ClusterView(graph, free=free, **{"now_s": 0.0, "seed": 1, **more})  # type: ignore[arg-type]


def test_pack_fills_nodes_in_order_and_spread_takes_one_per_node_first() -> None:
    g = _ring(4)
    free = {"0": 1, "1": 3, "2": 2, "3": 3}
    job = Job("j", 0.0, local_models=4)
    assert PLACEMENTS.lookup("pack")().place(job, _view(g, free)) == Placed("0", ("1", "1", "1", "2"))
    # most free first (1 and 3, then 2, then 0), one each before any node gets a second
    assert PLACEMENTS.lookup("spread")().place(job, _view(g, free)) == Placed("1", ("3", "2", "0", "1"))
    for name in ("pack", "spread"):
        assert PLACEMENTS.lookup(name)().place(Job("big", 0.0, 9), _view(g, free)) is None


def test_sjf_tries_the_least_work_first() -> None:
    jobs = [Job("long", 0.0, 1, rounds=10, compute_s=1.0), Job("short", 1.0, 1, rounds=2, compute_s=1.0),
            Job("tie", 0.5, 1, rounds=1, compute_s=2.0)]
    ordered = ORDERS.lookup("sjf")().order(jobs, _view(_ring(3), {}))
    assert [j.name for j in ordered] == ["tie", "short", "long"]  # 2 s (earlier), 2 s, 10 s


def test_the_network_placement_keeps_a_job_near_its_g_and_off_busy_links() -> None:
    g = _ring(8)
    g.edges["0", "1"]["delay_s"] = 0.05  # a slow link: models far from G cost its round
    plan = planner(g, "mst", model_bytes=lambda job: 1_000_000)
    from fedmst.core.plan import loaded_phase_seconds

    def comm_s(p, running=()):  # type: ignore[no-untyped-def]
        return sum(loaded_phase_seconds(p, running, g, ph, chunk_bytes=1 << 18, with_delay=True)
                   for ph in ("broadcast", "upload"))

    job = Job("j", 0.0, local_models=2)
    free = {n: 1 for n in g}
    placed = PLACEMENTS.lookup("network")().place(job, _view(g, free, plan=lambda j, p: plan(j, p, []),
                                                              comm_s=comm_s))
    assert placed is not None
    chosen = comm_s(plan(job, placed, []))
    for other in (PLACEMENTS.lookup(n)().place(job, _view(g, free)) for n in ("pack", "random")):
        assert other is not None and chosen <= comm_s(plan(job, other, [])) + 1e-12
    assert not {"0", "1"} <= set(placed.nodes)  # never across the slow link
    with pytest.raises(JobError, match="needs the cluster's scheduler"):
        PLACEMENTS.lookup("network")().place(job, _view(g, free))


@pytest.mark.parametrize("spec,fragment", [
    ("fifo", "give ORDER/PLACEMENT"),
    ("fifo/random/network/x", "4 parts"),
    ("fifo/random/nope", "unknown preemption 'nope'"),
    ("fifo/random,fifo/random/none", "fifo+random given twice"),
    ("nope/random", "unknown queue order 'nope'"),
    ("fifo/nope", "unknown placement 'nope'"),
    ("fifo/random,fifo/random", "fifo+random given twice"),
    ("fifo/random,", "an empty item"),
])
def test_bad_policy_lists_are_one_line(spec: str, fragment: str) -> None:
    from fedmst.errors import FedmstError
    from fedmst.run.cluster import parse_policies

    with pytest.raises(FedmstError) as err:
        parse_policies(spec)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_policies_compare_on_one_trace_into_their_folders(tmp_path: Path) -> None:
    from fedmst.run import cluster
    from fedmst.run.cluster_records import read_jobs_csv
    from fedmst.run.config import RunConfig
    from fedmst.run.folders import OutputFolder

    resolved = cluster.resolve(RunConfig(topology="nsfnet", slots=1, jobs="poisson:180,12", seed=3, rounds=2,
                                         model="mlp", mode="simulate", compute_s=0.2))
    summaries = cluster.compare(resolved, cluster.parse_policies("fifo/random,sjf/pack,fifo/network"),
                                OutputFolder(tmp_path / "c", False), report=lambda line: None)
    assert list(summaries) == ["fifo+random", "sjf+pack", "fifo+network"]
    record = json.loads((tmp_path / "c" / "comparison.json").read_text())
    assert record["status"] == "completed" and set(record["runs"].values()) == {"completed"}
    for name, summary in summaries.items():
        assert (tmp_path / "c" / name / "jobs.csv").is_file() and summary.jobs_finished == 12
        assert (summary.order, summary.placement) == tuple(name.split("+"))
    # the same jobs with the same training times in every folder
    trained = {name: sorted((r.job, r.train_s) for r in read_jobs_csv(tmp_path / "c" / name)) for name in summaries}
    assert len({tuple(v) for v in trained.values()}) == 1
    from fedmst.views.gantt import plot_jobs

    figure = plot_jobs(tmp_path / "c")  # every policy's JCT distribution side by side
    assert figure == tmp_path / "c" / "jobs.png" and figure.stat().st_size > 10_000
    from fedmst.views.gantt import policies_figure

    fig = policies_figure(tmp_path / "c")  # titled by the trace and the topology, not by where the folder lies
    try:
        assert fig.get_suptitle() == "3 policies on one trace: poisson:180,12 on nsfnet", fig.get_suptitle()
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_delay_waits_for_a_consolidated_placement_then_takes_a_looser_one() -> None:
    from fedmst.core.cluster.policies import Delay

    g = nx.path_graph([str(i) for i in range(6)])  # 0-1-2-3-4-5
    capacity = {"0": 3, "1": 1, "2": 1, "3": 1, "4": 1, "5": 1}  # node 0 could hold the job alone

    def at(now: float, free: dict[str, int]) -> ClusterView:
        return ClusterView(g, free, now_s=now, seed=1, slots=capacity)

    delay = Delay()
    job = Job("j", 0.0, local_models=2)
    spread = {"0": 1, "2": 1, "4": 1}  # no two free slots within one hop of each other
    assert delay.place(job, at(0.0, spread)) is None  # level 0 only: one node for all three
    assert delay.wake_at([job], at(0.0, spread)) == pytest.approx(1.0)  # its first timer
    assert delay.place(job, at(1.5, spread)) is None  # level 1: within a hop
    late = delay.place(job, at(2.5, spread))  # level 2: 0, 2 and 4 within 2 hops of 2
    assert late is not None and set(late.nodes) == {"0", "2", "4"} and late.note.startswith("level 2 after 2.5 s")
    assert delay.timers[2] == pytest.approx(5.0)  # twice the wait that found level 2
    assert delay.timers[:2] == pytest.approx([0.9, 0.9])  # levels 0 and 1 waited out: shortened
    together = delay.place(Job("k", 3.0, 2), at(3.0, {"0": 3}))
    assert together == Placed("0", ("0", "0")) and together.note.startswith("level 0 after 0 s")


def test_delay_never_waits_for_a_level_the_cluster_cannot_give() -> None:
    from fedmst.core.cluster.policies import Delay

    g = nx.path_graph([str(i) for i in range(5)])
    one_each = {n: 1 for n in g}  # no node holds two models: level 0 can never be
    placed = Delay().place(Job("j", 0.0, 1), ClusterView(g, one_each, now_s=0.0, seed=1, slots=one_each))
    assert placed is not None and placed.note.startswith("level 1 after 0 s")


def test_delay_places_a_job_the_network_hardly_slows_at_once() -> None:
    from fedmst.core.cluster.policies import Delay

    g = _ring(6)
    plan = planner(g, "mst", model_bytes=lambda job: 100)

    def view(comm: float) -> ClusterView:
        return _view(g, {"0": 1, "3": 1}, slots={"0": 2, "3": 1}, plan=lambda j, p: plan(j, p, []),
                     comm_s=lambda p: comm)

    job = Job("j", 0.0, local_models=1, compute_s=1.0)
    assert Delay().place(job, view(comm=1.0)) is None  # half its round on the links: it waits for node 0
    placed = Delay().place(job, view(comm=0.01))
    assert placed is not None and "not network-sensitive" in placed.note


def test_delay_timers_run_out_in_the_loop_without_another_event() -> None:
    """While a long job runs and nothing arrives, a waiting job's timer runs out and it is placed."""
    g = nx.path_graph([str(i) for i in range(5)])  # 0-1-2-3-4
    nx.set_edge_attributes(g, 100.0, "capacity_mbps")
    nx.set_edge_attributes(g, 0.0, "delay_s")
    g.graph["name"] = "path5"
    slots = {"0": 1, "1": 1, "2": 1, "3": 0, "4": 1}
    runner = SimulatedRunner(g, train_s=lambda job: 10.0, chunk_bytes=1 << 18, with_delay=False)
    cluster = Cluster(g, slots, seed=1, placement=PLACEMENTS.lookup("delay")())
    plan = planner(g, "mst", model_bytes=lambda job: 1000)
    jobs = [Job("long", 0.0, 1, rounds=2), Job("later", 0.1, 1, rounds=1)]
    ended = {e.job.name: e for e in run_cluster(jobs, cluster, runner, plan).ended}
    assert ended["long"].queue_s == 0 and ended["long"].placed is not None
    # no level 0 (one slot a node); level 1 waited out for a second, then level 2, long before "long" ends
    assert ended["later"].queue_s == pytest.approx(1.0) and ended["later"].placed is not None
    assert ended["later"].placed.note.startswith("level 2") and ended["later"].start_s < ended["long"].end_s  # type: ignore[operator]


def _comm(g: nx.Graph):  # type: ignore[no-untyped-def]
    from fedmst.core.plan import loaded_phase_seconds

    def comm_s(p, running=()):  # type: ignore[no-untyped-def]
        return sum(loaded_phase_seconds(p, running, g, ph, chunk_bytes=1 << 18, with_delay=True)
                   for ph in ("broadcast", "upload"))
    return comm_s


def test_smallest_srtf_and_las_orders() -> None:
    jobs = [Job("big", 0.0, 3, rounds=4, compute_s=1.0), Job("small", 1.0, 1, rounds=9, compute_s=1.0),
            Job("half", 2.0, 2, rounds=8, compute_s=1.0)]
    view = _view(_ring(3), {}, rounds_done={"half": 6, "big": 1})
    names = {name: [j.name for j in ORDERS.lookup(name)().order(jobs, view)] for name in ("smallest", "srtf", "las")}
    assert names["smallest"] == ["small", "half", "big"]  # 2, 3, 4 slots
    assert names["srtf"] == ["half", "big", "small"]  # 2, 3, 9 rounds left
    assert names["las"] == ["small", "big", "half"]  # 0, 4, 18 slot-rounds had


def test_sjf_bco_puts_small_jobs_on_fragments_and_spreads_large_ones_over_few_idle_nodes() -> None:
    from fedmst.core.cluster.policies import SjfBco

    g = nx.complete_graph([str(i) for i in range(4)])
    nx.set_edge_attributes(g, 100.0, "capacity_mbps")
    nx.set_edge_attributes(g, 0.001, "delay_s")
    slots = {n: 4 for n in g}
    free = {"0": 1, "1": 4, "2": 4, "3": 2}  # 0 and 3 partly busy
    plan = planner(g, "mst", model_bytes=lambda job: 100_000)
    more = dict(slots=slots, plan=lambda j, p: plan(j, p, []), comm_s=_comm(g))
    small = Job("small", 0.0, 1, rounds=2, compute_s=1.0)
    assert SjfBco._fa_ffp(small, free, slots) == ["3", "3"]  # the fullest node that holds it
    assert SjfBco()._lbsgf(Job("big", 0.0, 5), free, slots) == ["1"] * 4 + ["2"] * 2
    halves = {n: 2 for n in g}  # 8 slots on 4 nodes, where 2 would hold them on an idle cluster: over the cap of 3
    assert SjfBco()._lbsgf(Job("huge", 0.0, 7), halves, slots) is None
    placed = SjfBco().place(small, _view(g, free, waiting=(small,), **more))
    assert placed is not None and set(placed.nodes) == {"3"}  # a job on one node moves nothing: kappa keeps it whole
    placed = SjfBco().place(Job("x", 0.0, 3), _view(g, free, **more))
    assert placed is not None and len(placed.nodes) == 4


def test_cassini_prefers_links_whose_jobs_can_take_turns() -> None:
    from fedmst.core.cluster.policies import Cassini, Running

    g = _ring(6)
    plan = planner(g, "spff", model_bytes=lambda job: 2_000_000)
    comm_s = _comm(g)
    running = {}
    for name, placed in (("a", Placed("0", ("1",))), ("b", Placed("1", ("0",)))):  # each on 0-1 nearly half its round
        job = Job(name, 0.0, 1, rounds=5, compute_s=0.01)
        running[name] = Running(job, placed, 0.0, plan(job, placed, []))
    plans = [r.plan for r in running.values()]
    job = Job("j", 0.0, 1, rounds=5, compute_s=0.01)
    view = _view(g, {"0": 1, "1": 1, "3": 1, "4": 1}, running=running, plan=lambda j, p: plan(j, p, plans),
                 comm_s=lambda p: comm_s(p, plans))
    duty = Cassini._duties(running["a"].job, running["a"].plan, view)
    assert 0.4 < duty[("0", "1")] < 0.5 and duty[("0", "1")] == pytest.approx(duty[("1", "0")])
    placed = Cassini().place(job, view)
    assert placed is not None and set(placed.nodes) == {"3", "4"}  # a third job on 0-1 could not take turns
    one = [running["a"].plan]
    alone = Cassini().place(job, replace(view, running={"a": running["a"]}, plan=lambda j, p: plan(j, p, one),
                                         comm_s=lambda p: comm_s(p, one)))
    assert alone is not None and set(alone.nodes) == {"0", "1"}  # two can take turns: node order decides


def test_las_preemption_stops_lower_queues_only_and_enough_of_them() -> None:
    from fedmst.core.cluster.policies import LeastAttainedPreemption, Running

    g = _ring(6)
    plan = planner(g, "mst", model_bytes=lambda job: 1000)

    def run(name: str, models: int, nodes: tuple[str, ...]) -> Running:
        job = Job(name, 0.0, models, rounds=100)
        return Running(job, Placed(nodes[0], nodes[1:]), 0.0, plan(job, Placed(nodes[0], nodes[1:]), []))

    running = {r.job.name: r for r in (run("old", 1, ("0", "1")), run("older", 1, ("2", "3")),
                                        run("young", 1, ("4", "5")))}
    done = {"old": 10, "older": 70, "young": 1}  # 20 and 140 slot-rounds (queues 1, 2), 2 (queue 0)
    waiting = Job("new", 0.0, 1, rounds=3)
    evict = LeastAttainedPreemption().evict(waiting, _view(g, {}, running=running, rounds_done=done))
    assert evict is not None and evict.victims == ("older",)  # the most service first, and enough
    evict = LeastAttainedPreemption().evict(Job("new", 0.0, 3, rounds=3),
                                            _view(g, {}, running=running, rounds_done=done))
    assert evict is not None and evict.victims == ("older", "old")
    # a job of queue 1 may stop only queue 2's, which is not enough for 4 slots: none
    assert LeastAttainedPreemption().evict(Job("mid", 0.0, 3, rounds=9),
                                           _view(g, {}, running=running, rounds_done={**done, "mid": 5})) is None
    # a job that has not finished a round since it started is never stopped
    fresh = {**running, "older": Running(running["older"].job, running["older"].placed, 0.0, running["older"].plan,
                                         rounds_before=70)}
    evict = LeastAttainedPreemption().evict(waiting, _view(g, {}, running=fresh, rounds_done=done))
    assert evict is not None and evict.victims == ("old",)


def test_network_preemption_stops_insensitive_jobs_for_a_sensitive_one() -> None:
    from fedmst.core.cluster.policies import NetworkPreemption, Running

    g = _ring(6)
    plan = planner(g, "mst", model_bytes=lambda job: 5_000_000)
    comm_s = _comm(g)

    def run(name: str, nodes: tuple[str, ...], compute_s: float) -> Running:
        job = Job(name, 0.0, len(nodes) - 1, rounds=50, compute_s=compute_s)
        return Running(job, Placed(nodes[0], nodes[1:]), 0.0, plan(job, Placed(nodes[0], nodes[1:]), []))

    running = {r.job.name: r for r in (run("slow", ("0", "1"), 100.0), run("chatty", ("2", "3"), 0.01))}
    view = _view(g, {"5": 1}, slots={n: 1 for n in g}, running=running, rounds_done={"slow": 1, "chatty": 1},
                 plan=lambda j, p: plan(j, p, []), comm_s=comm_s)
    sensitive = Job("s", 0.0, 2, rounds=5, compute_s=0.01)
    evict = NetworkPreemption().evict(sensitive, view)
    assert evict is not None and evict.victims == ("slow",)  # around node 0 or 1: the chatty job is sensitive too
    assert NetworkPreemption().evict(Job("calm", 0.0, 2, rounds=5, compute_s=1000.0), view) is None
    assert NetworkPreemption().evict(Job("one", 0.0, 1, rounds=5, compute_s=0.01),
                                     replace(view, free={"4": 1, "5": 1})) is None  # consolidated on free slots


@pytest.mark.parametrize("policies", [("las", "random", "las"), ("fifo", "delay", "network")])
def test_preempted_jobs_resume_and_finish_every_round(policies: tuple[str, str, str]) -> None:
    from fedmst.core.cluster.policies import PREEMPTIONS

    g = _ring(4)
    # the long jobs train for long (not network-sensitive) and have had service past las's first threshold
    # when the short ones come
    long = [Job(f"long{i}", 0.0, 1, rounds=30, compute_s=2.0) for i in range(2)]
    short = [Job(f"short{i}", 40.0 + i, 1, rounds=3, compute_s=0.01) for i in range(3)]
    runner = SimulatedRunner(g, train_s=lambda job: job.compute_s or 0.0, chunk_bytes=1 << 18, with_delay=True)
    stops = []
    plan = planner(g, "mst", model_bytes=lambda job: 2_000_000)
    cluster = Cluster(g, node_slots(g, 1), 3, ORDERS.lookup(policies[0])(), PLACEMENTS.lookup(policies[1])(),
                      PREEMPTIONS.lookup(policies[2])(), comm_s=lambda p, running: _comm(g)(p, running))
    history = run_cluster([*long, *short], cluster, runner, plan, stopped=stops.append)
    _no_slot_twice(history.slots)
    ended = {e.job.name: e for e in history.ended}
    assert all(e.status == "finished" and e.outcome is not None and e.outcome.rounds == e.job.rounds
               for e in ended.values())
    assert history.preemptions == stops and stops
    for stop in stops:
        assert stop.job.startswith("long") and stop.by.startswith("short") and stop.stopped_s >= stop.asked_s
        assert 0 < stop.rounds_done < 30
    assert sum(e.preemptions for e in ended.values()) == len(stops)
    for e in ended.values():  # its slot intervals, one per run
        assert len({s.from_s for s in e.slots}) == e.preemptions + 1
    assert len({s.round for s in ended["long0"].outcome.spans if s.phase == "upload"}) == 30


def test_a_preemption_plugins_mistake_is_one_line() -> None:
    from fedmst.core.cluster.policies import Evict, Preemption

    class Wrong(Preemption):
        def evict(self, job, view):  # type: ignore[no-untyped-def]
            return Evict(("nobody",), "because")

    g = _ring(3)
    with pytest.raises(JobError, match="would stop 'nobody' for job b, which is not a running job"):
        _simulated(g, [Job("a", 0.0, 2, rounds=3), Job("b", 0.1, 2, rounds=1)], preemption=Wrong())


def test_policies_of_a_users_package_run_through_the_command(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    users = str(Path(__file__).with_name("userbackends"))
    (tmp_path / "jobs.csv").write_text("job,submit_s,local_models,rounds,compute_s\n"
                                       "long,0,3,40,0.5\nlate,0.5,3,2,0.1\n")
    spec = "userpolicies:Newest/userpolicies:LastNodes/userpolicies:StopLongest,fifo/random"
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("fedmst")), "cluster", "--topology", "small", "--slots", "1", "--jobs",
         str(tmp_path / "jobs.csv"), "--model", "mlp", "--mode", "simulate", "--policies", spec,
         "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [users, os.environ.get("PYTHONPATH")]))})
    assert proc.returncode == 0, proc.stderr
    mine = tmp_path / "out" / "userpolicies_Newest+userpolicies_LastNodes+userpolicies_StopLongest"
    jobs = {r["job"]: r for r in csv.DictReader((mine / "jobs.csv").open())}
    assert jobs["long"]["preemptions"] == "1" and jobs["long"]["rounds"] == "40"
    assert jobs["late"]["placement"] == "last nodes" and float(jobs["late"]["queue_s"]) >= 1.0
    (stop,) = csv.DictReader((mine / "preemptions.csv").open())
    assert (stop["job"], stop["by"], stop["reason"]) == ("long", "late", "late waited a second")
    assert json.loads((tmp_path / "out" / "comparison.json").read_text())["status"] == "completed"


def test_cassini_shifts_a_jobs_first_round_between_the_running_jobs_communication() -> None:
    from fedmst.core.cluster.policies import Cassini, Running
    from fedmst.core.cluster.startup import set_up_s
    from fedmst.core.contention import capacities, mean_iteration_s, profile_of, simulate

    g = nx.path_graph(["a", "b", "c"])
    nx.set_edge_attributes(g, 100.0, "capacity_mbps")
    nx.set_edge_attributes(g, 0.001, "delay_s")
    plan = planner(g, "spff", model_bytes=lambda job: 4_000_000)

    def profile(job, p):  # type: ignore[no-untyped-def]
        return profile_of(p, g, compute_s=job.compute_s or 0.0, chunk_bytes=1 << 18, with_delay=True)

    a = Job("a", 0.0, 1, rounds=9, compute_s=0.4)
    ran = Running(a, Placed("a", ("c",)), 0.0, plan(a, Placed("a", ("c",)), []))
    b = Job("b", 0.0, 1, rounds=9, compute_s=0.4)
    view = _view(g, {"a": 1, "c": 1}, slots={"a": 2, "b": 0, "c": 2}, running={"a": ran},
                 plan=lambda j, p: plan(j, p, [ran.plan]), comm_s=lambda p: _comm(g)(p, [ran.plan]),
                 profile=profile, round_began={"a": 0.1}, now_s=0.3)
    placed = Cassini().place(b, view)
    assert placed is not None and placed.start_at_s is not None and "shifted" in placed.note
    assert Cassini().place(b, replace(view, round_began={})).start_at_s is None  # no round under way: no shift
    mine = plan(b, placed, [ran.plan])
    ready = 0.3 + set_up_s(mine, g)
    assert ready < placed.start_at_s < ready + profile(b, mine).period_s

    def mean_round(start: float) -> float:
        return mean_iteration_s(simulate([profile(a, ran.plan), profile(b, mine)], {"a": 0.1, "b": start},
                                         {"a": 3, "b": 3}, capacities(g)))

    assert mean_round(placed.start_at_s) < mean_round(ready) - 0.01  # taking turns beats starting when ready


def test_links_of_a_cluster_folder_without_counters_says_why(tmp_path: Path) -> None:
    """A simulated cluster measured no link; an emulated one killed before its end (config.json
    says emulate, no summary.json: what a kill -9 leaves) never wrote its counters: each is said."""
    from fedmst.run import cluster
    from fedmst.run.config import RunConfig
    from fedmst.run.folders import OutputFolder
    from fedmst.views.links import link_table

    out = tmp_path / "c"
    resolved = cluster.resolve(RunConfig(topology="line3", slots=1, jobs="poisson:60,2", seed=3, rounds=1,
                                         model="mlp", mode="simulate", compute_s=0.2, out=str(out)))
    cluster.run(resolved, OutputFolder(out, False), report=lambda line: None)
    with pytest.raises(FedmstError, match=r"fluid model \(--mode simulate\) measured no link"):
        link_table(out)
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "mode": "emulate"}))
    (out / "summary.json").unlink()
    with pytest.raises(FedmstError, match=r"an emulated cluster that did not end \(killed") as caught:
        link_table(out)
    assert "simulate" not in str(caught.value)


def _cluster_command(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:

    users = str(Path(__file__).with_name("userbackends"))
    return subprocess.run(
        [str(Path(sys.executable).with_name("fedmst")), "cluster", "--topology", "small", "--model", "mlp",
         "--mode", "simulate", *args], capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200",
             "PYTHONPATH": os.pathsep.join(filter(None, [users, os.environ.get("PYTHONPATH")]))})


@pytest.mark.parametrize("args,fragment", [
    (("--policies", "fifo/random", "--order", "las"), "--order with --policies: each ORDER/PLACEMENT"),
    (("--policies", "fifo/random", "--placement", "random", "--preempt", "las"), "--placement and --preempt with"),
    (("--time-compress", "10", "--jobs", "poisson:6,3"), "--time-compress 10 with --jobs poisson:6,3: a Poisson"),
])
def test_cluster_options_a_run_would_ignore_are_refused(tmp_path: Path, args: tuple[str, ...], fragment: str) -> None:
    (tmp_path / "jobs.csv").write_text("job,submit_s,local_models,rounds\na,0,2,1\n")
    given = args if "--jobs" in args else (*args, "--jobs", "jobs.csv")
    proc = _cluster_command(tmp_path, *given, "--out", "out")
    assert proc.returncode == 1 and fragment in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_a_rejected_job_keeps_its_rounds_and_a_policies_run_says_what_it_wrote(tmp_path: Path) -> None:
    (tmp_path / "jobs.csv").write_text("job,submit_s,local_models,rounds\na,0,2,2\nhuge,0.5,40,3\n")
    proc = _cluster_command(tmp_path, "--jobs", "jobs.csv", "--policies", "fifo/random,las/pack", "--out", "out")
    assert proc.returncode == 0, proc.stderr
    assert "out/: comparison.json, and a folder per policy (fifo+random, las+pack)" in proc.stdout, proc.stdout
    assert "TCP congestion control" not in proc.stdout  # the fluid model runs no TCP
    rows = {r["job"]: r for r in csv.DictReader((tmp_path / "out" / "las+pack" / "jobs.csv").open())}
    assert (rows["huge"]["status"], rows["huge"]["rounds"], rows["huge"]["rounds_asked"]) == ("rejected", "0", "3")
    assert (rows["a"]["rounds"], rows["a"]["rounds_asked"]) == ("2", "2")
    summary = json.loads((tmp_path / "out" / "las+pack" / "summary.json").read_text())
    assert summary["transport"] == {}


def test_a_failing_placement_plugin_leaves_no_progress_line(tmp_path: Path) -> None:
    (tmp_path / "jobs.csv").write_text("job,submit_s,local_models,rounds\na,0,2,1\nb,0,2,1\n")
    proc = _cluster_command(tmp_path, "--jobs", "jobs.csv", "--placement", "brokenpolicy:Fails", "--out", "out")
    assert proc.returncode == 1 and "Fails" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "jobs" not in proc.stdout.splitlines()[-1], proc.stdout  # no "starting 0/2 jobs" left behind


def test_the_cluster_table_names_the_transport() -> None:
    from fedmst.run.cluster_records import ClusterSummary, cluster_table
    from rich.console import Console

    summary = ClusterSummary(
        status="completed", command="cluster", mode="emulate", scheduler="mst", order="fifo", placement="random",
        topology="small", slots=4, jobs=1, jobs_finished=1, jobs_rejected=0, jobs_failed=0, makespan_s=1.0,
        mean_jct_s=1.0, median_jct_s=1.0, p99_jct_s=1.0, mean_queue_s=0.0, slot_utilisation=0.5, comm_share=0.5,
        mean_round_s=0.5, link_bytes=1000, time_scale=1.0, wall_s=3.0,
        transport={"congestion_control": "dctcp", "congestion_control_knobs": {}, "ecn_k": "auto", "ecn_marked": 7})
    console = Console(width=120, record=True)
    console.print(cluster_table({"": summary}))
    text = console.export_text()
    assert "TCP congestion control" in text and "dctcp (ECN K auto)" in text
    assert "ECN-marked packets" in text and " 7 " in text


def test_optical_nodes_hold_no_slot() -> None:
    g = load_topology("spine-leaf:2,3")
    assert node_slots(g, default=4) == {"s0": 0, "s1": 0, "l0": 4, "l1": 4, "l2": 4}
