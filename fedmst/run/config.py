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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence, get_type_hints

import networkx as nx

from fedmst.core import faults
from fedmst.core.schedulers import get_scheduler
from fedmst.core.tasks import Task, place_task
from fedmst.core.topology import load_topology, node_order
from fedmst.core.wire import DEFAULT_MTU
from fedmst.core.workload import WorkloadPlan, make_tasks, schedule_workload
from fedmst.errors import FedmstError
from fedmst.workers.backends import BACKENDS, DEFAULT_IMAGE, WorkerLimits, worker_limits

DEFAULT_MODEL = "mlp-large"
DEFAULT_DATASET = "digits"
DELAY_MODES = ("auto", "netem", "userspace", "off")
OPTIMIZERS = ("sgd", "momentum", "adam")
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
    if config.workers not in BACKENDS:
        raise FedmstError(f"unknown worker backend {config.workers!r}; choose one of: {', '.join(BACKENDS)}")
    if config.workers == "process" and (config.cpus or config.memory):
        raise FedmstError("--cpus/--memory limit containers: add --workers docker")
    if config.tasks > 1 and (config.global_node is not None or config.local_nodes is not None):
        raise FedmstError("--global-node/--local-nodes place one task: leave them out with --tasks N")


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
    require_tools(delay_mode)
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
    placed = _tasks(config, graph, model_bytes=0)  # placement does not depend on the model's size
    names = list(schedulers or [config.scheduler])
    for scheduler in names:
        get_scheduler(scheduler)
    # torch (1.5 s) only after every check that does not need it, so most bad input fails at once
    from fedmst.fl import data, models

    dataset = data.load_dataset(config.dataset)
    size = models.model_bytes(models.build_model(config.model, num_classes=dataset.num_classes,
                                                 input_shape=dataset.input_shape))
    tasks = [replace(task, model_bytes=size) for task in placed]
    data.dirichlet_shards(dataset.y_train, config.local_models, config.alpha, seed=config.seed)  # too many models?
    runs = []
    for scheduler in names:
        workload = schedule_workload(graph, tasks, scheduler, wavelengths=config.wavelengths, mtu=config.mtu)
        if not workload.plans:
            raise FedmstError(f"every task was blocked under {scheduler}, e.g. {workload.blocked[0][0]}: "
                              f"{workload.blocked[0][1]}")
        nodes = _worker_nodes(config, graph, workload)
        for node in slow:
            if node not in nodes:
                raise FedmstError(f"--slow-node {node}: node {node} runs no worker in this run (it only forwards)")
        runs.append(ResolvedRun(
            config=replace(config, scheduler=scheduler), graph=graph, workload=workload,
            link_failures=link_failures, kills=kills, slow=slow, worker_nodes=nodes,
            limits=worker_limits(nodes, config.cpus, config.memory, graph.nodes),
            delay_mode=host.delay_mode, netem_available=host.netem_available,
        ))
    backend_for(config.workers, config.image).check()  # last: the limits above are checked first
    return runs


def _tasks(config: RunConfig, graph: nx.Graph, model_bytes: int) -> list[Task]:
    if config.tasks == 1:
        return [place_task(graph, name="task0", local_models=config.local_models, model_bytes=model_bytes,
                           seed=config.seed, global_node=config.global_node, local_nodes=config.local_nodes)]
    return make_tasks(graph, config.tasks, config.local_models, model_bytes, config.seed)


def _worker_nodes(config: RunConfig, graph: nx.Graph, workload: WorkloadPlan) -> tuple[str, ...]:
    """Nodes that run an agent: every node holding a model or relaying for one, and with faults
    to inject every node, since a re-planned tree may aggregate anywhere."""
    if config.fail_links or config.kill_workers:
        return tuple(sorted(graph.nodes, key=node_order))
    return tuple(sorted(set().union(*(p.nodes for p in workload.plans)), key=node_order))
