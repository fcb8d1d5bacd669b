"""A run's options, checked and resolved once, before anything is created.

:class:`RunConfig` is what the user asked for (it is written to ``config.json`` and can be read
back with ``--config``, so a run folder can be run again exactly). :func:`resolve` turns it, for
one or several schedulers, into :class:`ResolvedRun` objects: the topology loaded, the tasks
placed, each scheduler's plans made, the faults and limits parsed, and the host checked (root,
tools, netem probed once). Bad input therefore fails in one line before any namespace, process
or file exists, and ``compare`` and ``sweep`` load, size and schedule everything once.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence, get_type_hints

import networkx as nx

from fedmst.core import faults
from fedmst.core.contention import Profile, capacities, cassini_offsets, profile_of
from fedmst.core.linktrace import LinkChange, read_link_trace
from fedmst.core.ordering import ORDERS, order_tasks
from fedmst.core.traffic import BackgroundFlow, parse_flow, read_traffic_file
from fedmst.core.schedulers import get_scheduler
from fedmst.core.tasks import Task, place_task
from fedmst.core.topology import load_topology, node_order
from fedmst.core.wire import DEFAULT_MTU
from fedmst.core.workload import WorkloadPlan, make_tasks, read_workload, schedule_workload
from fedmst.net.queues import QUEUES
from fedmst.errors import FedmstError
from fedmst.workers.backends import DEFAULT_IMAGE, WorkerLimits, check_backend, worker_limits

DEFAULT_MODEL = "mlp-large"
DEFAULT_DATASET = "digits"
DELAY_MODES = ("auto", "netem", "userspace", "off")
OPTIMIZERS = ("sgd", "momentum", "adam")
CLOCKS = ("lockstep", "independent")
LINK_STATES = ("planned", "measured")
INTERLEAVES = ("none", "cassini")
"""Local optimizers, as :data:`fedmst.fl.training.OPTIMIZERS` names them (no torch here)."""


@dataclass(frozen=True)
class RunConfig:
    """Every option of a run, as given; written to ``config.json``."""

    topology: str = "nsfnet"
    scheduler: str = "mst"
    local_models: int = 4
    tasks: int = 1
    wavelengths: int = 40
    rounds: int = 2
    model: str = DEFAULT_MODEL
    dataset: str = DEFAULT_DATASET
    seed: int = 1
    out: str = "runs/latest"
    global_node: str | None = None
    local_nodes: tuple[str, ...] | None = None
    epochs: int = 5
    batch_size: int = 32
    lr: float = 0.1
    optimizer: str = "momentum"
    """Local training: chosen with scripts/bench_learning.py (README, "Learning")."""
    target_accuracy: float = 0.8
    alpha: float = 0.5
    chunk_bytes: int = 256 * 1024
    mtu: int = DEFAULT_MTU
    delay_mode: str = "auto"
    queue: str = "fifo"
    """How each link direction's sender queues: one FIFO, or ``fair``: one queue per transfer
    served in turn (:mod:`fedmst.net.queues`)."""
    loss: float = 0.0
    jitter_ms: float = 0.0
    phase_timeout_s: float = 300.0
    save_models: bool = False
    workers: str = "process"
    image: str = DEFAULT_IMAGE
    cpus: tuple[str, ...] = ()
    memory: tuple[str, ...] = ()
    fail_links: tuple[str, ...] = ()
    kill_workers: tuple[str, ...] = ()
    slow_nodes: tuple[str, ...] = ()
    deadline_s: float | None = None
    stall_s: float = 10.0
    workload: str | None = None
    """A workload file (:func:`fedmst.core.workload.read_workload`) placing the tasks instead of the seed."""
    clock: str = "lockstep"
    """``lockstep``: every task's phase starts together; ``independent``: each task runs its rounds
    back to back from its own start offset."""
    compute_s: float = 0.0
    """Each local model's training lasts at least this long (a task in the workload file may say otherwise)."""
    interleave: str = "none"
    """``cassini``: shift the tasks' starts so that their communication interleaves on shared links."""
    traffic: tuple[str, ...] = ()
    """Background flows, ``SRC-DST:RATE[:tcp|udp][@START[-END]]`` (:mod:`fedmst.core.traffic`)."""
    traffic_file: str | None = None
    """More background flows, from a JSON file (:func:`fedmst.core.traffic.read_traffic_file`)."""
    link_trace: str | None = None
    """Links' capacity, delay or loss changing during the run (:mod:`fedmst.core.linktrace`)."""
    order: str = "fifo"
    """The order tasks are admitted and scheduled in: as listed, or ``sjf-bco`` (:mod:`fedmst.core.ordering`)."""
    link_state: str = "planned"
    """What the schedulers see as a link's load: the bytes earlier tasks planned on it, or with
    ``measured`` also the background traffic measured on it in the last round (re-planned then)."""


