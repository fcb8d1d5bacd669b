"""The Plan: the contract between the pure half (scheduling, prediction) and the real half.

A Plan says, for one task and one round, which directed overlay transfers carry model weights (or
a segment of them), over which physical path each travels, what each carries, and which must
finish before another may start: a DAG of transfers. Trees of whole-model transfers rooted at G
(``mst``, ``spff``) are the simple case; ring all-reduce and binomial trees are other shapes of it.
Everything else (where aggregation happens, the bytes every link direction must carry, a
fluid-model latency, whether every update reaches G exactly once) is derived from it here, with
no I/O, so that what the emulation measures can always be shown beside what the Plan predicted.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from typing import Collection, Literal, Mapping, Protocol, Sequence, TypeVar

import networkx as nx

from fedmst.errors import SchedulerError
from fedmst.core.route import Along, LinkDir
from fedmst.core.tasks import Task
from fedmst.core.wire import DEFAULT_MTU, wire_bytes

Phase = Literal["broadcast", "upload"]
TRANSFER_PHASES: tuple[Phase, Phase] = ("broadcast", "upload")
"""The phases that move weights, in the order a round runs them (training is not planned here)."""
Carries = Literal["global", "sum"]
Segment = tuple[int, int]
"""A byte range ``[start, stop)`` of a model's flat float32 weights (multiples of 4)."""


@dataclass(frozen=True)
class Transfer(Along):
    """One directed overlay transfer of model weights: all of them, or the ``segment`` given.

    ``carries`` says what travels: ``"global"``, the global model (for the local models in
    ``models``, which it reaches directly or through later transfers; a transfer to G's node may
    serve none but G itself), or ``"sum"``, the sample-weighted sum of the updates of the local
    models in ``models``. By default a broadcast carries the global model and an upload a sum.

    ``step`` orders the transfers at a node: one of step k leaves its source only once every
    transfer of an earlier step from or to that node has completed (store and forward, as a
    collective's steps do); a transfer forwarding or summing one of the same step is pipelined
    chunk by chunk behind it.
    """

    phase: Phase
    path: tuple[str, ...]
    models: frozenset[int]
    segment: Segment | None = None
    """None: the whole model."""
    step: int = 0
    carries: Carries = field(default=None)  # type: ignore[assignment]  # set from the phase below

    def __post_init__(self) -> None:
        if self.carries is None:
            object.__setattr__(self, "carries", "global" if self.phase == "broadcast" else "sum")

    def span(self, model_bytes: int) -> Segment:
        """The byte range this transfer carries of a model of ``model_bytes``."""
        return self.segment or (0, model_bytes)

    def payload(self, model_bytes: int) -> int:
        lo, hi = self.span(model_bytes)
        return hi - lo


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
    @property
    def segment(self) -> Segment | None: ...
    @property
    def step(self) -> int: ...
    @property
    def carries(self) -> str: ...


R = TypeVar("R", bound=Routed)


def covers(outer: Segment | None, inner: Segment | None) -> bool:
    """Whether byte range ``outer`` contains ``inner`` (None is the whole model).

    >>> covers(None, (0, 8)), covers((0, 8), (4, 8)), covers((0, 8), None)
    (True, True, False)
    """
    if outer is None:
        return True
    return inner is not None and outer[0] <= inner[0] and inner[1] <= outer[1]


def feeders(transfer: R, transfers: Sequence[R]) -> list[R]:
    """The transfers of ``transfers`` whose weights ``transfer`` passes on at its source, none
    where it starts from what the source holds (G's model in broadcast, a leaf's own update).

    A sum adds the source's own updates to every arriving sum of the same bytes whose models
    are among its own. The global model comes from the first arriving copy that serves all of its
    models; in upload, a node without one completes the sum itself (the arriving sums are then
    its feeders). Only transfers of the same or an earlier step feed. The agents relay and sum by
    this rule, and a transfer can only finish once its feeders did.

    >>> down = Transfer("broadcast", ("G", "r"), frozenset({0, 1}))
    >>> on = Transfer("broadcast", ("r", "a"), frozenset({1}))
    >>> feeders(on, [down, on]) == [down], feeders(down, [down, on])
    (True, [])
    """
    arriving = [t for t in transfers if t.phase == transfer.phase and t.dst == transfer.src
                and t.step <= transfer.step and covers(t.segment, transfer.segment)]
    sums = [t for t in arriving if t.carries == "sum"]
    if transfer.carries == "sum":
        return [t for t in sums if set(t.models) <= set(transfer.models)]
    held = [t for t in arriving if t.carries == "global" and set(transfer.models) <= set(t.models)]
    if held or transfer.phase == "broadcast":
        return held[:1]
    return sums


