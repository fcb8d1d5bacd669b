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
from hypothesis import given, settings
from hypothesis import strategies as st
from graphs import DELAY_S, graph_from, line, random_connected_graph

import fedmst
from fedmst.errors import SchedulerError
from fedmst.core.schedulers import Scheduler, get_scheduler, register_scheduler, schedule, scheduler_names
from fedmst.core.schedulers.mst import auxiliary_graph, link_seconds
from fedmst.core.plan import Plan, Transfer, plan_summary, predicted_link_bytes
from fedmst.core.route import least_delay_paths, path_delay_ns
from fedmst.core.topology import load_topology
from fedmst.core.traffic import BackgroundFlow, flow_path
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
    """a-b-d and a-c-d are equal; load already on one of them tips MST away from it: a loaded
    link costs the same bytes (lightpaths are not shared) and more time."""

    g = graph_from([("a", "b"), ("b", "d"), ("a", "c"), ("c", "d")])
    t = task("a", "d")

    @pytest.mark.parametrize("loaded,free", [("b", "c"), ("c", "b")])
    def test_mst_avoids_the_loaded_path(self, loaded: str, free: str) -> None:
        state = {("a", loaded): float(M), (loaded, "d"): float(M)}
        assert transfers(schedule(self.g, self.t, "mst", state)) == [
            ("broadcast", ("a", free, "d"), [0]),
            ("upload", ("d", free, "a"), [0]),
        ]

    def test_load_in_either_direction_counts(self) -> None:
        state = {("b", "a"): float(M), ("d", "b"): float(M)}
        assert schedule(self.g, self.t, "mst", state).phase("broadcast")[0].path == ("a", "c", "d")

    def test_load_never_buys_a_longer_tree(self) -> None:
        """a-d directly, or a-b-d: however loaded a-d is, mst keeps the one link; mst-latency
        takes the detour once a-d's queue costs more time than the extra hop."""
        g = graph_from([("a", "d"), ("a", "b"), ("b", "d")])
        state = {("a", "d"): 50.0 * M}
        assert schedule(g, self.t, "mst", state).phase("broadcast")[0].path == ("a", "d")
        assert schedule(g, self.t, "mst-latency", state).phase("broadcast")[0].path == ("a", "b", "d")

    def test_spff_ignores_link_state(self) -> None:
        state = {("a", "c"): float(M), ("c", "d"): float(M)}
        assert schedule(self.g, self.t, "spff", state) == schedule(self.g, self.t, "spff")


class TestLeastDelayTies:
    """Routes of equal length tie exactly (not by the rounding of summed float delays) and go to
    the one with fewer hops; equal in both, to node order."""

    nsfnet = load_topology("nsfnet")

    @staticmethod
    def km(g: nx.Graph, path: list[str]) -> float:
        return sum(g.edges[u, v]["length_km"] for u, v in zip(path, path[1:]))

    def test_nsfnet_2_to_11_takes_the_three_hop_route(self) -> None:
        """Three 7,800 km routes; in floats 2-1-3-10-11 sums to 0.039 and 2-5-13-11 to 0.03900000000000001."""
        g = self.nsfnet
        assert self.km(g, ["2", "1", "3", "10", "11"]) == self.km(g, ["2", "5", "13", "11"]) == 7800
        assert least_delay_paths(g, "2")["11"] == ["2", "5", "13", "11"]
        assert least_delay_paths(g, "11")["2"] == ["11", "13", "5", "2"]
        assert flow_path(g, BackgroundFlow("2", "11", 1.0)) == ["2", "5", "13", "11"]
        for name in ("spff", "binomial", "ring"):
            plan = schedule(g, task("2", "11"), name)
            assert {t.path for t in plan.transfers} == {("2", "5", "13", "11"), ("11", "13", "5", "2")}, name

    def test_nsfnet_every_route_is_shortest_then_fewest_hops(self) -> None:
        g = self.nsfnet
        for src in g.nodes:
            for dst, path in least_delay_paths(g, src).items():
                if dst != src:
                    best = min((round(self.km(g, p)), len(p)) for p in nx.all_simple_paths(g, src, dst))
                    assert (round(self.km(g, path)), len(path)) == best, (src, dst, path)

    def test_a_float_tie_goes_to_fewer_hops(self) -> None:
        """0.1 + 0.3 ms is less than 0.4 ms in floats; it is the same delay."""
        g = graph_from([("a", "b")], delay_s=0.0001)
        g.add_edge("b", "c", **{**g.edges["a", "b"], "delay_s": 0.0003})
        g.add_edge("a", "c", **{**g.edges["a", "b"], "delay_s": 0.0004})
        assert 0.0001 + 0.0003 < 0.0004 and nx.shortest_path(g, "a", "c", weight="delay_s") == ["a", "b", "c"]
        assert least_delay_paths(g, "a")["c"] == ["a", "c"]
        assert transfers(schedule(g, task("a", "c"), "spff"))[0] == ("broadcast", ("a", "c"), [0])
        assert path_delay_ns(g, ["a", "b", "c"]) == path_delay_ns(g, ["a", "c"]) == 400_000

    def test_without_delays_fewest_hops_win(self) -> None:
        g = graph_from([("a", "b"), ("b", "c"), ("c", "d"), ("a", "e"), ("e", "d")], delay_s=0.0)
        assert least_delay_paths(g, "a")["d"] == ["a", "e", "d"]

    def test_a_shorter_route_still_wins_over_fewer_hops(self) -> None:
        g = graph_from([("a", "b"), ("b", "c"), ("c", "d")])
        g.add_edge("a", "d", **{**g.edges["a", "b"], "delay_s": 3 * DELAY_S + 1e-9})
        assert least_delay_paths(g, "a")["d"] == ["a", "b", "c", "d"]

    @pytest.mark.parametrize("order", [1, -1])
    def test_equal_delay_and_hops_go_by_node_order(self, order: int) -> None:
        g = graph_from([("a", "c"), ("c", "d"), ("a", "b"), ("b", "d")][::order])
        assert least_delay_paths(g, "a")["d"] == ["a", "b", "d"]