_MINIMUM = {"local_models": ("--local-models", 1), "tasks": ("--tasks", 1), "wavelengths": ("--wavelengths", 1),
            "rounds": ("--rounds", 1), "epochs": ("--epochs", 1), "batch_size": ("--batch-size", 1),
            "chunk_bytes": ("--chunk-kb", 1), "seed": ("--seed", 0)}


def validate(config: RunConfig) -> None:
    """Refuse, in one line naming the option, values no run can use (whether they came from the
    command line or a config file)."""
    for name, (option, least) in _MINIMUM.items():
        value = getattr(config, name)
        if value < least:
            shown = value // 1024 if name == "chunk_bytes" else value
            raise FedmstError(f"{option} {shown}: give {'a number' if least else 'a seed'} of {least} or more")
    if not 576 <= config.mtu <= 9000:
        raise FedmstError(f"--mtu {config.mtu}: give an MTU between 576 and 9000")
    if config.delay_mode not in DELAY_MODES:
        raise FedmstError(f"--delay-mode {config.delay_mode}: choose one of {', '.join(DELAY_MODES)}")
    if config.queue not in QUEUES:
        raise FedmstError(f"--queue {config.queue}: choose one of {', '.join(QUEUES)}")
    if not 0 <= config.loss < 1:
        raise FedmstError(f"--loss {config.loss:g}: give a probability in [0, 1)")
    if config.jitter_ms < 0:
        raise FedmstError(f"--jitter-ms {config.jitter_ms:g}: give 0 or more milliseconds")
    if config.delay_mode == "off" and (config.loss or config.jitter_ms):
        given = [o for o, v in (("--loss", config.loss), ("--jitter-ms", config.jitter_ms)) if v]
        raise FedmstError(f"{' and '.join(given)} need{'s' if len(given) == 1 else ''} a delay mechanism: "
                          "--delay-mode off applies neither; use --delay-mode auto, netem or userspace")
    if not config.stall_s >= 0.1:
        raise FedmstError(f"--stall-timeout {config.stall_s:g}: give at least 0.1 seconds")
    if config.deadline_s is not None and not config.deadline_s > 0:
        raise FedmstError(f"--deadline {config.deadline_s:g}: give a positive number of seconds")
    if not config.lr > 0:
        raise FedmstError(f"--lr {config.lr:g}: give a positive learning rate")
    if not config.alpha > 0:
        raise FedmstError(f"alpha {config.alpha:g}: give a positive Dirichlet concentration")
    if not 0 < config.target_accuracy <= 1:
        raise FedmstError(f"--target-accuracy {config.target_accuracy:g}: give an accuracy in (0, 1]")
    if config.optimizer not in OPTIMIZERS:
        raise FedmstError(f"--optimizer {config.optimizer}: choose one of {', '.join(OPTIMIZERS)}")
    check_backend(config.workers, limited=bool(config.cpus or config.memory))
    if config.tasks > 1 and (config.global_node is not None or config.local_nodes is not None):
        raise FedmstError("--global-node/--local-nodes place one task: leave them out with --tasks N")
    if config.workload is not None and (config.tasks > 1 or config.global_node is not None
                                        or config.local_nodes is not None):
        raise FedmstError("--workload places the tasks: leave out --tasks, --global-node and --local-nodes")
    if config.clock not in CLOCKS:
        raise FedmstError(f"--clock {config.clock}: choose one of {', '.join(CLOCKS)}")
    if config.interleave not in INTERLEAVES:
        raise FedmstError(f"--interleave {config.interleave}: choose one of {', '.join(INTERLEAVES)}")
    if config.interleave != "none" and config.clock != "independent":
        raise FedmstError(f"--interleave {config.interleave} shifts tasks on their own clocks: add --clock independent")
    if not config.compute_s >= 0:
        raise FedmstError(f"--compute-s {config.compute_s:g}: give 0 or more seconds")
    if config.order not in ORDERS:
        raise FedmstError(f"--order {config.order}: choose one of {', '.join(ORDERS)}")
    if config.link_state not in LINK_STATES:
        raise FedmstError(f"--link-state {config.link_state}: choose one of {', '.join(LINK_STATES)}")
    if config.clock == "independent":
        given = [o for o, v in (("--fail-link", config.fail_links), ("--kill-worker", config.kill_workers),
                                ("--deadline", config.deadline_s),
                                ("--link-state measured", config.link_state == "measured")) if v]
        if given:
            raise FedmstError(f"{', '.join(given)}: not supported with --clock independent yet (faults, deadlines "
                              "and re-plans happen between lockstep phases); use --clock lockstep")


