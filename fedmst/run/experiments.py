"""The poster's Figure 3 as one command: both schedulers over a range of local-model counts.

Every point (scheduler x local models x seed) is a real run of ``--tasks`` concurrent tasks in
its own folder; the sweep gathers them into one tidy table, ``sweep.csv``, with a row per
scheduler x local-model count x seed x task x round, and draws latency and consumed bandwidth
against the number of local models, measured beside the Plans' prediction, with the spread over
seeds.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

from fedmst.run.engine import RunConfig, prepare, run
from fedmst.run.results import read_csv, write_csv

SWEEP_FIELDS = (
    "scheduler", "local_models", "seed", "task", "round",
    "broadcast_s", "train_s", "upload_s", "round_s", "accuracy",
    "run_link_bytes_measured", "run_link_bytes_predicted", "run_reserved_capacity_mbps",
    "run_tasks_blocked", "run_predicted_comm_s",
)
SCHEDULERS = ("spff", "mst")

Progress = Callable[[str], None]


def points(local_models: Sequence[int], seeds: Sequence[int]) -> list[tuple[int, int, str]]:
    """Every (local models, seed, scheduler) to run, in the order they run.

    >>> points([2, 4], [1])
    [(2, 1, 'spff'), (2, 1, 'mst'), (4, 1, 'spff'), (4, 1, 'mst')]
    """
    return [(k, seed, s) for k in local_models for seed in seeds for s in SCHEDULERS]


def sweep(base: RunConfig, local_models: Sequence[int], seeds: Sequence[int], out: Path,
          progress: Progress) -> list[dict[str, Any]]:
    """Run every point for real, writing ``out/sweep.csv`` after each one; return its rows."""
    todo = points(local_models, seeds)
    for k, seed, scheduler in todo:  # every input is checked before the first network is built
        prepare(replace(base, local_models=k, seed=seed, scheduler=scheduler))
    rows: list[dict[str, Any]] = []
    for k, seed, scheduler in todo:
        progress(f"{scheduler} with {k} local models, seed {seed}")
        folder = out / f"k{k}-seed{seed}" / scheduler
        summary = run(replace(base, local_models=k, seed=seed, scheduler=scheduler, out=str(folder)),
                      report=lambda _: None)
        per_round = summary["rounds"]
        for r in read_csv(folder / "tasks.csv"):
            rows.append({
                "scheduler": scheduler, "local_models": k, "seed": seed, "task": r["task"],
                "round": int(r["round"]), **{f: float(r[f]) for f in
                                             ("broadcast_s", "train_s", "upload_s", "round_s", "accuracy")},
                "run_link_bytes_measured": summary["link_bytes_measured"] / per_round,
                "run_link_bytes_predicted": summary["link_bytes_predicted"] / per_round,
                "run_reserved_capacity_mbps": summary["reserved_capacity_mbps"],
                "run_tasks_blocked": summary["tasks_blocked"],
                "run_predicted_comm_s": summary["predicted_broadcast_s"] + summary["predicted_upload_s"],
            })
        write_csv(out / "sweep.csv", SWEEP_FIELDS, rows)
    return rows
