"""The emulate back end of ``fedmst cluster``: one emulated network for the whole trace, and each
job run for real on it from the moment it is placed, while the others run.

A placed job gets a :class:`~fedmst.run.session.Session` of its own on the shared emulation: its
routes installed, an agent started on each of its nodes (forked from the warm fork server), set up,
then its rounds on its own clock (:class:`~fedmst.protocol.RunRounds`, as ``--clock independent``
runs a task), in a thread of its own (where a preemption may stop it, a round at a time). Its
agents end with it. Its folder ``DIR/jobs/NAME/`` keeps its plan and its agents' logs. The links'
counters measure every job together (``links.csv``). Times are the network's: the host's clock
divided by the time scale.

A job a preemption stops ends at its next round boundary: its G writes the global model and the
strategy (with its state) into ``DIR/jobs/NAME/checkpoint-R/`` (R: the rounds it had finished), and
its agents end. When it is placed again (anywhere), its new agents set up, take the checkpoint
up (:class:`~fedmst.protocol.Restore`), and G's model is saved into ``resumed-R/`` beside it and
checked equal to the checkpoint before round R+1, whose broadcast carries it over the emulated
links (measured in ``links.csv``, counted in the job's ``link_bytes``).
"""

from __future__ import annotations

import json
import queue
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import fields, replace
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from fedmst.core.cluster.jobs import Job
from fedmst.core.cluster.loop import Outcome, Underway
from fedmst.core.optical.wavelengths import Lightpath
from fedmst.core.plan import Plan
from fedmst.core.route import LinkDir, warm_elements
from fedmst.core.wire import wire_bytes
from fedmst.core.span import PhaseSpan
from fedmst.core.timescale import TimeScale
from fedmst.core.workload import WorkloadPlan
from fedmst.errors import FedmstError
from fedmst.net.emulation import Emulation
from fedmst.protocol import Checkpoint, Reply, Restore, RoundsDone, RunRounds, Save, TaskSpec
from fedmst.run.config import RunConfig
from fedmst.run.prepare import ResolvedRun
from fedmst.run.measure import ClockRun, CounterSampler, whole_run_link_rows
from fedmst.run.recovery import aggregation_weights
from fedmst.run.results import SAMPLE_FIELDS, write_csv, write_links
from fedmst.run.session import Session
from fedmst.workers import dataflow
from fedmst.workers.backends import WorkerBackend


PROGRESS_S = 0.5
"""Seconds of the host's clock the loop waits at most before it says where it stands again."""


