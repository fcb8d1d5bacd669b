"""The Plan: the contract between the pure half (scheduling, prediction) and the real half.

A Plan says, for one task and one round, which directed overlay transfers carry model weights,
over which physical path each travels, and which local models' weights each carries. Everything
else (where aggregation happens, the bytes every link direction must carry, a fluid-model
latency) is derived from it here, with no I/O, so that what the emulation measures can always be
shown beside what the Plan predicted.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Collection, Literal, Mapping, Protocol, Sequence, TypeVar

import networkx as nx

from fedmst.errors import SchedulerError
from fedmst.core.route import Along, LinkDir
from fedmst.core.tasks import Task
from fedmst.core.wire import DEFAULT_MTU, wire_bytes

Phase = Literal["broadcast", "upload"]
PHASES: tuple[Phase, Phase] = ("broadcast", "upload")


@dataclass(frozen=True)
class Transfer(Along):
    """One directed overlay transfer of a whole model's worth of weights.

    ``models`` are the local-model indices whose weights this transfer serves: in broadcast,
    the local models downstream that the global weights are for; in upload, the local models
    whose (sample-weighted) updates are summed into the one tensor it carries.
    """

    phase: Phase
    path: tuple[str, ...]
    models: frozenset[int]


class Routed(Protocol):
    """What :func:`feeders` needs of a transfer: a :class:`Transfer`, or an agent's view of one."""

    @property
    def phase(self) -> str: ...
    @property
    def src(self) -> str: ...
    @property
    def dst(self) -> str: ...
    @property
    def models(self) -> Collection[int]: ...


R = TypeVar("R", bound=Routed)


def feeders(transfer: R, transfers: Sequence[R]) -> list[R]:
    """The transfers of ``transfers`` whose weights ``transfer`` passes on at its source: in
    broadcast the one bringing the global model for all of its local models, in upload those
    whose updates it sums. None where it starts the phase (at G in broadcast, at a leaf in upload).

    The agents relay and sum by this rule, and a transfer can only finish once its feeders did.

    >>> down = Transfer("broadcast", ("G", "r"), frozenset({0, 1}))
    >>> on = Transfer("broadcast", ("r", "a"), frozenset({1}))
    >>> feeders(on, [down, on]) == [down], feeders(down, [down, on])
    (True, [])
    """
    arriving = [t for t in transfers if t.phase == transfer.phase and t.dst == transfer.src]
    if transfer.phase == "broadcast":
        return [t for t in arriving if set(transfer.models) <= set(t.models)]
    return [t for t in arriving if set(t.models) <= set(transfer.models)]


@dataclass(frozen=True)
class Plan:
    """How one task's weights travel in one round, as chosen by ``scheduler``."""

    scheduler: str
    task: Task
    transfers: tuple[Transfer, ...]

    @classmethod
    def mirrored(cls, scheduler: str, task: Task, hops: Sequence[tuple[tuple[str, ...], frozenset[int]]]) -> "Plan":
        """The plan whose broadcast runs each (path from parent, models below) hop, parents
        first, and whose upload runs them back, children first: every hop's far end sums what
        reaches it before sending one tensor on."""
        broadcast = [Transfer("broadcast", path, models) for path, models in hops]
        upload = [Transfer("upload", path[::-1], models) for path, models in reversed(hops)]
        return cls(scheduler=scheduler, task=task, transfers=tuple(broadcast + upload))

    def phase(self, phase: Phase) -> tuple[Transfer, ...]:
        return tuple(t for t in self.transfers if t.phase == phase)

    @property
    def nodes(self) -> frozenset[str]:
        """Nodes that run an agent for this task: endpoints of transfers, G and every local model."""
        ends = {n for t in self.transfers for n in (t.src, t.dst)}
        return frozenset(ends | self.task.terminals)

    @property
    def aggregation_nodes(self) -> frozenset[str]:
        """G, plus every node that sums two or more updates into one upload transfer."""
        up = self.phase("upload")

        def inputs(out: Transfer) -> int:
            own = [i for i in self.task.models_at(out.src) if i in out.models]
            return len(feeders(out, up)) + len(own)

        return frozenset({self.task.global_node} | {t.src for t in up if inputs(t) >= 2})


def predicted_link_bytes(
    plan: Plan, phase: Phase | None = None, *, mtu: int = DEFAULT_MTU
) -> dict[LinkDir, int]:
    """Bytes of weights (with their TCP/IP and Ethernet headers) every link direction carries in
    one round, or in one ``phase``, under ``plan``.

    Each transfer puts ``wire_bytes(model_bytes, mtu)`` on every hop of its path. The acknowledgements
    flowing back are not predicted: how often a receiver acknowledges depends on how its
    application reads, so they are measured and reported on their own.
    """
    out: dict[LinkDir, int] = defaultdict(int)
    for t in plan.transfers:
        if phase in (None, t.phase):
            for hop in t.hops:
                out[hop] += wire_bytes(plan.task.model_bytes, mtu)
    return dict(out)


