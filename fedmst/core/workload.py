"""A workload: N concurrent FL tasks sharing one network, scheduled one after another.

Each task has its own G and local models, placed by seed (:func:`make_tasks`). Tasks are
scheduled in order (:func:`schedule_workload`): every scheduler is handed the link state left
by the tasks admitted before it, the bytes per round their plans put on each link direction.
MST uses it (links get cheaper where tasks already pass, so it reuses paths); SPFF ignores it
and routes every task on its own shortest paths.

Under both sits the optical layer (:mod:`fedmst.core.optical`): every path of a plan
needs a lightpath, given by first fit over W wavelengths per link. A task for which some path
finds no wavelength is blocked: it gets no plan, the lightpaths it already got are released,
and it is listed in :attr:`WorkloadPlan.blocked` with the reason. Blocked tasks leave no link
state behind.

Consumed bandwidth is reported two ways: bytes per round on link directions
(:meth:`WorkloadPlan.predicted_link_bytes`, to set beside what the emulation measures) and
capacity reserved (:attr:`WorkloadPlan.reserved_wavelength_links` x per-wavelength capacity).
"""

from __future__ import annotations

import hashlib
import random
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import networkx as nx

from fedmst.errors import SchedulerError, TaskError
from fedmst.core.jsonfile import read_entries
from fedmst.core.schedulers import schedule
from fedmst.core.optical.slots import DEFAULT_FRAME, Frame
from fedmst.core.optical.wavelengths import Lightpath, Spectrum, lightpath_stretches
from fedmst.core.optical.circuits import fibres, spectrum_for
from fedmst.core.optical.policies import Assignment, OCSPolicy, assign, policy_on, settle
from fedmst.core.plan import LinkDir, Phase, Plan, predicted_link_bytes
from fedmst.core.tasks import Task, compute_nodes, place_task
from fedmst.core.wire import DEFAULT_MTU


def task_seed(seed: int, index: int) -> int:
    """Seed of task ``index`` in a workload seeded ``seed``: a hash, so no two (seed, index)
    pairs collide and each task's placement depends on nothing else.

    >>> task_seed(1, 0) == task_seed(1, 0) != task_seed(1, 1)
    True
    """
    return int.from_bytes(hashlib.sha256(f"fedmst-workload/{seed}/{index}".encode()).digest()[:8], "big")


def _global_node(nodes: list[str], seed: int, index: int) -> str:
    """G of task ``index``: the nodes in a seeded order, reshuffled after each full pass, so the
    first ``len(nodes)`` tasks get distinct G's and task i's G never depends on how many follow."""
    cycle, at = divmod(index, len(nodes))
    order = nodes[:]
    random.Random(task_seed(seed, -1 - cycle)).shuffle(order)
    return order[at]


def make_tasks(graph: nx.Graph, n_tasks: int, local_models: int, model_bytes: int, seed: int) -> list[Task]:
    """``n_tasks`` tasks named ``task0..task{N-1}``, each placed by a seed derived from (seed, i).

    G's are distinct as long as there are nodes for them (:func:`~fedmst.core.tasks.compute_nodes`;
    then every node hosts one before any hosts two); local models go where
    :func:`fedmst.core.tasks.place_task` puts them, on distinct nodes other than G while k allows.
    Task i is the same whatever ``n_tasks`` is.
    """
    if n_tasks < 1:
        raise TaskError(f"--tasks must be at least 1, got {n_tasks}")
    nodes = compute_nodes(graph)
    if not nodes:
        raise TaskError(f"topology {graph.graph.get('name', '?')!r} has no nodes")
    return [
        place_task(
            graph,
            name=f"task{i}",
            local_models=local_models,
            model_bytes=model_bytes,
            seed=task_seed(seed, i),
            global_node=_global_node(nodes, seed, i),
        )
        for i in range(n_tasks)
    ]


_TASK_KEYS = {"name": str, "global_node": str, "local_nodes": list, "model": str, "dataset": str, "rounds": int,
              "compute_s": float, "start_s": float}
"""A workload file's task keys (:class:`~fedmst.core.tasks.Task`'s field names) and their JSON types."""


@dataclass(frozen=True)
class TaskEntry:
    """A task as a workload file gives it: placed, with None where the file leaves a setting to
    the run's options (:meth:`task` fills them, once)."""

    placed: Task
    rounds: int | None = None
    compute_s: float | None = None
    model: str | None = None
    dataset: str | None = None

    @property
    def name(self) -> str:
        return self.placed.name

    def task(self, *, rounds: int, compute_s: float, model: str, dataset: str) -> Task:
        """The task, with the given settings where the file said nothing."""
        return replace(self.placed, rounds=rounds if self.rounds is None else self.rounds,
                       compute_s=compute_s if self.compute_s is None else self.compute_s,
                       model=self.model or model, dataset=self.dataset or dataset)


