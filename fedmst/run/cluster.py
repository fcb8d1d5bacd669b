"""``fedmst cluster``: jobs from a trace arrive, wait for slots, run and end, on the emulated
network (``--mode emulate``) or on the fluid model (``--mode simulate``), one event loop and one
set of policies for both (:mod:`fedmst.core.cluster`).

:func:`resolve` checks everything before anything runs (the options, the topology's slots, the
trace, each job's model, the policies and scheduler), sizes each job's model and gives each job
its training time per round: ``compute_s`` where the trace or ``--compute-s`` asks for more, else
what this host measured for its model, its largest data shard and its epochs. Both modes use that
time: the fluid model as a phase's length, the emulation as a floor the agents train up to, so
that training is the same in both and the modes differ only in the network.
:func:`run` claims the folder and writes each job's rows as it ends.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any, Callable, Mapping

import networkx as nx

from fedmst.core.cluster.jobs import Job, JobError
from fedmst.core.cluster.loop import Cluster, Ended, Progress, planner, run_cluster
from fedmst.core.cluster.policies import ORDERS, PLACEMENTS
from fedmst.core.cluster.simulate import SimulatedRunner
from fedmst.core.cluster.slots import node_slots
from fedmst.core.cluster.traces import Trace, read_jobs
from fedmst.core.contention import ROUND_PHASES, iteration_times
from fedmst.core.schedulers import get_scheduler
from fedmst.core.topology import load_topology
from fedmst.errors import FedmstError
from fedmst.fl.strategies import build_strategy, strategy_knobs
from fedmst.run import folders
from fedmst.run.cluster_records import (JOB_FIELDS, JOBS, SLOT_FIELDS, SLOTS, TASKS, Appender, ClusterSummary,
                                        JobRow, figures, read_jobs_csv, read_slots_csv)
from fedmst.run.config import RunConfig, validate
from fedmst.run.report import Report, failed
from fedmst.run.results import TASK_FIELDS, write_json
from fedmst.wording import counted


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
    train_s: Mapping[str, float]
    """Job -> seconds one round's training lasts (the network's)."""
    with_delay: bool


def resolve(config: RunConfig) -> ResolvedCluster:
    """Check ``config`` for a cluster and prepare it; bad input fails here, in one line, before
    any network, process or file exists."""
    validate(config)
    if config.jobs is None:
        raise FedmstError("fedmst cluster needs --jobs: a .csv or .jsonl file, poisson:RATE,N, philly:FILE or "
                          "helios:FILE")
    ORDERS.lookup(config.order)
    PLACEMENTS.lookup(config.placement)
    get_scheduler(config.scheduler)
    if config.mode == "emulate":
        raise FedmstError("--mode emulate: not built yet in this version; use --mode simulate")
    graph = load_topology(config.topology)
    slots = node_slots(graph, config.slots)
    trace = read_jobs(config.jobs, seed=config.seed, time_compress=config.time_compress,
                      max_local_models=sum(slots.values()) - 1)
    jobs = tuple(j.filled(rounds=config.rounds, model=config.model, dataset=config.dataset, epochs=config.epochs,
                          compute_s=config.compute_s) for j in trace.jobs)
    sizes = _model_sizes(jobs)
    index = {j.name: i for i, j in enumerate(jobs)}
    return ResolvedCluster(
        config=config, graph=graph, slots=slots, trace=trace, jobs=jobs,
        model_bytes={j.name: sizes[(str(j.model), str(j.dataset))] for j in jobs},
        train_s={j.name: _train_s(config, j, config.seed + index[j.name]) for j in jobs},
        with_delay=config.delay_mode != "off")


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
        shards = data.dirichlet_shards(dataset.y_train, job.local_models, config.alpha, seed=seed)
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
        nodes=" ".join(placed.nodes) if placed else "", status=life.status, reason=life.reason,
        preemptions=life.preemptions, mean_round_s=out.mean_round_s if out else None,
        link_bytes=out.link_bytes if out else 0, final_accuracy=out.final_accuracy if out else None,
        comm_s=out.comm_s if out else 0.0)


def _task_rows(life: Ended) -> list[dict[str, Any]]:
    """The job's rounds as tasks.csv rows (an independent clock's columns)."""
    if life.outcome is None:
        return []
    phases = {(s.round, s.phase): s for s in life.outcome.spans}
    rows = []
    for (_, r), seconds in sorted(iteration_times(life.outcome.spans).items()):
        rows.append({"round": r, "task": life.job.name,
                     **{f"{p}_s": phases[(r, p)].end_s - phases[(r, p)].start_s for p in ROUND_PHASES},
                     "round_s": seconds, "accuracy": "", "local_models": life.job.local_models,
                     "start_s": phases[(r, "broadcast")].start_s, "end_s": phases[(r, "upload")].end_s,
                     "predicted_round_s": ""})
    return rows


class _Files:
    """The folder's tables, a row added as each job ends."""

    def __init__(self, out: Path) -> None:
        self.jobs, self.slots = Appender(out / JOBS, JOB_FIELDS), Appender(out / SLOTS, SLOT_FIELDS)
        self.tasks = Appender(out / TASKS, TASK_FIELDS)

    def ended(self, life: Ended) -> None:
        self.jobs.add([asdict(_row(life))])
        self.slots.add(asdict(s) for s in life.slots)
        self.tasks.add(_task_rows(life))

    def close(self) -> None:
        for table in (self.jobs, self.slots, self.tasks):
            table.close()


