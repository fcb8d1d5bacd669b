"""How a run goes on when links fail or workers die: what the agents run now, which faults strike
within a phase, and what a phase's outcome asks for.

:class:`Live` holds each task's current plan and which of its original local models take part.
:class:`Strike` injects a fault at a moment within a phase. :func:`assess` reads a phase's
outcome and says whether the tasks must be re-planned and whether the phase must run again; the
engine does both. Nothing here calls back into the engine.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from fedmst.core import faults
from fedmst.core.optical.wavelengths import Lightpath
from fedmst.core.plan import Plan
from fedmst.core.tasks import Task
from fedmst.core.timescale import REAL_TIME, TimeScale
from fedmst.core.topology import node_order
from fedmst.errors import EmulationError, FedmstError, WorkerDied
from fedmst.protocol import Failed, Reply
from fedmst.run.results import write_json
from fedmst.run.stall import Stall
from fedmst.workers.backends import Agents
from fedmst.workers.control import ControlServer

NEXT_PHASE = {"broadcast": "train", "train": "upload", "upload": "broadcast"}


@dataclass
class Live:
    """What the agents run now: each task's plan, which of its original local models take part,
    and what is broken. Re-planning replaces the plans and bumps ``epoch``."""

    tasks: dict[str, Task]
    plans: tuple[Plan, ...]
    models: dict[str, tuple[int, ...]]
    """Task -> original index of each local model of its current (reduced) task."""
    down: set[tuple[str, str]] = field(default_factory=set)
    dead: set[str] = field(default_factory=set)
    epoch: int = 0
    circuits: tuple[Lightpath, ...] = ()
    """The optical circuits the plans hold (on a fabric; none elsewhere)."""


def aggregation_weights(live: Live, samples: Mapping[str, Mapping[int, int]], late: Mapping[str, list[int]],
                        round_: int) -> dict[str, dict[int, float]]:
    """Each task's aggregation weights over the local models whose update counts this round
    (in the plan and not late); they sum to 1."""
    from fedmst.fl.aggregation import sample_weights

    weights = {}
    for name, planned in live.models.items():
        models_ = [i for i in planned if i not in late.get(name, ())]
        if not models_:
            raise FedmstError(f"round {round_}: every local model of {name} missed the deadline; raise --deadline")
        weights[name] = dict(zip(models_, sample_weights([samples[name][i] for i in models_])))
    return weights


class Strike:
    """A fault that strikes ``after_s`` seconds into a phase, under its transfers, or at the
    phase's end if the phase is done sooner. ``action`` injects it and returns the bytes it
    destroyed in flight. Times are the network's: ``scale`` slows the timer, ``clock`` (monotonic,
    in the network's seconds) stamps when it struck."""

    def __init__(self, event: str, after_s: float, action: Callable[[], int], *, node: str | None = None,
                 link: tuple[str, str] | None = None, scale: TimeScale = REAL_TIME,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.event, self.action, self.clock = event, action, clock
        self.node, self.link = node, link
        """The worker it kills, or the link it takes down."""
        self.description = ""
        self.at_s: float | None = None
        self.when = 0.0
        """When it struck (``clock``)."""
        self.lost_bytes = 0
        self.after_s = after_s
        self.at_end = False
        """Whether the phase ended before ``after_s`` and the fault struck at its end instead."""
        self._lock = threading.Lock()
        self._timer = threading.Timer(scale.real_s(after_s), self.strike)
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = self.clock()
        self._timer.start()

    def strike(self, at_end: bool = False) -> None:
        with self._lock:
            if self.at_s is None:
                self.when = self.clock()
                self.lost_bytes = self.action()
                self.at_s = self.clock() - self._t0
                self.at_end = at_end

    def finish(self, phase: str) -> None:
        """Strike now if the phase ended first, and describe what happened when."""
        self._timer.cancel()
        if self._timer.is_alive():
            self._timer.join()
        self.strike(at_end=True)
        self.description = f"{self.event} {self.at_s:.2f} s into the {'training' if phase == 'train' else phase}"
        if self.at_end and self.after_s > 0:
            self.description += f", at its end: it was over before the {self.after_s:g} s asked"


def strikes_for(round_: int, phase: str, link_failures: tuple[faults.LinkFailure, ...],
                kills: tuple[faults.WorkerKill, ...], set_link_down: Callable[[str, str], int],
                agents: Agents, scale: TimeScale, clock: Callable[[], float]) -> list[Strike]:
    """The faults that strike during this phase: links failing under the broadcast, workers
    killed under the broadcast (``@R+S``) or while they train (``@R``); ``scale`` and ``clock`` as
    :class:`Strike` takes them."""
    strikes = [Strike(f"link {f.link[0]}-{f.link[1]} down", f.after_s, lambda f=f: set_link_down(*f.link),
                      link=f.link, scale=scale, clock=clock)
               for f in link_failures if f.round == round_ and f.after_s is not None and phase == "broadcast"]

    def kill(node: str) -> int:
        agents.kill(node)
        return 0

    for k in kills:
        if k.round == round_ and phase == ("broadcast" if k.after_s is not None else "train"):
            strikes.append(Strike(f"worker on node {k.node} killed", k.after_s or 0.0, lambda n=k.node: kill(n),
                                  node=k.node, scale=scale, clock=clock))
    return strikes


def notice_kills(killed: list[str], agents: Agents, server: ControlServer, timeout_s: float) -> None:
    """Make sure every killed worker's death is noticed even if it replied just before dying."""
    for node in killed:
        if node in server.agents:
            agents.procs[node].wait(timeout=timeout_s)
            try:
                agents.check()
            except WorkerDied as exc:
                server.drop(exc.node, str(exc))


@dataclass(frozen=True)
class Aborted:
    """A phase's attempt given up because its transfers failed: which nodes failed and why, and
    (once the engine counted them) the bytes the attempt put on the links."""

    phase: str
    failed_nodes: Mapping[str, str]
    link_bytes: int | None = None


@dataclass(frozen=True)
class Fault:
    """What broke: links that failed or workers that died, as a sentence (``event``), and, for a
    fault noticed under a phase, why each newly dead worker is gone (``cause``), how long each
    death (or a stalled link's failure) took to notice (``detected_s``), the stall the coordinator
    found, and the attempt given up (``aborted``); ``None`` leaves a key out of faults.json."""

    event: str
    in_flight_lost_bytes: int
    cause: Mapping[str, str] | None = None
    detected_s: Mapping[str, float] | None = None
    stall: str | None = None
    aborted: Aborted | None = None


@dataclass(frozen=True)
class FaultEvent:
    """One entry of faults.json: a :class:`Fault` and how the re-planning that answered it went
    (before which phase of which round, what each step took, which local models it dropped, and
    each task's new plan with its flows)."""

    fault: Fault
    round: int
    before_phase: str
    scheduling_s: float
    routes_s: float
    reconnect_s: float
    replan_s: float
    setup_link_bytes: int
    dropped: Mapping[str, Mapping[str, str]]
    tasks: tuple[Mapping[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        """The entry as faults.json holds it: the fault's keys, then the re-planning's."""
        out = _present(asdict(self))
        fault = _present(out.pop("fault"))
        if "aborted" in fault:
            fault["aborted"] = _present(fault["aborted"])
        return {**fault, **out, "tasks": list(self.tasks)}


def write_faults(path: Path, events: Sequence[FaultEvent]) -> None:
    """faults.json: every fault of the run so far and its re-planning."""
    write_json(path, [e.to_json() for e in events])


def _present(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if v is not None}


@dataclass(frozen=True)
class Assessment:
    """What a phase's outcome asks for: ``fault`` (None when nothing broke) for faults.json; with
    ``redo`` transfers failed and the phase must run again on a new plan."""

    fault: Fault | None
    redo: bool = False


def assess(phase: str, replies: Mapping[str, Reply], strikes: list[Strike], live: Live,
           lost: Mapping[str, str], died: Mapping[str, float], stall: Stall | None = None) -> Assessment:
    """After a phase: did links fail or workers die under it (``strikes`` injected, ``lost``
    agents dropped by the control server, ``died`` when each death was noticed, on the strikes'
    clock)? Then the tasks
    are re-planned around them, and if transfers failed (they break when a peer dies, or the
    coordinator aborted the phase on the ``stall`` it found) the phase runs again. A failure
    with neither cause ends the run, naming the stall if there was one. Marks the newly dead
    nodes in ``live``.
    """
    dead = set(lost) - live.dead
    kill_times = {st.node: st.when for st in strikes if st.node is not None}
    failed = {node: re.sub(r"\[/[^\]]*\] ", "", rep.error)  # gloo's source paths: noise
              for node, rep in replies.items() if isinstance(rep, Failed)}
    if not dead and not strikes:
        if stall is not None:
            raise EmulationError(f"{phase}: {stall}, and no fault was injected there "
                                 "(raise --stall-timeout if a link can stand idle that long)")
        if failed:
            node, why = next(iter(failed.items()))
            raise EmulationError(f"agent on node {node} failed in {phase}: {why}")
        return Assessment(None)
    live.dead |= dead
    detected = {n: died[n] - kill_times[n] for n in dead if n in kill_times}
    if stall is not None:
        detected |= {"-".join(st.link): stall.at - st.when for st in strikes
                     if st.link is not None and set(st.link) == set(stall.hop)}
    fault = Fault(
        event=", ".join([*(st.description for st in strikes),
                         *(f"worker on node {n} died" for n in sorted(dead - kill_times.keys(), key=node_order))]),
        in_flight_lost_bytes=sum(st.lost_bytes for st in strikes),
        cause={n: lost[n] for n in sorted(dead, key=node_order)}, detected_s=detected,
        stall=None if stall is None else str(stall),
        aborted=Aborted(phase, failed) if failed else None,
    )
    return Assessment(fault, redo=bool(failed))


def late_models(replies: Mapping[str, Reply]) -> dict[str, list[int]]:
    """The local models each task's agents reported late in the train phase."""
    late: dict[str, list[int]] = {}
    for reply in replies.values():
        for name, models_ in getattr(reply, "late", {}).items():
            late.setdefault(name, []).extend(models_)
    return {name: sorted(m) for name, m in late.items()}