def predicted_phase_seconds(
    plans: Plan | Sequence[Plan],
    graph: nx.Graph,
    phase: Phase,
    *,
    chunk_bytes: int,
    with_delay: bool,
    mtu: int = DEFAULT_MTU,
) -> float:
    """Fluid-model duration of one phase of one or several concurrent plans: the busiest link's
    serialisation time plus the pipeline fill along the longest chain of transfers.

    The busiest link direction must serialise all bytes planned on it (by every plan) at its
    capacity. On top of that, a relay forwards chunk by chunk, so each hop of the deepest chain
    adds one chunk's serialisation and (when delay is emulated) its propagation delay. It ignores
    TCP slow start and CPU limits, so real runs are a little slower.
    """
    plans = [plans] if isinstance(plans, Plan) else list(plans)
    loads: dict[LinkDir, int] = defaultdict(int)
    for plan in plans:
        for hop, b in predicted_link_bytes(plan, phase, mtu=mtu).items():
            loads[hop] += b
    if not loads:
        return 0.0
    serialise = max(b * 8 / _capacity_bps(graph, u, v) for (u, v), b in loads.items())
    return serialise + max(_deepest_chain(p, graph, phase, chunk_bytes, with_delay, mtu) for p in plans)


def _deepest_chain(plan: Plan, graph: nx.Graph, phase: Phase, chunk_bytes: int, with_delay: bool,
                   mtu: int) -> float:
    transfers = plan.phase(phase)

    def hop_fill(t: Transfer) -> float:
        chunk = wire_bytes(min(chunk_bytes, plan.task.model_bytes), mtu)
        return sum(
            chunk * 8 / _capacity_bps(graph, u, v)
            + (graph.edges[u, v]["delay_s"] if with_delay else 0.0)
            for u, v in t.hops
        )

    # longest chain of transfers: u continues t when it leaves t's end carrying one of t's
    # models (broadcast fans models out, upload merges them, so neither subset test fits both)
    def continues(u: Transfer, t: Transfer) -> bool:
        return u.src == t.dst and bool(u.models & t.models)

    def chain(t: Transfer) -> float:
        return hop_fill(t) + max((chain(u) for u in transfers if continues(u, t)), default=0.0)

    starts = [t for t in transfers if not any(continues(t, u) for u in transfers)]
    return max((chain(t) for t in starts), default=0.0)


def _capacity_bps(graph: nx.Graph, u: str, v: str) -> float:
    return float(graph.edges[u, v]["capacity_mbps"]) * 1e6


def check_plan(plan: Plan, graph: nx.Graph) -> None:
    """Raise :class:`SchedulerError` unless ``plan`` is a valid schedule of its task on ``graph``.

    Valid means, for each phase: every path follows real links; for every local model not
    hosted at G, the transfers that serve it form exactly one chain between G's node and the
    model's node (G outwards in broadcast, towards G in upload), each transfer continuing the
    previous one; no other transfer serves that model, and none serves a model hosted on G's
    node; and the transfers of a phase form a tree rooted at G.
    """
    task = plan.task
    where = f"plan of {plan.scheduler!r} for task {task.name!r}"
    for t in plan.transfers:
        if len(t.path) < 2:
            raise SchedulerError(f"{where}: transfer with path {t.path} has no hop")
        if len(set(t.path)) != len(t.path):
            raise SchedulerError(f"{where}: transfer path {t.path} visits a node twice")
        for u, v in t.hops:
            if not graph.has_edge(u, v):
                raise SchedulerError(f"{where}: transfer path {t.path} uses missing link {u}-{v}")
        if not t.models:
            raise SchedulerError(f"{where}: transfer {t.path} serves no local model")
    for phase in PHASES:
        transfers = plan.phase(phase)
        for i, node in enumerate(task.local_nodes):
            chain = [t for t in transfers if i in t.models]
            if node == task.global_node:
                if chain:
                    raise SchedulerError(f"{where}: model {i} sits at G yet {phase} moves it")
                continue
            start, end = (task.global_node, node) if phase == "broadcast" else (node, task.global_node)
            at, seen = start, 0
            while at != end:
                step = [t for t in chain if t.src == at]
                if len(step) != 1:
                    raise SchedulerError(
                        f"{where}: {phase} of model {i} has {len(step)} transfers leaving {at}"
                    )
                at, seen = step[0].dst, seen + 1
                if seen > len(chain):
                    raise SchedulerError(f"{where}: {phase} of model {i} loops")
            if seen != len(chain):
                raise SchedulerError(f"{where}: {phase} of model {i} has stray transfers")
        # the overlay (parallel transfers merged) is a tree rooted at G
        tree = nx.DiGraph()
        for t in transfers:
            parent, child = (t.src, t.dst) if phase == "broadcast" else (t.dst, t.src)
            tree.add_edge(parent, child)
        if tree.number_of_nodes() and not (
            nx.is_arborescence(tree) and tree.in_degree(task.global_node) == 0
        ):
            raise SchedulerError(f"{where}: {phase} transfers do not form a tree rooted at G")


def plan_summary(plan: Plan) -> Mapping[str, object]:
    """A JSON-ready description of a plan, for results folders and agents."""
    return {
        "scheduler": plan.scheduler,
        "task": plan.task.name,
        "global_node": plan.task.global_node,
        "local_nodes": list(plan.task.local_nodes),
        "aggregation_nodes": sorted(plan.aggregation_nodes),
        "transfers": [
            {"phase": t.phase, "path": list(t.path), "models": sorted(t.models)} for t in plan.transfers
        ],
    }
