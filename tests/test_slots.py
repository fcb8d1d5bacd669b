"""Time-sliced (OTS) wavelengths in the optical accounting: frames, first fit in time, continuity,
blocking, and the shares the prediction reads (fedmst.core.optical.slots and wavelengths)."""

from __future__ import annotations

import itertools

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedmst.core.optical.circuits import circuit_view, spectrum_for
from fedmst.core.optical.policies import JointPolicy, OCSPolicy, OTSPolicy, SizePolicy
from fedmst.core.optical.slots import Frame
from fedmst.core.optical.wavelengths import Spectrum, admit
from fedmst.core.plan import Plan, Transfer
from fedmst.core.schedulers import schedule
from fedmst.core.tasks import Task
from fedmst.core.topology import load_topology
from fedmst.core.workload import make_tasks, schedule_workload
from fedmst.errors import SchedulerError


def _line(n: int = 3, mbps: float = 100.0) -> nx.Graph:
    g = nx.path_graph([f"n{i}" for i in range(n)])
    nx.set_edge_attributes(g, mbps, "capacity_mbps")
    nx.set_edge_attributes(g, 0.001, "delay_s")
    return g


@pytest.mark.parametrize("frame, problem", [
    (Frame(timeslots=0), "--timeslots must be an integer >= 1, got 0"),
    (Frame(timeslots=True), "--timeslots must be an integer >= 1, got True"),
    (Frame(slot_us=0.0), "--timeslot-us must be a finite number > 0, got 0"),
    (Frame(slot_us=float("inf")), "--timeslot-us must be a finite number > 0, got inf"),
    (Frame(guard_us=-1.0), "--guard-us must be a finite number >= 0, got -1"),
    (Frame(slot_us=50.0, guard_us=50.0), "--guard-us (50) must be below --timeslot-us (50)"),
])
def test_a_frame_that_cannot_be_is_refused_in_one_line(frame: Frame, problem: str) -> None:
    said = frame.problem()
    assert said is not None and said.startswith(problem) and "\n" not in said


def test_a_slots_share_and_opening_follow_the_frame() -> None:
    f = Frame(timeslots=4, slot_us=1000.0, guard_us=250.0)
    assert f.problem() is None
    assert f.share(1) == pytest.approx(0.1875) and f.share(4) == pytest.approx(0.75)
    assert f.opens_at(0) == pytest.approx(250e-6)
    assert f.opens_at(3, frame=2) - f.opens_at(3, frame=1) == pytest.approx(f.frame_us / 1e6)
    assert f.opens_at(1, delay_s=0.002) - f.opens_at(1) == pytest.approx(0.002)


@pytest.mark.parametrize("slot_us, guard_us, scale", [(500.0, 50.0, 10.0), (5000.0, 250.0, 1.0),
                                                      (5000.0, 25.0, 10.0), (1000.0, 0.0, 5.0)])
def test_the_host_clock_must_stretch_short_slots(slot_us: float, guard_us: float, scale: float) -> None:
    assert Frame(slot_us=slot_us, guard_us=guard_us).min_scale() == pytest.approx(scale)


def test_circuits_and_slots_split_a_fibre_and_never_mix() -> None:
    s = Spectrum(_line(), 1, ots=2, frame=Frame(timeslots=2))
    assert s.slot_mbps("n0", "n1") == pytest.approx(100 / 3)
    circuit = s.reserve(("n0", "n1"), 0, ("a", ("n0", "n1")))
    assert circuit.kind == "ocs" and circuit.held_mbps == pytest.approx((100 / 3,))
    with pytest.raises(SchedulerError, match="needs no slots"):
        s.reserve(("n1", "n2"), 0, ("b", ("n1", "n2")), slots=(0,))
    with pytest.raises(SchedulerError, match="needs distinct slots in 0..1"):
        s.reserve(("n1", "n2"), 1, ("b", ("n1", "n2")))
    with pytest.raises(SchedulerError, match="needs distinct slots in 0..1"):
        s.reserve(("n1", "n2"), 1, ("b", ("n1", "n2")), slots=(2,))
    sliced = s.reserve(("n0", "n1", "n2"), 1, ("b", ("n0", "n1", "n2")), slots=(1,))
    assert sliced.kind == "ots" and sliced.share == pytest.approx(0.45)
    assert s.first_fit(("n0", "n1")) is None  # the one circuit wavelength is held
    assert s.first_fit_slot(("n0", "n1")) == (1, 0)
    with pytest.raises(SchedulerError, match="slot 1 of wavelength 1 on n1-n2 is held by 'b'"):
        s.reserve(("n1", "n2"), 1, ("c", ("n1", "n2")), slots=(0, 1))
    assert s.reserved_wavelength_links() == 3  # the circuit's link, and wavelength 1 on two links
    assert s.slot_utilisation() == pytest.approx(1 / 2)  # one slot of the two of the one wavelength lit
    s.release_task("b")
    assert s.first_fit_slot(("n0", "n1", "n2")) == (1, 0) and s.slot_utilisation() == 0.0


