"""The simulate back end: each job's rounds on the fluid model of concurrent transfers
(:class:`fedmst.core.contention.Fluid`), its training lasting what ``train_s`` says. No root, no
network, no process: the same event loop and policies as the emulation, thousands of jobs a minute.

A job first sets up (:func:`~fedmst.core.cluster.startup.set_up_s`: round trips of its longest
path, and on a fabric its new lightpaths' ``reconfig_s``), then runs its rounds. On a fabric its
transfers cross the fibres on the lightpaths it holds, at their rates: the fluid model shares a
lightpath among the job's own transfers on it, never with another job's.
What it leaves out is what the emulation measures: TCP's dynamics (slow start, losses, queueing
beyond the fair share), the host's CPU, and accuracy (no model trains here). How far its job
completion times are from the emulated ones is measured in ``docs/cluster.md``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from fedmst.core.cluster.jobs import Job
from fedmst.core.cluster.loop import Outcome, Underway
from fedmst.core.cluster.startup import set_up_s
from fedmst.core.contention import Demand, Fluid, Profile, capacities, profile_of
from fedmst.core.optical.circuits import circuit_view
from fedmst.core.plan import Plan
from fedmst.core.route import LinkDir
from fedmst.core.span import PhaseSpan
from fedmst.core.wire import DEFAULT_MTU

if TYPE_CHECKING:
    import networkx as nx

    from fedmst.core.optical.wavelengths import Lightpath


class SimulatedRunner:
    """Runs jobs on the fluid model (a :class:`~fedmst.core.cluster.loop.Runner`). A job a
    preemption stopped resumes as a new run: set up again, then its rounds left."""

    def __init__(self, graph: nx.Graph, train_s: Callable[[Job], float], *, chunk_bytes: int, with_delay: bool,
                 mtu: int = DEFAULT_MTU, reconfig_s: float = 0.0) -> None:
        self.graph, self.train_s, self.mtu, self.reconfig_s = graph, train_s, mtu, reconfig_s
        self.chunk_bytes, self.with_delay = chunk_bytes, with_delay
        self.capacity = capacities(graph)
        """Bytes per second of every link direction, and of every job's own lightpaths (:func:`_on_circuits`)."""
        self.fluid = Fluid(self.capacity)
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

    def start(self, job: Job, plan: Plan, first_round: int = 1, start_at_s: float | None = None,
              circuits: tuple[Lightpath, ...] = ()) -> None:
        view = circuit_view(self.graph, circuits) if circuits else self.graph
        profile = profile_of(plan, view, compute_s=self.train_s(job), chunk_bytes=self.chunk_bytes,
                             with_delay=self.with_delay, mtu=self.mtu)
        if circuits:
            profile = _on_circuits(profile, circuits, capacities(view), self.capacity)
        self.plans[job.name], self.spans[job.name], self.done[job.name] = plan, [], 0
        self.before[job.name] = first_round - 1
        self.begun[job.name] = self.fluid.now
        set_up = (set_up_s(plan, self.graph) if self.with_delay else 0.0) + (self.reconfig_s if circuits else 0.0)
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


def _on_circuits(profile: Profile, circuits: Sequence[Lightpath], held: Mapping[LinkDir, float],
                 capacity: dict[LinkDir, float]) -> Profile:
    """``profile`` with every fibre direction its job holds lightpaths on made the job's own: a
    resource ``(u, "v@JOB")`` of the rate those lightpaths hold together (``held``), added to
    ``capacity``, so that other jobs' transfers on the fibre do not share it.

    >>> from fedmst.core.optical.wavelengths import Lightpath
    >>> lp = Lightpath("j", ("l0", "s", "l1"), 0, (80.0, 80.0))
    >>> p = Profile("j", Demand(1.0, {("l0", "s"): 10.0, ("h", "l0"): 10.0}), 0.0, Demand(1.0, {}))
    >>> capacity = {}
    >>> sorted(_on_circuits(p, [lp], {("l0", "s"): 1e7}, capacity).broadcast.link_bytes), capacity
    ([('h', 'l0'), ('l0', 's@j')], {('l0', 's@j'): 10000000.0})
    """
    own = {hop for lp in circuits for u, v in zip(lp.path, lp.path[1:]) for hop in ((u, v), (v, u))}

    def key(hop: LinkDir) -> LinkDir:
        if hop not in own:
            return hop
        private = (hop[0], f"{hop[1]}@{profile.name}")
        capacity[private] = held[hop]
        return private

    def mine(demand: Demand) -> Demand:
        return replace(demand, link_bytes={key(hop): b for hop, b in demand.link_bytes.items()})

    return replace(profile, broadcast=mine(profile.broadcast), upload=mine(profile.upload))


__all__ = ["SimulatedRunner"]
