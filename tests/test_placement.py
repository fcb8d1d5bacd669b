"""Placing one emulation's nodes on several hosts (fedmst.core.placement): METIS's partition cuts
fewer predicted bytes than a random balanced one, follows the hosts' cores and the pins, and
refuses pins and hosts that cannot be, in one line."""

from __future__ import annotations

import pytest

from fedmst.core.placement import evaluate, node_load_s, overloaded, place, random_balanced
from fedmst.core.topology import load_topology
from fedmst.core.workload import make_tasks, schedule_workload
from fedmst.errors import FedmstError


def _geant(scheduler: str = "mst", tasks: int = 1, k: int = 16):
    g = load_topology("topozoo/Geant2012")
    plans = schedule_workload(g, make_tasks(g, tasks, k, 4_500_000, 4), scheduler, wavelengths=40).plans
    return g, plans


@pytest.mark.parametrize("scheduler", ["spff", "mst", "hier"])
def test_metis_cuts_fewer_bytes_than_random_balanced_placements(scheduler: str) -> None:
    g, plans = _geant(scheduler)
    hosts = {"h1": 2, "h2": 2, "h3": 2}
    placed = place(g, plans, hosts)
    assert set(placed.hosts) == set(g) and set(placed.hosts.values()) == set(hosts)
    randoms = [random_balanced(g, plans, hosts, seed=s).cut_bytes for s in range(10)]
    assert placed.cut_bytes < min(randoms), (placed.cut_bytes, randoms)
    total = sum(placed.load_s.values())
    assert max(placed.load_s.values()) <= 0.6 * total  # no host takes most of the work


def test_the_cut_is_every_link_between_hosts_and_its_bytes_the_plans() -> None:
    g, plans = _geant()
    placed = place(g, plans, {"h1": 1, "h2": 1})
    again = evaluate(g, plans, placed.hosts)
    assert again == placed
    for u, v in g.edges:
        crosses = placed.hosts[u] != placed.hosts[v]
        assert crosses == any({u, v} == set(e) for e in placed.cut)


def test_a_host_with_more_cores_takes_more_of_the_work() -> None:
    g, plans = _geant("spff", tasks=3, k=10)
    placed = place(g, plans, {"big": 6, "small": 2})
    assert placed.load_s["big"] > 1.5 * placed.load_s["small"], placed.load_s


def test_pins_win_and_one_host_takes_everything() -> None:
    g, plans = _geant()
    node = sorted(g)[0]
    first = place(g, plans, {"h1": 1, "h2": 1})
    other = "h2" if first.hosts[node] == "h1" else "h1"
    assert place(g, plans, {"h1": 1, "h2": 1}, pinned={node: other}).hosts[node] == other
    alone = place(g, plans, {"only": 4})
    assert alone.cut == () and alone.cut_bytes == 0.0 and set(alone.hosts.values()) == {"only"}
    assert alone.load_s["only"] == pytest.approx(sum(node_load_s(g, plans).values()))


@pytest.mark.parametrize("cores, pinned, said", [
    ({"h1": 1, "h2": 1}, {"nowhere": "h1"}, "pin file: node 'nowhere' is not in topology"),
    ({"h1": 1, "h2": 1}, {"AT": "h9"}, "pin file: host 'h9' (for node AT) is not one of the run's: h1, h2"),
    ({"h1": 0, "h2": 1}, {}, "hosts to place on need one core or more each"),
    ({}, {}, "hosts to place on need one core or more each"),
])
def test_pins_and_hosts_that_cannot_be_are_refused_in_one_line(cores: dict[str, int], pinned: dict[str, str],
                                                               said: str) -> None:
    g, plans = _geant()
    with pytest.raises(FedmstError, match=said.replace("(", r"\(").replace(")", r"\)")) as err:
        place(g, plans, cores, pinned=pinned)
    assert "\n" not in str(err.value)


def test_a_cut_the_hosts_network_cannot_carry_is_refused() -> None:
    g, plans = _geant()
    placed = place(g, plans, {"h1": 1, "h2": 1})
    capacity = sum(float(g.edges[u, v]["capacity_mbps"]) for u, v in placed.cut)
    assert overloaded(placed.hosts, g, {("h2", "h1"): capacity}) is None
    assert overloaded(placed.hosts, g, {("h1", "h3"): 1.0}) is None  # a pair not measured is not judged
    said = overloaded(placed.hosts, g, {("h1", "h2"): capacity / 2})
    assert said is not None and said.startswith("the links cut between hosts h1 and h2 carry up to")
