"""Workloads of concurrent tasks: seeded placement, MST reusing paths via link state, SPFF alone."""

from __future__ import annotations

from collections import Counter

import pytest
from graphs import graph_from

from fedmst.errors import SchedulerError, TaskError
from fedmst.core.schedulers import schedule
from fedmst.core.plan import check_plan, predicted_link_bytes
from fedmst.core.tasks import Task
from fedmst.core.topology import load_topology
from fedmst.core.wire import wire_bytes
from fedmst.core.workload import WorkloadPlan, link_state, make_tasks, schedule_workload

M = 100_000
WIRE = wire_bytes(M)
NSFNET = load_topology("nsfnet")


def task(name: str, g: str, *local: str) -> Task:
    return Task(name=name, global_node=g, local_nodes=local, model_bytes=M)


class TestMakeTasks:
    def test_seeded_and_named(self) -> None:
        tasks = make_tasks(NSFNET, 5, 3, M, seed=1)
        assert tasks == make_tasks(NSFNET, 5, 3, M, seed=1)
        assert tasks != make_tasks(NSFNET, 5, 3, M, seed=2)
        assert [t.name for t in tasks] == ["task0", "task1", "task2", "task3", "task4"]
        assert all(t.k == 3 and t.model_bytes == M for t in tasks)

    def test_task_i_does_not_depend_on_how_many_follow(self) -> None:
        assert make_tasks(NSFNET, 30, 4, M, seed=3)[:7] == make_tasks(NSFNET, 7, 4, M, seed=3)

    def test_distinct_g_while_nodes_last(self) -> None:
        n = NSFNET.number_of_nodes()
        gs = [t.global_node for t in make_tasks(NSFNET, 2 * n + 3, 2, M, seed=1)]
        assert len(set(gs[:n])) == n
        assert set(Counter(gs).values()) <= {2, 3}

    def test_local_models_distinct_and_off_g(self) -> None:
        for t in make_tasks(NSFNET, 20, 5, M, seed=4):
            assert len(set(t.local_nodes)) == 5 and t.global_node not in t.local_nodes

    def test_tasks_differ(self) -> None:
        tasks = make_tasks(NSFNET, 10, 3, M, seed=1)
        assert len({(t.global_node, t.local_nodes) for t in tasks}) == 10

    def test_at_least_one_task(self) -> None:
        with pytest.raises(TaskError, match="--tasks"):
            make_tasks(NSFNET, 0, 3, M, seed=1)


class TestLoadAvoidance:
    """Square a-b-d / a-c-d plus d-e. task0 (G=b, L=d) loads b-d; task1 (G=a, L=d, e) has two
    equal trees, via b or via c. Alone MST breaks the tie towards b; seeing task0's load it goes
    via c: the same bytes, and no link shared with task0 (lightpaths are not groomed)."""

    g = graph_from([("a", "b"), ("b", "d"), ("a", "c"), ("c", "d"), ("d", "e")])
    tasks = [task("task0", "b", "d"), task("task1", "a", "d", "e")]

    def paths(self, wp: WorkloadPlan) -> list[tuple[str, ...]]:
        return [t.path for p in wp.plans for t in p.phase("broadcast")]

    def test_mst_avoids_the_loaded_path(self) -> None:
        shared = schedule_workload(self.g, self.tasks, "mst", wavelengths=8)
        alone = schedule_workload(self.g, self.tasks, "mst", wavelengths=8, share_link_state=False)
        assert self.paths(shared) == [("b", "d"), ("a", "c", "d"), ("d", "e")]
        assert self.paths(alone) == [("b", "d"), ("a", "b", "d"), ("d", "e")]
        # the trees are equally long, so the bytes are equal...
        assert shared.predicted_total_bytes() == alone.predicted_total_bytes() == 8 * WIRE
        # ...and both aggregate, so they cost less than SPFF's star
        spff = schedule_workload(self.g, self.tasks, "spff", wavelengths=8)
        assert spff.predicted_total_bytes() == 12 * WIRE

    def test_spff_routes_each_task_alone(self) -> None:
        wp = schedule_workload(self.g, self.tasks, "spff", wavelengths=8)
        assert wp.plans == tuple(schedule(self.g, t, "spff") for t in self.tasks)
        assert self.paths(wp) == [("b", "d"), ("a", "b", "d"), ("a", "b", "d", "e")]

    def test_link_state_is_the_earlier_tasks_bytes(self) -> None:
        shared = schedule_workload(self.g, self.tasks, "mst", wavelengths=8)
        first = schedule(self.g, self.tasks[0], "mst")
        second = schedule(self.g, self.tasks[1], "mst", {h: float(b) for h, b in link_state([first]).items()})
        assert shared.plans == (first, second)
        assert link_state([first]) == {("b", "d"): WIRE, ("d", "b"): WIRE}

    def test_avoiding_load_saves_wavelengths(self) -> None:
        # no grooming across tasks: riding b-d with task0 would need a second wavelength there
        shared = schedule_workload(self.g, self.tasks, "mst", wavelengths=1)
        alone = schedule_workload(self.g, self.tasks, "mst", wavelengths=1, share_link_state=False)
        assert shared.blocked == ()
        assert alone.blocked == (
            ("task1", "no wavelength free on every link of path a-b-d (W=1; links full: b-d)"),
        )


