"""steiner-opt: the exact minimum Steiner tree, checked against brute force and against the
trees of mst and spff (the shared scheduler contract runs it too)."""

from __future__ import annotations

import itertools
import random

import networkx as nx
import pytest
from graphs import random_connected_graph
from hypothesis import given, settings
from hypothesis import strategies as st

from fedmst.core.plan import predicted_link_bytes
from fedmst.core.schedulers import schedule
from fedmst.core.schedulers import steiner_opt
from fedmst.core.schedulers.steiner_opt import min_steiner_tree
from fedmst.core.tasks import place_task
from fedmst.core.topology import load_topology
from fedmst.errors import SchedulerError


def fewest_links(graph: nx.Graph, terminals: set[str]) -> int:
    """Brute force: the smallest set of links whose subgraph connects every terminal."""
    edges = list(graph.edges)
    first = next(iter(terminals))
    for k in range(len(terminals) - 1, len(edges) + 1):
        for chosen in itertools.combinations(edges, k):
            sub = nx.Graph(chosen)
            if first in sub and terminals <= nx.node_connected_component(sub, first):
                return k
    raise AssertionError("the terminals are not connected")


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(3, 7), k=st.integers(1, 4))
def test_the_tree_has_the_fewest_links_brute_force_finds(seed: int, n: int, k: int) -> None:
    graph = random_connected_graph(seed, n, 0.4, uniform=False)
    if graph.number_of_edges() > 11:  # keep the brute force small
        return
    rng = random.Random(seed)
    root, *others = rng.sample(sorted(graph), min(n, k + 1))
    tree = min_steiner_tree(graph, root, {root, *others})
    assert nx.is_tree(tree) and {root, *others} <= set(tree)
    assert tree.number_of_edges() == (fewest_links(graph, {root, *others}) if others else 0)


def links_used(plan: object) -> set[frozenset[str]]:
    return {frozenset(hop) for t in plan.transfers if t.phase == "broadcast"  # type: ignore[attr-defined]
            for hop in itertools.pairwise(t.path)}


def test_on_nsfnet_it_never_uses_more_links_than_mst_or_spff() -> None:
    """200 random placements with the 4.5 MB model: fewer links and link bytes than mst's
approximation and spff's star, never more."""
    graph = load_topology("nsfnet")
    gaps = []
    for seed in range(200):
        task = place_task(graph, name="t", local_models=1 + seed % 10, model_bytes=4_505_640, seed=seed)
        plans = [schedule(graph, task, s) for s in ("steiner-opt", "mst", "spff")]
        best, mst, spff = (len(links_used(p)) for p in plans)
        assert best <= mst and best <= spff, (seed, best, mst, spff)
        opt_bytes, *others = (sum(predicted_link_bytes(p).values()) for p in plans)
        assert all(opt_bytes <= b for b in others), (seed, opt_bytes, others)
        gaps.append(mst - best)
    assert max(gaps) <= 2  # mst's approximation is within two links of the optimum here


def test_ties_go_to_the_shorter_delay() -> None:
    """A square a-b-c-d-a: c is two links from a either way; the way through d is shorter."""
    g = nx.Graph()
    g.add_edge("a", "b", delay_s=0.004)
    g.add_edge("b", "c", delay_s=0.004)
    g.add_edge("a", "d", delay_s=0.001)
    g.add_edge("d", "c", delay_s=0.001)
    assert sorted(map(sorted, min_steiner_tree(g, "a", {"c"}).edges)) == [["a", "d"], ["c", "d"]]


def test_a_program_too_large_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(steiner_opt, "MAX_VARIABLES", 100)
    graph = load_topology("nsfnet")
    with pytest.raises(SchedulerError, match=r"steiner-opt: the exact program for 21 links and 3 terminals has "
                                             r"\d+ variables, more than the 100 it solves; use mst"):
        min_steiner_tree(graph, "0", {"0", "5", "9"})