def read_workload(path: str | Path, graph: nx.Graph) -> list[TaskEntry]:
    """The tasks of a workload file, in its order (``--order`` says whether they are admitted in it)::

        {"tasks": [{"name": "A", "global_node": "a1", "local_nodes": ["b1", "b2"], "model": "cnn",
                    "dataset": "digits", "rounds": 6, "compute_s": 0.8, "start_s": 0.0}, ...]}

    ``name``, ``global_node`` and ``local_nodes`` are required; ``model`` and ``dataset`` (as
    ``--model``/``--dataset`` name them), ``rounds``, ``compute_s`` (each local model's training
    lasts at least that long) and ``start_s`` (its start, with ``--clock independent``) are
    optional. A node may host several local models (list it again).
    Any fault is refused in one line naming the file and the task. ``model_bytes`` is left 0: the
    run sets it from the task's model.
    """
    where = f"--workload {path}"
    entries = read_entries(path, where, "tasks", TaskError)
    if not entries:
        raise TaskError(f"{where}: no tasks: give at least one")
    tasks = [_task_from(where, i, entry, graph) for i, entry in enumerate(entries)]
    names = [t.name for t in tasks]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise TaskError(f"{where}: task name(s) {', '.join(twice)} given more than once")
    return tasks


def _task_from(where: str, i: int, entry: Any, graph: nx.Graph) -> TaskEntry:
    if not isinstance(entry, dict):
        raise TaskError(f"{where}: task {i} is not a JSON object")
    label = f"{where}: task {entry.get('name', i)!s}"
    unknown = sorted(set(entry) - _TASK_KEYS.keys())
    if unknown:
        raise TaskError(f"{label}: unknown key(s) {', '.join(unknown)} (known: {', '.join(_TASK_KEYS)})")
    missing = [k for k in ("name", "global_node", "local_nodes") if k not in entry]
    if missing:
        raise TaskError(f"{label}: missing {', '.join(missing)}")
    for key, kind in _TASK_KEYS.items():
        value = entry.get(key)
        ok = value is None or (isinstance(value, kind) and not isinstance(value, bool)) or (
            kind is float and isinstance(value, int) and not isinstance(value, bool))
        if not ok:
            raise TaskError(f"{label}: {key} = {value!r} is not a{'n' if kind is int else ''} {kind.__name__}")
    nodes = [str(n) for n in entry["local_nodes"]]
    if not nodes:
        raise TaskError(f"{label}: local_nodes is empty")
    rounds, compute_s, start_s = entry.get("rounds"), entry.get("compute_s"), entry.get("start_s", 0.0)
    if rounds is not None and rounds < 1:
        raise TaskError(f"{label}: rounds {rounds}: give 1 or more")
    for key, value in (("compute_s", compute_s), ("start_s", start_s)):
        if value is not None and not value >= 0:
            raise TaskError(f"{label}: {key} {value}: give 0 or more seconds")
    try:
        placed = place_task(graph, name=entry["name"], local_models=len(nodes), model_bytes=0, seed=0,
                            global_node=str(entry["global_node"]), local_nodes=nodes)
    except TaskError as exc:
        raise TaskError(f"{where}: {exc}") from None
    return TaskEntry(replace(placed, start_s=float(start_s)), rounds=rounds,
                     compute_s=None if compute_s is None else float(compute_s), model=entry.get("model"),
                     dataset=entry.get("dataset"))


@dataclass(frozen=True)
class WorkloadPlan:
    """What one scheduler made of a workload on a network with ``wavelengths`` per link.

    ``plans`` are the admitted tasks' plans, ``blocked`` the (task name, reason) of the others,
    both in scheduling order. ``lightpaths`` are those the admitted tasks hold, in the order
    they were reserved.
    """

    scheduler: str
    plans: tuple[Plan, ...]
    blocked: tuple[tuple[str, str], ...]
    wavelengths: int
    lightpaths: tuple[Lightpath, ...]

    def predicted_link_bytes(self, *, mtu: int = DEFAULT_MTU) -> dict[LinkDir, int]:
        """Bytes per round on every link direction, summed over the admitted tasks' plans."""
        return link_state(self.plans, mtu=mtu)

    def predicted_total_bytes(self, *, mtu: int = DEFAULT_MTU) -> int:
        """Bytes per round summed over every link direction (each hop of each transfer counts)."""
        return sum(self.predicted_link_bytes(mtu=mtu).values())

    @property
    def links_in_use(self) -> frozenset[frozenset[str]]:
        """Undirected links that carry any of the workload's transfers (its footprint)."""
        return frozenset(frozenset(hop) for p in self.plans for t in p.transfers for hop in t.hops)

    @property
    def reserved_wavelength_links(self) -> int:
        """Wavelengths held, counted once per link they are held on."""
        return sum(lp.wavelength_links for lp in self.lightpaths)

    @property
    def reserved_capacity_mbps(self) -> float:
        """Capacity reserved: per-wavelength capacity summed over the wavelength-links held."""
        return sum(lp.reserved_mbps for lp in self.lightpaths)

    @property
    def blocking_ratio(self) -> float:
        """Blocked tasks over all tasks (0.0 for an empty workload)."""
        total = len(self.plans) + len(self.blocked)
        return len(self.blocked) / total if total else 0.0


