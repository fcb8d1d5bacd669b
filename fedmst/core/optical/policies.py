"""Who gets which wavelength on a fabric: the optical policy point, ``--optical``.

A policy is an :class:`OpticalPolicy` subclass registered like the schedulers (:data:`POLICIES`,
entry-point group ``fedmst.optical``, or ``package.module:Class``). :meth:`OpticalPolicy.assign` is
called once per task, in the order tasks are admitted, on the spectrum the earlier tasks left, and
reserves what it gives; :meth:`OpticalPolicy.settle` once after all of them, to share out what is
left. The built-ins: ``ocs`` (every lightpath a circuit), ``ots`` (every lightpath one timeslot),
``size`` (MOON's rule) and ``joint`` (fedmst's: the round's structure decides).

>>> POLICIES.names()[:4]
('joint', 'ocs', 'ots', 'size')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar, Sequence, TypeVar

from fedmst.core.optical.wavelengths import Lightpath, Path, Spectrum, admit
from fedmst.core.plan import Plan, feeders
from fedmst.errors import SchedulerError
from fedmst.plugins import Registry, one_line


@dataclass(frozen=True)
class Assignment:
    """What a policy gave one task: its ``circuits`` (one OCS lightpath per stretch of fibre of each
    of its transfer paths), or, where it is ``blocked``, none and why."""

    task: str
    circuits: tuple[Lightpath, ...] = ()
    blocked: str | None = None


class OpticalPolicy:
    """Who gets which wavelength: :meth:`assign` is called once per task, in the order tasks are
    admitted, on the spectrum the earlier tasks left (and reserves what it gives on it)."""

    name: ClassVar[str]
    time_slices: ClassVar[bool] = False
    """Whether it gives timeslots: a fabric without OTS wavelengths is refused for it."""

    def assign(self, spectrum: Spectrum, plan: Plan) -> Assignment:
        raise NotImplementedError

    def settle(self, spectrum: Spectrum, plans: Sequence[Plan]) -> None:
        """Once every task is admitted (``plans``, in order), change what the admitted tasks hold on
        ``spectrum`` if the policy shares out what is left (here: nothing changes)."""


class OCSPolicy(OpticalPolicy):
    """Every lightpath a circuit, by first fit (what the poster's testbed does)."""

    name = "ocs"

    def time_sliced(self, plan: Plan, path: Path) -> bool:
        """Whether the lightpath serving ``path`` of ``plan`` is time-sliced (here: never)."""
        return False

    def assign(self, spectrum: Spectrum, plan: Plan) -> Assignment:
        task = plan.task.name
        reason = admit(spectrum, plan, lambda path: self.time_sliced(plan, path))
        if reason is not None:
            return Assignment(task, blocked=reason)
        return Assignment(task, tuple(lp for lp in spectrum.lightpaths if lp.task == task))


class OTSPolicy(OCSPolicy):
    """Every lightpath time-sliced: one slot of an OTS wavelength in every frame, by first fit."""

    name = "ots"
    time_slices = True

    def time_sliced(self, plan: Plan, path: Path) -> bool:
        return True


class SizePolicy(OCSPolicy):
    """MOON's rule (Zhang et al., IEEE TNSE 2025): a path whose largest transfer carries more than
    :attr:`threshold_bytes` gets a circuit (a long flow), the rest get timeslots (bursts). The
    threshold is a class attribute: subclass to change it."""

    name = "size"
    time_slices = True
    threshold_bytes: ClassVar[float] = 10e6

    def time_sliced(self, plan: Plan, path: Path) -> bool:
        payloads = [t.payload(plan.task.model_bytes) for t in plan.transfers if t.path in (path, path[::-1])]
        return max(payloads, default=0) <= self.threshold_bytes


class JointPolicy(SizePolicy):
    """fedmst's answer to the poster's third challenge: circuits and timeslots managed together,
    by what the rounds need. Three rules, each read off the plans:

    - *Kind by size, either where full.* A path gets a circuit or timeslots by MOON's rule, and the
      other kind where its own is full, so a task is blocked only when a fibre has neither.
    - *Hops follow one another.* A lightpath whose transfers relay what another of the task's
      lightpaths brings takes the first slot free after that one's, so a chunk relayed at a leaf
      leaves in the next slot of the same frame rather than a frame later.
    - *Spare slots lent by bytes.* Once every task is in, the slots still free on the OTS wavelengths
      already lit go to the time-sliced lightpaths there, one at a time to the one holding the
      fewest slots per byte it carries a round (the same slot end to end, next to those it holds),
      so bursts go faster without lighting another wavelength.
    """

    name = "joint"

    def assign(self, spectrum: Spectrum, plan: Plan) -> Assignment:
        task = plan.task.name
        reason = admit(spectrum, plan, lambda path: self.time_sliced(plan, path), either=True,
                       first_slot=lambda path: _after_feeder(spectrum, plan, path))
        if reason is not None:
            return Assignment(task, blocked=reason)
        return Assignment(task, tuple(lp for lp in spectrum.lightpaths if lp.task == task))

    def settle(self, spectrum: Spectrum, plans: Sequence[Plan]) -> None:
        by_task = {plan.task.name: plan for plan in plans}
        open_ = [[lp, _bytes_on(by_task[lp.task], lp.owner[1])] for lp in spectrum.lightpaths
                 if lp.slots and lp.task in by_task]
        while open_:
            i = min(range(len(open_)), key=lambda i: len(open_[i][0].slots) / open_[i][1])
            wider = spectrum.lend(open_[i][0])
            if wider is None:
                del open_[i]
            else:
                open_[i][0] = wider


def _bytes_on(plan: Plan, path: Path) -> int:
    """The bytes ``plan``'s transfers carry a round on ``path``, either way (at least 1)."""
    return max(1, sum(t.payload(plan.task.model_bytes) for t in plan.transfers if t.path in (path, path[::-1])))


def _after_feeder(spectrum: Spectrum, plan: Plan, path: Path) -> int:
    """The slot after the last of the time-sliced lightpath that brings ``path``'s first transfer
    its weights (0 where it starts from what its source holds, or its feeder is a circuit)."""
    first = next(t for t in plan.transfers if t.path in (path, path[::-1]))
    fed_by = {f.path for f in feeders(first, plan.transfers)}
    fed_by |= {p[::-1] for p in fed_by}
    held = [lp for lp in spectrum.lightpaths if lp.task == plan.task.name and lp.slots and lp.owner[1] in fed_by]
    return held[-1].slots[-1] + 1 if held else 0


POLICIES: Registry[type[OpticalPolicy]] = Registry(
    "optical policy", "fedmst.optical", SchedulerError,
    {cls.name: cls for cls in (OCSPolicy, OTSPolicy, SizePolicy, JointPolicy)},
    accepts=lambda cls: isinstance(cls, type) and issubclass(cls, OpticalPolicy),
    requirement="a subclass of fedmst.api.OpticalPolicy")


def policy_on(spec: str, spectrum: Spectrum, *, fabric: bool) -> OpticalPolicy:
    """The policy ``spec`` names, to give lightpaths on ``spectrum``: where nothing is a fibre
    (``fabric`` False) nothing is set up and the links keep first fit's circuit accounting
    whatever the policy; on a fabric, one that gives timeslots is refused where the fibres carry
    no time-sliced wavelength."""
    policy = get_policy(spec)
    if not fabric:
        return OCSPolicy()
    if policy.time_slices and not spectrum.ots:
        raise SchedulerError(f"--optical {spec} gives timeslots, and the fibres carry no time-sliced wavelength: "
                             "give --ots-wavelengths 1 or more")
    return policy


def get_policy(spec: str) -> OpticalPolicy:
    """The policy registered as ``spec`` or named ``package.module:Class``; an unknown one is
    refused with the choices."""
    return POLICIES.lookup(spec)()


T = TypeVar("T")


def _call(policy: OpticalPolicy, on: str, call: Callable[[], T]) -> T:
    """``call``'s answer; a plugin's failure in it is its fault, said in one line naming it."""
    try:
        return call()
    except SchedulerError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's bug is reported as its fault, in one line
        raise SchedulerError(f"optical policy {type(policy).__name__} failed {on}: {one_line(exc)}") from exc


def assign(policy: OpticalPolicy, spectrum: Spectrum, plan: Plan) -> Assignment:
    """``policy``'s assignment for ``plan``; a plugin's failure or wrong answer is its fault, in one line."""
    given = _call(policy, f"on {plan.task.name}", lambda: policy.assign(spectrum, plan))
    if not isinstance(given, Assignment):
        raise SchedulerError(f"optical policy {type(policy).__name__} returned {type(given).__name__}, "
                             "not a fedmst.api.Assignment")
    return given


def settle(policy: OpticalPolicy, spectrum: Spectrum, plans: Sequence[Plan]) -> None:
    """``policy``'s share-out once ``plans`` are admitted; a plugin's failure is its fault, in one line."""
    _call(policy, "on the admitted tasks", lambda: policy.settle(spectrum, plans))


__all__ = ["POLICIES", "Assignment", "JointPolicy", "OCSPolicy", "OTSPolicy", "OpticalPolicy", "SizePolicy", "assign",
           "get_policy", "policy_on", "settle"]
