"""SPFF and MST on small hand-checked graphs, and MST never costing more link bytes than SPFF."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest
from graphs import graph_from, line, random_connected_graph

import fedmst
from fedmst.errors import SchedulerError
from fedmst.core.schedulers import Scheduler, get_scheduler, register_scheduler, schedule, scheduler_names
from fedmst.core.schedulers.mst import link_weight, load_discount
from fedmst.core.plan import Plan, Transfer, plan_summary, predicted_link_bytes
from fedmst.core.tasks import Task
from fedmst.core.wire import wire_bytes

M = 100_000
W = wire_bytes(M)


def task(g: str, *local: str) -> Task:
    return Task(name="t", global_node=g, local_nodes=local, model_bytes=M)


def transfers(plan: Plan) -> list[tuple[str, tuple[str, ...], list[int]]]:
    return sorted((t.phase, t.path, sorted(t.models)) for t in plan.transfers)


def total_bytes(plan: Plan) -> int:
    return sum(predicted_link_bytes(plan).values())


def both_ways(*hops: tuple[str, str], times: int = 1) -> dict[tuple[str, str], int]:
    """Link bytes when each hop carries ``times`` transfers each way (one per phase)."""
    out: dict[tuple[str, str], int] = {}
    for u, v in hops:
        out[(u, v)] = out[(v, u)] = times * W
    return out


class TestLine:
    """G=a, L1 at b, L2 at c on a-b-c: the poster's case for in-path aggregation."""

    g = line("a", "b", "c")
    t = task("a", "b", "c")

    def test_spff_opens_one_connection_per_model(self) -> None:
        plan = schedule(self.g, self.t, "spff")
        assert transfers(plan) == [
            ("broadcast", ("a", "b"), [0]),
            ("broadcast", ("a", "b", "c"), [1]),
            ("upload", ("b", "a"), [0]),
            ("upload", ("c", "b", "a"), [1]),
        ]
        assert predicted_link_bytes(plan) == {
            ("a", "b"): 2 * W,
            ("b", "a"): 2 * W,
            ("b", "c"): W,
            ("c", "b"): W,
        }
        assert plan.aggregation_nodes == {"a"}

    def test_mst_relays_and_aggregates_at_b(self) -> None:
        plan = schedule(self.g, self.t, "mst")
        assert transfers(plan) == [
            ("broadcast", ("a", "b"), [0, 1]),
            ("broadcast", ("b", "c"), [1]),
            ("upload", ("b", "a"), [0, 1]),
            ("upload", ("c", "b"), [1]),
        ]
        assert predicted_link_bytes(plan) == both_ways(("a", "b"), ("b", "c"))
        assert plan.aggregation_nodes == {"a", "b"}

    def test_mst_strictly_cheaper(self) -> None:
        assert total_bytes(schedule(self.g, self.t, "mst")) < total_bytes(schedule(self.g, self.t, "spff"))


class TestBranchPoint:
    """A router x where two branches meet aggregates; degree-2 routers only forward."""

    # g - r1 - r2 - x, x - y - l1, x - l2, and a spur r1 - z no one needs
    g = graph_from(
        [("g", "r1"), ("r1", "r2"), ("r2", "x"), ("x", "y"), ("y", "l1"), ("x", "l2"), ("r1", "z")]
    )
    t = task("g", "l1", "l2")

    def test_mst_compresses_forwarding_routers(self) -> None:
        plan = schedule(self.g, self.t, "mst")
        assert plan.transfers == (
            Transfer("broadcast", ("g", "r1", "r2", "x"), frozenset({0, 1})),
            Transfer("broadcast", ("x", "l2"), frozenset({1})),
            Transfer("broadcast", ("x", "y", "l1"), frozenset({0})),
            Transfer("upload", ("l1", "y", "x"), frozenset({0})),
            Transfer("upload", ("l2", "x"), frozenset({1})),
            Transfer("upload", ("x", "r2", "r1", "g"), frozenset({0, 1})),
        )
        assert plan.aggregation_nodes == {"g", "x"}
        assert plan.nodes == {"g", "x", "l1", "l2"}
        assert predicted_link_bytes(plan) == both_ways(
            ("g", "r1"), ("r1", "r2"), ("r2", "x"), ("x", "y"), ("y", "l1"), ("x", "l2")
        )

    def test_spff_sends_twice_over_the_trunk(self) -> None:
        plan = schedule(self.g, self.t, "spff")
        assert transfers(plan) == [
            ("broadcast", ("g", "r1", "r2", "x", "l2"), [1]),
            ("broadcast", ("g", "r1", "r2", "x", "y", "l1"), [0]),
            ("upload", ("l1", "y", "x", "r2", "r1", "g"), [0]),
            ("upload", ("l2", "x", "r2", "r1", "g"), [1]),
        ]
        trunk = both_ways(("g", "r1"), ("r1", "r2"), ("r2", "x"), times=2)
        assert predicted_link_bytes(plan) == {**both_ways(("x", "y"), ("y", "l1"), ("x", "l2")), **trunk}
        assert plan.aggregation_nodes == {"g"}


