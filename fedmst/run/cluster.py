"""``fedmst cluster``: jobs from a trace arrive, wait for slots, run and end, on the emulated
network (``--mode emulate``, :mod:`fedmst.run.cluster_emulate`) or on the fluid model (``--mode
simulate``), one event loop and one set of policies for both (:mod:`fedmst.core.cluster`).

:func:`resolve` checks everything before anything runs (the options, the topology's slots, the
trace, each job's model, the policies and scheduler, and for emulation the host), sizes each job's
model and gives each job its training time per round as its ``compute_s``: what the trace or
``--compute-s`` asks for, or longer where this host takes longer to train the job's model on its
largest data shard for its epochs. Both modes train for that time (the fluid model as a phase's
length, the agents as a floor they train up to), so that they differ only in the network.
:func:`run` claims the folder and writes each job's rows as it ends.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import networkx as nx

from fedmst.core.cluster.jobs import Job, JobError
from fedmst.core.cluster.loop import Cluster, Ended, Planner, Progress, Runner, Stopped, planner, run_cluster
from fedmst.core.cluster.policies import ORDERS, PLACEMENTS, PREEMPTIONS, ClusterView
from fedmst.core.cluster.simulate import SimulatedRunner
from fedmst.core.cluster.slots import Occupancy, node_slots
from fedmst.core.cluster.traces import Trace, read_jobs
from fedmst.core.contention import Profile, profile_of
from fedmst.core.optical.circuits import fibres, planned_view
from fedmst.core.optical.held import Wavelengths
from fedmst.core.optical.policies import get_policy
from fedmst.core.optical.wavelengths import Lightpath
from fedmst.core.plan import TRANSFER_PHASES, Plan, loaded_phase_seconds
from fedmst.core.schedulers import get_scheduler
from fedmst.core.topology import load_topology
from fedmst.core.workload import WorkloadPlan
from fedmst.errors import FedmstError
from fedmst.fl.strategies import build_strategy, strategy_knobs
from fedmst.run import folders
from fedmst.run.cluster_records import (JOB_FIELDS, JOBS, NODE_SEPARATOR, ROUNDS, SLOT_FIELDS, SLOTS, STOPPED,
                                        STOPPED_FIELDS, TASKS, Appender, ClusterSummary, JobRow, figures,
                                        read_jobs_csv, read_slots_csv)
from fedmst.run.config import RunConfig, split_list, validate
from fedmst.run.experiments import claimed
from fedmst.run.layout import COMPARISON, run_folder_name
from fedmst.run.prepare import ResolvedRun
from fedmst.run.report import Report
from fedmst.run.measure import round_means, task_rows
from fedmst.run.results import ROUND_FIELDS, TASK_FIELDS, write_csv, write_json


@dataclass(frozen=True)
class ResolvedCluster:
    """A cluster command, fully resolved: what the event loop and its back end need."""

    config: RunConfig
    graph: nx.Graph
    slots: Mapping[str, int]
    trace: Trace
    jobs: tuple[Job, ...]
    """The trace's jobs with the command's options where it said nothing."""
    model_bytes: Mapping[str, int]
    """Job -> bytes of its model's weights."""
    seeds: Mapping[str, int]
    """Job -> the seed of its data shards and initial weights: ``--seed`` plus its place in the trace."""
    with_delay: bool
    base: ResolvedRun | None = None
    """``--mode emulate``: the cluster as one run (its network, options, host and time scale)."""
    scale_reason: str = ""

    @property
    def time_scale(self) -> float:
        return self.base.time_scale if self.base is not None else 1.0


