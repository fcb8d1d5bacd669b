"""The optical layer: first fit with wavelength continuity, release, blocking, reserved capacity;
OCS circuits on a fabric, the policy point, the options and the circuits' classifier."""

from __future__ import annotations

import ipaddress
import json
from dataclasses import replace
from pathlib import Path

import click
import pytest
from graphs import graph_from, line

from fedmst.api import Assignment, OpticalPolicy
from fedmst.errors import FedmstError, SchedulerError
from fedmst.core.schedulers import schedule
from fedmst.core.optical.wavelengths import Spectrum, admit, lightpath_paths
from fedmst.core.optical.circuits import circuit_view, fibres, optical_rows, optical_summary
from fedmst.core.optical.policies import OCSPolicy, assign, get_policy
from fedmst.core.plan import Plan
from fedmst.core.topology import load_topology
from fedmst.net.circuits import Circuit, CircuitClasses, circuit_commands, classifier
from fedmst.run.config import RunConfig, read_config_file, validate
from fedmst.core.tasks import Task
from fedmst.core.workload import schedule_workload

M = 100_000


def task(name: str, g: str, *local: str) -> Task:
    return Task(name=name, global_node=g, local_nodes=local, model_bytes=M)


class TestFirstFit:
    g = line("a", "b", "c")

    def test_empty_spectrum_gives_zero(self) -> None:
        assert Spectrum(self.g, 4).first_fit(("a", "b", "c")) == 0

    def test_lowest_free_index(self) -> None:
        s = Spectrum(self.g, 4)
        s.reserve(("a", "b"), 0, ("t0", ("a", "b")))
        s.reserve(("a", "b"), 2, ("t1", ("a", "b")))
        assert s.first_fit(("a", "b")) == 1
        assert s.free("a", "b") == (1, 3) == s.free("b", "a")
        assert s.first_fit(("b", "c")) == 0  # other links are untouched

    def test_continuity_skips_a_wavelength_taken_on_the_next_link(self) -> None:
        s = Spectrum(self.g, 3)
        s.reserve(("a", "b"), 0, ("t0", ("a", "b")))
        s.reserve(("b", "c"), 1, ("t1", ("b", "c")))
        assert s.first_fit(("a", "b", "c")) == 2
        assert s.first_fit(("c", "b", "a")) == 2  # a lightpath serves both directions

    def test_no_common_wavelength_blocks(self) -> None:
        s = Spectrum(self.g, 2)
        s.reserve(("a", "b"), 0, ("t0", ("a", "b")))
        s.reserve(("b", "c"), 1, ("t1", ("b", "c")))
        assert s.free("a", "b") == (1,) and s.free("b", "c") == (0,)
        assert s.first_fit(("a", "b", "c")) is None
        assert s.full_links(("a", "b", "c")) == ()

    def test_release_frees_every_link(self) -> None:
        s = Spectrum(self.g, 1)
        s.reserve(("a", "b", "c"), 0, ("t0", ("a", "b", "c")))
        assert s.holder("c", "b", 0) == ("t0", ("a", "b", "c"))
        assert s.first_fit(("b", "c")) is None
        s.release(("t0", ("a", "b", "c")))
        assert s.first_fit(("a", "b", "c")) == 0
        assert s.reserved_wavelength_links() == 0 and s.lightpaths == ()

    def test_release_task(self) -> None:
        s = Spectrum(self.g, 2)
        s.reserve(("a", "b"), 0, ("t0", ("a", "b")))
        s.reserve(("b", "c"), 0, ("t0", ("b", "c")))
        s.reserve(("a", "b"), 1, ("t1", ("a", "b")))
        s.release_task("t0")
        assert [lp.owner for lp in s.lightpaths] == [("t1", ("a", "b"))]
        assert s.free("a", "b") == (0,) and s.free("b", "c") == (0, 1)

    def test_bad_reservations_fail(self) -> None:
        s = Spectrum(self.g, 2)
        s.reserve(("a", "b"), 0, ("t0", ("a", "b")))
        with pytest.raises(SchedulerError, match="held by 't0'"):
            s.reserve(("b", "a"), 0, ("t1", ("b", "a")))
        with pytest.raises(SchedulerError, match="already holds"):
            s.reserve(("a", "b"), 1, ("t0", ("a", "b")))
        with pytest.raises(SchedulerError, match="out of range"):
            s.reserve(("b", "c"), 2, ("t2", ("b", "c")))
        with pytest.raises(SchedulerError, match="missing link a-c"):
            s.first_fit(("a", "c"))
        with pytest.raises(SchedulerError, match="no link"):
            s.first_fit(("a",))

    @pytest.mark.parametrize("w", [0, -1, 1.5, True])
    def test_wavelength_count_must_be_positive_int(self, w: object) -> None:
        with pytest.raises(SchedulerError, match="wavelengths"):
            Spectrum(self.g, w)  # type: ignore[arg-type]

    def test_wavelength_capacity_must_be_positive(self) -> None:
        with pytest.raises(SchedulerError, match="capacity"):
            Spectrum(self.g, 2, wavelength_mbps=0.0)


