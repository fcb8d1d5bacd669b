"""``fedmst cluster`` on a fabric: a job holds its lightpaths while it runs, waits while they would
block, and its transfers go at the rate they hold (the fluid model), never sharing another job's."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from fedmst.core.cluster.jobs import Job
from fedmst.core.cluster.loop import Cluster, run_cluster, planner
from fedmst.core.cluster.simulate import SimulatedRunner
from fedmst.core.optical.circuits import circuit_view
from fedmst.core.optical.held import Wavelengths
from fedmst.core.plan import TRANSFER_PHASES, predicted_phase_seconds
from fedmst.core.schedulers import schedule
from fedmst.core.tasks import Task
from fedmst.core.topology import load_topology
from fedmst.errors import SchedulerError
from fedmst.core.cluster.policies import Placement

USER_MODULES = str(Path(__file__).with_name("userbackends"))


def _across() -> Placement:
    """userpolicies.Across, the user's placement the command runs too (test_integration)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(USER_MODULES)
        return importlib.import_module("userpolicies").Across()

MODEL = 1_000_000
FABRIC = "spine-leaf:1,2,2,mbps=100"
"""Hosts h0_0, h0_1 under leaf l0 and h1_0, h1_1 under l1, one spine: every job crosses l0-s0-l1."""


def _run(ocs: int, jobs: list[Job], policy: str = "ocs", ots: int = 0):
    graph = load_topology(FABRIC)
    slots = {n: 1 if n.startswith("h") else 0 for n in graph}
    wavelengths = Wavelengths(graph, policy, ocs=ocs, ots=ots)
    runner = SimulatedRunner(graph, train_s=lambda job: 1.0, chunk_bytes=1 << 18, with_delay=False, reconfig_s=0.02)
    history = run_cluster(jobs, Cluster(graph, slots, seed=1, placement=_across(), wavelengths=wavelengths), runner,
                          planner(graph, "spff", model_bytes=lambda job: MODEL))
    return {e.job.name: e for e in history.ended}, wavelengths


def _alone_comm_s(ocs: int, ots: int = 0, policy: str = "ocs") -> float:
    """A job's broadcast and upload as its plan predicts them alone on the lightpaths it would hold
    (on the whole fibres with ``ocs`` 0 and ``ots`` 0)."""
    g = load_topology(FABRIC)
    plan = schedule(g, Task("j0", "h0_0", ("h1_0",), MODEL), "spff")
    view = circuit_view(g, Wavelengths(g, policy, ocs=ocs, ots=ots).admit(plan)) if ocs + ots else g
    return sum(predicted_phase_seconds(plan, view, p, chunk_bytes=1 << 18, with_delay=False) for p in TRANSFER_PHASES)


def test_each_job_goes_at_its_own_wavelengths_rate_and_no_faster() -> None:
    """Four wavelengths a fibre: two jobs at once each hold one, 25 Mbit/s, and each moves its
    weights as fast as it would alone on it: not at the 50 Mbit/s that half the fibre would give."""
    ended, held = _run(4, [Job("j0", 0.0, 1, rounds=1), Job("j1", 0.0, 1, rounds=1)])
    assert _alone_comm_s(4) > 1.5 * _alone_comm_s(0)
    for e in ended.values():
        assert e.status == "finished" and e.outcome is not None and e.start_s == 0.0
        assert e.outcome.comm_s == pytest.approx(_alone_comm_s(4), rel=1e-6)
        assert e.outcome.setup_s == pytest.approx(0.02)  # the circuits' set-up, before the first broadcast
    assert held.most_used == {"l0-s0": 2, "l1-s0": 2} and not held.waited


def test_a_job_whose_lightpath_would_block_waits_for_one_to_be_given_back() -> None:
    ended, held = _run(1, [Job("j0", 0.0, 1, rounds=2), Job("j1", 0.0, 1, rounds=2)])
    first, second = ended["j0"], ended["j1"]
    assert first.status == second.status == "finished"
    assert second.start_s == pytest.approx(first.end_s)  # its compute slots were free all along
    assert held.waited == {"j1"} and held.most_used == {"l0-s0": 1, "l1-s0": 1}
    assert held.spectrum.lightpaths == ()  # every job gave its wavelengths back


def test_time_slices_fit_more_jobs_at_once_at_their_slots_rate() -> None:
    """One OTS wavelength of 8 slots and no circuit: both jobs run at once, each on one slot."""
    ended, held = _run(0, [Job("j0", 0.0, 1, rounds=1), Job("j1", 0.0, 1, rounds=1)], policy="ots", ots=1)
    assert ended["j0"].start_s == ended["j1"].start_s == 0.0 and not held.waited
    for e in ended.values():
        assert e.outcome is not None and e.outcome.comm_s == pytest.approx(_alone_comm_s(0, 1, "ots"), rel=1e-6)
    assert held.most_used == {"l0-s0": 1, "l1-s0": 1}


def test_a_job_that_blocks_on_an_idle_cluster_is_rejected_saying_why() -> None:
    """j9's two local models under l1 take two lightpaths over l0-s0-l1 (one per transfer path):
    with one wavelength a fibre it can never start, so it is rejected, and j0 runs."""
    ended, held = _run(1, [Job("j9", 0.0, 2, rounds=1), Job("j0", 0.0, 1, rounds=1)])
    assert ended["j9"].status == "rejected" and ended["j0"].status == "finished"
    assert ended["j9"].reason.startswith(
        "blocked on an idle cluster: no wavelength free on every link of path l0-s0-l1")
    assert held.waited == {"j9"}


def test_a_time_sliced_policy_without_time_slices_is_refused() -> None:
    with pytest.raises(SchedulerError, match="--optical ots gives timeslots, and the fibres carry no time-sliced"):
        Wavelengths(load_topology(FABRIC), "ots", ocs=2, ots=0)