def resolve(config: RunConfig) -> ResolvedCluster:
    """Check ``config`` for a cluster and prepare it; bad input fails here, in one line, before
    any network, process or file exists."""
    validate(config)
    if config.jobs is None:
        raise FedmstError("fedmst cluster needs --jobs: a .csv or .jsonl file, poisson:RATE,N, philly:FILE or "
                          "helios:FILE")
    ORDERS.lookup(config.job_order)
    PLACEMENTS.lookup(config.placement)
    PREEMPTIONS.lookup(config.preempt)
    get_scheduler(config.scheduler)
    graph = load_topology(config.topology)
    get_policy(config.optical)
    wavelengths(graph, config)  # the wavelengths' terms, refused now rather than once the network is up
    slots = node_slots(graph, config.slots)
    if sum(slots.values()) < 2:
        raise JobError(f"topology {graph.graph['name']!r}: the cluster has 1 slot, and a job needs 2 at least (a local "
                       "model and its G): give more --slots")
    trace = read_jobs(config.jobs, seed=config.seed, time_compress=config.time_compress,
                      max_local_models=sum(slots.values()) - 1)
    if config.time_compress != 1 and config.jobs.startswith("poisson:"):  # a factor read_jobs found valid
        raise FedmstError(f"--time-compress {config.time_compress:g} with --jobs {config.jobs}: a Poisson trace's "
                          "rate is already per minute of network time; give the rate you want instead")
    jobs = tuple(j.filled(rounds=config.rounds, model=config.model, dataset=config.dataset, epochs=config.epochs,
                          compute_s=config.compute_s) for j in trace.jobs)
    sizes = _model_sizes(jobs)
    seeds = {j.name: config.seed + i for i, j in enumerate(jobs)}
    # a job's training time, declared once: what both modes train for (module docstring)
    jobs = tuple(replace(j, compute_s=_train_s(config, j, seeds[j.name])) for j in jobs)
    resolved = ResolvedCluster(
        config=config, graph=graph, slots=slots, trace=trace, jobs=jobs,
        model_bytes={j.name: sizes[(str(j.model), str(j.dataset))] for j in jobs}, seeds=seeds,
        with_delay=config.delay_mode != "off")
    if config.mode == "simulate":
        return resolved
    return _emulated(resolved)


def _emulated(resolved: ResolvedCluster) -> ResolvedCluster:
    """``resolved`` with the cluster as one run to emulate: the host checked, every node with a
    slot a worker node, and the time scale ``auto`` picks for a full cluster (:func:`_full`)."""
    from fedmst.run.prepare import check_host, pick_time_scale, training_scale
    from fedmst.run.spread import check_cut, check_spread, spread_over
    from fedmst.workers.backends import backend_for, check_backend

    config = resolved.config
    check_backend(config.workers, limited=False)
    host = check_host(config)
    resolved = replace(resolved, with_delay=host.delay_mode != "off")  # as the fluid model runs the trace
    full = _full(resolved)
    backend_for(config.workers, config.image).check()
    spread = None
    if config.ray is not None:  # placed by the trace, and auto judged by the busiest host of a full cluster
        spread = spread_over(check_spread(config, resolved.graph), resolved.graph, _trace_plans(resolved),
                             "over the trace as the simulator runs it", seed=config.seed, mtu=config.mtu)
    view = planned_view(resolved.graph, full.lightpaths)  # the network as the full cluster's lightpaths carry it
    scale, reason = pick_time_scale(config, host, view, full, spread)  # a given scale below the slots' floor: refused
    if config.time_scale == "auto":  # jobs run on their own clocks: a full cluster's trainings must fit the cores
        scale, reason = training_scale(full, scale, reason, what="of a full cluster ")
    base = ResolvedRun(
        config=config, graph=resolved.graph, workload=full, link_failures=(), kills=(), slow={},
        worker_nodes=tuple(n for n, k in resolved.slots.items() if k), limits={}, delay_mode=host.delay_mode,
        netem_available=host.netem_available, transport=host.transport, time_scale=scale, scale_reason=reason,
        spread=spread)
    if spread is not None:
        check_cut(spread, base.scale.graph(base.graph))
    return replace(resolved, base=base, scale_reason=reason)


def _full(resolved: ResolvedCluster) -> WorkloadPlan:
    """The trace's first jobs placed on an empty cluster until it is full, planned, with the
    lightpaths they would hold on a fabric: what the host must keep up with when every slot is busy
    (``--time-scale auto``, whose floor time-sliced lightpaths' slots set)."""
    config, cluster = resolved.config, _cluster(resolved)
    occupancy = Occupancy(resolved.slots)
    plan, comm_s = _planner(resolved), cluster.comm_s
    plans: list[Plan] = []
    for job in (j for j in resolved.jobs if j.slots <= occupancy.total):  # the others are rejected as they come
        view = ClusterView(resolved.graph, occupancy.free, 0.0, config.seed, slots=resolved.slots,
                           plan=lambda job, placed: plan(job, placed, plans),
                           comm_s=None if comm_s is None else lambda p: comm_s(p, plans))
        placed = cluster.placement.place(job, view)
        if placed is None:
            break
        occupancy.take(job.name, placed.nodes, 0.0)
        plans.append(plan(job, placed, plans))
    held = cluster.wavelengths
    for p in plans if held is not None else ():
        held.admit(p)  # a job that would block holds nothing: it would wait
    return WorkloadPlan(scheduler=config.scheduler, plans=tuple(plans), blocked=(), wavelengths=0,
                        lightpaths=held.spectrum.lightpaths if held is not None else ())


