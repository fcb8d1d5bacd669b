"""The simulate back end: each job's rounds on the fluid model of concurrent transfers
(:class:`fedmst.core.contention.Fluid`), its training lasting what ``train_s`` says. No root, no
network, no process: the same event loop and policies as the emulation, thousands of jobs a minute.

A job first sets up (:func:`~fedmst.core.cluster.startup.set_up_s`: round trips of its longest
path), then runs its rounds.
What it leaves out is what the emulation measures: TCP's dynamics (slow start, losses, queueing
beyond the fair share), the host's CPU, and accuracy (no model trains here). How far its job
completion times are from the emulated ones is measured in ``docs/cluster.md``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Mapping

from fedmst.core.cluster.jobs import Job
from fedmst.core.cluster.loop import Outcome, Underway
from fedmst.core.cluster.startup import set_up_s
from fedmst.core.contention import Fluid, capacities, profile_of
from fedmst.core.plan import Plan
from fedmst.core.span import PhaseSpan
from fedmst.core.wire import DEFAULT_MTU

if TYPE_CHECKING:
    import networkx as nx


class SimulatedRunner:
    """Runs jobs on the fluid model (a :class:`~fedmst.core.cluster.loop.Runner`). A job a
    preemption stopped resumes as a new run: set up again, then its rounds left."""

    def __init__(self, graph: nx.Graph, train_s: Callable[[Job], float], *, chunk_bytes: int, with_delay: bool,
                 mtu: int = DEFAULT_MTU) -> None:
        self.graph, self.train_s, self.mtu = graph, train_s, mtu
        self.chunk_bytes, self.with_delay = chunk_bytes, with_delay
        self.fluid = Fluid(capacities(graph))
        self.plans: dict[str, Plan] = {}
        self.spans: dict[str, list[PhaseSpan]] = {}
        """The phases each running job ran so far."""
        self.begun: dict[str, float] = {}
        self.done: dict[str, int] = {}
        self.before: dict[str, int] = {}
        """Rounds each running job had finished before this run (its spans number on from them)."""
        self.round_began: dict[str, float] = {}
        self.stopping: set[str] = set()

    def now(self) -> float:
        return self.fluid.now

    def start(self, job: Job, plan: Plan, first_round: int = 1, start_at_s: float | None = None) -> None:
        profile = profile_of(plan, self.graph, compute_s=self.train_s(job), chunk_bytes=self.chunk_bytes,
                             with_delay=self.with_delay, mtu=self.mtu)
        self.plans[job.name], self.spans[job.name], self.done[job.name] = plan, [], 0
        self.before[job.name] = first_round - 1
        self.begun[job.name] = self.fluid.now
        set_up = set_up_s(plan, self.graph) if self.with_delay else 0.0
        self.fluid.add(profile, job.rounds or 1, max(self.fluid.now + set_up, start_at_s or 0.0))

    def preempt(self, name: str) -> None:
        self.stopping.add(name)
        self.fluid.stop(name)

    def underway(self, name: str) -> Underway:
        return Underway(self.done[name], self.round_began.get(name))

    def interrupted(self, name: str) -> Outcome:
        finished = {s.round for s in self.spans[name] if s.phase == "upload"}
        return replace(Outcome.finished(self.plans[name], [s for s in self.spans[name] if s.round in finished],
                                        self.begun[name], self.fluid.now, mtu=self.mtu), status="interrupted")

    def wait(self, until_s: float | None) -> Mapping[str, Outcome]:
        for span in self.fluid.advance(until_s):
            self.spans[span.task].append(replace(span, round=span.round + self.before[span.task]))
            self.done[span.task] += span.phase == "upload"
            if span.phase == "upload":  # the next round begins as this one ends
                self.round_began[span.task] = span.end_s
            elif span.phase == "broadcast" and span.round == 1:  # the fluid model's round 1: this run's first
                self.round_began[span.task] = span.start_s
        out = {}
        for name in self.fluid.ended:
            plan = self.plans.pop(name)
            outcome = Outcome.finished(plan, self.spans.pop(name), self.begun.pop(name), self.fluid.now, mtu=self.mtu)
            if name in self.stopping and self.done.pop(name) < plan.task.rounds:
                outcome = replace(outcome, status="preempted")
            self.stopping.discard(name)
            del self.before[name]
            self.round_began.pop(name, None)
            out[name] = outcome
        return out


__all__ = ["SimulatedRunner"]