def read_config_file(path: Path, extra_keys: Sequence[str] = ()) -> dict[str, Any]:
    """Options from a TOML file or an earlier run's ``config.json``, by :class:`RunConfig` field
    name (``local-models`` and ``local_models`` alike), checked against the field types;
    ``extra_keys`` names options of the command that are not run options (e.g. ``schedulers``).

    An unknown key is refused, naming it, so a misspelt option cannot silently do nothing.
    """
    try:
        text = Path(path).read_text()
        raw = json.loads(text) if Path(path).suffix == ".json" else tomllib.loads(text)
    except OSError as exc:
        raise FedmstError(f"--config {path}: cannot read it ({exc.strerror or exc})") from None
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise FedmstError(f"--config {path}: malformed: {' '.join(str(exc).split())}") from None
    if not isinstance(raw, dict):
        raise FedmstError(f"--config {path}: expected a table of options")
    hints = get_type_hints(RunConfig)
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name in extra_keys:
            out[name] = value
            continue
        if name not in hints:
            raise FedmstError(f"--config {path}: unknown option {key!r}")
        out[name] = _typed(path, key, value, hints[name])
    return out


def _typed(path: Path, key: str, value: Any, hint: Any) -> Any:
    """``value`` as the field's type (lists become tuples, ints may stand for floats)."""
    text = str(hint)
    if value is None and "None" in text:
        return None
    if "tuple" in text:
        if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int)) for v in value):
            return tuple(str(v) for v in value)
    elif hint is bool or text == "bool":
        if isinstance(value, bool):
            return value
    elif "float" in text:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif "int" in text:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(value, (str, int)) and not isinstance(value, bool):
        return str(value)
    name = getattr(hint, "__name__", None) or text.replace("typing.", "")
    raise FedmstError(f"--config {path}: option {key!r} = {value!r} is not of type {name}")


@dataclass(frozen=True)
class ResolvedRun:
    """One scheduler's run, fully resolved: what the engine needs and nothing left to check."""

    config: RunConfig
    graph: nx.Graph
    workload: WorkloadPlan
    link_failures: tuple[faults.LinkFailure, ...]
    kills: tuple[faults.WorkerKill, ...]
    slow: Mapping[str, float]
    worker_nodes: tuple[str, ...]
    limits: Mapping[str, WorkerLimits]
    delay_mode: str
    """``netem``, ``userspace`` or ``off``: ``auto`` already decided by probing the kernel."""
    netem_available: bool
    background: tuple[BackgroundFlow, ...] = ()
    link_changes: tuple[LinkChange, ...] = ()
    listed: tuple[str, ...] = ()
    """The tasks' names as the workload lists them: task i is seeded with ``seed + i`` whatever
    order ``--order`` admits them in."""
    offsets: Mapping[str, float] = field(default_factory=dict)
    """Task -> seconds its start is shifted by ``--interleave`` (beyond its own ``start_s``)."""

    def profiles(self) -> list[Profile]:
        """Each admitted task's round as predicted alone (:mod:`fedmst.core.contention`)."""
        return _profiles(self.config, self.graph, self.workload, with_delay=self.delay_mode != "off")


def _profiles(config: RunConfig, graph: nx.Graph, workload: WorkloadPlan, *, with_delay: bool) -> list[Profile]:
    return [profile_of(p, graph, compute_s=float(p.task.compute_s or 0.0), start_s=p.task.start_s,
                       chunk_bytes=config.chunk_bytes, with_delay=with_delay, mtu=config.mtu)
            for p in workload.plans]


@dataclass(frozen=True)
class Host:
    """What this host can emulate, found once per command (probing netem creates an interface)."""

    delay_mode: str
    netem_available: bool


def check_host(config: RunConfig) -> Host:
    """Root, the tools the emulation needs, and ``--delay-mode`` decided against the kernel."""
    from fedmst.net.emulation import probe_capabilities, require_tools, resolve_delay_mode

    require_tools()  # root, and the tools that probing the kernel needs
    capabilities = probe_capabilities()
    delay_mode = resolve_delay_mode(config.delay_mode, capabilities)
    require_tools(delay_mode, background=bool(config.traffic or config.traffic_file))
    return Host(delay_mode=delay_mode, netem_available=capabilities.netem)


