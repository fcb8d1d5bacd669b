"""Task placement: seeded, distinct nodes while they last, explicit nodes respected, clear errors."""

from __future__ import annotations

from collections import Counter

import networkx as nx
import pytest

from fedmst.errors import FedmstError, TaskError
from fedmst.core.tasks import Task, compute_nodes, place_task
from fedmst.core.topology import load_topology, optical_nodes

from graphs import line


def _grid() -> nx.Graph:
    """4x4 grid with string node names: 16 nodes."""
    g = nx.convert_node_labels_to_integers(nx.grid_2d_graph(4, 4))
    g = nx.relabel_nodes(g, {n: f"n{n}" for n in g})
    g.graph["name"] = "grid16"
    return g


def place(g: nx.Graph, k: int, seed: int = 0, **kw: object) -> Task:
    return place_task(g, name="t", local_models=k, model_bytes=1000, seed=seed, **kw)  # type: ignore[arg-type]


def test_same_seed_same_placement() -> None:
    g = _grid()
    for seed in range(5):
        assert place(g, 6, seed) == place(g, 6, seed)


def test_placement_does_not_depend_on_node_insertion_order() -> None:
    g = _grid()
    shuffled = nx.Graph(name="grid16")
    shuffled.add_nodes_from(sorted(g.nodes, reverse=True))
    shuffled.add_edges_from(g.edges)
    assert place(g, 5, seed=3) == place(shuffled, 5, seed=3)


def test_different_seeds_differ() -> None:
    g = _grid()
    placements = {(t.global_node, t.local_nodes) for t in (place(g, 6, seed) for seed in range(10))}
    assert len(placements) > 1


def test_task_fields() -> None:
    t = place(_grid(), 4, seed=2)
    assert t.name == "t" and t.model_bytes == 1000 and t.k == 4
    assert t.global_node in _grid() and all(n in _grid() for n in t.local_nodes)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("k", [1, 5, 14, 15])
def test_distinct_nodes_while_other_nodes_last(seed: int, k: int) -> None:
    g = _grid()  # 15 nodes besides G's
    t = place(g, k, seed)
    assert t.k == k
    assert t.global_node not in t.local_nodes
    assert len(set(t.local_nodes)) == k


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("k", [16, 31, 47])
def test_nodes_shared_only_beyond_other_nodes(seed: int, k: int) -> None:
    g = _grid()
    t = place(g, k, seed)
    counts = Counter(t.local_nodes)
    others = set(g) - {t.global_node}
    assert t.global_node not in counts
    assert set(counts) == others  # every other node is used before any is used twice
    assert max(counts.values()) - min(counts.values()) <= 1  # then spread evenly


def test_two_node_graph_shares_the_other_node() -> None:
    t = place(line("a", "b"), 3, seed=1, global_node="a")
    assert t.local_nodes == ("b", "b", "b")
    assert t.models_at("b") == (0, 1, 2) and t.models_at("a") == ()


def test_explicit_global_node_respected() -> None:
    g = _grid()
    for seed in range(5):
        t = place(g, 15, seed, global_node="n7")
        assert t.global_node == "n7"
        assert "n7" not in t.local_nodes and len(set(t.local_nodes)) == 15


def test_explicit_local_nodes_respected_in_order() -> None:
    g = _grid()
    t = place(g, 4, seed=9, global_node="n0", local_nodes=["n3", "n0", "n3", "n15"])
    assert t.global_node == "n0"
    assert t.local_nodes == ("n3", "n0", "n3", "n15")  # explicit nodes may repeat or hold G
    assert isinstance(t.local_nodes, tuple)


def test_explicit_local_nodes_with_seeded_global_node() -> None:
    g = _grid()
    t = place(g, 2, seed=4, local_nodes=("n1", "n2"))
    assert t.local_nodes == ("n1", "n2")
    assert t.global_node == place(g, 2, seed=4).global_node  # same seeded choice of G


def test_docstring_example() -> None:
    g = nx.path_graph(["a", "b", "c"])
    assert place_task(g, name="t", local_models=2, model_bytes=8, seed=0, global_node="a").local_nodes == (
        "b", "c")