class TestCapacity:
    """a-b at 100 Mbit/s, b-c at 40 Mbit/s, W=4: wavelengths of 25 and 10 Mbit/s."""

    g = graph_from([("a", "b")], capacity_mbps=100.0)
    g.add_edge("b", "c", capacity_mbps=40.0, delay_s=0.0005, length_km=100.0)

    def test_slots_split_link_capacity(self) -> None:
        s = Spectrum(self.g, 4)
        assert (s.slot_mbps("a", "b"), s.slot_mbps("c", "b")) == (25.0, 10.0)
        lp = s.reserve(("a", "b", "c"), 0, ("t", ("a", "b", "c")))
        s.reserve(("b", "c"), 1, ("u", ("b", "c")))
        assert (lp.slot_mbps, lp.reserved_mbps, lp.wavelength_links) == ((25.0, 10.0), 35.0, 2)
        assert s.reserved_wavelength_links() == 3
        assert s.reserved_capacity_mbps() == 45.0

    def test_fixed_wavelength_capacity(self) -> None:
        s = Spectrum(self.g, 4, wavelength_mbps=10.0)
        s.reserve(("a", "b", "c"), 3, ("t", ("a", "b", "c")))
        assert s.reserved_capacity_mbps() == 20.0

    def test_workload_reports_both_measures(self) -> None:
        # SPFF for G=a, L=(b, c): lightpaths a-b and a-b-c; bytes per round on four directions
        wp = schedule_workload(self.g, [task("t", "a", "b", "c")], "spff", wavelengths=4)
        assert [(lp.path, lp.wavelength) for lp in wp.lightpaths] == [(("a", "b"), 0), (("a", "b", "c"), 1)]
        assert wp.reserved_wavelength_links == 3
        assert wp.reserved_capacity_mbps == 25.0 + 25.0 + 10.0
        assert len(wp.predicted_link_bytes()) == 4


class TestLightpathPaths:
    def test_spff_one_lightpath_per_distinct_path(self) -> None:
        plan = schedule(line("a", "b", "c"), task("t", "a", "b", "c", "c"), "spff")
        assert lightpath_paths(plan) == (("a", "b"), ("a", "b", "c"))

    def test_mst_one_lightpath_per_overlay_edge(self) -> None:
        plan = schedule(line("a", "b", "c"), task("t", "a", "b", "c"), "mst")
        assert lightpath_paths(plan) == (("a", "b"), ("b", "c"))

    def test_nothing_to_move_needs_nothing(self) -> None:
        s = Spectrum(line("a", "b"), 1)
        assert admit(s, schedule(line("a", "b"), task("t", "a", "a"), "spff")) is None
        assert s.lightpaths == ()