def test_zero_wavelengths_of_both_kinds_is_refused() -> None:
    with pytest.raises(SchedulerError, match="wavelengths per link must be an integer >= 1, got 0"):
        Spectrum(_line(), 0)
    assert Spectrum(_line(), 0, ots=1).first_fit(("n0", "n1")) is None
    with pytest.raises(SchedulerError, match="--guard-us"):
        Spectrum(_line(), 0, ots=1, frame=Frame(slot_us=10.0, guard_us=20.0))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=25),
       st.integers(1, 2), st.integers(1, 3))
def test_no_slot_of_any_link_is_ever_held_twice(requests: list[tuple[int, int]], ots: int, timeslots: int) -> None:
    """Whatever is asked, in whatever order: first fit gives a slot free on every link, a slot is
    held by one lightpath on each link, and a request finds none only when none is free on all."""
    g = _line(5)
    s = Spectrum(g, 0, ots=ots, frame=Frame(timeslots=timeslots))
    for i, (a, b) in enumerate(requests):
        if a == b:
            continue
        path = tuple(nx.shortest_path(g, f"n{a}", f"n{b}"))
        got = s.first_fit_slot(path)
        if got is None:
            links = set(map(frozenset, zip(path, path[1:])))
            taken = {(lp.wavelength, t) for lp in s.lightpaths for t in lp.slots
                     if links & set(map(frozenset, zip(lp.path, lp.path[1:])))}
            assert set(itertools.product(range(ots), range(timeslots))) <= taken
            continue
        s.reserve(path, got[0], (f"t{i}", path), slots=(got[1],))
    held: dict[tuple[frozenset[str], int, int], str] = {}
    for lp in s.lightpaths:
        for u, v in zip(lp.path, lp.path[1:]):
            for t in lp.slots:
                key = (frozenset((u, v)), lp.wavelength, t)
                assert key not in held, f"{key} held by {held.get(key)} and {lp.task}"
                held[key] = lp.task
    assert 0.0 <= s.slot_utilisation() <= 1.0


def test_a_blocked_task_gets_nothing_and_says_why_in_time() -> None:
    g = _line()
    s = Spectrum(g, 0, ots=1, frame=Frame(timeslots=1))
    plan = schedule(g, Task("t0", "n0", ("n2",), 1000), "spff")
    assert admit(s, plan, lambda path: True) is None
    second = schedule(g, Task("t1", "n0", ("n2",), 1000), "spff")
    why = admit(s, second, lambda path: True)
    assert why is not None and why.startswith("no timeslot free on every link of path n0-n1-n2")
    assert [lp.task for lp in s.lightpaths] == ["t0"]


def _fabric_plan(name: str, model_bytes: int):
    g = load_topology("spine-leaf:2,2,2")
    task = Task("t0", "h0_0", ("h0_1", "h1_0", "h1_1"), model_bytes)
    return g, schedule(g, task, name)