def test_blocked_tasks_leave_no_link_state() -> None:
    # line a-b-c-d, W=1: task1 (a to d) is blocked on c-d and gives back a-b, which task2 then
    # gets; task1 puts no bytes anywhere
    g = graph_from([("a", "b"), ("b", "c"), ("c", "d")])
    tasks = [task("task0", "c", "d"), task("task1", "a", "d"), task("task2", "a", "b")]
    wp = schedule_workload(g, tasks, "mst", wavelengths=1)
    assert [n for n, _ in wp.blocked] == ["task1"]
    assert wp.predicted_link_bytes() == {("c", "d"): WIRE, ("d", "c"): WIRE, ("a", "b"): WIRE, ("b", "a"): WIRE}


def test_names_must_be_distinct() -> None:
    g = graph_from([("a", "b")])
    with pytest.raises(SchedulerError, match="distinct"):
        schedule_workload(g, [task("t", "a", "b"), task("t", "b", "a")], "spff", wavelengths=4)


def test_empty_workload() -> None:
    wp = schedule_workload(graph_from([("a", "b")]), [], "mst", wavelengths=2)
    assert (wp.plans, wp.blocked, wp.blocking_ratio, wp.reserved_capacity_mbps) == ((), (), 0.0, 0.0)


W_LARGE = 10_000


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, int], WorkloadPlan]:
    """30 tasks on NSFNET, seed 1, k = 2, 4, 8, with wavelengths enough that nothing blocks."""
    out = {}
    for k in (2, 4, 8):
        tasks = make_tasks(NSFNET, 30, k, M, seed=1)
        for name in ("spff", "mst"):
            out[(name, k)] = schedule_workload(NSFNET, tasks, name, wavelengths=W_LARGE)
    return out


class TestNsfnet:
    def test_nothing_blocked_and_every_plan_valid(self, runs: dict[tuple[str, int], WorkloadPlan]) -> None:
        for wp in runs.values():
            assert wp.blocked == () and len(wp.plans) == 30
            for plan in wp.plans:
                check_plan(plan, NSFNET)

    def test_spff_bytes_are_linear_in_models(self, runs: dict[tuple[str, int], WorkloadPlan]) -> None:
        # each local model adds its own G<->Li path both ways; k=2's models are k=8's first two
        for k in (2, 4, 8):
            wp = runs[("spff", k)]
            assert wp.predicted_total_bytes() == sum(
                2 * WIRE * len(t.hops) for p in wp.plans for t in p.phase("broadcast")
            )
        per_model = [runs[("spff", k)].predicted_total_bytes() / k for k in (2, 4, 8)]
        assert max(per_model) / min(per_model) < 1.25

    def test_mst_grows_slower_than_spff(self, runs: dict[tuple[str, int], WorkloadPlan]) -> None:
        def growth(name: str) -> float:
            return runs[(name, 8)].predicted_total_bytes() / runs[(name, 2)].predicted_total_bytes()

        assert growth("mst") < growth("spff")
        for k in (2, 4, 8):
            assert runs[("mst", k)].predicted_total_bytes() < runs[("spff", k)].predicted_total_bytes()
            assert runs[("mst", k)].reserved_wavelength_links < runs[("spff", k)].reserved_wavelength_links

    def test_workload_bytes_sum_the_plans(self, runs: dict[tuple[str, int], WorkloadPlan]) -> None:
        wp = runs[("mst", 4)]
        total: Counter[tuple[str, str]] = Counter()
        for plan in wp.plans:
            total.update(predicted_link_bytes(plan))
        assert wp.predicted_link_bytes() == dict(total)


# workload files ------------------------------------------------------------------------------------
def _file(tmp_path, text: str):
    path = tmp_path / "workload.json"
    path.write_text(text)
    return path