def _cluster(resolved: ResolvedCluster) -> Cluster:
    """The cluster's slots and policies, and the prediction its policies look ahead with."""
    config = resolved.config

    def comm_s(plan: Plan, running: Sequence[Plan]) -> float:
        return sum(loaded_phase_seconds(plan, running, resolved.graph, phase, chunk_bytes=config.chunk_bytes,
                                        with_delay=resolved.with_delay, mtu=config.mtu) for phase in TRANSFER_PHASES)

    def profile(job: Job, plan: Plan) -> Profile:
        return profile_of(plan, resolved.graph, compute_s=job.compute_s or 0.0, chunk_bytes=config.chunk_bytes,
                          with_delay=resolved.with_delay, mtu=config.mtu)

    return Cluster(resolved.graph, resolved.slots, config.seed, ORDERS.lookup(config.job_order)(),
                   PLACEMENTS.lookup(config.placement)(), PREEMPTIONS.lookup(config.preempt)(), comm_s=comm_s,
                   profile=profile, wavelengths=wavelengths(resolved.graph, config))


def wavelengths(graph: nx.Graph, config: RunConfig) -> Wavelengths | None:
    """On a fabric, its fibres' wavelengths as the running jobs will hold them (None elsewhere:
    the links carry their full capacity, as in a run)."""
    if not fibres(graph):
        return None
    return Wavelengths(graph, config.optical, ocs=config.ocs_wavelengths, ots=config.ots_wavelengths,
                       frame=config.frame, mtu=config.mtu)


def _planner(resolved: ResolvedCluster) -> Planner:
    config = resolved.config
    strategy = build_strategy(config.strategy, strategy_knobs(config.strategy_args))
    return planner(resolved.graph, config.scheduler, lambda job: resolved.model_bytes[job.name],
                   sums_in_path=strategy.decomposable, mtu=config.mtu)


def _model_sizes(jobs: tuple[Job, ...]) -> dict[tuple[str, str], int]:
    """Bytes of every kind of model the jobs train (an unknown model or dataset fails here, naming it)."""
    from fedmst.fl import data, models

    sizes = {}
    for model, dataset in dict.fromkeys((str(j.model), str(j.dataset)) for j in jobs):
        try:
            sizes[(model, dataset)] = models.sized_model(model, data.load_dataset(dataset))
        except FedmstError as exc:
            first = next(j.name for j in jobs if (j.model, j.dataset) == (model, dataset))
            raise JobError(f"job {first}: {exc}") from None
    return sizes


def _train_s(config: RunConfig, job: Job, seed: int) -> float:
    """Seconds one round of ``job``'s training lasts: its ``compute_s``, or longer where this host
    takes longer to train its largest shard for its epochs (what the slowest local model sets)."""
    from fedmst.fl import data

    dataset = data.load_dataset(str(job.dataset))
    try:
        shards = data.shards(dataset, job.local_models, config.partition, seed=seed)
    except FedmstError as exc:
        raise JobError(f"job {job.name}: {exc}") from None
    measured = (job.epochs or 1) * max(map(len, shards)) * _sample_s(str(job.model), str(job.dataset),
                                                                     config.batch_size, config.optimizer, config.lr)
    return max(job.compute_s or 0.0, measured)


@cache
def _sample_s(model: str, dataset: str, batch_size: int, optimizer: str, lr: float) -> float:
    """Seconds this host takes to train ``model`` on one sample of ``dataset``, as an agent trains
    (one thread): the median of three epochs over up to 512 samples."""
    import torch

    from fedmst.fl import data, models, training

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ds = data.load_dataset(dataset)
        x, y = ds.x_train[:512], ds.y_train[:512]
        net = models.build_model(model, num_classes=ds.num_classes, input_shape=ds.input_shape)
        times = []
        for seed in range(3):
            began = time.perf_counter()
            training.train_local(net, x, y, epochs=1, batch_size=batch_size, lr=lr, seed=seed, optimizer=optimizer)
            times.append(time.perf_counter() - began)
    finally:
        torch.set_num_threads(threads)
    return sorted(times)[1] / len(x)


