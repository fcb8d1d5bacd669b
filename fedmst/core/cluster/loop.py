"""The cluster's event loop: jobs arrive, wait in a queue, are placed on free slots, run and end.

One loop for every back end: the loop decides (who runs where, when), a :class:`Runner` runs
(:class:`fedmst.core.cluster.simulate.SimulatedRunner` on the fluid model; the emulation in
:mod:`fedmst.run.cluster`) and says when jobs end. Events are arrivals and job ends: at each,
ended jobs free their slots at once, arrived jobs join the queue, and the queue is tried again in
the :class:`~fedmst.core.cluster.policies.Order`'s order, each job placed where the
:class:`~fedmst.core.cluster.policies.Placement` puts it or left waiting. A job that asks more
slots than the cluster has is rejected when it arrives, with the reason; the others run.

>>> import networkx as nx
>>> from fedmst.core.cluster.simulate import SimulatedRunner
>>> g = nx.Graph([("a", "b")], name="ab")
>>> g.edges["a", "b"].update(capacity_mbps=100.0, delay_s=0.0)
>>> runner = SimulatedRunner(g, train_s=lambda job: 1.0, chunk_bytes=1 << 18, with_delay=False)
>>> jobs = [Job("j0", 0.0, 1, rounds=2), Job("j1", 0.5, 1, rounds=1), Job("huge", 1.0, 9, rounds=1)]
>>> plan = planner(g, "spff", model_bytes=lambda job: 1000)
>>> history = run_cluster(jobs, Cluster(g, {"a": 1, "b": 1}, seed=1), runner, plan)
>>> [(e.job.name, e.status, e.queue_s and round(e.queue_s, 2), round(e.jct_s, 2)) for e in history.ended]
[('huge', 'rejected', None, 0.0), ('j0', 'finished', 0.0, 2.0), ('j1', 'finished', 1.5, 2.5)]
>>> [(s.node, s.job, round(s.to_s, 2)) for s in history.slots]
[('b', 'j0', 2.0), ('a', 'j0', 2.0), ('b', 'j1', 3.0), ('a', 'j1', 3.0)]
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Literal, Mapping, Protocol, Sequence, TypeVar

from fedmst.core.cluster.jobs import Job, JobError
from fedmst.core.cluster.policies import (ORDERS, PLACEMENTS, PREEMPTIONS, ClusterView, Evict, Order, Placed,
                                          Placement, Preemption, Running)
from fedmst.core.cluster.slots import Occupancy, SlotInterval
from fedmst.core.contention import Profile, iteration_times
from fedmst.core.plan import Plan, predicted_link_bytes
from fedmst.core.schedulers import schedule
from fedmst.core.span import PhaseSpan
from fedmst.core.tasks import DEFAULT_DATASET, DEFAULT_MODEL, Task
from fedmst.core.wire import DEFAULT_MTU
from fedmst.core.workload import link_state
from fedmst.errors import FedmstError
from fedmst.wording import counted

if TYPE_CHECKING:
    import networkx as nx

    from fedmst.core.optical.held import Wavelengths
    from fedmst.core.optical.wavelengths import Lightpath

Status = Literal["finished", "rejected", "failed", "preempted", "interrupted"]
"""How a run of a job ended; "preempted" only between its runs (it goes back to the queue);
"interrupted": the command was stopped while it ran, waited or was still to come."""


@dataclass(frozen=True)
class Outcome:
    """How a job's run ended, as its runner measured it (the network's seconds)."""

    end_s: float
    status: Status = "finished"
    reason: str = ""
    rounds: int = 0
    """Rounds it finished."""
    mean_round_s: float | None = None
    link_bytes: int = 0
    """Bytes its transfers put on the links, every hop of every round counted."""
    final_accuracy: float | None = None
    comm_s: float = 0.0
    """Seconds of its rounds spent moving weights (broadcast and upload)."""
    setup_s: float = 0.0
    """Seconds from its start to its first round: its agents started and connected."""
    spans: tuple[PhaseSpan, ...] = ()
    """Its phases, round by round (tasks.csv)."""
    accuracies: tuple[float, ...] = ()
    """G's accuracy after each round (none where no model trained: the fluid model)."""

    @classmethod
    def finished(cls, plan: Plan, spans: Sequence[PhaseSpan], begun_s: float, end_s: float, *, mtu: int,
                 accuracies: Sequence[float] = ()) -> Outcome:
        """The outcome of a job that ran ``plan`` from ``begun_s`` (its start) to ``end_s``, its
        rounds' phases ``spans``: what every back end reports of a job that ended."""
        rounds = iteration_times(spans)
        return cls(end_s=end_s, rounds=len(rounds),
                   mean_round_s=sum(rounds.values()) / len(rounds) if rounds else None,
                   link_bytes=sum(predicted_link_bytes(plan, mtu=mtu).values()) * len(rounds),
                   final_accuracy=accuracies[-1] if accuracies else None,
                   comm_s=sum(s.end_s - s.start_s for s in spans if s.phase != "train"),
                   setup_s=min((s.start_s for s in spans), default=end_s) - begun_s, spans=tuple(spans),
                   accuracies=tuple(accuracies))

    @classmethod
    def joined(cls, parts: Sequence[Outcome]) -> Outcome:
        """A job's runs, each stopped by a preemption but the last, as one outcome: their rounds,
        bytes, set-ups and phases added up, ended as the last ended.

        >>> a, b = Outcome(1.0, "preempted", rounds=1, mean_round_s=0.4), Outcome(3.0, rounds=3, mean_round_s=0.2)
        >>> one = Outcome.joined([a, b])
        >>> one.rounds, round(one.mean_round_s, 3), one.status
        (4, 0.25, 'finished')
        """
        last = parts[-1]
        rounds = sum(p.rounds for p in parts)
        timed = [(p.mean_round_s, p.rounds) for p in parts if p.mean_round_s is not None and p.rounds]
        return cls(end_s=last.end_s, status=last.status, reason=last.reason, rounds=rounds,
                   mean_round_s=sum(m * n for m, n in timed) / sum(n for _, n in timed) if timed else None,
                   link_bytes=sum(p.link_bytes for p in parts),
                   final_accuracy=next((p.final_accuracy for p in reversed(parts) if p.final_accuracy is not None),
                                       None),
                   comm_s=sum(p.comm_s for p in parts), setup_s=sum(p.setup_s for p in parts),
                   spans=tuple(s for p in parts for s in p.spans),
                   accuracies=tuple(a for p in parts for a in p.accuracies))