class TestBlockingW1:
    """One wavelength per link on a line: overlapping paths cannot both be lit."""

    g = line("a", "b", "c", "d")

    def test_second_overlapping_task_is_blocked_and_reported(self) -> None:
        tasks = [task("task0", "a", "b"), task("task1", "a", "c"), task("task2", "c", "d")]
        wp = schedule_workload(self.g, tasks, "spff", wavelengths=1)
        assert [p.task.name for p in wp.plans] == ["task0", "task2"]
        assert wp.blocked == (
            ("task1", "no wavelength free on every link of path a-b-c (W=1; links full: a-b)"),
        )
        assert wp.blocking_ratio == pytest.approx(1 / 3)
        assert [(lp.task, lp.path, lp.wavelength) for lp in wp.lightpaths] == [
            ("task0", ("a", "b"), 0),
            ("task2", ("c", "d"), 0),
        ]
        assert wp.reserved_wavelength_links == 2
        # blocked tasks carry no bytes
        assert set(wp.predicted_link_bytes()) == {("a", "b"), ("b", "a"), ("c", "d"), ("d", "c")}

    def test_blocked_task_releases_what_it_got(self) -> None:
        # task1's first path b-a is lit, its second b-c-d is not: b-a is given back, so task2 fits
        tasks = [task("task0", "c", "d"), task("task1", "b", "a", "d"), task("task2", "a", "b")]
        wp = schedule_workload(self.g, tasks, "spff", wavelengths=1)
        assert [p.task.name for p in wp.plans] == ["task0", "task2"]
        assert [name for name, _ in wp.blocked] == ["task1"]
        assert "b-c-d" in wp.blocked[0][1] and "c-d" in wp.blocked[0][1]

    def test_mst_lives_under_the_same_limit(self) -> None:
        tasks = [task("task0", "a", "b"), task("task1", "a", "c")]
        wp = schedule_workload(self.g, tasks, "mst", wavelengths=1)
        assert [name for name, _ in wp.blocked] == ["task1"]
        assert "links full: a-b" in wp.blocked[0][1]

    def test_two_wavelengths_admit_both(self) -> None:
        tasks = [task("task0", "a", "b"), task("task1", "a", "c")]
        wp = schedule_workload(self.g, tasks, "spff", wavelengths=2)
        assert wp.blocked == () and wp.blocking_ratio == 0.0
        assert [lp.wavelength for lp in wp.lightpaths] == [0, 1]

    def test_continuity_reason(self) -> None:
        # W=2: 0 is held on a-b, 1 on b-c; a-b-c has a free wavelength on each link, none on both
        g = line("a", "b", "c")
        s = Spectrum(g, 2)
        s.reserve(("a", "b"), 0, ("x", ("a", "b")))
        s.reserve(("b", "c"), 1, ("y", ("b", "c")))
        reason = admit(s, schedule(g, task("t", "a", "c"), "spff"))
        assert reason is not None and "continuity" in reason
        assert len(s.lightpaths) == 2


class TestCircuits:
    """OCS circuits on a fabric: fibres, stretches, a wavelength per transfer path, blocking,
    the prediction's view and the records."""

    fabric = load_topology("spine-leaf:2,2,1,mbps=100")

    def test_fibres_are_the_links_with_an_optical_end(self) -> None:
        assert sorted(map(sorted, fibres(self.fabric))) == [["l0", "s0"], ["l0", "s1"], ["l1", "s0"], ["l1", "s1"]]
        assert fibres(load_topology("nsfnet")) == frozenset()

    def test_each_transfer_path_holds_its_own_wavelength_on_its_stretch(self) -> None:
        wp = schedule_workload(self.fabric, [task("t", "h0_0", "l1", "h1_0")], "spff", wavelengths=4)
        stretch = {lp.path for lp in wp.lightpaths}
        assert len(stretch) == 1 and len(next(iter(stretch))) == 3  # l0-s-l1: the host links hold none
        assert sorted(lp.wavelength for lp in wp.lightpaths) == [0, 1]
        assert {lp.serves[-1] for lp in wp.lightpaths} == {"l1", "h1_0"}
        assert {lp.slot_mbps for lp in wp.lightpaths} == {(25.0, 25.0)}  # 100 Mbit/s / 4 on each fibre
        view = circuit_view(self.fabric, wp.lightpaths)
        hop = next(iter(stretch))[:2]
        assert view.edges[hop]["capacity_mbps"] == 50.0 and view.edges["h0_0", "l0"]["capacity_mbps"] == 100.0

    def test_a_task_that_finds_no_wavelength_is_blocked_not_an_error(self) -> None:
        tasks = [task("t0", "h0_0", "h1_0"), task("t1", "l0", "l1")]
        wp = schedule_workload(self.fabric, tasks, "spff", wavelengths=1)  # both cross l0-s-l1, the same spine
        assert [p.task.name for p in wp.plans] == ["t0"] and wp.blocking_ratio == 0.5
        assert wp.blocked[0][0] == "t1" and "W=1" in wp.blocked[0][1]

    def test_a_topology_without_optical_nodes_keeps_its_accounting(self) -> None:
        g = line("a", "b", "c")
        wp = schedule_workload(g, [task("t", "a", "b", "c")], "spff", wavelengths=8)
        assert [lp.path for lp in wp.lightpaths] == [("a", "b"), ("a", "b", "c")]
        assert all(lp.serves == () for lp in wp.lightpaths) and circuit_view(g, wp.lightpaths) is g

    def test_records(self) -> None:
        wp = schedule_workload(self.fabric, [task("t", "h0_0", "l1")], "spff", wavelengths=4)
        rows = optical_rows([(1, wp.lightpaths)], (("t9", "no wavelength"),), 1.2)
        assert [r["kind"] for r in rows] == ["ocs", ""]  # a blocked task holds no kind
        assert rows[0]["transfer"].startswith("h0_0-l0-") and rows[0]["reserved_mbps"] == 25.0
        assert rows[1]["blocked"] == "no wavelength" and rows[1]["path"] == ""
        summary = optical_summary(self.fabric, [(1, wp.lightpaths)], 0.5, policy="ocs", wavelengths=4, reconfig_ms=1.2)
        assert summary["optical_nodes"] == ["s0", "s1"] and sum(summary["wavelengths_used"].values()) == 2
        assert summary["blocking_ratio"] == 0.5

    def test_every_plan_is_recorded_from_its_round(self) -> None:
        """A re-plan's circuits join optical.csv from the round they hold; one kept from the plan
        before costs no set-up, and the summary counts it once."""
        first = schedule_workload(self.fabric, [task("t", "h0_0", "l1")], "spff", wavelengths=4).lightpaths
        plans = [(1, first), (2, (*first, replace(first[0], wavelength=3)))]
        rows = optical_rows(plans, (), 1.2)
        assert [(r["from_round"], r["setup_ms"]) for r in rows] == [(1, 1.2), (2, 0.0), (2, 1.2)]
        summary = optical_summary(self.fabric, plans, 0.0, policy="ocs", wavelengths=4, reconfig_ms=1.2)
        assert summary["plans"] == 2 and summary["circuits"] == 2
        assert max(summary["wavelengths_used"].values()) == 2