def waits_on(transfer: R, transfers: Sequence[R]) -> list[R]:
    """Everything ``transfer`` needs before it can finish: its feeders, and every transfer of an
    earlier step from or to its source (which must complete before it starts)."""
    earlier = [t for t in transfers if t.phase == transfer.phase and t.step < transfer.step
               and transfer.src in (t.src, t.dst)]
    return list({id(t): t for t in [*feeders(transfer, transfers), *earlier]}.values())


def equal_segments(model_bytes: int, n: int) -> list[Segment]:
    """``n`` contiguous byte ranges covering a model, as equal as whole float32 weights allow
    (the last ones one weight shorter); empty ranges are left out.

    >>> equal_segments(40, 3)
    [(0, 16), (16, 28), (28, 40)]
    """
    weights = model_bytes // 4
    bounds = [4 * ((weights // n) * i + min(i, weights % n)) for i in range(n + 1)]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]


@dataclass(frozen=True)
class Plan:
    """How one task's weights travel in one round, as chosen by ``scheduler``."""

    scheduler: str
    task: Task
    transfers: tuple[Transfer, ...]

    def __post_init__(self) -> None:
        # a segment that is the whole model is written as None, so that whole-model transfers match
        whole = (0, self.task.model_bytes)
        if any(t.segment == whole for t in self.transfers):
            object.__setattr__(self, "transfers", tuple(
                replace(t, segment=None) if t.segment == whole else t for t in self.transfers))

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
        """G, plus every node that sums two or more updates into a transfer it sends."""
        def inputs(out: Transfer) -> int:
            sums = [f for f in feeders(out, self.transfers) if f.carries == "sum"]
            if out.carries == "global" and not sums:
                return 0
            own = self.task.models_at(out.src)
            return len(sums) + len(own if out.carries == "global" else [i for i in own if i in out.models])

        return frozenset({self.task.global_node} | {t.src for t in self.transfers if inputs(t) >= 2})


def predicted_link_bytes(
    plan: Plan, phase: Phase | None = None, *, mtu: int = DEFAULT_MTU
) -> dict[LinkDir, int]:
    """Bytes of weights (with their TCP/IP and Ethernet headers) every link direction carries in
    one round, or in one ``phase``, under ``plan``.

    Each transfer puts ``wire_bytes(its payload, mtu)`` on every hop of its path. The
    acknowledgements flowing back are not predicted: how often a receiver acknowledges depends on
    how its application reads, so they are measured and reported on their own.
    """
    out: dict[LinkDir, int] = defaultdict(int)
    for t in plan.transfers:
        if phase in (None, t.phase):
            for hop in t.hops:
                out[hop] += wire_bytes(t.payload(plan.task.model_bytes), mtu)
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
    """Fluid-model duration of one phase of one or several concurrent plans.

    Steps are taken one after another, as synchronous rounds (the alpha-beta model of collectives);
    a tree of whole-model transfers is one step. Within a step, the busiest link direction must
    serialise all bytes planned on it (by every plan) at its capacity, and on top of that a relay
    forwards chunk by chunk, so each hop of the step's deepest chain of transfers adds one chunk's
    serialisation and (when delay is emulated) its propagation delay. It ignores TCP slow start and
    CPU limits, so real runs are a little slower.
    """
    plans = [plans] if isinstance(plans, Plan) else list(plans)
    total = 0.0
    for step in sorted({t.step for p in plans for t in p.phase(phase)}):
        loads: dict[LinkDir, int] = defaultdict(int)
        for p in plans:
            for t in p.phase(phase):
                if t.step == step:
                    for hop in t.hops:
                        loads[hop] += wire_bytes(t.payload(p.task.model_bytes), mtu)
        serialise = max(b * 8 / _capacity_bps(graph, u, v) for (u, v), b in loads.items())
        total += serialise + max(_deepest_chain(p, graph, phase, step, chunk_bytes, with_delay, mtu)
                                 for p in plans)
    return total


def loaded_phase_seconds(plan: Plan, running: Sequence[Plan], graph: nx.Graph, phase: Phase, *, chunk_bytes: int,
                         with_delay: bool, mtu: int = DEFAULT_MTU) -> float:
    """How long ``plan``'s ``phase`` would take on links that the ``running`` plans load too, as if
    their phases coincided: each of its steps serialises, on its busiest link direction, its own
    bytes and every running plan's there, then fills its own deepest chain. A placement's score
    (:class:`fedmst.core.cluster.policies.Network`): links busy with other jobs count against it.

    >>> from fedmst.core.tasks import Task
    >>> g = nx.path_graph(["a", "b"])
    >>> nx.set_edge_attributes(g, 8.0, "capacity_mbps"); nx.set_edge_attributes(g, 0.0, "delay_s")
    >>> one = Plan("x", Task("t", "a", ("b",), 1_000_000), (Transfer("broadcast", ("a", "b"), frozenset({0})),))
    >>> alone = loaded_phase_seconds(one, [], g, "broadcast", chunk_bytes=1 << 30, with_delay=False)
    >>> shared = loaded_phase_seconds(one, [one], g, "broadcast", chunk_bytes=1 << 30, with_delay=False)
    >>> round(alone, 2), round(shared - alone, 2)
    (2.09, 1.05)
    """
    total = 0.0
    for step in sorted({t.step for t in plan.phase(phase)}):
        mine = {hop for t in plan.phase(phase) if t.step == step for hop in t.hops}
        loads: dict[LinkDir, int] = defaultdict(int)
        for p in (plan, *running):
            for t in p.phase(phase):
                if p is not plan or t.step == step:
                    for hop in t.hops:
                        if hop in mine:
                            loads[hop] += wire_bytes(t.payload(p.task.model_bytes), mtu)
        serialise = max((b * 8 / _capacity_bps(graph, u, v) for (u, v), b in loads.items()), default=0.0)
        total += serialise + _deepest_chain(plan, graph, phase, step, chunk_bytes, with_delay, mtu)
    return total


def _deepest_chain(plan: Plan, graph: nx.Graph, phase: Phase, step: int, chunk_bytes: int, with_delay: bool,
                   mtu: int) -> float:
    """The pipeline fill of the longest chain of one step's transfers, each behind its feeders."""
    transfers = [t for t in plan.phase(phase) if t.step == step]

    def hop_fill(t: Transfer) -> float:
        chunk = wire_bytes(min(chunk_bytes, t.payload(plan.task.model_bytes)), mtu)
        return sum(
            chunk * 8 / _capacity_bps(graph, u, v)
            + (graph.edges[u, v]["delay_s"] if with_delay else 0.0)
            for u, v in t.hops
        )

    start: dict[int, float] = {}

    def begins(i: int) -> float:
        if i not in start:
            start[i] = 0.0  # a cycle (refused by check_plan) cannot recurse forever
            start[i] = max((begins(transfers.index(f)) + hop_fill(f) for f in feeders(transfers[i], transfers)),
                           default=0.0)
        return start[i]

    return max((begins(i) + hop_fill(t) for i, t in enumerate(transfers)), default=0.0)


def _capacity_bps(graph: nx.Graph, u: str, v: str) -> float:
    return float(graph.edges[u, v]["capacity_mbps"]) * 1e6


def forward_each(plan: Plan) -> Plan:
    """``plan`` with every update carried to G whole: each upload sum of several local models
    becomes one transfer per model along the same path and step, so relays forward and never add
    (a median or Krum at G needs every update). Link bytes grow with the updates crossing each
    link. A plan whose upload hands on the global model (a ring's all-gather) sums by
    construction and is refused.

    >>> t = Task("t", "G", ("a", "b"), 8)
    >>> up = Plan("tree", t, (Transfer("upload", ("b", "a"), frozenset({1})),
    ...                       Transfer("upload", ("a", "G"), frozenset({0, 1}))))
    >>> [(x.path, sorted(x.models)) for x in forward_each(up).transfers]
    [(('b', 'a'), [1]), (('a', 'G'), [0]), (('a', 'G'), [1])]
    """
    if any(t.phase == "upload" and t.carries == "global" for t in plan.transfers):
        raise SchedulerError(f"{plan.scheduler} cannot carry each update to G whole: its upload hands on the "
                             "global model (a ring all-reduce sums by construction); use a tree or star scheduler")
    return replace(plan, transfers=tuple(
        one for t in plan.transfers
        for one in ([t] if t.phase == "broadcast" else [replace(t, models=frozenset({m})) for m in sorted(t.models)])))


def check_plan(plan: Plan, graph: nx.Graph) -> None:
    """Raise :class:`SchedulerError` unless ``plan`` is a valid schedule of its task on ``graph``.

    Valid means: every path follows real links without visiting a node twice; segments are whole
    float32 weights inside the model; no transfers wait on each other in a cycle; every transfer
    has what it sends (a sum carries each of its models' updates exactly once, and the global model
    leaves only G in broadcast, a node that received it, or one that completed the sum of every
    update); at the end of the upload, G's node has every byte of the global model, made of every
    local model's update exactly once (each upload transfer carrying one, for a task whose updates
    must not be added in the network); and at the end of the broadcast, every local model's node
    has every byte of the global model (received, or kept since it completed the last upload).
    """
    task = plan.task
    where = f"plan of {plan.scheduler!r} for task {task.name!r}"
    everyone = frozenset(range(task.k))
    for t in plan.transfers:
        name = f"{where}: {t.phase} transfer {'-'.join(t.path)}"
        if t.phase not in TRANSFER_PHASES:
            raise SchedulerError(f"{name}: unknown phase {t.phase!r}; use one of {', '.join(TRANSFER_PHASES)}")
        if len(t.path) < 2:
            raise SchedulerError(f"{where}: transfer with path {t.path} has no hop")
        if len(set(t.path)) != len(t.path):
            raise SchedulerError(f"{where}: transfer path {t.path} visits a node twice")
        for u, v in t.hops:
            if not graph.has_edge(u, v):
                raise SchedulerError(f"{where}: transfer path {t.path} uses missing link {u}-{v}")
        if t.carries not in ("global", "sum") or (t.phase == "broadcast" and t.carries == "sum"):
            raise SchedulerError(f"{name} carries {t.carries!r}: a broadcast carries the global model, "
                                 "an upload a sum or the global model")
        if not set(t.models) <= everyone:
            raise SchedulerError(f"{name} serves unknown local models {sorted(set(t.models) - everyone)}")
        if not t.models and task.global_node not in (t.src, t.dst):
            raise SchedulerError(f"{where}: transfer {t.path} serves no local model")
        if t.segment is not None:
            lo, hi = t.segment
            if not (0 <= lo < hi <= task.model_bytes and lo % 4 == 0 and hi % 4 == 0):
                raise SchedulerError(f"{name}: segment {t.segment} is not a range of whole float32 weights "
                                     f"inside the model's {task.model_bytes} bytes")
        if t.step < 0:
            raise SchedulerError(f"{name}: negative step {t.step}")
        if not task.sums_in_path and t.phase == "upload" and len(t.models) != 1:
            raise SchedulerError(f"{name} carries {len(t.models)} updates as one, but task {task.name}'s updates "
                                 "must reach G each whole (see forward_each)")
    atoms = _atoms(plan)
    values = {phase: _values(plan, phase) for phase in ("upload", "broadcast")}
    holds_after_upload = {n for n in plan.nodes if not _missing(plan, "upload", n, atoms, values["upload"])}
    for phase in TRANSFER_PHASES:
        _check_sources(plan, phase, values[phase], where)
    for i, node in enumerate(task.local_nodes):
        gaps = _missing(plan, "broadcast", node, atoms, values["broadcast"])
        if node != task.global_node and gaps and node not in holds_after_upload:
            (lo, hi), _ = gaps[0]
            raise SchedulerError(f"{where}: model {i}'s node {node} does not receive bytes {lo}..{hi} of the "
                                 "global model in broadcast, nor keep them from the upload")
    gaps = _missing(plan, "upload", task.global_node, atoms, values["upload"])
    if gaps:
        (lo, hi), total = gaps[0]
        raise SchedulerError(f"{where}: G's node {task.global_node} ends the upload with bytes {lo}..{hi} of the "
                             f"global model {_wrong(total, Counter(range(task.k)))}")


def _wrong(value: Counter[int], want: Counter[int]) -> str:
    """How a sum of updates differs from the one wanted, in words."""
    missing = sorted(set(want) - set(value))
    twice = sorted(m for m, n in value.items() if n > 1)
    stray = sorted(set(value) - set(want))
    parts = [f"lacking updates {missing}" if missing else "", f"counting {twice} more than once" if twice else "",
             f"adding {stray}, not its own" if stray else ""]
    return ", ".join(p for p in parts if p)


def _atoms(plan: Plan) -> list[Segment]:
    """The byte ranges between every segment boundary of the plan: no transfer splits one."""
    cuts = {0, plan.task.model_bytes} | {b for t in plan.transfers if t.segment for b in t.segment}
    ordered = sorted(cuts)
    return list(zip(ordered, ordered[1:]))


def _values(plan: Plan, phase: Phase) -> dict[int, Counter[int] | None]:
    """What each transfer of ``phase`` carries (by index in the plan): the count of every update in
    its sum; for the global model None, or where its source completes the sum, the count of every
    update in it. Raises on a cycle of transfers waiting on each other."""
    transfers = plan.phase(phase)
    order = nx.DiGraph()
    order.add_nodes_from(range(len(transfers)))
    index = {id(t): i for i, t in enumerate(transfers)}
    order.add_edges_from((index[id(w)], i) for i, t in enumerate(transfers) for w in waits_on(t, transfers))
    try:
        ordered = list(nx.topological_sort(order))
    except nx.NetworkXUnfeasible:
        cycle = [transfers[i].path for i, _ in nx.find_cycle(order)]
        raise SchedulerError(f"plan of {plan.scheduler!r} for task {plan.task.name!r}: {phase} transfers "
                             f"{cycle} wait on each other in a cycle") from None
    values: dict[int, Counter[int] | None] = {}
    for i in ordered:
        t = transfers[i]
        feeds = feeders(t, transfers)
        if t.carries == "global" and (phase == "broadcast" or any(f.carries == "global" for f in feeds)):
            values[i] = None
            continue
        own = [m for m in plan.task.models_at(t.src) if t.carries == "global" or m in t.models]
        total = Counter(own)
        for f in feeds:
            total.update(values[index[id(f)]] or {})
        values[i] = total
    return values


def _check_sources(plan: Plan, phase: Phase, values: Mapping[int, Counter[int] | None], where: str) -> None:
    """Every transfer of ``phase`` has what it sends (see :func:`check_plan`), given what each
    carries (:func:`_values`)."""
    task, transfers = plan.task, plan.phase(phase)
    for i, value in values.items():
        t = transfers[i]
        name = f"{where}: {phase} transfer {'-'.join(t.path)} (step {t.step})"
        if value is None:
            if phase == "broadcast" and t.src != task.global_node and not feeders(t, transfers):
                raise SchedulerError(f"{name} leaves {t.src}, which has not received the global model for "
                                     f"models {sorted(t.models)}")
            continue
        want = Counter(range(task.k)) if t.carries == "global" else Counter(t.models)
        if value != want:
            what = "the global model it completes" if t.carries == "global" else "its sum"
            raise SchedulerError(f"{name}: {what} is wrong, {_wrong(value, want)}")


def _missing(plan: Plan, phase: Phase, node: str, atoms: list[Segment],
             values: Mapping[int, Counter[int] | None]) -> list[tuple[Segment, Counter[int]]]:
    """The byte ranges of the global model ``node`` does not have at the end of ``phase`` (neither
    received as the global model, nor completed from every update exactly once), each with the
    updates it does have there; ``values`` is what each transfer carries (:func:`_values`)."""
    task, transfers = plan.task, plan.phase(phase)
    arriving = [(t, values[i]) for i, t in enumerate(transfers) if t.dst == node]
    gaps = []
    for atom in atoms:
        covering = [None if t.carries == "global" else v for t, v in arriving if covers(t.segment, atom)]
        if any(v is None for v in covering) or (node == task.global_node and phase == "broadcast"):
            continue
        total = Counter(task.models_at(node))
        for v in covering:
            total.update(v or {})
        if total != Counter(range(task.k)):
            gaps.append((atom, total))
    return gaps


def plan_summary(plan: Plan) -> Mapping[str, object]:
    """A JSON-ready description of a plan, for results folders and agents."""
    return {
        "scheduler": plan.scheduler,
        "task": plan.task.name,
        "global_node": plan.task.global_node,
        "local_nodes": list(plan.task.local_nodes),
        "model": plan.task.model, "dataset": plan.task.dataset, "model_bytes": plan.task.model_bytes,
        "aggregation_nodes": sorted(plan.aggregation_nodes),
        "transfers": [
            {"phase": t.phase, "path": list(t.path), "models": sorted(t.models), "carries": t.carries,
             "segment": list(t.segment) if t.segment else None, "step": t.step}
            for t in plan.transfers
        ],
    }