@dataclass(frozen=True)
class Ended:
    """One job's life in the cluster: when it came, started (None: never) and ended, where it ran."""

    job: Job
    start_s: float | None
    end_s: float
    status: Status
    reason: str = ""
    placed: Placed | None = None
    outcome: Outcome | None = None
    preemptions: int = 0
    """Times a preemption stopped it."""
    slots: tuple[SlotInterval, ...] = ()
    """The slots it held, and when."""

    @property
    def queue_s(self) -> float | None:
        """Seconds it waited from its arrival to its start."""
        return None if self.start_s is None else self.start_s - self.job.submit_s

    @property
    def jct_s(self) -> float:
        """Its job completion time: end minus submission."""
        return self.end_s - self.job.submit_s


@dataclass(frozen=True)
class Stopped:
    """One row of preemptions.csv: ``job`` asked at ``asked_s`` to stop so that ``by`` could run,
    stopped at its round boundary ``stopped_s`` with ``rounds_done`` rounds done."""

    asked_s: float
    stopped_s: float
    job: str
    by: str
    reason: str
    rounds_done: int


@dataclass(frozen=True)
class Underway:
    """How far a running job has got in this run of it."""

    rounds: int
    """Rounds it has finished."""
    round_began_s: float | None
    """When its current round began (None: it is still setting up)."""