class EmulatedRunner:
    """Runs each job for real on ``emu`` (a :class:`~fedmst.core.cluster.loop.Runner`).
    ``base`` is the cluster as one run (network, options, time scale); ``seeds`` gives each job
    the seed of its data and initial weights."""

    def __init__(self, base: ResolvedRun, emu: Emulation, backend: WorkerBackend, out: Path, scratch: Path,
                 seeds: Mapping[str, int]) -> None:
        self.base, self.emu, self.backend, self.out, self.scratch, self.seeds = base, emu, backend, out, scratch, seeds
        self.scale: TimeScale = base.scale
        self.t0 = time.monotonic()
        self._ended: queue.Queue[tuple[str, Outcome]] = queue.Queue()
        self.threads: dict[str, threading.Thread] = {}
        self.begun: dict[str, float] = {}
        self.done: list[tuple[Plan, int]] = []
        """Each ended job's plan and the rounds it finished (what links.csv predicts)."""
        self._lock = threading.Lock()
        self.stopping: set[str] = set()
        self.stoppable = base.config.preempt != "none"
        """Whether a preemption may stop a job: then its rounds go a round at a time (:meth:`_rounds`)."""
        self.underways: dict[str, Underway] = {}
        """How far each running job has got in this run of it, where it runs a round at a time."""
        self.progress = scratch / "progress"
        """Where G says how far its job has got, where a job runs its rounds in one command."""
        self.progress.mkdir(parents=True, exist_ok=True)
        self.set_up_bytes: dict[LinkDir, int] = {}
        """What the finished jobs' set-ups put on each link direction (:func:`set_up_link_bytes`)."""
        self.plans: dict[str, Plan] = {}
        self.finished_spans: dict[str, list[PhaseSpan]] = {}
        """Each running job's phases of the rounds it finished in this run, where it runs a round at a time."""
        self.rounds_began: dict[str, float] = {}
        """When each running job's rounds command began (monotonic), where it runs them in one."""

    @contextmanager
    def measuring(self) -> Iterator[None]:
        """Measure the links over the block (the whole trace): links.csv (every link direction's
        bytes beside what the finished jobs' plans predict for the rounds they ran) and samples.csv
        (the counters every 100 ms of the network's time), written however the block ends."""
        emu = self.emu
        before, background = emu.meters.counters_and_background()
        drops = emu.meters.queue_drops()
        sampler = CounterSampler(emu.meters.counters, scale=self.scale)
        sampler.t0 = self.t0
        try:
            with sampler.sampling(0, "rounds"):
                yield
        finally:
            after, counted = emu.meters.counters_and_background()
            other = {hop: counted[hop] - background[hop] for hop in after}
            write_links(self.out / "links.csv", whole_run_link_rows(
                self.done, {hop: after[hop] - before[hop] - other[hop] for hop in after},
                {hop: n - drops[hop] for hop, n in emu.meters.queue_drops().items()}, other, self.base.graph,
                self.base.config.mtu, set_up=self.set_up_bytes))
            write_csv(self.out / "samples.csv", SAMPLE_FIELDS, sampler.rows)

    def now(self) -> float:
        return self.scale.network_s(time.monotonic() - self.t0)

    def start(self, job: Job, plan: Plan, first_round: int = 1, start_at_s: float | None = None,
              circuits: tuple[Lightpath, ...] = ()) -> None:
        self.begun[job.name] = self.now()
        self.plans[job.name], self.finished_spans[job.name] = plan, []
        self.underways[job.name] = Underway(0, None)
        thread = threading.Thread(target=self._run, args=(job, plan, first_round, start_at_s, circuits),
                                  name=f"job-{job.name}", daemon=True)
        self.threads[job.name] = thread
        thread.start()

    def preempt(self, name: str) -> None:
        self.stopping.add(name)

    def underway(self, name: str) -> Underway:
        if self.stoppable:
            return self.underways[name]
        try:  # G's progress file (a job runs from round 1 where nothing preempts)
            round_, at = (self.progress / name).read_text().split()
        except (OSError, ValueError):
            return Underway(0, None)
        return Underway(int(round_) - 1, self.scale.network_s(float(at) - self.t0))

    def interrupted(self, name: str) -> Outcome:
        """How far running job ``name`` had got when the command was interrupted: the phases of
        the rounds it finished in this run (told by its agents as they went, where the rounds ran
        in one command), their bytes, and no accuracy (G evaluates once its rounds are over)."""
        spans: list[PhaseSpan] = list(self.finished_spans.get(name, []))
        started = self.rounds_began.get(name)
        if not self.stoppable and started is not None:
            done = self.underway(name).rounds
            told: dict[str, list[PhaseSpan]] = {}
            try:
                lines = (self.progress / f"{name}.spans").read_text().splitlines()
            except OSError:
                lines = []
            for line in lines:
                try:
                    s = json.loads(line)
                    told.setdefault(s["node"], []).append(PhaseSpan(**{f.name: s[f.name] for f in fields(PhaseSpan)}))
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by the interruption
            spans += self._windows(self.plans[name], started, {
                node: [s for s in node_spans if s.round <= done] for node, node_spans in told.items()})
        outcome = Outcome.finished(self.plans[name], spans, self.begun[name], self.now(), mtu=self.base.config.mtu)
        return replace(outcome, status="interrupted")

    def wait(self, until_s: float | None) -> Mapping[str, Outcome]:
        """As the loop asks, or after at most :data:`PROGRESS_S` with nothing, so that the loop shows
        where it stands while jobs run."""
        timeout = PROGRESS_S if until_s is None else min(PROGRESS_S, max(0.0, self.scale.real_s(until_s - self.now())))
        try:
            first = self._ended.get(timeout=timeout)
        except queue.Empty:
            return {}
        out = dict([first])
        while True:
            try:
                name, outcome = self._ended.get_nowait()
            except queue.Empty:
                break
            out[name] = outcome
        for name in out:
            self.threads.pop(name).join()
            self.stopping.discard(name)
            self.underways.pop(name, None)
            for held in (self.plans, self.finished_spans, self.rounds_began):  # what interrupted() would read
                held.pop(name, None)
        return out

    def _job_run(self, job: Job, plan: Plan, folder: Path, circuits: tuple[Lightpath, ...]) -> ResolvedRun:
        """The job as a run of one task on the cluster's network, holding ``circuits``."""
        base = self.base
        config = replace(base.config, out=str(folder), scheduler=plan.scheduler, seed=self.seeds[job.name],
                         rounds=job.rounds or 1, model=str(job.model), dataset=str(job.dataset),
                         epochs=job.epochs or base.config.epochs, compute_s=job.compute_s or 0.0)
        workload = WorkloadPlan(scheduler=plan.scheduler, plans=(plan,), blocked=(), wavelengths=0,
                                lightpaths=circuits)
        return replace(base, config=config, workload=workload, worker_nodes=tuple(sorted(plan.nodes)),
                       listed=(job.name,), offsets={job.name: 0.0}, profiles=())

    def _run(self, job: Job, plan: Plan, first_round: int, start_at_s: float | None,
             circuits: tuple[Lightpath, ...]) -> None:
        """Run ``job``'s rounds from ``first_round``, the first not before ``start_at_s`` nor
        before its ``circuits`` are set up (``--reconfig-ms`` after its session installs them), and
        say how it ended (a failure is the job's, not the cluster's); a run after the first goes in
        ``DIR/jobs/NAME/run-N/``."""
        folder = self.out / "jobs" / job.name
        if first_round > 1:
            folder = folder / f"run-{len(list(folder.glob('run-*'))) + 2}"
        scratch = self.scratch / folder.relative_to(self.out)
        outcome: Outcome | None = None
        session: Session | None = None
        try:
            folder.mkdir(parents=True)
            scratch.mkdir(parents=True)
            session = Session(self._job_run(job, plan, folder, circuits), self.emu, self.backend, folder, scratch,
                              report=lambda line: None)
            got: dict[str, object] = {}

            def rounds(session: Session = session) -> None:
                if circuits:  # set up once its session installed them, before its first broadcast
                    time.sleep(self.scale.real_s(self.base.config.reconfig_ms / 1e3))
                got.update(self._rounds(session, job, first_round, start_at_s))

            session.run(rounds)
            outcome = Outcome.finished(plan, got["spans"], self.begun[job.name], self.now(),  # type: ignore[arg-type]
                                       mtu=self.base.config.mtu, accuracies=got["accuracy"])  # type: ignore[arg-type]
            if got["stopped"]:
                outcome = replace(outcome, status="preempted")
            with self._lock:  # jobs end together
                self.done.append((plan, outcome.rounds))
                for hop, n in set_up_link_bytes(session.specs, plan.task.model_bytes // 4, self.base.config).items():
                    self.set_up_bytes[hop] = self.set_up_bytes.get(hop, 0) + n
        except FedmstError as exc:
            outcome = Outcome(end_s=self.now(), status="failed", reason=" ".join(str(exc).split()))
        except Exception as exc:  # noqa: BLE001 - a bug ends this job, said with its traceback, not the cluster
            if folder.is_dir():
                (folder / "error.log").write_text(traceback.format_exc())
            outcome = Outcome(end_s=self.now(), status="failed",
                              reason=f"{type(exc).__name__}: {' '.join(str(exc).split())} (traceback in "
                                     f"{folder / 'error.log'})")
        finally:
            try:
                _stop_agents(session)  # a job that failed mid-round must not train on in slots given to others
                if session is not None:
                    session.release_circuits()  # its wavelengths go back to the loop's spectrum as it ends
            finally:
                self._ended.put((job.name, outcome or Outcome(end_s=self.now(), status="failed",
                                                              reason="interrupted")))

    def _rounds(self, session: Session, job: Job, first_round: int, start_at_s: float | None) -> dict[str, object]:
        """The job's rounds from ``first_round`` (resumed from its checkpoint after the first), the
        first not before ``start_at_s``, as one task on its own clock: its phases (the network's
        seconds from the cluster's start), G's accuracy after each round, and whether a preemption
        stopped it early (its checkpoint written).

        Without preemption every round goes in one command, back to back, and G says where it is
        in a progress file (:meth:`underway`). With it, a round at a time, so that the job can stop
        between two; that costs each round what round 1 costs: a receiver posts its receive only
        when its round begins, and gloo sends nothing before the receiver says it is ready, so each
        broadcast waits a one-way trip per hop more (docs/cluster.md)."""
        name, last = job.name, first_round + (job.rounds or 1) - 1
        folder = self.out / "jobs" / name
        if first_round > 1:
            self._resume(session, name, folder / f"checkpoint-{first_round - 1}", folder / f"resumed-{first_round - 1}")
        weights = aggregation_weights(session.live, session.samples, {}, 1)
        not_before = -1.0 if start_at_s is None else self.t0 + self.scale.real_s(start_at_s)
        if not self.stoppable:
            started = max(time.monotonic(), not_before)
            self.rounds_began[name] = started
            replies = session.server.run(
                RunRounds(start_at=started, rounds={name: last}, offsets={name: 0.0}, weights=weights,
                          progress_dir=str(self.progress)),
                timeout_s=session.timeout_s * 3 * last, check=session.check)
            spans, accuracy = self._timeline(session, name, started, replies)
            return {"spans": spans, "accuracy": accuracy, "stopped": False}
        spans, accuracy = [], []
        r = first_round
        while r <= last:
            stop = name in self.stopping
            started = max(time.monotonic(), not_before)
            self.underways[name] = Underway(r - first_round, self.scale.network_s(started - self.t0))
            replies = session.server.run(
                RunRounds(start_at=started, rounds={name: 0 if stop else 1}, offsets={name: 0.0}, weights=weights,
                          first_round=r, evaluate=stop or r == last),
                timeout_s=session.timeout_s * 3, check=session.check)
            more_spans, more_accuracy = self._timeline(session, name, started, replies)
            spans += more_spans
            accuracy += more_accuracy
            self.finished_spans[name] = spans
            if stop:
                checkpoint = folder / f"checkpoint-{r - 1}"
                checkpoint.mkdir(exist_ok=True)  # a job stopped before a round of this run: the same model
                session.server.run(Checkpoint(str(checkpoint)), timeout_s=session.timeout_s, check=session.check)
                return {"spans": spans, "accuracy": accuracy, "stopped": True}
            r += 1
        return {"spans": spans, "accuracy": accuracy, "stopped": False}

    def _timeline(self, session: Session, name: str, started: float,
                  replies: Mapping[str, Reply]) -> tuple[list[PhaseSpan], list[float]]:
        """A RunRounds' replies as the job's phases (the network's seconds from the cluster's
        start) and G's accuracy after each of its rounds."""
        done = {node: reply for node, reply in replies.items() if isinstance(reply, RoundsDone)}
        return (self._windows(session.live.plans[0], started, {node: reply.spans for node, reply in done.items()}),
                [a for reply in done.values() for a in reply.accuracy.get(name, ())])

    def _windows(self, plan: Plan, started: float, spans: Mapping[str, Sequence[PhaseSpan]]) -> list[PhaseSpan]:
        """Each node's spans of a rounds command that began at ``started`` (monotonic; theirs count
        from it) as the job's phase windows, in the network's seconds from the cluster's start."""
        offset = started - self.t0
        clock = ClockRun(plans=(plan,), rounds={plan.task.name: 1}, offsets={plan.task.name: 0.0})
        clock.spans = {node: tuple(replace(s, start_s=self.scale.network_s(offset + s.start_s),
                                           end_s=self.scale.network_s(offset + s.end_s)) for s in node_spans)
                       for node, node_spans in spans.items()}
        return clock.windows()

    @staticmethod
    def _resume(session: Session, name: str, checkpoint: Path, resumed: Path) -> None:
        """Take the job's checkpoint up on its new agents, and check that G's global model is the
        checkpoint's, bit for bit (saved into ``resumed``)."""
        import torch

        session.server.run(Restore(str(checkpoint)), timeout_s=session.timeout_s, check=session.check)
        resumed.mkdir()
        session.server.run(Save(str(resumed)), timeout_s=session.timeout_s, check=session.check)
        if not torch.equal(torch.load(resumed / f"{name}-global.pt"), torch.load(checkpoint / f"{name}-global.pt")):
            raise FedmstError(f"job {name}: the resumed global model differs from its checkpoint {checkpoint}")


def _stop_agents(session: Session | None) -> None:
    """Kill the job's agents still running: one ended with its job, but a job that failed (a
    peer died, a phase timed out) leaves the others waiting on it."""
    agents = getattr(session, "agents", None)
    for proc in (agents.procs.values() if agents is not None else ()):
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def set_up_link_bytes(specs: Sequence[TaskSpec], numel: int, config: RunConfig) -> dict[LinkDir, int]:
    """What a job's set-up puts on each link direction: every connection's warming
    (:func:`fedmst.core.route.warm_elements` zeros one way, one weight back). A run's set-up comes
    before its counters start; a cluster's jobs set up while others run, so its links carry both."""
    chunk, mtu = max(1, config.chunk_bytes // 4), config.mtu
    out: dict[LinkDir, int] = {}
    for task in specs:
        for name in dict.fromkeys(t.connection for t in task.transfers):
            shared = [t for t in task.transfers if t.connection == name]
            first = shared[0]
            largest = max(hi - lo for lo, hi in (dataflow.span(t, numel) for t in shared))
            there = wire_bytes(4 * warm_elements(largest, chunk, first.window_bytes), mtu)
            for u, v in zip(first.path, first.path[1:]):
                out[(u, v)] = out.get((u, v), 0) + there
                out[(v, u)] = out.get((v, u), 0) + wire_bytes(4, mtu)
    return out


__all__ = ["EmulatedRunner", "set_up_link_bytes"]