def resolve(config: RunConfig, schedulers: Sequence[str] | None = None, host: Host | None = None) -> list[ResolvedRun]:
    """Check ``config`` and the host (unless ``host`` was checked already), then plan it with each
    of ``schedulers`` (default: ``config.scheduler``); every run shares the same topology and tasks."""
    from fedmst.workers.backends import backend_for

    validate(config)
    host = host or check_host(config)
    graph = load_topology(config.topology)
    link_failures = tuple(faults.parse_link_failure(f, graph, config.rounds) for f in config.fail_links)
    kills = tuple(faults.parse_worker_kill(k, graph, config.rounds) for k in config.kill_workers)
    slow = dict(faults.parse_slow_node(spec, graph) for spec in config.slow_nodes)
    background = tuple(parse_flow(spec, graph) for spec in config.traffic) + tuple(
        read_traffic_file(config.traffic_file, graph) if config.traffic_file else ())
    link_changes = read_link_trace(config.link_trace, graph) if config.link_trace else ()
    if host.delay_mode == "off" and any(c.delay_ms is not None or c.loss is not None for c in link_changes):
        raise FedmstError(f"--link-trace {config.link_trace}: changes delay or loss, which --delay-mode off does "
                          "not apply; use --delay-mode auto, netem or userspace")
    placed = _tasks(config, graph)  # placement does not depend on the model's size
    names = list(schedulers or [config.scheduler])
    for scheduler in names:
        get_scheduler(scheduler)
    # torch (1.5 s) only after every check that does not need it, so most bad input fails at once
    from fedmst.fl import data, models

    sizes: dict[tuple[str, str], int] = {}
    for kind in dict.fromkeys((str(t.model), str(t.dataset)) for t in placed):
        dataset = data.load_dataset(kind[1])
        sizes[kind] = models.sized_model(kind[0], dataset)
        k = max(t.k for t in placed if t.dataset == kind[1])
        data.dirichlet_shards(dataset.y_train, k, config.alpha, seed=config.seed)  # too many local models?
    tasks = [replace(task, model_bytes=sizes[(str(task.model), str(task.dataset))]) for task in placed]
    runs = []
    for scheduler in names:
        ordered = order_tasks(graph, tasks, config.order, scheduler, chunk_bytes=config.chunk_bytes,
                              with_delay=host.delay_mode != "off", mtu=config.mtu)
        workload = schedule_workload(graph, ordered, scheduler, wavelengths=config.wavelengths, mtu=config.mtu)
        if not workload.plans:
            raise FedmstError(f"every task was blocked under {scheduler}, e.g. {workload.blocked[0][0]}: "
                              f"{workload.blocked[0][1]}")
        nodes = _worker_nodes(config, graph, workload)
        for node in slow:
            if node not in nodes:
                raise FedmstError(f"--slow-node {node}: node {node} runs no worker in this run (it only forwards)")
        offsets = {p.task.name: 0.0 for p in workload.plans}
        if config.interleave == "cassini":
            offsets = cassini_offsets(_profiles(config, graph, workload, with_delay=host.delay_mode != "off"),
                                      {p.task.name: int(p.task.rounds or config.rounds) for p in workload.plans},
                                      capacities(graph))
        runs.append(ResolvedRun(
            background=background, offsets=offsets, link_changes=link_changes, listed=tuple(t.name for t in tasks),
            config=replace(config, scheduler=scheduler), graph=graph, workload=workload,
            link_failures=link_failures, kills=kills, slow=slow, worker_nodes=nodes,
            limits=worker_limits(nodes, config.cpus, config.memory, graph.nodes),
            delay_mode=host.delay_mode, netem_available=host.netem_available,
        ))
    backend_for(config.workers, config.image).check()  # last: the limits above are checked first
    return runs


def _tasks(config: RunConfig, graph: nx.Graph) -> list[Task]:
    """The tasks, from the workload file or placed by seed, each with its model, dataset, rounds and
    compute time given (the run's options where the file says nothing)."""
    if config.workload is not None:
        tasks = read_workload(config.workload, graph)
    elif config.tasks == 1:
        tasks = [place_task(graph, name="task0", local_models=config.local_models, model_bytes=0,
                            seed=config.seed, global_node=config.global_node, local_nodes=config.local_nodes)]
    else:
        tasks = make_tasks(graph, config.tasks, config.local_models, 0, config.seed)
    tasks = [replace(t, rounds=config.rounds if t.rounds is None else t.rounds,
                     compute_s=config.compute_s if t.compute_s is None else t.compute_s,
                     model=t.model or config.model, dataset=t.dataset or config.dataset) for t in tasks]
    if config.clock == "lockstep":
        own = [t.name for t in tasks if t.rounds != config.rounds or t.start_s]
        if own:
            raise FedmstError(f"--workload {config.workload}: task(s) {', '.join(own)} have their own rounds or "
                              "start_s: add --clock independent (in lockstep every task runs every round together)")
    return tasks


def _worker_nodes(config: RunConfig, graph: nx.Graph, workload: WorkloadPlan) -> tuple[str, ...]:
    """Nodes that run an agent: every node holding a model or relaying for one, and with faults
    to inject or a measured link state every node, since a re-planned tree may aggregate anywhere."""
    if config.fail_links or config.kill_workers or config.link_state == "measured":
        return tuple(sorted(graph.nodes, key=node_order))
    return tuple(sorted(set().union(*(p.nodes for p in workload.plans)), key=node_order))
