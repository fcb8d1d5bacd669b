"""Experiments over any list of schedulers: ``compare`` (one configuration, every scheduler on
identical tasks) and ``sweep`` (the poster's Figure 3: every scheduler over a range of
local-model counts and seeds).

Everything is resolved before the first network is built: the host is checked once, and each
point's topology, tasks and plans are made once, so bad input fails before anything runs and a
plan is never made twice.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

from fedmst.errors import FedmstError
from fedmst.run.config import ResolvedRun, RunConfig, check_host, resolve
from fedmst.run.layout import run_folder_name
from fedmst.run.report import Summary, comparison
from fedmst.run.results import read_csv, write_csv, write_json

SWEEP_FIELDS = (
    "scheduler", "local_models", "seed", "task", "round",
    "broadcast_s", "train_s", "upload_s", "round_s", "accuracy",
    "run_link_bytes_measured", "run_link_bytes_predicted", "run_reserved_capacity_mbps",
    "run_tasks_blocked", "run_predicted_comm_s",
)
DEFAULT_SCHEDULERS = ("spff", "mst")

Report = Callable[[str], None]
Progress = Callable[[str], None]


def check_schedulers(schedulers: Sequence[str]) -> None:
    """Refuse an empty list or a scheduler named twice (two runs would share one folder)."""
    if not schedulers:
        raise FedmstError("--schedulers: name at least one scheduler, e.g. spff,mst")
    folders = [run_folder_name(s) for s in schedulers]
    if {".", ".."} & set(folders):
        raise FedmstError("--schedulers: '.' and '..' cannot name a scheduler")
    twice = sorted({s for s, f in zip(schedulers, folders) if folders.count(f) > 1})
    if twice:
        raise FedmstError(f"--schedulers: {', '.join(twice)} given twice")


def compare(config: RunConfig, schedulers: Sequence[str], out: Path, report: Report,
            command_started: float | None = None) -> dict[str, Summary]:
    """Run ``config`` with every scheduler on identical tasks into ``out/NAME/`` and write
    ``out/comparison.json``: every summary and its ratios to the first scheduler (the baseline).
    The first run's time breakdown counts the preparation since ``command_started``."""
    from fedmst.run.engine import run

    check_schedulers(schedulers)
    runs = resolve(config, schedulers)
    summaries = {r.config.scheduler: run(_into(r, out / run_folder_name(r.config.scheduler)), report=report,
                                         command_started=command_started if i == 0 else None)
                 for i, r in enumerate(runs)}
    write_json(out / "comparison.json", comparison(summaries))
    return summaries


def _into(run: ResolvedRun, folder: Path) -> ResolvedRun:
    return replace(run, config=replace(run.config, out=str(folder)))


def points(local_models: Sequence[int], seeds: Sequence[int],
           schedulers: Sequence[str] = DEFAULT_SCHEDULERS) -> list[tuple[int, int, str]]:
    """Every (local models, seed, scheduler) to run, in the order they run.

    >>> points([2, 4], [1])
    [(2, 1, 'spff'), (2, 1, 'mst'), (4, 1, 'spff'), (4, 1, 'mst')]
    """
    return [(k, seed, s) for k in local_models for seed in seeds for s in schedulers]


def sweep(base: RunConfig, local_models: Sequence[int], seeds: Sequence[int], out: Path, progress: Progress,
          schedulers: Sequence[str] = DEFAULT_SCHEDULERS) -> list[dict[str, Any]]:
    """Run every point for real, writing ``out/sweep.csv`` after each one; return its rows."""
    from fedmst.run.engine import run

    check_schedulers(schedulers)
    host, resolved = check_host(base), {}
    for k in local_models:  # every input is checked and planned before the first network is built
        for seed in seeds:
            for r in resolve(replace(base, local_models=k, seed=seed), schedulers, host):
                resolved[(k, seed, r.config.scheduler)] = r
    rows: list[dict[str, Any]] = []
    for k, seed, scheduler in points(local_models, seeds, schedulers):
        progress(f"{scheduler} with {k} local models, seed {seed}")
        folder = out / f"k{k}-seed{seed}" / run_folder_name(scheduler)
        summary = run(_into(resolved[(k, seed, scheduler)], folder), report=lambda _: None)
        for r in read_csv(folder / "tasks.csv"):
            rows.append({
                "scheduler": scheduler, "local_models": k, "seed": seed, "task": r["task"],
                "round": int(r["round"]), **{f: float(r[f]) for f in
                                             ("broadcast_s", "train_s", "upload_s", "round_s", "accuracy")},
                "run_link_bytes_measured": summary.per_round_bytes,
                "run_link_bytes_predicted": summary.link_bytes_predicted / summary.rounds,
                "run_reserved_capacity_mbps": summary.reserved_capacity_mbps,
                "run_tasks_blocked": summary.tasks_blocked,
                "run_predicted_comm_s": summary.predicted_broadcast_s + summary.predicted_upload_s,
            })
        write_csv(out / "sweep.csv", SWEEP_FIELDS, rows)
    return rows
