"""A user's optical policy must give exactly what it reserved: the data plane and the prediction
read the spectrum, so an answer that differs from it is refused in one line, and wavelengths a
policy reserved before it blocked a task go back to the others. (:class:`Halves`, a user's policy
that does it right, runs for real in test_integration.py.)"""
from __future__ import annotations

import pytest

from fedmst.api import Assignment, OpticalPolicy
from fedmst.core.optical.wavelengths import Spectrum, lightpath_stretches
from fedmst.core.optical.policies import OCSPolicy
from fedmst.core.plan import Plan
from fedmst.core.tasks import Task
from fedmst.core.topology import load_topology
from fedmst.core.workload import schedule_workload
from fedmst.errors import SchedulerError

M = 1_000_000


def _tasks(*names: str) -> list[Task]:
    return [Task(name=n, global_node="l0", local_nodes=("l1",), model_bytes=M) for n in names]


class Halves(OpticalPolicy):
    """A user's policy: every stretch of fibre time-sliced, two neighbouring slots of every frame
    of the first OTS wavelength with a slot free (the one after it taken too)."""

    name = "halves"
    time_slices = True

    def assign(self, spectrum: Spectrum, plan: Plan) -> Assignment:
        task = plan.task.name
        for serves, path in lightpath_stretches(plan, spectrum.graph):
            got = spectrum.first_fit_slot(path)
            if got is None:
                return Assignment(task, blocked=f"no slot on {'-'.join(path)}")
            wavelength, slot = got
            spectrum.reserve(path, wavelength, (task, serves), slots=(slot, (slot + 1) % spectrum.frame.timeslots))
        return Assignment(task, tuple(lp for lp in spectrum.lightpaths if lp.task == task))


class Unreserved(OpticalPolicy):
    """Gives the circuits first fit would, without holding them on the spectrum."""

    name = "unreserved"

    def assign(self, spectrum: Spectrum, plan: Plan) -> Assignment:
        given = OCSPolicy().assign(spectrum, plan)
        spectrum.release_task(plan.task.name)
        return given


class HalfDone(OpticalPolicy):
    """Reserves its circuits, then gives up on the task."""

    name = "half-done"

    def assign(self, spectrum: Spectrum, plan: Plan) -> Assignment:
        OCSPolicy().assign(spectrum, plan)
        return Assignment(plan.task.name, blocked="changed its mind")


class Partial(OpticalPolicy):
    """Reserves one stretch of the first transfer path only."""

    name = "partial"

    def assign(self, spectrum: Spectrum, plan: Plan) -> Assignment:
        path = plan.transfers[0].path
        held = spectrum.reserve(path[:2], 0, (plan.task.name, path))
        return Assignment(plan.task.name, (held,))


def test_circuits_a_policy_did_not_reserve_are_refused() -> None:
    with pytest.raises(SchedulerError, match=r"gave task t0 1 circuit\(s\) but holds 0 on the spectrum"):
        schedule_workload(load_topology("spine-leaf:2,2"), _tasks("t0"), "spff", wavelengths=4,
                          optical="test_optical_policies:Unreserved")


def test_a_task_a_policy_blocks_keeps_no_wavelength() -> None:
    wp = schedule_workload(load_topology("spine-leaf:2,2"), _tasks("t0", "t1"), "spff", wavelengths=1,
                           optical="test_optical_policies:HalfDone")
    assert wp.plans == () and [t for t, _ in wp.blocked] == ["t0", "t1"]  # t1 found W=1 free again
    assert all(why == "changed its mind" for _, why in wp.blocked) and wp.lightpaths == ()


def test_a_stretch_left_without_a_circuit_is_refused() -> None:
    with pytest.raises(SchedulerError, match=r"optical policy 'test_optical_policies:Partial' gave task t0 no circuit"):
        schedule_workload(load_topology("spine-leaf:1,2"), _tasks("t0"), "spff", wavelengths=4,
                          optical="test_optical_policies:Partial")
