"""The optical layer: first fit with wavelength continuity, release, blocking, reserved capacity."""

from __future__ import annotations

import pytest
from graphs import graph_from, line

from fedmst.errors import SchedulerError
from fedmst.core.schedulers import schedule
from fedmst.core.optical import Spectrum, admit, lightpath_paths
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