def link_state(
    plans: tuple[Plan, ...] | list[Plan], *, phase: Phase | None = None, mtu: int = DEFAULT_MTU
) -> dict[LinkDir, int]:
    """Bytes per round (or per ``phase``) ``plans`` put on every link direction, summed: the link
    state later tasks see, and the prediction for a run of all of them."""
    out: dict[LinkDir, int] = defaultdict(int)
    for plan in plans:
        for hop, b in predicted_link_bytes(plan, phase, mtu=mtu).items():
            out[hop] += b
    return dict(out)


def schedule_workload(
    graph: nx.Graph,
    tasks: list[Task] | tuple[Task, ...],
    scheduler: str,
    *,
    wavelengths: int,
    wavelength_mbps: float | None = None,
    share_link_state: bool = True,
    mtu: int = DEFAULT_MTU,
    load: Mapping[LinkDir, float] | None = None,
    optical: str = OCSPolicy.name,
    ots: int = 0,
    frame: Frame = DEFAULT_FRAME,
) -> WorkloadPlan:
    """Schedule ``tasks`` in order with ``scheduler``, each admitted or blocked by first fit.

    Each task's plan comes from :func:`fedmst.core.schedulers.schedule` (so it is checked), given as
    link state the bytes per round of the tasks admitted before it (all zeros with
    ``share_link_state=False``, which makes every task independent), on top of ``load``: bytes per
    round that something else puts on link directions (background traffic, measured). Its paths then get
    lightpaths on a :class:`~fedmst.core.optical.wavelengths.Spectrum` of ``wavelengths`` per link
    (and, on a fabric, ``ots`` time-sliced ones cut into ``frame``s; per-wavelength capacity
    ``capacity_mbps`` over all of them, or ``wavelength_mbps``), given by the ``optical`` policy
    (:mod:`fedmst.core.optical.policies`; on a fabric only fibres hold them), which may share out what
    is left once every task is in.
    """
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise SchedulerError(f"task names in a workload must be distinct, got {names}")
    spectrum = spectrum_for(graph, wavelengths, wavelength_mbps, ots=ots, frame=frame, mtu=mtu)
    policy = policy_on(optical, spectrum, fabric=bool(fibres(graph)))
    plans: list[Plan] = []
    blocked: list[tuple[str, str]] = []
    state: dict[LinkDir, float] = defaultdict(float)
    for task in tasks:
        seen = {hop: float(b) for hop, b in (load or {}).items()} if load or share_link_state else None
        if share_link_state:
            for hop, b in state.items():
                seen[hop] = seen.get(hop, 0.0) + b
        plan = schedule(graph, task, scheduler, seen)
        given = assign(policy, spectrum, plan)
        if given.blocked is not None:
            spectrum.release_task(task.name)  # whatever the policy reserved before it gave up
            blocked.append((task.name, given.blocked))
            continue
        check_held(spectrum, plan, given, optical)
        plans.append(plan)
        for hop, b in predicted_link_bytes(plan, mtu=mtu).items():
            state[hop] += b
    settle(policy, spectrum, plans)
    return WorkloadPlan(
        scheduler=scheduler,
        plans=tuple(plans),
        blocked=tuple(blocked),
        wavelengths=wavelengths,
        lightpaths=spectrum.lightpaths,
    )


def check_held(spectrum: Spectrum, plan: Plan, given: Assignment, policy: str) -> None:
    """Refuse, in one line, an assignment that is not what the spectrum holds for its task, or that
    leaves a stretch of fibre of one of the plan's transfer paths without a circuit: the data plane
    and the prediction read the spectrum, so a policy's answer must be exactly what it reserved."""
    task = plan.task.name
    held = {lp for lp in spectrum.lightpaths if lp.task == task}
    if set(given.circuits) != held:
        raise SchedulerError(f"optical policy {policy!r} gave task {task} {len(given.circuits)} circuit(s) but holds "
                             f"{len(held)} on the spectrum: reserve each circuit it gives (Spectrum.reserve), no other")
    covered = {(lp.owner[1], lp.path) for lp in held}
    for path, stretch in lightpath_stretches(plan, spectrum.graph):
        if (path, stretch) not in covered:
            raise SchedulerError(f"optical policy {policy!r} gave task {task} no circuit on "
                                 f"{'-'.join(stretch)} (transfer path {'-'.join(path)})")


__all__ = ["TaskEntry", "WorkloadPlan", "link_state", "make_tasks", "read_workload", "schedule_workload", "task_seed"]
