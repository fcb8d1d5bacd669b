"""The wavelengths a cluster's running jobs hold (``fedmst cluster`` on a fabric): jobs come and
go, and their lightpaths with them.

A job is given its lightpaths by the ``--optical`` policy when it starts, on the spectrum the
running jobs leave, and gives them back when it ends or a preemption stops it (it is given new
ones when it starts again). A job whose lightpaths would block waits, as a job waits for slots,
until a running job gives wavelengths back; one that blocks on fibres nobody holds never fits and
is rejected. A policy's share-out once every task is in (:meth:`OpticalPolicy.settle`, ``joint``'s
spare slots) is not made here: it would change running jobs' rates each time another comes or goes.

>>> from fedmst.core.schedulers import schedule
>>> from fedmst.core.tasks import Task
>>> from fedmst.core.topology import load_topology
>>> g = load_topology("spine-leaf:1,2,1")
>>> held = Wavelengths(g, "ocs", ocs=1, ots=0)
>>> plans = [schedule(g, Task(f"j{i}", "h0_0", ("h1_0",), 1000), "spff") for i in range(2)]
>>> [lp.path for lp in held.admit(plans[0])], held.admit(plans[1])[:44]
([('l0', 's0', 'l1')], 'no wavelength free on every link of path l0-')
>>> held.release("j0"); len(held.admit(plans[1])), held.most_used
(1, {'l0-s0': 1, 'l1-s0': 1})
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

from fedmst.core.optical.circuits import spectrum_for, wavelengths_held
from fedmst.core.optical.policies import assign, policy_on
from fedmst.core.optical.slots import DEFAULT_FRAME, Frame
from fedmst.core.optical.wavelengths import Lightpath
from fedmst.core.plan import Plan
from fedmst.core.wire import DEFAULT_MTU
from fedmst.core.workload import check_held

if TYPE_CHECKING:
    import networkx as nx


class Wavelengths:
    """The fibres of ``graph`` (a fabric), ``ocs`` circuit and ``ots`` time-sliced wavelengths each,
    as the running jobs hold them under the ``policy`` named."""

    def __init__(self, graph: nx.Graph, policy: str, *, ocs: int, ots: int, frame: Frame = DEFAULT_FRAME,
                 mtu: int = DEFAULT_MTU) -> None:
        self.spectrum = spectrum_for(graph, ocs, ots=ots, frame=frame, mtu=mtu)
        self.policy, self.name = policy_on(policy, self.spectrum, fabric=True), policy
        self.most_used: dict[str, int] = {}
        """Fibre (``u-v``) -> the most wavelengths held on it at once (a time-sliced one counts once)."""
        self.waited: set[str] = set()
        """The jobs that found their lightpaths blocked at least once (and waited, or were rejected)."""

    def admit(self, plan: Plan) -> tuple[Lightpath, ...] | str:
        """The lightpaths ``plan``'s job now holds, or why it would block (holding nothing)."""
        given = assign(self.policy, self.spectrum, plan)
        if given.blocked is not None:
            self.spectrum.release_task(plan.task.name)  # whatever the policy reserved before it gave up
            self.waited.add(plan.task.name)
            return given.blocked
        check_held(self.spectrum, plan, given, self.name)
        for fibre, held in wavelengths_held(self.spectrum.lightpaths).items():
            self.most_used[fibre] = max(self.most_used.get(fibre, 0), held)
        return given.circuits

    def summary(self) -> dict[str, object]:
        """summary.json's ``optical`` for a cluster: the policy and its terms, the most wavelengths
        held at once on each fibre, and how many jobs found their lightpaths blocked."""
        s = self.spectrum
        return {"policy": self.name, "ocs_wavelengths": s.wavelengths, "ots_wavelengths": s.ots,
                "frame": asdict(s.frame), "wavelengths_used": dict(sorted(self.most_used.items())),
                "jobs_blocked_on_wavelengths": len(self.waited)}

    def release(self, job: str) -> None:
        """Give back every lightpath ``job`` holds (none: nothing happens)."""
        self.spectrum.release_task(job)


__all__ = ["Wavelengths"]
