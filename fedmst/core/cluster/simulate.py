"""The simulate back end: each job's rounds on the fluid model of concurrent transfers
(:class:`fedmst.core.contention.Fluid`), its training lasting what ``train_s`` says. No root, no
network, no process: the same event loop and policies as the emulation, thousands of jobs a minute.

What it leaves out is what the emulation measures: TCP's dynamics (slow start, losses, queueing
beyond the fair share), the host's CPU, and accuracy (no model trains here). How far its job
completion times are from the emulated ones is measured in ``docs/cluster.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping

from fedmst.core.cluster.jobs import Job
from fedmst.core.cluster.loop import Outcome
from fedmst.core.contention import Fluid, capacities, iteration_times, profile_of
from fedmst.core.plan import Plan, predicted_link_bytes
from fedmst.core.span import PhaseSpan
from fedmst.core.wire import DEFAULT_MTU

if TYPE_CHECKING:
    import networkx as nx


class SimulatedRunner:
    """Runs jobs on the fluid model (a :class:`~fedmst.core.cluster.loop.Runner`)."""

    def __init__(self, graph: nx.Graph, train_s: Callable[[Job], float], *, chunk_bytes: int, with_delay: bool,
                 mtu: int = DEFAULT_MTU) -> None:
        self.graph, self.train_s, self.mtu = graph, train_s, mtu
        self.chunk_bytes, self.with_delay = chunk_bytes, with_delay
        self.fluid = Fluid(capacities(graph))
        self.plans: dict[str, Plan] = {}
        self.spans: dict[str, list[PhaseSpan]] = {}
        """The phases each running job ran so far."""

    def now(self) -> float:
        return self.fluid.now

    def start(self, job: Job, plan: Plan) -> None:
        profile = profile_of(plan, self.graph, compute_s=self.train_s(job), chunk_bytes=self.chunk_bytes,
                             with_delay=self.with_delay, mtu=self.mtu)
        self.plans[job.name], self.spans[job.name] = plan, []
        self.fluid.add(profile, job.rounds or 1, self.fluid.now)

    def wait(self, until_s: float | None) -> Mapping[str, Outcome]:
        for span in self.fluid.advance(until_s):
            self.spans[span.task].append(span)
        out = {}
        for name in self.fluid.ended:
            spans = self.spans.pop(name)
            rounds = iteration_times(spans)
            plan = self.plans.pop(name)
            out[name] = Outcome(end_s=self.fluid.now, rounds=len(rounds),
                                mean_round_s=sum(rounds.values()) / len(rounds),
                                link_bytes=sum(predicted_link_bytes(plan, mtu=self.mtu).values()) * len(rounds),
                                comm_s=sum(s.end_s - s.start_s for s in spans if s.phase != "train"),
                                spans=tuple(spans))
        return out


__all__ = ["SimulatedRunner"]