@pytest.mark.parametrize("scheduler", ["spff", "mst"])
def test_ots_gives_every_stretch_of_fibre_one_slot_and_the_prediction_its_share(scheduler: str) -> None:
    g, plan = _fabric_plan(scheduler, 1_000_000)
    frame = Frame(timeslots=4, slot_us=1000.0, guard_us=100.0)
    spectrum = spectrum_for(g, 2, ots=2, frame=frame)
    given_ = OTSPolicy().assign(spectrum, plan)
    assert given_.blocked is None and given_.circuits
    for lp in given_.circuits:
        assert lp.kind == "ots" and len(lp.slots) == 1 and lp.wavelength >= 2
        assert all(g.nodes[n].get("optical") for n in lp.path[1:-1])  # a stretch of fibre: spines inside
    view = circuit_view(g, given_.circuits)
    lp = given_.circuits[0]
    u, v = lp.path[:2]
    shared = sum(1 for other in given_.circuits if frozenset((u, v)) in map(frozenset, zip(other.path, other.path[1:])))
    rate = g.edges[u, v]["capacity_mbps"] / 4 * frame.share(1)
    assert view.edges[u, v]["capacity_mbps"] == pytest.approx(rate * shared)


def test_size_puts_big_transfers_on_circuits_and_small_ones_on_slots() -> None:
    for model_bytes, kind in ((SizePolicy.threshold_bytes * 2, "ocs"), (SizePolicy.threshold_bytes / 2, "ots")):
        g, plan = _fabric_plan("spff", int(model_bytes))
        given_ = SizePolicy().assign(spectrum_for(g, 2, ots=2), plan)
        assert given_.blocked is None and {lp.kind for lp in given_.circuits} == {kind}


def test_ocs_is_unchanged_by_time_sliced_wavelengths_but_for_the_rate() -> None:
    g, plan = _fabric_plan("mst", 1_000_000)
    alone = OCSPolicy().assign(spectrum_for(g, 4), plan).circuits
    beside = OCSPolicy().assign(spectrum_for(g, 4, ots=4), plan).circuits
    assert [(lp.path, lp.wavelength) for lp in alone] == [(lp.path, lp.wavelength) for lp in beside]
    assert all(b.slot_mbps[0] == pytest.approx(a.slot_mbps[0] / 2) for a, b in zip(alone, beside))


def test_a_slot_carries_whole_packets_and_one_too_short_for_any_is_refused() -> None:
    """A packet never straddles a slot's end: the share counts the whole frames that fit its open
    time (the gate lets no more go), and a slot that fits none cannot carry anything."""
    g = _line(2, mbps=100.0)
    fluid = Spectrum(g, 0, ots=1, frame=Frame(timeslots=2, slot_us=200.0, guard_us=20.0))
    packets = Spectrum(g, 0, ots=1, frame=Frame(timeslots=2, slot_us=200.0, guard_us=20.0), frame_bytes=1514)
    # 180 µs open at 100 Mbit/s is 2,250 bytes: one whole 1,514-byte frame
    assert fluid.reserve(("n0", "n1"), 0, ("a", ("n0", "n1")), slots=(0,)).share == pytest.approx(0.45)
    assert packets.reserve(("n0", "n1"), 0, ("a", ("n0", "n1")), slots=(0,)).share == pytest.approx(
        1514 * 8 / 100 / 200 / 2)
    short = Spectrum(g, 0, ots=1, frame=Frame(timeslots=2, slot_us=100.0, guard_us=10.0), frame_bytes=1514)
    with pytest.raises(SchedulerError, match="carries no whole packet of 1514 bytes: give a longer --timeslot-us"):
        short.reserve(("n0", "n1"), 0, ("a", ("n0", "n1")), slots=(0,))


def _one_hop(task: str, model_bytes: int, *paths: tuple[str, ...]) -> Plan:
    """A plan broadcasting ``task``'s model along ``paths`` in turn, each relaying the one before."""
    transfers = tuple(Transfer("broadcast", p, frozenset({0})) for p in paths)
    return Plan("hand", Task(task, paths[0][0], (paths[-1][-1],), model_bytes), transfers)


def test_joint_relays_in_the_slot_after_their_feeder() -> None:
    """A relay at n1 forwards what n0-n1 brought: joint gives n1-n2 the slot after n0-n1's, so a
    chunk goes on in the same frame; ots takes the lowest slot free, the same as its feeder's."""
    plan = _one_hop("t", 1000, ("n0", "n1"), ("n1", "n2"))
    got = {}
    for policy in (OTSPolicy(), JointPolicy()):
        spectrum = Spectrum(_line(), 0, ots=1, frame=Frame(timeslots=4))
        assert policy.assign(spectrum, plan).blocked is None
        got[policy.name] = [lp.slots for lp in spectrum.lightpaths]
    assert got == {"ots": [(0,), (0,)], "joint": [(0,), (1,)]}