def run(resolved: ResolvedCluster, output: folders.OutputFolder, report: Report,
        progress: Callable[[Progress, float], None] = lambda p, host_s: None) -> ClusterSummary:
    """Run the cluster into ``output`` and return its summary; jobs.csv, slots.csv and tasks.csv
    grow as jobs end, and summary.json says how the command ended, whatever ended it.
    ``progress`` is told where the loop stands after every event, with the host's seconds so far."""
    config, out = resolved.config, output.path
    claim = folders.claim(output, "cluster")
    began, status = time.monotonic(), "interrupted"
    try:
        write_json(out / "config.json", asdict(config))
        if resolved.trace.skipped:
            report(f"{config.jobs}: {counted(resolved.trace.skipped, 'job')} of the trace left out "
                   "(no GPU, or never ran)")
        files = _Files(out)
        try:
            strategy = build_strategy(config.strategy, strategy_knobs(config.strategy_args))
            runner = SimulatedRunner(resolved.graph, train_s=lambda job: resolved.train_s[job.name],
                                     chunk_bytes=config.chunk_bytes, with_delay=resolved.with_delay, mtu=config.mtu)
            cluster = Cluster(resolved.graph, resolved.slots, config.seed, ORDERS.lookup(config.order)(),
                              PLACEMENTS.lookup(config.placement)())
            plan = planner(resolved.graph, config.scheduler, lambda job: resolved.model_bytes[job.name],
                           sums_in_path=strategy.decomposable, mtu=config.mtu)
            run_cluster(resolved.jobs, cluster, runner, plan, ended=files.ended,
                        progress=lambda p: progress(p, time.monotonic() - began))
        finally:
            files.close()
        status = "completed"
    except Exception as exc:
        status = failed(exc)
        raise
    finally:
        try:
            if out.is_dir():
                _summarise(resolved, out, status, time.monotonic() - began)
        finally:
            os.close(claim)
    return ClusterSummary.read(out)


def _summarise(resolved: ResolvedCluster, out: Path, status: str, wall_s: float) -> None:
    """summary.json from the folder's tables (what they hold is what the command got to)."""
    config = resolved.config
    rows = read_jobs_csv(out) if (out / JOBS).exists() else []
    held = read_slots_csv(out) if (out / SLOTS).exists() else []
    total = sum(resolved.slots.values())
    ClusterSummary(
        status=status, command="cluster", mode=config.mode, scheduler=config.scheduler, order=config.order,
        placement=config.placement, topology=resolved.graph.graph["name"], slots=total, jobs=len(resolved.jobs),
        jobs_finished=sum(r.status == "finished" for r in rows),
        jobs_rejected=sum(r.status == "rejected" for r in rows),
        jobs_failed=sum(r.status == "failed" for r in rows), **figures(rows, held, total),  # type: ignore[arg-type]
        time_scale=1.0, wall_s=wall_s, skipped=resolved.trace.skipped,
    ).write(out)


__all__ = ["ResolvedCluster", "resolve", "run"]