class Runner(Protocol):
    """What runs the jobs the loop starts, on one clock (the network's seconds)."""

    def now(self) -> float:
        """The time now."""

    def start(self, job: Job, plan: Plan, first_round: int = 1, start_at_s: float | None = None,
              circuits: tuple[Lightpath, ...] = ()) -> None:
        """Run ``job`` now, its rounds moving weights as ``plan`` says, the first not before
        ``start_at_s`` (a time shift), on the optical ``circuits`` it holds (on a fabric); a job a
        preemption stopped resumes from its checkpoint at round ``first_round`` (``job.rounds`` are
        those left)."""

    def preempt(self, name: str) -> None:
        """Stop job ``name`` at its next round boundary, keeping its checkpoint; :meth:`wait` then
        returns it with status "preempted" (or "finished", where that round was its last)."""

    def underway(self, name: str) -> Underway:
        """How far running job ``name`` has got in this run of it."""

    def interrupted(self, name: str) -> Outcome:
        """How far running job ``name`` had got in this run of it when the command was interrupted:
        the rounds it finished, with their phases (status "interrupted")."""

    def wait(self, until_s: float | None) -> Mapping[str, Outcome]:
        """Go on until one or more jobs end (returned by name), or until ``until_s`` (None: until a
        job ends), whichever comes first; an empty result means ``until_s`` came."""


Planner = Callable[[Job, Placed, Sequence[Plan]], Plan]
"""How a placed job's weights travel, given the plans of the jobs running now (the scheduler)."""


def planner(graph: nx.Graph, scheduler: str, model_bytes: Callable[[Job], int], *, sums_in_path: bool = True,
            mtu: int = DEFAULT_MTU) -> Planner:
    """The :data:`Planner` of ``scheduler``: a placed job becomes a :class:`~fedmst.core.tasks.Task`
    (its name, nodes, model and rounds), planned as a workload's tasks are, seeing as link state
    the bytes per round the running jobs' plans put on each link direction."""
    def plan(job: Job, placed: Placed, running: Sequence[Plan]) -> Plan:
        task = Task(name=job.name, global_node=placed.global_node, local_nodes=placed.local_nodes,
                    model_bytes=model_bytes(job), rounds=job.rounds or 1, compute_s=job.compute_s or 0.0,
                    model=job.model or DEFAULT_MODEL, dataset=job.dataset or DEFAULT_DATASET,
                    sums_in_path=sums_in_path)
        return schedule(graph, task, scheduler, {hop: float(b) for hop, b in link_state(running, mtu=mtu).items()})
    return plan


@dataclass
class Cluster:
    """The cluster's compute and policies: slots per node, queue order and placement."""

    graph: nx.Graph
    slots: Mapping[str, int]
    seed: int
    order: Order = field(default_factory=lambda: ORDERS.lookup("fifo")())
    placement: Placement = field(default_factory=lambda: PLACEMENTS.lookup("random")())
    preemption: Preemption = field(default_factory=lambda: PREEMPTIONS.lookup("none")())
    comm_s: Callable[[Plan, Sequence[Plan]], float] | None = None
    """A plan's broadcast and upload on links the given running plans load too (the view's ``comm_s``)."""
    profile: Callable[[Job, Plan], Profile] | None = None
    """A job's round on a plan for the fluid model (the view's ``profile``)."""
    wavelengths: Wavelengths | None = None
    """On a fabric, the fibres' wavelengths: a job starts only once it holds its lightpaths."""


@dataclass(frozen=True)
class Progress:
    """Where the loop stands, after each event."""

    now_s: float
    waiting: int
    running: int
    done: int
    total: int


@dataclass(frozen=True)
class History:
    """What a cluster ran: every job's life in the order they ended, every slot interval held,
    and every preemption."""

    ended: list[Ended]
    slots: list[SlotInterval]
    preemptions: list[Stopped] = field(default_factory=list)


def run_cluster(jobs: Sequence[Job], cluster: Cluster, runner: Runner, plan: Planner,
                progress: Callable[[Progress], None] = lambda _: None,
                ended: Callable[[Ended], None] = lambda _: None,
                stopped: Callable[[Stopped], None] = lambda _: None) -> History:
    """Run ``jobs`` (each arriving at its ``submit_s``) on ``cluster`` through ``runner``. ``ended``
    is told of each job as it ends (to write it at once), ``stopped`` of each preemption,
    ``progress`` after every event."""
    loop = _Loop(jobs, cluster, runner, plan, progress, ended, stopped)
    return History(loop.run(), loop.occupancy.intervals, loop.preemptions)


