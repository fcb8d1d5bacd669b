"""Plans are optically transparent: light passes through all-optical nodes, so every scheduler's
plan (a user's plugin's included) relays, sums and computes at electrical nodes only, its transfers
crossing optical nodes on their physical paths; without optical nodes nothing changes."""

from __future__ import annotations

import random
from dataclasses import replace

import networkx as nx
import pytest
from graphs import CAPACITY_MBPS, DELAY_S, graph_from, random_connected_graph
from hypothesis import given, settings
from hypothesis import strategies as st
from test_scheduler_contract import atoms_of, case, run_phase

from fedmst.core.optical.fabric import cut_loops, expand, transparent_overlay
from fedmst.core.plan import Plan, Transfer, check_plan, predicted_link_bytes, predicted_phase_seconds
from fedmst.core.schedulers import LinkState, Scheduler, schedule, scheduler_names
from fedmst.core.tasks import Task
from fedmst.core.topology import load_topology, optical_nodes
from fedmst.core.wire import wire_bytes
from fedmst.errors import SchedulerError

HOSTS = {"l0": ["h0a"], "l1": ["h1a", "h1b"], "l2": ["h2a"], "l3": ["h3a", "h3b"]}


def spine_leaf() -> nx.Graph:
    """2 optical spines, 4 leaves each linked to both, 1-2 hosts per leaf; all links alike."""
    g = graph_from([*((s, leaf) for s in ("s0", "s1") for leaf in HOSTS),
                    *((leaf, h) for leaf, hosts in HOSTS.items() for h in hosts)])
    for s in ("s0", "s1"):
        g.nodes[s]["optical"] = True
    return g


def nsfnet() -> nx.Graph:
    """NSFNET with its two busiest nodes (5 and 8, four links each) made all-optical."""
    g = load_topology("nsfnet").copy()
    for n in ("5", "8"):
        g.nodes[n]["optical"] = True
    return g


def cases() -> list[tuple[str, nx.Graph, Task, LinkState]]:
    """Tasks on both fabrics: every host, hosts and a leaf, and NSFNET's electrical nodes, loaded."""
    sl, ns = spine_leaf(), nsfnet()
    hosts = tuple(h for hs in HOSTS.values() for h in hs if h != "h0a")
    loaded = {("l0", "s0"): 5e6, ("s1", "l2"): 1e6}
    return [("spine-leaf", sl, Task("hosts", "h0a", hosts, 400_000), {}),
            ("spine-leaf+leaf", sl, Task("mixed", "h1b", ("h0a", "l2", "h3a", "h3a", "l0"), 2_000_000), loaded),
            ("nsfnet", ns, Task("ns", "0", ("3", "7", "10", "11", "12", "13", "13"), 400_000), {("4", "5"): 1e6})]


@pytest.mark.parametrize("name", scheduler_names())
@pytest.mark.parametrize("label, g, task, state", cases(), ids=[c[0] for c in cases()])
def test_every_scheduler_stops_only_at_electrical_nodes(name: str, label: str, g: nx.Graph, task: Task,
                                                        state: LinkState) -> None:
    """No transfer starts or ends at an optical node, none sums there, every path is physical, and
    the plan still aggregates exactly: G ends the upload with every update once, every local
    model's node starts the round with the global model."""
    plan = schedule(g, task, name, state)
    optical = optical_nodes(g)
    assert not optical & {n for t in plan.transfers for n in (t.src, t.dst)}
    assert not optical & (plan.aggregation_nodes | plan.nodes)
    check_plan(plan, g)
    rng = random.Random(label)
    atoms = atoms_of(plan)
    updates = {i: [rng.random() for _ in atoms] for i in range(task.k)}
    weights = {i: rng.random() for i in range(task.k)}
    old = [rng.random() for _ in atoms]
    after_upload = run_phase(plan, "upload", atoms, updates, weights, old)
    assert after_upload[task.global_node] == pytest.approx(
        [sum(weights[i] * updates[i][a] for i in range(task.k)) for a in range(len(atoms))])
    after_broadcast = run_phase(plan, "broadcast", atoms, updates, weights, old)
    for node in set(task.local_nodes) - {task.global_node}:
        assert after_broadcast.get(node) == pytest.approx(old) or node in after_upload, node


def test_spine_leaf_overlay_joins_leaves_through_both_spines() -> None:
    """Leaves are joined by two-hop lightpaths, spread over both spines; hosts keep their links;
    a lightpath carries the load of its busiest hop."""
    over = transparent_overlay(spine_leaf())
    leaves = sorted(HOSTS)
    lightpaths = {(u, v): over.graph.edges[u, v] for i, u in enumerate(leaves) for v in leaves[i + 1:]}
    assert {e["hops"] for e in lightpaths.values()} == {2}
    assert {e["path"][1] for e in lightpaths.values()} == {"s0", "s1"}
    assert all(e["capacity_mbps"] == CAPACITY_MBPS and e["delay_s"] == 2 * DELAY_S for e in lightpaths.values())
    assert over.graph.edges["l1", "h1b"] == {**spine_leaf().edges["l1", "h1b"], "hops": 1, "path": ("h1b", "l1")}
    spine = over.path("l0", "l1")[1]
    load = over.load({("l0", spine): 3.0, (spine, "l1"): 7.0, ("l1", spine): 1.0})
    assert load is not None and load["l0", "l1"] == 7.0 and load["l1", "l0"] == 1.0