def _row(life: Ended) -> JobRow:
    out, placed = life.outcome, life.placed
    return JobRow(
        job=life.job.name, submit_s=life.job.submit_s, start_s=life.start_s, end_s=life.end_s, queue_s=life.queue_s,
        jct_s=life.jct_s, local_models=life.job.local_models, rounds=out.rounds if out else 0,
        nodes=NODE_SEPARATOR.join(placed.nodes) if placed else "", status=life.status, reason=life.reason,
        preemptions=life.preemptions, mean_round_s=out.mean_round_s if out else None,
        link_bytes=out.link_bytes if out else 0, final_accuracy=out.final_accuracy if out else None,
        comm_s=out.comm_s if out else 0.0, setup_s=out.setup_s if out else 0.0,
        placement=placed.note if placed else "", train_s=life.job.compute_s or 0.0,
        rounds_asked=life.job.rounds or 0)


def _task_rows(life: Ended) -> list[dict[str, Any]]:
    """The job's rounds as tasks.csv rows (an independent clock's columns)."""
    if life.outcome is None:
        return []
    name = life.job.name
    return task_rows(life.outcome.spans, {name: life.outcome.accuracies}, {name: life.job.local_models})


class _Files:
    """The folder's tables, a row added as each job ends."""

    def __init__(self, out: Path) -> None:
        self.jobs, self.slots = Appender(out / JOBS, JOB_FIELDS), Appender(out / SLOTS, SLOT_FIELDS)
        self.tasks = Appender(out / TASKS, TASK_FIELDS)
        self.preemptions = Appender(out / STOPPED, STOPPED_FIELDS)
        self.out, self.task_rows = out, list[dict[str, Any]]()

    def ended(self, life: Ended) -> None:
        self.jobs.add([asdict(_row(life))])
        self.slots.add(asdict(s) for s in life.slots)
        rows = _task_rows(life)
        self.tasks.add(rows)
        self.task_rows += rows

    def close(self) -> None:
        """Close the tables, and write rounds.csv: each round's means over the jobs that ran it."""
        for table in (self.jobs, self.slots, self.tasks, self.preemptions):
            table.close()
        write_csv(self.out / ROUNDS, ROUND_FIELDS, round_means(self.task_rows))


def run(resolved: ResolvedCluster, output: folders.OutputFolder, report: Report,
        progress: Callable[[Progress, float], None] = lambda p, host_s: None) -> ClusterSummary:
    """Run the cluster into ``output`` and return its summary; jobs.csv, slots.csv and tasks.csv
    grow as jobs end, and summary.json says how the command ended, whatever ended it.
    ``progress`` is told where the loop stands after every event, with the host's seconds so far."""
    config, out = resolved.config, output.path
    began = time.monotonic()
    network: dict[str, dict[str, Any]] = {}  # what the emulation says as it closes: its TCP's terms, its hosts
    cluster = _cluster(resolved)
    optical = cluster.wavelengths.summary if cluster.wavelengths is not None else dict
    with claimed(output, "cluster",
                 lambda status: _summarise(resolved, out, status, time.monotonic() - began, network, optical())):
        write_json(out / "config.json", asdict(config))
        left_out = resolved.trace.left_out()  # public traces' jobs without a GPU or a run time
        if left_out is not None:
            report(left_out)
        files = _Files(out)
        try:
            with _runner(resolved, out, report, network) as runner:
                def ended(life: Ended) -> None:
                    files.ended(life)
                    if life.status not in ("finished", "interrupted"):  # the command says it was interrupted
                        report(f"job {life.job.name} {life.status} at {life.end_s:.2f} s: {life.reason}")

                def stopped(stop: Stopped) -> None:
                    files.preemptions.add([asdict(stop)])

                run_cluster(resolved.jobs, cluster, runner, _planner(resolved), ended=ended, stopped=stopped,
                            progress=lambda p: progress(p, time.monotonic() - began))
        finally:
            files.close()
    return ClusterSummary.read(out)