def test_two_models_on_one_node() -> None:
    g, t = line("a", "b"), task("a", "b", "b")
    spff, mst = schedule(g, t, "spff"), schedule(g, t, "mst")
    assert transfers(spff) == [
        ("broadcast", ("a", "b"), [0]),
        ("broadcast", ("a", "b"), [1]),
        ("upload", ("b", "a"), [0]),
        ("upload", ("b", "a"), [1]),
    ]
    assert transfers(mst) == [("broadcast", ("a", "b"), [0, 1]), ("upload", ("b", "a"), [0, 1])]
    assert predicted_link_bytes(spff) == both_ways(("a", "b"), times=2)
    assert predicted_link_bytes(mst) == both_ways(("a", "b"))
    assert mst.aggregation_nodes == {"a", "b"}  # b sums its two models' updates
    assert spff.aggregation_nodes == {"a"}


@pytest.mark.parametrize("name", ["spff", "mst"])
def test_model_at_g_needs_no_transfer(name: str) -> None:
    g = line("a", "b")
    assert transfers(schedule(g, task("a", "a", "b"), name)) == [
        ("broadcast", ("a", "b"), [1]),
        ("upload", ("b", "a"), [1]),
    ]
    assert schedule(g, task("a", "a", "a"), name).transfers == ()


class TestLinkState:
    """a-b-d and a-c-d are equal; load already on one of them tips MST towards it."""

    g = graph_from([("a", "b"), ("b", "d"), ("a", "c"), ("c", "d")])
    t = task("a", "d")

    @pytest.mark.parametrize("via", ["b", "c"])
    def test_mst_prefers_loaded_path(self, via: str) -> None:
        state = {("a", via): float(M), (via, "d"): float(M)}
        assert transfers(schedule(self.g, self.t, "mst", state)) == [
            ("broadcast", ("a", via, "d"), [0]),
            ("upload", ("d", via, "a"), [0]),
        ]

    def test_load_in_either_direction_counts(self) -> None:
        state = {("c", "a"): float(M), ("d", "c"): float(M)}
        assert schedule(self.g, self.t, "mst", state).phase("broadcast")[0].path == ("a", "c", "d")

    def test_spff_ignores_link_state(self) -> None:
        state = {("a", "c"): float(M), ("c", "d"): float(M)}
        assert schedule(self.g, self.t, "spff", state) == schedule(self.g, self.t, "spff")


def test_load_discount() -> None:
    assert load_discount(0.0, M) == 1.0
    assert load_discount(M, M) == 0.5
    assert load_discount(3 * M, M) == 0.25


def test_link_weight_is_transfer_time_plus_latency() -> None:
    link = {"capacity_mbps": 100.0, "delay_s": 0.002, "length_km": 400.0}
    assert link_weight(link, M, 0.0) == pytest.approx(M * 8 / 100e6 + 0.002)
    assert link_weight(link, M, M) == pytest.approx((M * 8 / 100e6 + 0.002) / 2)


def test_unknown_scheduler_lists_choices() -> None:
    with pytest.raises(SchedulerError, match=r"'nope'.*mst, spff"):
        get_scheduler("nope")
    with pytest.raises(SchedulerError, match="mst, spff"):
        schedule(line("a", "b"), task("a", "b"), "nope")