def test_a_workload_file_places_its_tasks_in_order(tmp_path) -> None:
    import json

    from fedmst.core.workload import read_workload

    path = _file(tmp_path, json.dumps({"tasks": [
        {"name": "A", "global_node": "a", "local_nodes": ["b", "c", "c"], "rounds": 3, "compute_s": 0.5,
         "model": "cnn", "dataset": "digits"},
        {"name": "B", "global_node": "c", "local_nodes": ["a"], "start_s": 1.25},
    ]}))
    a, b = read_workload(path, load_topology("line3"))
    assert (a.name, a.placed.global_node, a.placed.local_nodes, a.rounds, a.compute_s, a.placed.start_s) == (
        "A", "a", ("b", "c", "c"), 3, 0.5, 0.0)
    assert (a.model, a.dataset) == ("cnn", "digits")
    assert (b.name, b.rounds, b.compute_s, b.placed.start_s, b.model, b.dataset) == ("B", None, None, 1.25, None, None)
    run = {"rounds": 2, "compute_s": 0.0, "model": "mlp", "dataset": "digits"}
    assert (a.task(**run).rounds, a.task(**run).model, a.task(**run).compute_s) == (3, "cnn", 0.5)
    assert (b.task(**run).rounds, b.task(**run).model, b.task(**run).start_s) == (2, "mlp", 1.25)


@pytest.mark.parametrize("text,fragment", [
    ("[", "not JSON"),
    ('{"tasks": []}', "no tasks: give at least one"),
    ('{"jobs": []}', 'expected {"tasks": [...]}'),
    ('{"tasks": [{"name": "A", "global_node": "a"}]}', "task A: missing local_nodes"),
    ('{"tasks": [{"name": "A", "global_node": "a", "local_nodes": ["b"], "epochs": 3}]}',
     "task A: unknown key(s) epochs"),
    ('{"tasks": [{"name": "A", "global_node": "a", "local_nodes": ["b"], "model": 3}]}', "model = 3 is not a str"),
    ('{"tasks": [{"name": "A", "global_node": "zz", "local_nodes": ["b"]}]}', "node 'zz' is not in topology"),
    ('{"tasks": [{"name": "A", "global_node": "a", "local_nodes": []}]}', "local_nodes is empty"),
    ('{"tasks": [{"name": "A", "global_node": "a", "local_nodes": ["b"], "rounds": 0}]}', "rounds 0: give 1 or more"),
    ('{"tasks": [{"name": "A", "global_node": "a", "local_nodes": ["b"], "rounds": 1.5}]}',
     "rounds = 1.5 is not an int"),
    ('{"tasks": [{"name": "A", "global_node": "a", "local_nodes": ["b"], "compute_s": -1}]}',
     "compute_s -1: give 0 or more seconds"),
    ('{"tasks": [{"name": "A", "global_node": "a", "local_nodes": ["b"]}, '
     '{"name": "A", "global_node": "b", "local_nodes": ["c"]}]}', "task name(s) A given more than once"),
])
def test_a_bad_workload_file_is_refused_in_one_line(tmp_path, text: str, fragment: str) -> None:
    from fedmst.core.workload import read_workload

    with pytest.raises(TaskError) as exc:
        read_workload(_file(tmp_path, text), load_topology("line3"))
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def test_a_missing_workload_file_is_refused(tmp_path) -> None:
    from fedmst.core.workload import read_workload

    with pytest.raises(TaskError, match="cannot read it"):
        read_workload(tmp_path / "nope.json", load_topology("line3"))


def test_shipped_workloads_read_on_the_dumbbell() -> None:
    from pathlib import Path

    from fedmst.core.workload import read_workload

    folder = Path(__file__).resolve().parents[1] / "topologies" / "workloads"
    graph = load_topology("dumbbell")
    for path in sorted(folder.glob("*.json")):
        assert read_workload(path, graph), path


def test_a_workload_file_cannot_put_a_model_on_an_optical_node(tmp_path) -> None:
    from fedmst.core.workload import read_workload

    path = _file(tmp_path, '{"tasks": [{"name": "A", "global_node": "l0", "local_nodes": ["l1", "s0"]}]}')
    with pytest.raises(TaskError) as exc:
        read_workload(path, load_topology("spine-leaf:1,2"))
    assert str(exc.value) == (f"--workload {path}: task A: node s0 is all-optical (light passes through it): "
                              "it cannot hold G or a local model")


def test_seeded_workloads_place_no_model_on_an_optical_node() -> None:
    graph = load_topology("spine-leaf:4,4")
    tasks = make_tasks(graph, n_tasks=12, local_models=6, model_bytes=8, seed=3)
    assert set().union(*(t.terminals for t in tasks)) == {"l0", "l1", "l2", "l3"}