@contextmanager
def _runner(resolved: ResolvedCluster, out: Path, report: Report,
            network: dict[str, dict[str, Any]]) -> Iterator[Runner]:
    """The back end of ``--mode``: the fluid model, or the emulated network (built here, torn down
    whatever ends the block, its TCP's terms then put in ``network["transport"]``, and with
    ``--ray`` where it ran in ``network["hosts"]``)."""
    config = resolved.config
    if resolved.base is None:
        yield _simulated(resolved)
        return
    from fedmst.net.cleanup import RunState
    from fedmst.net.emulation import Emulation
    from fedmst.run.cluster_emulate import EmulatedRunner
    from fedmst.run.engine import emulation
    from fedmst.run.results import write_transport
    from fedmst.workers.backends import backend_for

    base, state = resolved.base, RunState()
    backend = backend_for(config.workers, config.image, {})
    emu: Emulation | None = None
    try:
        emu, _ = emulation(base, backend, state, out, report)
        with emu:
            report(f"run {state.id}'s links: htb bandwidth; {emu.emulated()['note']}; TCP congestion control "
                   f"{config.congestion_control}"
                   + (f"; {base.scale.describe(base.graph)}" if base.scale.slowed else "")
                   + (f" (auto: {resolved.scale_reason})" if base.scale.slowed and resolved.scale_reason else ""))
            runner = EmulatedRunner(base, emu, backend, out, state.scratch, resolved.seeds)
            with runner.measuring():
                yield runner
    finally:
        if emu is not None:
            write_transport(out, emu.tcp, base.graph)
            network["transport"] = emu.tcp.terms()
            if config.ray is not None:
                network["hosts"] = emu.spread()  # type: ignore[attr-defined]
        try:
            backend.down()
        finally:
            state.remove()


def _simulated(resolved: ResolvedCluster, kind: type[SimulatedRunner] = SimulatedRunner) -> SimulatedRunner:
    config = resolved.config
    return kind(resolved.graph, train_s=lambda job: job.compute_s or 0.0, chunk_bytes=config.chunk_bytes,
                with_delay=resolved.with_delay, mtu=config.mtu, reconfig_s=config.reconfig_ms / 1e3)


class _Recording(SimulatedRunner):
    """The fluid model, keeping every job's plan once per round it starts with."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.rounds_run: list[Plan] = []

    def start(self, job: Job, plan: Plan, first_round: int = 1, start_at_s: float | None = None,
              circuits: tuple[Lightpath, ...] = ()) -> None:
        self.rounds_run += [plan] * ((job.rounds or 1) - first_round + 1)
        super().start(job, plan, first_round, start_at_s, circuits)


def _trace_plans(resolved: ResolvedCluster) -> tuple[Plan, ...]:
    """Every job's plan, once per round, as the fluid model runs the trace: what a cluster spread
    over hosts is placed by (the nodes a job gets depend on the jobs before it, which the trace's
    first full cluster alone does not say). The emulation may place a job elsewhere where its
    timings differ; the tunnels' measured bytes say how far."""
    runner = _simulated(resolved, _Recording)
    assert isinstance(runner, _Recording)
    run_cluster(resolved.jobs, _cluster(resolved), runner, _planner(resolved))
    return tuple(runner.rounds_run)


Policies = tuple[str, str, str]
"""A cluster's policies: its queue order, placement and preemption."""


def parse_policies(spec: str) -> list[Policies]:
    """``--policies``: ``ORDER/PLACEMENT[/PREEMPT]`` items, comma-separated, each part a registered
    name or ``package.module:Class`` (checked here, before anything runs); no preemption where the
    third part is left out.

    >>> parse_policies("fifo/random,las/network/network")
    [('fifo', 'random', 'none'), ('las', 'network', 'network')]
    """
    if not spec.strip():
        raise FedmstError("--policies is empty: give ORDER/PLACEMENT[/PREEMPT] items separated by commas, "
                          "e.g. fifo/random,las/network/network (or leave the option out for one cluster)")
    policies = []
    for item in split_list(spec, "--policies"):
        parts = item.split("/")
        if len(parts) > 3:
            raise FedmstError(f"--policies {item}: {len(parts)} parts; give ORDER/PLACEMENT or "
                              "ORDER/PLACEMENT/PREEMPT, e.g. las/network/network")
        if len(parts) < 2 or not all(parts):
            raise FedmstError(f"--policies {item}: give ORDER/PLACEMENT or ORDER/PLACEMENT/PREEMPT, e.g. fifo/random")
        order, placement, preempt = (*parts, "none") if len(parts) == 2 else parts
        ORDERS.lookup(order)
        PLACEMENTS.lookup(placement)
        PREEMPTIONS.lookup(preempt)
        policies.append((order, placement, preempt))
    folders_ = [policy_folder(*p) for p in policies]
    twice = sorted({f for f in folders_ if folders_.count(f) > 1})
    if twice:
        raise FedmstError(f"--policies: {', '.join(twice)} given twice")
    return policies