class _Loop:
    def __init__(self, jobs: Sequence[Job], cluster: Cluster, runner: Runner, plan: Planner,
                 progress: Callable[[Progress], None], ended: Callable[[Ended], None],
                 stopped: Callable[[Stopped], None]) -> None:
        self.cluster, self.runner, self.plan = cluster, runner, plan
        self.progress, self.tell, self.tell_stopped = progress, ended, stopped
        self.arrivals = sorted(jobs, key=lambda j: j.submit_s)
        self.total = len(jobs)
        self.occupancy = Occupancy(cluster.slots)
        self.waiting: list[Job] = []
        self.running: dict[str, Running] = {}
        self.done: list[Ended] = []
        self.preemptions: list[Stopped] = []
        self.rounds_before: dict[str, int] = {}
        """Rounds each job finished in its runs a preemption stopped."""
        self.parts: dict[str, list[Outcome]] = {}
        """The outcomes of each job's stopped runs."""
        self.first_start: dict[str, float] = {}
        self.held: dict[str, list[SlotInterval]] = {}
        self.stopping: dict[str, tuple[float, str, str]] = {}
        """Job asked to stop -> when, for which waiting job, why."""
        self.evicting: dict[str, set[str]] = {}
        """Waiting job -> the jobs stopping to make room for it."""
        self.first: list[str] = []
        """Waiting jobs whose victims have stopped: tried before the order's."""
        self._seen: tuple[float, int, ClusterView] | None = None
        self._changes = 0
        """Counts what changes a view (a job placed, stopping, arriving or ending): a view is
        built once per change, not once per job a policy is asked about."""

    def run(self) -> list[Ended]:
        try:
            return self._run()
        except KeyboardInterrupt:  # every job is still accounted for, as far as can be, then the command stops
            with contextlib.suppress(Exception):
                self._interrupted(self.runner.now())
            raise

    def _interrupted(self, now: float) -> None:
        """Record every job the interrupt caught: those running with the rounds they finished and
        the slots they held until now, those waiting or still to come as never started."""
        reason = "running when the command was interrupted"
        for name, run in list(self.running.items()):
            self.rounds_before.pop(name, None)
            held = len(self.occupancy.intervals)
            self.occupancy.release(name, now)
            self.held.setdefault(name, []).extend(self.occupancy.intervals[held:])
            parts = [*self.parts.pop(name, []), replace(self.runner.interrupted(name), end_s=now, reason=reason)]
            whole = Outcome.joined(parts)
            self._record(Ended(run.job, self.first_start.pop(name, run.start_s), now, "interrupted", reason,
                               run.placed, whole, preemptions=len(parts) - 1, slots=tuple(self.held.pop(name))))
        self.running = {}
        for job, where in [*((j, "waiting") for j in self.waiting), *((j, "still to come") for j in self.arrivals)]:
            self._record(Ended(job, None, max(now, job.submit_s), "interrupted",
                               f"{where} when the command was interrupted: never started"))
        self.waiting, self.arrivals = [], []

    def _run(self) -> list[Ended]:
        while self.arrivals or self.waiting or self.running:
            now = self.runner.now()
            wake = self._wake(now)
            until = min([t for t in (self.arrivals[0].submit_s if self.arrivals else None, wake) if t is not None],
                        default=None)
            if until is None and not self.running:  # nothing runs, nothing comes: the queue can never move
                self._stuck()
                break
            for name, outcome in self.runner.wait(until).items():
                self._end(name, outcome)
            now = self.runner.now()
            while self.arrivals and self.arrivals[0].submit_s <= now + 1e-9:
                self._arrive(self.arrivals.pop(0), now)
            self._schedule(now)
            self._preempt(now)
            self.progress(Progress(now, len(self.waiting), len(self.running), len(self.done), self.total))
        return self.done

    def _record(self, life: Ended) -> None:
        self._changes += 1
        self.done.append(life)
        self.tell(life)

    def _arrive(self, job: Job, now: float) -> None:
        self._changes += 1
        if job.slots > self.occupancy.total:
            self._record(Ended(job, None, now, "rejected",
                               f"asks {counted(job.slots, 'slot')} ({counted(job.local_models, 'local model')} "
                               f"and G), more than the cluster's {self.occupancy.total}"))
        else:
            self.waiting.append(job)

    def _schedule(self, now: float) -> None:
        cluster = self.cluster
        ordered = _policy(cluster.order, "order", lambda: list(cluster.order.order(self.waiting, self._view(now))))
        for job in ordered:
            if job not in self.waiting:
                raise JobError(f"order {type(cluster.order).__name__} gave {job!r}, which is not waiting")
        first = [j for name in dict.fromkeys(self.first) for j in self.waiting if j.name == name]
        for job in [*first, *(j for j in ordered if j not in first)]:
            if job.name in self.evicting:
                continue  # its room is being made
            placed = self._placed(job, now)
            if placed is None:
                continue
            done = self.rounds_before.get(job.name, 0)
            remaining = replace(job, rounds=(job.rounds or 1) - done)
            plan = self.plan(remaining, placed, [r.plan for r in self.running.values()])
            circuits = self._circuits(job, plan, now)
            if circuits is None:
                continue
            self.occupancy.take(job.name, placed.nodes, now)
            self._changes += 1
            self.waiting.remove(job)
            self.first_start.setdefault(job.name, now)
            self.running[job.name] = Running(job, placed, now, plan, rounds_before=done)
            self.runner.start(remaining, plan, first_round=done + 1, start_at_s=placed.start_at_s, circuits=circuits)
        self.first = [name for name in self.first if any(j.name == name for j in self.waiting)]

    def _circuits(self, job: Job, plan: Plan, now: float) -> tuple[Lightpath, ...] | None:
        """The lightpaths ``job`` holds from now on ``plan`` (none off a fabric), or None where they
        would block: it waits for a running job to give wavelengths back, or, with none running
        (nothing else holds one), it never fits and is rejected."""
        if self.cluster.wavelengths is None:
            return ()
        got = self.cluster.wavelengths.admit(plan)
        if not isinstance(got, str):
            return got
        if not self.running:
            self.waiting.remove(job)
            self._record(Ended(job, self.first_start.pop(job.name, None), now, "rejected",
                               f"blocked on an idle cluster: {got}"))
        return None

    def _preempt(self, now: float) -> None:
        """Ask the preemption, for each job still waiting in the order's order, which running jobs
        to stop for it; those stop at their next round boundary (:meth:`_end` requeues them)."""
        policy = self.cluster.preemption
        if isinstance(policy, PREEMPTIONS.lookup("none")) or not self.waiting:
            return
        for job in _policy(self.cluster.order, "order", lambda: list(self.cluster.order.order(self.waiting,
                                                                                              self._view(now)))):
            if job.name in self.evicting:
                continue
            evict = _policy(policy, "preemption", lambda job=job: policy.evict(job, self._view(now)))
            if evict is None:
                continue
            name = f"preemption {type(policy).__name__}"
            if not isinstance(evict, Evict) or not evict.victims:
                raise JobError(f"{name} gave {evict!r} for job {job.name}: give an Evict with victims, or None")
            for victim in evict.victims:
                if victim not in self.running or victim in self.stopping:
                    raise JobError(f"{name} would stop {victim!r} for job {job.name}, which is not a running job "
                                   "that is not stopping already")
            self.evicting[job.name] = set(evict.victims)
            self._changes += 1
            for victim in evict.victims:
                self.stopping[victim] = (now, job.name, evict.reason)
                self.runner.preempt(victim)

    def _wake(self, now: float) -> float | None:
        """When the placement or the preemption wants the queue tried again though nothing arrives
        or ends (a job's timer running out), if one does and anything waits."""
        if not self.waiting:
            return None
        wakes = [_policy(policy, kind, lambda policy=policy: policy.wake_at(self.waiting, self._view(now)))
                 for kind, policy in (("placement", self.cluster.placement), ("preemption", self.cluster.preemption))]
        return min((max(w, now) for w in wakes if w is not None), default=None)

    def _placed(self, job: Job, now: float) -> Placed | None:
        """Where the placement puts ``job`` now, checked: a plugin's mistake ends the command in one line."""
        policy = self.cluster.placement
        placed = _policy(policy, "placement", lambda: policy.place(job, self._view(now)))
        if placed is None:
            return None
        name = f"placement {type(policy).__name__}"
        if not isinstance(placed, Placed):
            raise JobError(f"{name} gave {placed!r} for job {job.name}: give a Placed or None")
        if len(placed.local_nodes) != job.local_models:
            raise JobError(f"{name} placed {counted(len(placed.local_nodes), 'local model')} of job {job.name}, "
                           f"which has {job.local_models}")
        free = self.occupancy.free
        for node in dict.fromkeys(placed.nodes):
            if placed.nodes.count(node) > free.get(node, 0):
                raise JobError(f"{name} put {placed.nodes.count(node)} of job {job.name}'s models on node {node!r}, "
                               f"which has {free.get(node, 0)} free slot(s)")
        return placed

    def _view(self, now: float) -> ClusterView:
        if self._seen is None or self._seen[:2] != (now, self._changes):
            self._seen = (now, self._changes, self._build_view(now))
        return self._seen[2]

    def _build_view(self, now: float) -> ClusterView:
        running = [r.plan for r in self.running.values()]
        comm_s = self.cluster.comm_s
        done, began = dict(self.rounds_before), {}
        for name in self.running:
            underway = self.runner.underway(name)
            done[name] = done.get(name, 0) + underway.rounds
            if underway.round_began_s is not None:
                began[name] = underway.round_began_s
        return ClusterView(self.cluster.graph, self.occupancy.free, now, self.cluster.seed, dict(self.running),
                           slots=self.cluster.slots, plan=lambda job, placed: self.plan(job, placed, running),
                           comm_s=None if comm_s is None else  # a running job's own plan loads no link twice
                           lambda plan: comm_s(plan, [p for p in running if p is not plan]),
                           profile=self.cluster.profile, waiting=tuple(self.waiting), rounds_done=done,
                           stopping=frozenset(self.stopping), round_began=began)

    def _end(self, name: str, outcome: Outcome) -> None:
        self._changes += 1
        run = self.running.pop(name)
        if self.cluster.wavelengths is not None:
            self.cluster.wavelengths.release(name)
        held = len(self.occupancy.intervals)
        self.occupancy.release(name, outcome.end_s)
        self.held.setdefault(name, []).extend(self.occupancy.intervals[held:])
        parts = [*self.parts.pop(name, []), outcome]
        asked = self.stopping.pop(name, None)
        for waiting, victims in list(self.evicting.items()):
            victims.discard(name)
            if not victims:
                del self.evicting[waiting]
                if waiting not in self.first:
                    self.first.append(waiting)
        if outcome.status == "preempted":
            assert asked is not None, f"job {name} stopped though no preemption asked it to"
            self.parts[name] = parts
            self.rounds_before[name] = self.rounds_before.get(name, 0) + outcome.rounds
            stop = Stopped(asked[0], outcome.end_s, name, asked[1], asked[2], self.rounds_before[name])
            self.preemptions.append(stop)
            self.tell_stopped(stop)
            self.waiting.append(run.job)
            return
        self.rounds_before.pop(name, None)
        whole = Outcome.joined(parts) if len(parts) > 1 else outcome
        self._record(Ended(run.job, self.first_start.pop(name), whole.end_s, whole.status, whole.reason, run.placed,
                           whole, preemptions=len(parts) - 1, slots=tuple(self.held.pop(name))))

    def _stuck(self) -> None:
        """Reject what waits on an idle cluster: the placement placed none of it on free slots."""
        now = self.runner.now()
        for job in self.waiting:
            self._record(Ended(job, self.first_start.pop(job.name, None), now, "rejected",
                               f"placement {type(self.cluster.placement).__name__} did not place it on an idle "
                               "cluster"))
        self.waiting = []


T = TypeVar("T")


def _policy(policy: object, kind: str, call: Callable[[], T]) -> T:
    """``call`` a policy's method; an exception it raises ends the command in one line naming it."""
    try:
        return call()
    except FedmstError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's bug, said in one line with the policy's name
        raise JobError(f"{kind} {type(policy).__name__} raised {type(exc).__name__}: "
                       f"{' '.join(str(exc).split())}") from exc


__all__ = ["Cluster", "Ended", "History", "Outcome", "Planner", "Progress", "Runner", "Status", "Stopped", "Underway",
           "planner", "run_cluster"]