@pytest.mark.parametrize("name", ["spff", "mst"])
def test_same_inputs_same_plan(name: str) -> None:
    g = random_connected_graph(7, 12, 0.3, uniform=True)
    t = task("n3", "n0", "n5", "n5", "n9", "n11", "n3")
    shuffled = nx.Graph()
    edges = list(g.edges(data=True))
    random.Random(1).shuffle(edges)
    shuffled.add_edges_from((v, u, d) for u, v, d in edges)
    assert schedule(g, t, name) == schedule(g, t, name) == schedule(shuffled, t, name)


_PLANS_SCRIPT = """
import json
from graphs import random_connected_graph
from fedmst.core.schedulers import schedule
from fedmst.core.plan import plan_summary
from fedmst.core.tasks import place_task
out = []
for seed in range(30):
    g = random_connected_graph(seed, 12, 0.3, uniform=True)
    t = place_task(g, name="t", local_models=6, model_bytes=100000, seed=seed)
    out += [plan_summary(schedule(g, t, name)) for name in ("spff", "mst")]
print(json.dumps(out))
"""


def test_same_plan_in_every_process() -> None:
    """Ties must not break by str hash order, which Python salts per process."""
    root = Path(next(iter(fedmst.__path__))).parent
    path = os.pathsep.join([str(root), str(Path(__file__).parent)])

    def plans(hash_seed: str) -> list[object]:
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": path}
        run = subprocess.run([sys.executable, "-c", _PLANS_SCRIPT], env=env, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)

    assert plans("1") == plans("2")


@pytest.mark.parametrize("seed", range(200))
def test_mst_never_costs_more_link_bytes(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(3, 15)
    g = random_connected_graph(seed, n, rng.uniform(0.05, 0.5), uniform=True)
    nodes = sorted(g.nodes)
    t = task(rng.choice(nodes), *(rng.choice(nodes) for _ in range(rng.randint(1, 12))))
    assert total_bytes(schedule(g, t, "mst")) <= total_bytes(schedule(g, t, "spff"))


def test_plan_summary_is_json_ready() -> None:
    summary = plan_summary(schedule(line("a", "b", "c"), task("a", "b", "c"), "mst"))
    assert json.loads(json.dumps(summary))["aggregation_nodes"] == ["a", "b"]


class _Broken(Scheduler):
    name = "broken"

    def plan(self, graph, task, link_state=None):  # type: ignore[no-untyped-def]
        raise ValueError("a bug\nin the plugin")


class _NotAPlan(Scheduler):
    name = "not-a-plan"

    def plan(self, graph, task, link_state=None):  # type: ignore[no-untyped-def]
        return [("a", "b")]


def test_a_plugin_that_raises_or_returns_no_plan_is_one_schedulererror() -> None:
    import types

    module = types.ModuleType("fedmst_test_plugins")
    module._Broken, module._NotAPlan = _Broken, _NotAPlan  # type: ignore[attr-defined]
    sys.modules["fedmst_test_plugins"] = module
    g = nx.path_graph(["a", "b"])
    nx.set_edge_attributes(g, 0.001, "delay_s")
    nx.set_edge_attributes(g, 10.0, "capacity_mbps")
    task = Task("t", "a", ("b",), model_bytes=100)
    with pytest.raises(SchedulerError, match=r"'fedmst_test_plugins:_Broken' failed to plan t: ValueError: a bug in"):
        schedule(g, task, "fedmst_test_plugins:_Broken")
    with pytest.raises(SchedulerError, match="returned list, not a fedmst.api.Plan"):
        schedule(g, task, "fedmst_test_plugins:_NotAPlan")
    with pytest.raises(SchedulerError, match="has no attribute 'Nope'"):
        schedule(g, task, "fedmst_test_plugins:Nope")


def test_register_scheduler_refuses_duplicates_and_non_schedulers() -> None:
    with pytest.raises(SchedulerError, match="already registered"):
        register_scheduler("mst", _Broken)
    with pytest.raises(SchedulerError, match="not a subclass"):
        register_scheduler("something", dict)  # type: ignore[arg-type]
    assert "something" not in scheduler_names()