def policy_spec(order: str, placement: str, preempt: str) -> str:
    """The policies as ``--policies`` writes them (no third part for no preemption)."""
    return "/".join((order, placement) if preempt == "none" else (order, placement, preempt))


def policy_folder(order: str, placement: str, preempt: str = "none") -> str:
    """Where one policy's cluster goes in a comparison: ``ORDER+PLACEMENT[+PREEMPT]``, each part a
    plain folder name (a ``package.module:Class`` one's ``:`` made ``_``).

    >>> policy_folder("sjf", "pack"), policy_folder("fifo", "mypkg.mod:Mine"), policy_folder("las", "network", "las")
    ('sjf+pack', 'fifo+mypkg.mod_Mine', 'las+network+las')
    """
    return "+".join(run_folder_name(p) for p in ((order, placement) if preempt == "none" else
                                                 (order, placement, preempt)))


def compare(resolved: ResolvedCluster, policies: Sequence[Policies], output: folders.OutputFolder,
            report: Report, progress: Callable[[Progress, float], None] = lambda p, host_s: None
            ) -> dict[str, ClusterSummary]:
    """Run the same trace (the same jobs, training times and seeds) under each ``(order,
    placement, preemption)`` into ``output/``:func:`policy_folder`; ``output/comparison.json``
    holds every summary and says how the comparison ended, whatever ended it."""
    out = output.path
    names = [policy_folder(*p) for p in policies]
    summaries: dict[str, ClusterSummary] = {}

    def record(status: str) -> None:
        write_json(out / COMPARISON, {
            "status": status, "policies": names,
            "runs": {n: summaries[n].status if n in summaries else "not run" for n in names},
            "summaries": {n: asdict(s) for n, s in summaries.items()}})

    with claimed(output, "cluster", record):
        for (order, placement, preempt), name in zip(policies, names):
            report(f"[{name}] order {order}, placement {placement}, preemption {preempt}")
            one = replace(resolved, config=replace(resolved.config, job_order=order, placement=placement,
                                                   preempt=preempt, out=str(out / name)))
            summaries[name] = run(one, folders.OutputFolder(out / name, False),
                                  lambda line, name=name: report(f"[{name}] {line}"), progress)
    return summaries


def _summarise(resolved: ResolvedCluster, out: Path, status: str, wall_s: float,
               network: Mapping[str, Mapping[str, Any]], optical: Mapping[str, Any]) -> None:
    """summary.json from the folder's tables (what they hold is what the command got to)."""
    config = resolved.config
    rows = read_jobs_csv(out) if (out / JOBS).exists() else []
    held = read_slots_csv(out) if (out / SLOTS).exists() else []
    stops = len((out / STOPPED).read_text().splitlines()) - 1 if (out / STOPPED).exists() else 0
    total = sum(resolved.slots.values())
    ClusterSummary(
        status=status, command="cluster", mode=config.mode, scheduler=config.scheduler, order=config.job_order,
        placement=config.placement, preempt=config.preempt, preemptions=max(0, stops),
        topology=resolved.graph.graph["name"], slots=total, jobs=len(resolved.jobs),
        jobs_finished=sum(r.status == "finished" for r in rows),
        jobs_rejected=sum(r.status == "rejected" for r in rows),
        jobs_failed=sum(r.status == "failed" for r in rows),
        jobs_interrupted=sum(r.status == "interrupted" for r in rows), **figures(rows, held, total),  # type: ignore[arg-type]
        time_scale=resolved.time_scale, wall_s=wall_s, skipped=resolved.trace.skipped,
        transport=dict(network.get("transport", {})), hosts=dict(network.get("hosts", {})),
        optical=dict(optical)).write(out)


__all__ = ["Policies", "ResolvedCluster", "compare", "parse_policies", "policy_folder", "policy_spec", "resolve", "run"]
