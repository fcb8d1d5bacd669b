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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Literal, Mapping, Protocol, Sequence, TypeVar

from fedmst.core.cluster.jobs import Job, JobError
from fedmst.core.cluster.policies import ORDERS, PLACEMENTS, ClusterView, Order, Placed, Placement
from fedmst.core.cluster.slots import Occupancy, SlotInterval
from fedmst.core.contention import iteration_times
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

Status = Literal["finished", "rejected", "failed"]


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


class Runner(Protocol):
    """What runs the jobs the loop starts, on one clock (the network's seconds)."""

    def now(self) -> float:
        """The time now."""

    def start(self, job: Job, plan: Plan) -> None:
        """Run ``job`` now, its rounds moving weights as ``plan`` says."""

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
    comm_s: Callable[[Plan, Sequence[Plan]], float] | None = None
    """A plan's broadcast and upload on links the given running plans load too (the view's ``comm_s``)."""


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
    """What a cluster ran: every job's life in the order they ended, and every slot interval held."""

    ended: list[Ended]
    slots: list[SlotInterval]


def run_cluster(jobs: Sequence[Job], cluster: Cluster, runner: Runner, plan: Planner,
                progress: Callable[[Progress], None] = lambda _: None,
                ended: Callable[[Ended], None] = lambda _: None) -> History:
    """Run ``jobs`` (each arriving at its ``submit_s``) on ``cluster`` through ``runner``. ``ended``
    is told of each job as it ends (to write it at once), ``progress`` after every event."""
    loop = _Loop(jobs, cluster, runner, plan, progress, ended)
    return History(loop.run(), loop.occupancy.intervals)


class _Loop:
    def __init__(self, jobs: Sequence[Job], cluster: Cluster, runner: Runner, plan: Planner,
                 progress: Callable[[Progress], None], ended: Callable[[Ended], None]) -> None:
        self.cluster, self.runner, self.plan, self.progress, self.tell = cluster, runner, plan, progress, ended
        self.arrivals = sorted(jobs, key=lambda j: j.submit_s)
        self.total = len(jobs)
        self.occupancy = Occupancy(cluster.slots)
        self.waiting: list[Job] = []
        self.running: dict[str, tuple[Job, Placed, float, Plan]] = {}
        self.done: list[Ended] = []

    def run(self) -> list[Ended]:
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
            self.progress(Progress(now, len(self.waiting), len(self.running), len(self.done), self.total))
        return self.done

    def _record(self, life: Ended) -> None:
        self.done.append(life)
        self.tell(life)

    def _arrive(self, job: Job, now: float) -> None:
        if job.slots > self.occupancy.total:
            self._record(Ended(job, None, now, "rejected",
                               f"asks {counted(job.slots, 'slot')} ({counted(job.local_models, 'local model')} "
                               f"and G), more than the cluster's {self.occupancy.total}"))
        else:
            self.waiting.append(job)

    def _schedule(self, now: float) -> None:
        cluster = self.cluster
        for job in _policy(cluster.order, "order", lambda: list(cluster.order.order(self.waiting, self._view(now)))):
            if job not in self.waiting:
                raise JobError(f"order {type(cluster.order).__name__} gave {job!r}, which is not waiting")
            placed = self._placed(job, now)
            if placed is None:
                continue
            plan = self.plan(job, placed, [p for *_, p in self.running.values()])
            self.occupancy.take(job.name, placed.nodes, now)
            self.waiting.remove(job)
            self.running[job.name] = (job, placed, now, plan)
            self.runner.start(job, plan)

    def _wake(self, now: float) -> float | None:
        """When the placement wants the queue tried again though nothing arrives or ends (a job's
        timer running out), if it does and anything waits."""
        if not self.waiting:
            return None
        policy = self.cluster.placement
        wake = _policy(policy, "placement", lambda: policy.wake_at(self.waiting, self._view(now)))
        return None if wake is None else max(wake, now)

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
        running = [plan for *_, plan in self.running.values()]
        comm_s = self.cluster.comm_s
        return ClusterView(self.cluster.graph, self.occupancy.free, now, self.cluster.seed,
                           {name: placed for name, (_, placed, _, _) in self.running.items()},
                           slots=self.cluster.slots, plan=lambda job, placed: self.plan(job, placed, running),
                           comm_s=None if comm_s is None else lambda plan: comm_s(plan, running))

    def _end(self, name: str, outcome: Outcome) -> None:
        job, placed, start, _ = self.running.pop(name)
        held = len(self.occupancy.intervals)
        self.occupancy.release(name, outcome.end_s)
        self._record(Ended(job, start, outcome.end_s, outcome.status, outcome.reason, placed, outcome,
                           slots=tuple(self.occupancy.intervals[held:])))

    def _stuck(self) -> None:
        """Reject what waits on an idle cluster: the placement placed none of it on free slots."""
        now = self.runner.now()
        for job in self.waiting:
            self._record(Ended(job, None, now, "rejected",
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


__all__ = ["Cluster", "Ended", "History", "Outcome", "Planner", "Progress", "Runner", "Status", "planner",
           "run_cluster"]