def test_a_plugin_that_relays_at_a_spine_is_refused_in_one_line() -> None:
    with pytest.raises(SchedulerError) as info:
        schedule(spine_leaf(), Task("t", "h0a", ("h1a",), 8), f"{__name__}:RelayAtSpine")
    assert str(info.value) == ("plan of 'relay-at-spine' for task 't': broadcast transfer h0a-l0-s0 ends at optical "
                               "node s0 (light passes through it: no relay, aggregation or compute)")


class RelayAtSpine(Scheduler):
    """A plugin that ignores the graph it is given and relays through spine s0."""

    name = "relay-at-spine"

    def plan(self, graph: nx.Graph, task: Task, link_state: LinkState | None = None) -> Plan:
        down = Transfer("broadcast", ("h0a", "l0", "s0"), frozenset({0}))
        on = Transfer("broadcast", ("s0", "l1", "h1a"), frozenset({0}))
        return Plan(self.name, task, (down, on, Transfer("upload", ("h1a", "l1", "s0", "l0", "h0a"), frozenset({0}))))


def test_a_model_at_an_optical_node_is_refused_in_one_line() -> None:
    with pytest.raises(SchedulerError, match=r"^task 't': local model 1 sits at optical node s1 \(light passes"):
        schedule(spine_leaf(), Task("t", "h0a", ("h1a", "s1"), 8), "spff")


@pytest.mark.parametrize("name", ["mst", "steiner-opt"])
def test_trees_count_the_physical_hops_of_a_lightpath(name: str) -> None:
    """A four-hop lightpath a-b is one overlay edge, a two-link route a-c-b two: the tree takes the
    route with fewer physical links, which carries the model over fewer fibres."""
    g = graph_from([("a", "o1"), ("o1", "o2"), ("o2", "o3"), ("o3", "b"), ("a", "c"), ("c", "b")])
    for n in ("o1", "o2", "o3"):
        g.nodes[n]["optical"] = True
    plan = schedule(g, Task("t", "a", ("b",), 8), name)
    assert [t.path for t in plan.transfers] == [("a", "c", "b"), ("b", "c", "a")]


def test_a_spine_leaf_prediction_by_hand() -> None:
    """spff from h0a to h3a: one transfer over four physical links (host, leaf, spine, leaf, host),
    all 100 Mbit/s and 0.5 ms. The broadcast serialises the model once on the busiest link, then a
    chunk fills each of the four hops behind it."""
    g = spine_leaf()
    plan = schedule(g, Task("t", "h0a", ("h3a",), 1_000_000), "spff")
    (down,) = plan.phase("broadcast")
    assert len(down.hops) == 4 and down.path[2] in ("s0", "s1")
    assert set(predicted_link_bytes(plan, "broadcast")) == set(down.hops)
    rate = CAPACITY_MBPS * 1e6
    by_hand = wire_bytes(1_000_000) * 8 / rate + 4 * (wire_bytes(65_536) * 8 / rate + DELAY_S)
    got = predicted_phase_seconds(plan, g, "broadcast", chunk_bytes=65_536, with_delay=True)
    assert got == pytest.approx(by_hand)


@pytest.mark.parametrize("name", scheduler_names())
@pytest.mark.parametrize("seed", range(10))
def test_without_optical_nodes_plans_are_unchanged(name: str, seed: int) -> None:
    """A graph whose nodes all say ``optical: false`` is planned exactly as one without the attribute."""
    g, task, state = case(seed)
    marked = g.copy()
    nx.set_node_attributes(marked, False, "optical")
    assert schedule(marked, task, name, state) == schedule(g, task, name, state)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000))
def test_expand_never_repeats_a_node(seed: int) -> None:
    """Any simple walk over the overlay of a random graph with random optical nodes expands to a
    physical path between the same ends that visits no node twice."""
    rng = random.Random(seed)
    g = random_connected_graph(seed, rng.randint(3, 12), rng.uniform(0.05, 0.5), uniform=seed % 2 == 0)
    nodes = sorted(g.nodes)
    for n in rng.sample(nodes, rng.randint(1, len(nodes) - 2)):
        g.nodes[n]["optical"] = True
    over = transparent_overlay(g)
    assert set(over.graph) == set(g) - optical_nodes(g)
    walk = [rng.choice(sorted(over.graph))]
    while len(walk) < 6 and (step := sorted(set(over.graph[walk[-1]]) - set(walk))):
        walk.append(rng.choice(step))
    if len(walk) < 2:
        return
    task = Task("t", walk[0], (walk[-1],), 8)
    (t,) = expand(Plan("x", task, (Transfer("broadcast", tuple(walk), frozenset({0})),)), over).transfers
    assert len(set(t.path)) == len(t.path) and (t.src, t.dst) == (walk[0], walk[-1])
    assert all(g.has_edge(u, v) for u, v in t.hops)
    assert replace(t, path=cut_loops(t.path)) == t
