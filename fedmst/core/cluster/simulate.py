"""The simulate back end: each job's rounds on the fluid model of concurrent transfers
(:class:`fedmst.core.contention.Fluid`), its training lasting what ``train_s`` says. No root, no
network, no process: the same event loop and policies as the emulation, thousands of jobs a minute.

A job first sets up (:func:`set_up_s`: round trips of its longest path), then runs its rounds.
What it leaves out is what the emulation measures: TCP's dynamics (slow start, losses, queueing
beyond the fair share), the host's CPU, and accuracy (no model trains here). How far its job
completion times are from the emulated ones is measured in ``docs/cluster.md``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Mapping

from fedmst.core.cluster.jobs import Job
from fedmst.core.cluster.loop import Outcome
from fedmst.core.contention import Fluid, capacities, profile_of
from fedmst.core.plan import Plan
from fedmst.core.span import PhaseSpan
from fedmst.core.wire import DEFAULT_MTU

if TYPE_CHECKING:
    import networkx as nx


SET_UP_RTTS = 5.0
"""A job's set-up (its agents started, every connection opened and warmed) lasts this many round
trips of its longest path: measured 4.7 to 5.5 on NSFNET's paths of 15 to 72 ms at time scale 8,
where the host's part is an eighth of the network's (docs/cluster.md). A TCP handshake, gloo's
exchange of its pair addresses, and the warming transfer's slow start are each round trips."""


def set_up_s(plan: Plan, graph: nx.Graph) -> float:
    """How long ``plan``'s job takes to set up before its first round (:data:`SET_UP_RTTS`).

    >>> import networkx as nx
    >>> from fedmst.core.plan import Transfer
    >>> from fedmst.core.tasks import Task
    >>> g = nx.path_graph(["a", "b", "c"])
    >>> nx.set_edge_attributes(g, 0.01, "delay_s")
    >>> plan = Plan("x", Task("t", "a", ("c",), 8), (Transfer("broadcast", ("a", "b", "c"), frozenset({0})),))
    >>> round(set_up_s(plan, g), 3)
    0.2
    """
    return SET_UP_RTTS * max((2 * sum(graph.edges[u, v]["delay_s"] for u, v in t.hops) for t in plan.transfers),
                             default=0.0)


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
        self.stopping: set[str] = set()

    def now(self) -> float:
        return self.fluid.now

    def start(self, job: Job, plan: Plan, first_round: int = 1) -> None:
        profile = profile_of(plan, self.graph, compute_s=self.train_s(job), chunk_bytes=self.chunk_bytes,
                             with_delay=self.with_delay, mtu=self.mtu)
        self.plans[job.name], self.spans[job.name], self.done[job.name] = plan, [], 0
        self.before[job.name] = first_round - 1
        self.begun[job.name] = self.fluid.now
        set_up = set_up_s(plan, self.graph) if self.with_delay else 0.0
        self.fluid.add(profile, job.rounds or 1, self.fluid.now + set_up)

    def preempt(self, name: str) -> None:
        self.stopping.add(name)
        self.fluid.stop(name)

    def rounds_done(self, name: str) -> int:
        return self.done[name]

    def wait(self, until_s: float | None) -> Mapping[str, Outcome]:
        for span in self.fluid.advance(until_s):
            self.spans[span.task].append(replace(span, round=span.round + self.before[span.task]))
            self.done[span.task] += span.phase == "upload"
        out = {}
        for name in self.fluid.ended:
            plan = self.plans.pop(name)
            outcome = Outcome.finished(plan, self.spans.pop(name), self.begun.pop(name), self.fluid.now, mtu=self.mtu)
            if name in self.stopping and self.done.pop(name) < plan.task.rounds:
                outcome = replace(outcome, status="preempted")
            self.stopping.discard(name)
            del self.before[name]
            out[name] = outcome
        return out


__all__ = ["SET_UP_RTTS", "SimulatedRunner", "set_up_s"]