class TestPolicies:
    def test_the_built_ins_and_an_unknown_policy_lists_the_choices(self) -> None:
        assert isinstance(get_policy("ocs"), OCSPolicy)
        with pytest.raises(SchedulerError, match=r"unknown optical policy 'mesh'; choose one of: joint, ocs, ots"):
            get_policy("mesh")

    def test_a_users_policy_by_module_and_class(self) -> None:
        assert isinstance(get_policy("test_optical:FirstOnly"), FirstOnly)
        wp = schedule_workload(load_topology("spine-leaf:2,2"), [task("t0", "l0", "l1"), task("t1", "l0", "l1")],
                               "spff", wavelengths=8, optical="test_optical:FirstOnly")
        assert [p.task.name for p in wp.plans] == ["t0"] and wp.blocked == (("t1", "only the first task"),)

    def test_what_is_not_a_policy_is_refused(self) -> None:
        with pytest.raises(SchedulerError, match="not a subclass of fedmst.api.OpticalPolicy"):
            get_policy("fedmst.core.tasks:Task")

    def test_a_policys_wrong_answer_is_its_fault_in_one_line(self) -> None:
        class Wrong(OpticalPolicy):
            def assign(self, spectrum: Spectrum, plan: Plan) -> Assignment:
                return "yes"  # type: ignore[return-value]

        with pytest.raises(SchedulerError, match="returned str, not a fedmst.api.Assignment"):
            assign(Wrong(), Spectrum(line("a", "b"), 1), schedule(line("a", "b"), task("t", "a", "b"), "spff"))


class FirstOnly(OpticalPolicy):
    """A user's policy: circuits by first fit for the first task, every other one blocked."""

    name = "first-only"

    def assign(self, spectrum: Spectrum, plan: Plan) -> Assignment:
        if spectrum.lightpaths:
            return Assignment(plan.task.name, blocked="only the first task")
        return OCSPolicy().assign(spectrum, plan)