def test_shipped_topology() -> None:
    g = load_topology("line3")
    t = place(g, 2, seed=1)
    assert t.terminals == frozenset(g)


def _one_line(exc: pytest.ExceptionInfo[TaskError]) -> str:
    message = str(exc.value)
    assert "\n" not in message and message.strip() == message and message
    assert isinstance(exc.value, FedmstError)
    return message


@pytest.mark.parametrize("kw,fragment", [
    ({"global_node": "zz"}, "'zz'"),
    ({"local_nodes": ["a", "zz"]}, "'zz'"),
    ({"global_node": "a", "local_nodes": ["b", "yy"]}, "'yy'"),
])
def test_unknown_node(kw: dict[str, object], fragment: str) -> None:
    g = line("a", "b", "c")
    g.graph["name"] = "abc"
    with pytest.raises(TaskError) as exc:
        place(g, 2, **kw)
    message = _one_line(exc)
    assert fragment in message and "'abc'" in message and "task t" in message


def test_unknown_node_is_not_matched_by_other_type() -> None:
    g = nx.relabel_nodes(line("0", "1"), str)
    with pytest.raises(TaskError):
        place(g, 1, global_node=0)  # type: ignore[arg-type]


@pytest.mark.parametrize("given,k,counts", [(["a", "b"], 3, "2 local nodes given for 3 local models"),
                                            (["a", "b", "c"], 2, "3 local nodes given for 2 local models"),
                                            ([], 1, "0 local nodes given for 1 local model")])
def test_local_node_count_mismatch(given: list[str], k: int, counts: str) -> None:
    with pytest.raises(TaskError) as exc:
        place(line("a", "b", "c"), k, local_nodes=given)
    assert _one_line(exc).endswith(counts)


@pytest.mark.parametrize("k", [0, -1])
def test_k_below_one(k: int) -> None:
    with pytest.raises(TaskError) as exc:
        place(line("a", "b", "c"), k)
    message = _one_line(exc)
    assert "--local-models" in message and str(k) in message


def test_models_at() -> None:
    t = Task(name="t", global_node="g", local_nodes=("a", "b", "a", "c"), model_bytes=4)
    assert t.models_at("a") == (0, 2)
    assert t.models_at("b") == (1,)
    assert t.models_at("c") == (3,)
    assert t.models_at("g") == ()
    assert t.models_at("nowhere") == ()
    assert t.k == 4


def test_terminals() -> None:
    t = Task(name="t", global_node="g", local_nodes=("a", "b", "a"), model_bytes=4)
    assert t.terminals == frozenset({"g", "a", "b"})
    assert isinstance(t.terminals, frozenset)
    shared = Task(name="t", global_node="a", local_nodes=("a", "b"), model_bytes=4)
    assert shared.terminals == frozenset({"a", "b"})


def test_task_is_frozen() -> None:
    t = Task(name="t", global_node="g", local_nodes=("a",), model_bytes=4)
    with pytest.raises(AttributeError):
        t.global_node = "h"  # type: ignore[misc]


def test_random_placement_never_picks_an_optical_node() -> None:
    g = load_topology("spine-leaf:4,3,1")
    drawn: set[str] = set()
    for seed in range(200):
        task = place(g, k=5, seed=seed)
        drawn |= task.terminals
    assert drawn == set(g) - optical_nodes(g) and compute_nodes(g) == sorted(drawn)


@pytest.mark.parametrize("where", [{"global_node": "s1"}, {"global_node": "l0", "local_nodes": ["l1", "s0"]}])
def test_an_optical_node_cannot_hold_g_or_a_local_model(where: dict[str, object]) -> None:
    node = "s1" if "local_nodes" not in where else "s0"
    with pytest.raises(TaskError) as exc:
        place(load_topology("spine-leaf:2,2"), k=len(where.get("local_nodes", [1])), **where)  # type: ignore[arg-type]
    assert str(exc.value) == (f"task t: node {node} is all-optical (light passes through it): "
                              "it cannot hold G or a local model")
