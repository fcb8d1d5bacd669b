"""A run prepared once, before anything is created: options checked, topology, tasks and plans.

:func:`resolve` turns a :class:`~fedmst.run.config.RunConfig`, for one or several schedulers,
into :class:`ResolvedRun` objects: the topology loaded, the faults and limits parsed, the tasks
placed and sized, ordered and scheduled, their starts shifted, and the host checked (root, tools,
netem probed once). Bad input therefore fails in one line before any namespace, process or file
exists, and ``compare`` and ``sweep`` load, size and schedule everything once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import networkx as nx

from fedmst.core import faults
from fedmst.core.contention import Profile, capacities, cassini_offsets, profile_of
from fedmst.core.footprint import held_bytes
from fedmst.core.linktrace import LinkChange, read_link_trace
from fedmst.core.optical.circuits import fibre_refusal, planned_view
from fedmst.core.optical.policies import get_policy
from fedmst.core.plan import TRANSFER_PHASES, predicted_phase_seconds
from fedmst.core.ordering import shortest_jobs_first
from fedmst.core.schedulers import get_scheduler
from fedmst.core.selection import SELECTIONS, check_pool, participants
from fedmst.core.tasks import Task, compute_nodes, place_task
from fedmst.core.timescale import MEASURED_COSTS, PhaseLoad, TimeScale, phase_load, pick_scale, power_of_two
from fedmst.core.topology import load_topology, node_order, optical_nodes
from fedmst.core.traffic import BackgroundFlow, parse_flow, read_traffic_file
from fedmst.core.workload import TaskEntry, WorkloadPlan, make_tasks, read_workload, schedule_workload
from fedmst.errors import FedmstError
from fedmst.fl.devices import resolve_device
from fedmst.fl.strategies import build_strategy, strategy_knobs
from fedmst.net.capture import parse_links, require_tcpdump
from fedmst.net.congestion import Transport, prepare_transport
from fedmst.run.config import RunConfig, changed, validate
from fedmst.run.spread import Spread, SpreadHosts, check_cut, check_spread, spread_over
from fedmst.workers.backends import WorkerLimits, backend_for, check_backend, worker_limits
from fedmst.wording import counted


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
    transport: Transport | None = None
    """``--congestion-control`` built for this host (None: the host's default)."""
    background: tuple[BackgroundFlow, ...] = ()
    link_changes: tuple[LinkChange, ...] = ()
    listed: tuple[str, ...] = ()
    """The tasks' names as the workload lists them: task i is seeded with ``seed + i`` whatever
    order ``--order`` admits them in."""
    offsets: Mapping[str, float] = field(default_factory=dict)
    """Task -> seconds its start is shifted by ``--interleave`` (beyond its own ``start_s``)."""
    partition: Mapping[str, Any] = field(default_factory=dict)
    """How the tasks' training samples were split (:func:`split_data`; summary.json's ``partition``)."""
    profiles: tuple[Profile, ...] = ()
    """Each admitted task's round as predicted alone (:mod:`fedmst.core.contention`), in plan order."""
    time_scale: float = 1.0
    """``--time-scale`` decided: the factor given, or the one ``auto`` picked for these plans."""
    spread: Spread | None = None
    """With ``--ray``: the hosts it spans and each node's (:mod:`fedmst.run.spread`)."""
    scale_reason: str = ""
    """Why ``auto`` picked it ('' where the factor was given)."""
    device: str = "cpu"
    """Where the local models train (``--device`` decided on this host)."""

    @property
    def host_trainer(self) -> bool:
        """Whether one trainer process trains this host's local models (:func:`one_trainer`)."""
        return one_trainer(self.config, self.device)

    @property
    def scale(self) -> TimeScale:
        """How much slower than its network the run emulates it."""
        return TimeScale(self.time_scale)


@dataclass(frozen=True)
class Host:
    """What this host can emulate, found once per command (probing netem creates an interface)."""

    delay_mode: str
    netem_available: bool
    transport: Transport | None = None
    device: str = "cpu"
    """``--device`` decided: ``cpu`` or ``cuda:N`` (:func:`fedmst.fl.devices.resolve_device`)."""


def check_host(config: RunConfig) -> Host:
    """Root, the tools the emulation needs, ``--delay-mode`` decided against the kernel, and
    ``--congestion-control`` built (a BPF one compiled, its mistakes said before any network)."""
    from fedmst.net.emulation import probe_capabilities, require_tools, resolve_delay_mode

    require_tools()  # root, and the tools that probing the kernel needs
    capabilities = probe_capabilities()
    delay_mode = resolve_delay_mode(config.delay_mode, capabilities)
    require_tools(delay_mode, background=bool(config.traffic or config.traffic_file))
    transport = prepare_transport(config.congestion_control, config.cc_args, config.ecn_k, config.mtu)
    if transport.told_bytes and config.workers == "docker":
        raise FedmstError(f"--congestion-control {config.congestion_control}: the agents tell it each connection's "
                          "bytes through a kernel map, which an agent in a container may not open: use --workers "
                          "process")
    return Host(delay_mode=delay_mode, netem_available=capabilities.netem, transport=transport,
                device=_device(config))


def one_trainer(config: RunConfig, device: str) -> bool:
    """Whether one trainer process trains the host's local models, one at a time: on a GPU always
    (:mod:`fedmst.workers.gputrainer`), on the CPU with ``--host-trainer``."""
    return device != "cpu" or config.host_trainer


def _device(config: RunConfig) -> str:
    """``--device`` on this host; what a host trainer cannot serve, refused in one line."""
    no_trainer = config.device == "auto" and (config.client or config.ray)  # auto stays where a trainer cannot go
    device = "cpu" if no_trainer else resolve_device(config.device)
    trainer = "--host-trainer" if config.host_trainer else f"--device {config.device}"
    if one_trainer(config, device):
        if config.client:
            raise FedmstError(f"{trainer}: a Flower client (--client) trains on whatever device its own fit picks")
        if config.ray:
            instead = "--device cpu" if device != "cpu" else "no --host-trainer"
            raise FedmstError(f"{trainer}: a run spread over hosts (--ray) would need a trainer on each host, which "
                              f"fedmst does not start yet: leave out --ray, or use {instead}")
    return device


@dataclass(frozen=True)
class _Inputs:
    """What every scheduler's run shares: the network, its faults and changes, and the tasks."""

    graph: nx.Graph
    link_failures: tuple[faults.LinkFailure, ...]
    kills: tuple[faults.WorkerKill, ...]
    slow: Mapping[str, float]
    background: tuple[BackgroundFlow, ...]
    link_changes: tuple[LinkChange, ...]
    limits: Mapping[str, WorkerLimits]
    """Every node's worker limits (``--cpus``, ``--memory``)."""
    tasks: tuple[Task, ...]
    partition: Mapping[str, Any] = field(default_factory=dict)
    """summary.json's ``partition`` (:func:`split_data`)."""


def resolve(config: RunConfig, schedulers: Sequence[str] | None = None, host: Host | None = None,
            on: SpreadHosts | None = None) -> list[ResolvedRun]:
    """Check ``config`` and the host (unless ``host`` was checked already), then plan it with each
    of ``schedulers`` (default: ``config.scheduler``); every run shares the same topology and tasks.
    With ``--ray``, the run is spread over the hosts ``on`` names (found here unless a sweep found
    them once for all its points: :func:`fedmst.run.spread.check_spread`)."""
    validate(config)
    SELECTIONS.lookup(config.selection)
    get_policy(config.optical)
    check_backend(config.workers, limited=bool(config.cpus or config.memory))
    host = host or check_host(config)
    names = list(schedulers or [config.scheduler])
    inputs = _inputs(config, host, names)
    runs = _one_clock([_plan(config, host, inputs, scheduler) for scheduler in names])
    for run in runs if config.ray is None else ():  # a spread run's hosts are not this one
        check_memory(run)
    backend_for(config.workers, config.image).check()  # last: the limits above are checked first
    if config.ray is not None:
        on = on or check_spread(config, runs[0].graph)
        runs = _one_clock([_spread(r, host, on) for r in runs])
        for r in runs:
            check_cut(r.spread, r.scale.graph(r.graph))  # type: ignore[arg-type]
    return runs


def check_memory(run: ResolvedRun) -> None:
    """Refuse, in one line, a run whose agents' models alone (:func:`fedmst.core.footprint.held_bytes`,
    a floor) cannot fit: a container's ``--memory``, or the memory this host has available."""
    import psutil

    from fedmst.fl.training import STATE_COPIES
    from fedmst.workers.docker import memory_bytes

    if run.config.client:  # a Flower client's models are its own
        return
    held = held_bytes(run.workload.plans, STATE_COPIES[run.config.optimizer])
    models = ", ".join(sorted({f"{p.task.model} ({p.task.model_bytes / 1e6:.3g} MB)" for p in run.workload.plans}))
    for node, need in held.items():
        limit = run.limits[node].memory if node in run.limits else None
        if limit is not None and need > memory_bytes(limit):
            raise FedmstError(f"--memory {limit}: node {node}'s agent holds at least {need / 1e6:.0f} MB of models "
                              f"({models}: its local models, sums and {run.config.optimizer}'s training state), more "
                              "than its container may use: give it more memory, or a smaller --model")
    total, available = sum(held.values()), psutil.virtual_memory().available
    if run.config.workers == "process" and total > available:
        raise FedmstError(f"the agents would hold at least {total / 1e9:.1f} GB of models ({models}, "
                          f"{sum(p.task.k for p in run.workload.plans)} local models with their sums and training "
                          f"state), more than the {available / 1e9:.1f} GB this host has available: fewer tasks or "
                          "local models, or a smaller --model")


def _spread(run: ResolvedRun, host: Host, on: SpreadHosts) -> ResolvedRun:
    """``run`` spread over ``on``'s hosts, placed by a round of its plans; ``auto`` judged again, by
    the busiest host."""
    spread = spread_over(on, run.graph, run.workload.plans, "a round", seed=run.config.seed, mtu=run.config.mtu)
    scale, reason = run.time_scale, run.scale_reason
    if run.config.time_scale == "auto":
        view = planned_view(run.graph, run.workload.lightpaths)
        scale, reason = pick_time_scale(run.config, host, view, run.workload, spread)
    return replace(run, spread=spread, time_scale=scale, scale_reason=reason)


def _one_clock(runs: list[ResolvedRun]) -> list[ResolvedRun]:
    """The runs of one compare at one time scale, the largest ``auto`` picked for any of them:
    a slowed run counts training as each model's CPU time and one in real time as the wall-clock
    of models sharing the host's cores, so schedulers at different scales would not compare."""
    top = max(runs, key=lambda r: r.time_scale)
    return [r if r.time_scale == top.time_scale else
            replace(r, time_scale=top.time_scale, scale_reason=f"as {top.config.scheduler}: {top.scale_reason}")
            for r in runs]


def _inputs(config: RunConfig, host: Host, schedulers: Sequence[str]) -> _Inputs:
    """The topology, faults, background traffic, link changes and sized tasks, each checked."""
    graph = load_topology(config.topology)
    if config.pcap is not None:
        parse_links(config.pcap, graph)
        require_tcpdump()
    link_failures = tuple(faults.parse_link_failure(f, graph, config.rounds) for f in config.fail_links)
    kills = tuple(faults.parse_worker_kill(k, graph, config.rounds) for k in config.kill_workers)
    slow = dict(faults.parse_slow_node(spec, graph) for spec in config.slow_nodes)
    background = tuple(parse_flow(spec, graph) for spec in config.traffic) + tuple(
        read_traffic_file(config.traffic_file, graph) if config.traffic_file else ())
    link_changes = read_link_trace(config.link_trace, graph) if config.link_trace else ()
    if host.delay_mode == "off" and any(c.delay_ms is not None or c.loss is not None for c in link_changes):
        raise FedmstError(f"--link-trace {config.link_trace}: changes delay or loss, which --delay-mode off does "
                          "not apply; use --delay-mode auto, netem or userspace")
    refusal = fibre_refusal(graph, trace=config.link_trace, changed=[c.link for c in link_changes],
                            ecn=_ecn_asked(config, host.transport))
    if refusal:
        raise FedmstError(refusal)
    limits = worker_limits(graph.nodes, config.cpus, config.memory, graph.nodes)
    tasks = _sized(config, _tasks(config, graph), schedulers)
    return _Inputs(graph=graph, link_failures=link_failures, kills=kills, slow=slow, background=background,
                   link_changes=link_changes, limits=limits, tasks=tasks, partition=split_data(config, tasks))


def _ecn_asked(config: RunConfig, transport: Transport | None) -> str | None:
    """What asks the run's links to mark ECN, as the option that did, or None where nothing does."""
    if transport is None or transport.ecn is None:
        return None
    return f"--ecn-k {config.ecn_k}" if config.ecn_k else f"--congestion-control {config.congestion_control}"


def _sized(config: RunConfig, tasks: list[Task], schedulers: Sequence[str]) -> tuple[Task, ...]:
    """``tasks`` with their models' sizes, once every scheduler is known to exist: sizing loads
    torch (1.5 s), so every check that does not need it fails first."""
    for scheduler in schedulers:
        get_scheduler(scheduler)
    if config.client:
        return _flower_sized(config, tasks)
    from fedmst.fl import data, models, vision

    if config.download:
        fetched = [d for d in dict.fromkeys(t.dataset for t in tasks) if vision.is_vision(d)]
        if not fetched:
            raise FedmstError(f"--download fetches torchvision:NAME:ROOT datasets; {tasks[0].dataset!r} is read "
                              "from where it is")
        for dataset in fetched:
            vision.download(dataset)
    sizes: dict[tuple[str, str], int] = {}
    for kind in dict.fromkeys((t.model, t.dataset) for t in tasks):
        dataset = data.load_dataset(kind[1])
        sizes[kind] = models.sized_model(kind[0], dataset)
    return tuple(replace(task, model_bytes=sizes[(task.model, task.dataset)]) for task in tasks)


def split_data(config: RunConfig, tasks: Sequence[Task]) -> dict[str, Any]:
    """summary.json's ``partition``: ``--partition`` and, for each task (seeded as its agents seed it:
    the run's seed plus its place in the list), each local model's samples and class counts; a split
    the dataset cannot give (too many local models, classes or users) refused in one line."""
    if config.client:
        return {}
    from fedmst.fl import data, partitions

    out: dict[str, Any] = {"partition": config.partition, "tasks": {}}
    for i, task in enumerate(tasks):
        dataset = data.load_dataset(task.dataset)
        shards = data.shards(dataset, task.k, config.partition, seed=config.seed + i)
        out["tasks"][task.name] = partitions.counts(shards, dataset.y_train.numpy())
    return out


def _flower_sized(config: RunConfig, tasks: list[Task]) -> tuple[Task, ...]:
    """``tasks`` with the size of the Flower client's model: what its ``get_parameters`` returns (a
    client that cannot be loaded or run fails here, before any network is built)."""
    from fedmst.fl.flower import initial_layout, parse_run_config

    run_config = parse_run_config(config.run_config)
    sizes = {k: 4 * initial_layout(config.client, k, run_config, config.seed)[0].numel
             for k in dict.fromkeys(t.k for t in tasks)}
    return tuple(replace(task, model_bytes=sizes[task.k]) for task in tasks)


def _plan(config: RunConfig, host: Host, inputs: _Inputs, scheduler: str) -> ResolvedRun:
    """``scheduler``'s run: the tasks ordered, scheduled, their workers and starts decided."""
    graph, tasks, with_delay = inputs.graph, inputs.tasks, host.delay_mode != "off"
    if config.order == "sjf-contention":
        tasks = tuple(shortest_jobs_first(graph, tasks, scheduler, chunk_bytes=config.chunk_bytes,
                                          with_delay=with_delay, mtu=config.mtu))
    workload = schedule_workload(graph, tasks, scheduler, wavelengths=config.ocs_wavelengths, mtu=config.mtu,
                                 optical=config.optical, ots=config.ots_wavelengths, frame=config.frame)
    if not workload.plans:
        raise FedmstError(f"every task was blocked under {scheduler}, e.g. {workload.blocked[0][0]}: "
                          f"{workload.blocked[0][1]}")
    view = planned_view(graph, workload.lightpaths)  # what every prediction below is made on
    _check_strike_offsets(config, inputs, view, workload, scheduler, with_delay)
    nodes = _worker_nodes(config, graph, workload)
    for node in inputs.slow:
        if node not in nodes:
            raise FedmstError(f"--slow-node {node}: node {node} runs no worker in this run (it only forwards)")
    profiles = tuple(profile_of(p, planned_view(graph, workload.lightpaths, p.task.name),
                                compute_s=p.task.compute_s, start_s=p.task.start_s,
                                chunk_bytes=config.chunk_bytes, with_delay=with_delay, mtu=config.mtu)
                     for p in workload.plans)
    time_scale, reason = pick_time_scale(config, host, view, workload)
    offsets = {p.task.name: 0.0 for p in workload.plans}
    if config.interleave == "cassini":
        offsets = cassini_offsets(list(profiles), {p.task.name: p.task.rounds for p in workload.plans},
                                  capacities(view))
    return ResolvedRun(
        background=inputs.background, offsets=offsets, link_changes=inputs.link_changes,
        listed=tuple(t.name for t in inputs.tasks), partition=inputs.partition,
        config=replace(config, scheduler=scheduler), graph=graph,
        workload=workload, link_failures=inputs.link_failures, kills=inputs.kills, slow=inputs.slow,
        worker_nodes=nodes, limits={n: inputs.limits[n] for n in nodes},
        delay_mode=host.delay_mode, netem_available=host.netem_available, transport=host.transport,
        device=host.device, profiles=profiles, time_scale=time_scale, scale_reason=reason,
    )


def _check_strike_offsets(config: RunConfig, inputs: _Inputs, view: nx.Graph, workload: WorkloadPlan, scheduler: str,
                          with_delay: bool) -> None:
    """Refuse a fault ``+S`` seconds into a broadcast the plan predicts to be over by then
    (:func:`fedmst.core.faults.check_strike_offset`), where the plan's prediction is the round's
    own: no client selection, measured link state, link trace or background traffic changes or
    slows the plan first; ``view`` is the network as the plan's circuits carry it."""
    if not any(f.after_s is not None for f in (*inputs.link_failures, *inputs.kills)):
        return
    if config.clients_per_round or config.link_state == "measured" or inputs.link_changes or inputs.background:
        return
    broadcast_s = predicted_phase_seconds(workload.plans, view, "broadcast", chunk_bytes=config.chunk_bytes,
                                          with_delay=with_delay, mtu=config.mtu)
    faults.check_strike_offset(inputs.link_failures, inputs.kills, broadcast_s, scheduler)


def phase_loads(config: RunConfig, host: Host, graph: nx.Graph, workload: WorkloadPlan,
                on: set[str] | None = None) -> list[PhaseLoad]:
    """What each transfer phase of the run's plans asks of the host (:func:`phase_load`; ``on``: of
    the host holding only these nodes)."""
    with_delay = host.delay_mode != "off"
    return [phase_load(workload.plans, phase, predicted_phase_seconds(
        workload.plans, graph, phase, chunk_bytes=config.chunk_bytes, with_delay=with_delay, mtu=config.mtu),
        mtu=config.mtu, graph=graph, on=on) for phase in TRANSFER_PHASES]


def training_scale(workload: WorkloadPlan, scale: float, reason: str, *, what: str = "",
                   cores: int | None = None) -> tuple[float, str]:
    """``scale`` (and its ``reason``) raised, where needed, until the workload's local models
    training at once fit the host's cores: on independent clocks a model's training is waited out
    as N times its CPU time, so at most N models a core each train within their wait (the dumbbell
    of docs/contention.md: six models on two cores trained 2.1-2.3 s against 0.8 s of compute).
    ``cores``: what trains them, where not the host's cores (1: a host trainer's models take turns)."""
    trainers = sum(p.task.k for p in workload.plans)
    cores = cores or os.cpu_count() or 1
    if trainers / cores <= scale:
        return scale, reason
    return (float(power_of_two(trainers / cores)),
            f"{counted(trainers, 'local model')} {what}training on {counted(cores, 'core')}")


def pick_time_scale(config: RunConfig, host: Host, graph: nx.Graph, workload: WorkloadPlan,
                    spread: Spread | None = None) -> tuple[float, str]:
    """``--time-scale`` as a factor, and for ``auto`` why it is that one: from what the plans'
    transfer phases ask of this host (:func:`fedmst.core.timescale.pick_scale`) against its
    cores and the link ceiling it measured (once per boot), or, ``spread`` over hosts, of each
    host against its own cores, the busiest deciding; on ``graph`` as the plans' circuits
    carry it (:func:`fedmst.core.optical.circuits.planned_view`, which the caller made), and never
    below what time-sliced lightpaths' slots need (:meth:`fedmst.core.optical.slots.Frame.min_scale`:
    a given scale below it is refused)."""
    sliced = any(lp.slots for lp in workload.lightpaths)
    floor = config.frame.min_scale() if sliced else 1.0
    if config.time_scale != "auto":
        if float(config.time_scale) < floor:
            raise FedmstError(f"--time-scale {config.time_scale}: timeslots of {config.timeslot_us:g} µs with "
                              f"{config.guard_us:g} µs guards need a time scale of {floor:g} or more on this host "
                              "(docs/topologies.md, time-sliced wavelengths); give --time-scale auto")
        return float(config.time_scale), ""
    scale, reason = _host_scale(config, host, graph, workload, spread)
    if scale < floor:
        scale, reason = power_of_two(floor), (f"timeslots of {config.timeslot_us:g} µs with {config.guard_us:g} µs "
                                              "guards")
    if config.clock == "independent":  # trainings are waited out beside the transfers, not counted
        cores = 1 if one_trainer(config, host.device) else None  # one trainer: the models train in turn
        return training_scale(workload, float(scale), reason, cores=cores)
    return float(scale), reason


def _host_scale(config: RunConfig, host: Host, graph: nx.Graph, workload: WorkloadPlan,
                spread: Spread | None) -> tuple[int, str]:
    """What the plans' transfer phases ask of this host (:func:`fedmst.core.timescale.pick_scale`),
    or of the busiest host of ``spread``: each host's share (its nodes' agents, the links they
    receive on) against its cores, with this host's link ceiling (the hosts are taken to forward
    alike; ``docs/multi-host.md``)."""
    from fedmst.net.calibrate import link_ceiling_mbps
    from fedmst.net.delayline import running_kind
    from fedmst.net.emulation import Capabilities

    try:
        ceiling: float | None = link_ceiling_mbps(host.delay_mode, config.mtu,
                                                  Capabilities(netem=host.netem_available))
    except FedmstError:  # the costs keep their reference and links go unchecked against it
        ceiling = None
    line = running_kind() if host.delay_mode == "userspace" else "compiled"  # netem's cost: not measured
    costs = MEASURED_COSTS[line].on_host(ceiling)
    fastest = max(float(c) for _, _, c in graph.edges(data="capacity_mbps"))
    if spread is None:
        return pick_scale(phase_loads(config, host, graph, workload), costs, cores=os.cpu_count() or 1,
                          fastest_mbps=fastest, ceiling_mbps=ceiling, delay_lines=host.delay_mode == "userspace")
    by_host = {}
    for name, cores in spread.on.cores.items():
        nodes = {n for n, h in spread.placed.hosts.items() if h == name}
        by_host[name] = pick_scale(phase_loads(config, host, graph, workload, on=nodes), costs, cores=cores,
                                   fastest_mbps=fastest, ceiling_mbps=ceiling,
                                   delay_lines=host.delay_mode == "userspace")
    busiest = max(by_host, key=lambda h: by_host[h][0])
    scale, why = by_host[busiest]
    return scale, f"host {busiest}, the busiest: {why}" if scale > 1 else f"each of the {len(by_host)} hosts keeps up"


def _tasks(config: RunConfig, graph: nx.Graph) -> list[Task]:
    """The tasks, from the workload file or placed by seed, each with its model, dataset, rounds and
    compute time given (the run's options where the file says nothing)."""
    if config.workload is not None:
        entries = read_workload(config.workload, graph)
    elif config.tasks == 1:
        entries = [TaskEntry(place_task(graph, name="task0", local_models=config.local_models, model_bytes=0,
                                        seed=config.seed, global_node=config.global_node,
                                        local_nodes=config.local_nodes))]
    else:
        entries = [TaskEntry(t) for t in make_tasks(graph, config.tasks, config.local_models, 0, config.seed)]
    strategy = build_strategy(config.strategy, strategy_knobs(config.strategy_args))
    tasks = [replace(e.task(rounds=config.rounds, compute_s=config.compute_s, model=config.model,
                            dataset=config.dataset),
                     sums_in_path=strategy.decomposable)  # else relays forward every update whole
             for e in entries]
    for task in tasks:  # refused before anything starts
        count = participants(config.clients_per_round, task.k) if config.clients_per_round else task.k
        strategy.check(count)
        check_pool(config.selection_pool, count, str(config.clients_per_round))
    if config.clock == "lockstep":
        own = [t.name for t in tasks if t.rounds != config.rounds or t.start_s]
        if own:
            raise FedmstError(f"--workload {config.workload}: task(s) {', '.join(own)} have their own rounds or "
                              "start_s: add --clock independent (in lockstep every task runs every round together)")
    return tasks


def _worker_nodes(config: RunConfig, graph: nx.Graph, workload: WorkloadPlan) -> tuple[str, ...]:
    """Nodes that run an agent: every node holding a model or relaying for one, and with faults
    to inject, a measured link state or client selection every node that can compute, since a
    re-planned tree may aggregate on any of them (never on an all-optical node)."""
    if config.fail_links or config.kill_workers or config.link_state == "measured" or config.clients_per_round:
        return tuple(sorted(compute_nodes(graph), key=node_order))
    return tuple(sorted(set().union(*(p.nodes for p in workload.plans)), key=node_order))


def unused_optical_options(config: RunConfig, graph: nx.Graph) -> str | None:
    """A line for the console where the circuits' options were changed on a topology with no
    all-optical node: there they set nothing up, and a user should not read a result as theirs.

    >>> from fedmst.core.topology import load_topology
    >>> unused_optical_options(RunConfig(reconfig_ms=20.0), load_topology("line3"))
    '--reconfig-ms: no node of line3 is all-optical, so no lightpath is set up (docs/topologies.md)'
    >>> unused_optical_options(RunConfig(reconfig_ms=20.0), load_topology("spine-leaf:2,2")) is None
    True
    """
    if optical_nodes(graph):
        return None
    given = changed(config, ("optical", "reconfig_ms", "ots_wavelengths", "timeslots", "timeslot_us", "guard_us"))
    return (f"{', '.join(given)}: no node of {graph.graph['name']} is all-optical, so no lightpath is set up "
            "(docs/topologies.md)") if given else None


__all__ = ["Host", "ResolvedRun", "check_host", "phase_loads", "pick_time_scale", "resolve", "training_scale",
           "unused_optical_options"]