def test_link_seconds_is_transfer_behind_the_load_plus_latency() -> None:
    link = {"capacity_mbps": 100.0, "delay_s": 0.002, "length_km": 400.0}
    assert link_seconds(link, M, 0.0) == pytest.approx(M * 8 / 100e6 + 0.002)
    assert link_seconds(link, M, M) == pytest.approx(2 * M * 8 / 100e6 + 0.002)


def test_one_link_outweighs_every_links_time_together() -> None:
    g = random_connected_graph(3, 12, 0.4, uniform=False)
    aux = auxiliary_graph(g, task("n0", "n5"), {e: 10.0 * M for e in g.edges})
    weights = [w for *_, w in aux.edges(data="weight")]
    assert all(1 < w < 2 for w in weights) and sum(w - 1 for w in weights) < 1
    latency = auxiliary_graph(g, task("n0", "n5"), None, latency=True)
    assert sorted(w for *_, w in latency.edges(data="weight")) == sorted(
        link_seconds(d, M, 0.0) for *_, d in g.edges(data=True))


def test_unknown_scheduler_lists_choices() -> None:
    with pytest.raises(SchedulerError, match=r"'nope'.*binomial, hier, mst, mst-latency, ring, spff, steiner-opt"):
        get_scheduler("nope")
    with pytest.raises(SchedulerError, match="mst, mst-latency, ring, spff"):
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


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 100_000), uniform=st.booleans(),
       model_bytes=st.sampled_from([19_000, 100_000, 4_505_640, 45_000_000]), loaded=st.booleans())
def test_mst_never_costs_more_link_bytes(seed: int, uniform: bool, model_bytes: int, loaded: bool) -> None:
    """Any graph (uniform or with capacities and lengths varying per link), any model size, with
    or without earlier tasks' load: MST's tree never puts more bytes on the links than SPFF's star."""
    rng = random.Random(seed)
    n = rng.randint(3, 15)
    g = random_connected_graph(seed, n, rng.uniform(0.05, 0.5), uniform=uniform)
    nodes = sorted(g.nodes)
    t = Task(name="t", global_node=rng.choice(nodes),
             local_nodes=tuple(rng.choice(nodes) for _ in range(rng.randint(1, 12))), model_bytes=model_bytes)
    state = {(u, v): rng.uniform(0, 5) * model_bytes for u, v in g.edges if rng.random() < 0.5} if loaded else None
    mst = sum(predicted_link_bytes(schedule(g, t, "mst", state)).values())
    assert mst <= sum(predicted_link_bytes(schedule(g, t, "spff", state)).values())


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