class TestOptions:
    def test_the_old_name_points_at_the_new_one(self) -> None:
        from fedmst import cli

        with pytest.raises(click.UsageError, match="--wavelengths is now --ocs-wavelengths: give --ocs-wavelengths 8"):
            cli.run.make_context("run", ["--wavelengths", "8"])

    def test_an_old_config_json_reads_wavelengths_as_ocs(self, tmp_path: Path) -> None:
        path = tmp_path / "config.json"
        path.write_text(json.dumps({"wavelengths": 7}))
        assert read_config_file(path) == {"ocs_wavelengths": 7}

    def test_the_default_policy_is_the_ocs_policys_own_name(self) -> None:
        """``--optical``'s default and the planners' are the OCS policy's ``name``, not copies that
        could drift (the option's default is a literal since the CLI must not load the graphs)."""
        import inspect

        from fedmst.core.faults import replan_workload

        assert RunConfig().optical == OCSPolicy.name
        for planner in (schedule_workload, replan_workload):
            assert inspect.signature(planner).parameters["optical"].default == OCSPolicy.name, planner.__name__

    @pytest.mark.parametrize("change,message", [
        ({"reconfig_ms": -1.0}, "--reconfig-ms -1: give a finite number of ms, 0 or more"),
        ({"reconfig_ms": float("inf")}, "--reconfig-ms inf: give a finite number of ms, 0 or more"),
        ({"ocs_wavelengths": -1}, "--ocs-wavelengths -1: give a number of 0 or more"),
        ({"ocs_wavelengths": 0, "ots_wavelengths": 0}, "--ocs-wavelengths 0 with --ots-wavelengths 0: a fibre needs"),
        ({"timeslots": 0}, "--timeslots 0: give a number of 1 or more"),
        ({"timeslot_us": 0.0}, "--timeslot-us 0: give a finite number of µs above 0"),
        ({"guard_us": 500.0}, r"--guard-us \(500\) must be below --timeslot-us \(500\)"),
    ])
    def test_bad_values_are_refused(self, change: dict[str, float], message: str) -> None:
        with pytest.raises(FedmstError, match=message):
            validate(replace(RunConfig(), **change))


def test_the_classifier_sends_each_address_to_its_class() -> None:
    """The filter's program, run by a small classic-BPF interpreter on an IPv4 and an ARP frame."""
    program = [tuple(map(int, op.split())) for op in classifier({"10.128.0.1": 0x200, "10.128.0.2": 0x201})
               .split(",")[1:]]

    def run(frame: bytes) -> int:
        a, pc = 0, 0
        while True:
            code, jt, jf, k = program[pc]
            if code == 0x28:
                a = int.from_bytes(frame[k:k + 2], "big")
            elif code == 0x20:
                a = int.from_bytes(frame[k:k + 4], "big")
            elif code == 0x15:
                pc += jt if a == k else jf
            elif code == 0x06:
                return k
            pc += 1

    def ipv4(src: str) -> bytes:
        return bytes(12) + b"\x08\x00" + bytes(12) + ipaddress.IPv4Address(src).packed + bytes(8)

    assert run(ipv4("10.128.0.2")) == (5 << 16) | 0x201 and run(ipv4("10.128.0.1")) == (5 << 16) | 0x200
    assert run(ipv4("10.128.0.3")) == 0 and run(bytes(12) + b"\x08\x06" + bytes(40)) == 0
    assert circuit_commands("x", 0x200, 25.0, mtu=1500, netem="delay 1ms")[1].startswith("qdisc add dev x parent 5:200")


def test_each_installation_replaces_the_circuits_held_before() -> None:
    """A circuit's class on both directions of each hop and one filter per interface; the next
    installation first removes the filter and classes of the one before, so an interface holds
    exactly the circuits of the last plan."""
    sender = {hop: (hop[0], f"{hop[0]}-to-{hop[1]}") for hop in (("l0", "s"), ("s", "l0"), ("s", "l1"), ("l1", "s"))}
    netem = dict.fromkeys(sender)
    classes = CircuitClasses()
    first = classes.commands([Circuit(("l0", "s", "l1"), (25.0, 25.0), ("10.128.0.1", "10.128.0.2"))], sender,
                             mtu=1500, netem=netem)
    assert sorted(first) == ["l0", "l1", "s"] and len(first["s"]) == 4  # two classes, two filters
    assert [c.split()[0] for c in first["l0"]] == ["class", "filter"] and " prio 1 " in first["l0"][1]
    again = classes.commands([Circuit(("l0", "s"), (25.0,), ("10.128.0.5",))], sender, mtu=1500, netem=netem)
    assert again["l1"] == ["filter del dev l1-to-s parent 5:0 prio 1", "class del dev l1-to-s classid 5:200"]
    assert [c.split()[:2] for c in again["l0"]] == [["filter", "del"], ["class", "del"], ["class", "add"],
                                                    ["filter", "add"]]
    assert "classid 5:200 " in again["l0"][2] and " prio 1 " in again["l0"][3]