def test_joint_takes_the_other_kind_where_its_own_is_full() -> None:
    small = [_one_hop(f"t{i}", 1000, ("n0", "n1", "n2")) for i in range(3)]
    outcomes = {}
    for policy in (SizePolicy(), JointPolicy()):
        spectrum = Spectrum(_line(), 1, ots=1, frame=Frame(timeslots=1))
        outcomes[policy.name] = [policy.assign(spectrum, plan).blocked for plan in small]
    assert outcomes["size"][0] is None and outcomes["size"][1].startswith("no timeslot free")
    assert outcomes["joint"][:2] == [None, None]
    why = outcomes["joint"][2]
    assert why.startswith("no timeslot free on every link of path n0-n1-n2") and "; no wavelength free" in why


def test_joint_lends_the_spare_slots_by_bytes() -> None:
    """Two lightpaths on one wavelength of six slots, one carrying twice the bytes: after one slot
    each, the four left go two to one, so each holds slots in proportion to its bytes."""
    big, small = _one_hop("big", 2000, ("n0", "n1")), _one_hop("small", 1000, ("n0", "n1"))
    spectrum = Spectrum(_line(2), 0, ots=1, frame=Frame(timeslots=6))
    for plan in (big, small):
        assert JointPolicy().assign(spectrum, plan).blocked is None
    JointPolicy().settle(spectrum, [big, small])
    assert {lp.task: len(lp.slots) for lp in spectrum.lightpaths} == {"big": 4, "small": 2}
    assert spectrum.slot_utilisation() == 1.0


@pytest.mark.parametrize("scheduler", ["spff", "mst"])
def test_joint_lending_speeds_bursts_without_lighting_a_wavelength(scheduler: str) -> None:
    g = load_topology("spine-leaf:4,8,2")
    hosts = sorted((n for n in g if n.startswith("h")), key=lambda n: (int(n[1:].split("_")[0]), n))
    plan = schedule(g, Task("t0", hosts[0], tuple(hosts[3:15]), 4_500_000), scheduler)
    spectrum = spectrum_for(g, 40, ots=8)
    assert JointPolicy().assign(spectrum, plan).blocked is None
    before = spectrum.lightpaths

    def lit() -> dict[frozenset[str], set[int]]:
        out: dict[frozenset[str], set[int]] = {}
        for lp in spectrum.lightpaths:
            for hop in zip(lp.path, lp.path[1:]):
                out.setdefault(frozenset(hop), set()).add(lp.wavelength)
        return out

    wavelengths = lit()
    JointPolicy().settle(spectrum, [plan])
    assert lit() == wavelengths
    assert [(lp.path, lp.wavelength) for lp in spectrum.lightpaths] == [(lp.path, lp.wavelength) for lp in before]
    assert all(len(a.slots) >= len(b.slots) for a, b in zip(spectrum.lightpaths, before))
    assert sum(len(lp.slots) for lp in spectrum.lightpaths) > sum(len(lp.slots) for lp in before)
    assert all(spectrum.lend(lp) is None for lp in spectrum.lightpaths)  # nothing left to lend


@pytest.mark.parametrize("policy", ["ots", "size", "joint"])
def test_where_no_node_is_all_optical_every_policy_keeps_first_fits_accounting(policy: str) -> None:
    """No fabric, no time slices: the links keep the circuits' accounting as always (the run says
    the option set nothing up), rather than block every task for want of an OTS wavelength."""
    g = load_topology("nsfnet")
    tasks = make_tasks(g, 3, 4, 19_000, 1)
    wanted = schedule_workload(g, tasks, "mst", wavelengths=40)
    got = schedule_workload(g, tasks, "mst", wavelengths=40, optical=policy, ots=8)
    assert got.blocked == () and got.lightpaths == wanted.lightpaths
