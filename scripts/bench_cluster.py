#!/usr/bin/env python3
"""Benchmark ``fedmst cluster``'s simulate mode against its emulate mode on shared traces.

For each trace it resolves the cluster once (so both modes give every job the same training time,
measured once on this host), runs it for real (``--mode emulate``) and on the fluid model
(``--mode simulate``), and prints each mode's mean, median and p99 job completion time (JCT),
mean queueing, mean set-up and makespan, and the simulator's error against the emulation.
The simulator is only worth trusting as far as this table confirms it.

Traces (NSFNET, one slot per node, MST, the 19 KB ``mlp``, seed 3): the issue's (``poisson:60,12``,
two rounds: a job a second, jobs a third of a second long), and a loaded one (``poisson:180,20``,
three rounds: three jobs a second, jobs queue).

With ``--ray ADDRESS [--hosts N]`` each trace is also emulated spread over N hosts of that Ray
cluster (``fedmst cluster --ray``; ``scripts/ray-local.sh start N --namespaces`` makes such hosts
on this machine), and its figures are compared with the one-host emulation's.

Run as root from the repository: ``.venv/bin/python scripts/bench_cluster.py [--out runs/bench-cluster]
[--trace issue] [--ray ADDRESS --hosts 2]``. Prints a markdown table to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from statistics import mean

from fedmst.run import cluster
from fedmst.run.cluster_records import ClusterSummary, read_jobs_csv
from fedmst.run.config import RunConfig
from fedmst.run.folders import OutputFolder, choose

TRACES = {"issue (poisson:60,12, 2 rounds)": ("poisson:60,12", 2),
          "loaded (poisson:180,20, 3 rounds)": ("poisson:180,20", 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/bench-cluster")
    parser.add_argument("--time-scale", default="auto")
    parser.add_argument("--trace", choices=[label.split()[0] for label in TRACES], default=None,
                        help="only this trace (default: both)")
    parser.add_argument("--ray", default=None, metavar="ADDRESS", help="also emulate spread over this Ray cluster")
    parser.add_argument("--hosts", type=int, default=2, help="with --ray: how many of its hosts")
    args = parser.parse_args()
    out = choose(Path(args.out), given=False).path  # a fresh folder: runs/bench-x, then runs/bench-x-2 ...
    print(f"results in {out}/", file=sys.stderr)
    print("| trace | mode | mean JCT (s) | median JCT (s) | p99 JCT (s) | mean queue (s) | mean set-up (s) | "
          "makespan (s) | wall (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, (jobs, rounds) in TRACES.items():
        if args.trace is not None and not label.startswith(args.trace):
            continue
        config = RunConfig(topology="nsfnet", slots=1, jobs=jobs, seed=3, rounds=rounds, model="mlp",
                           scheduler="mst", time_scale=args.time_scale)
        emulated = cluster.resolve(config)
        simulated = replace(emulated, base=None, config=replace(config, mode="simulate"))
        modes = [("emulate", emulated), ("simulate", simulated)]
        if args.ray is not None:  # the same trace and training times, the network over the hosts
            spread = replace(config, ray=args.ray, hosts=args.hosts)
            cluster.resolve(spread)  # its checks: the cluster answers and has the hosts
            assert emulated.base is not None
            modes.insert(1, (f"emulate on {args.hosts} hosts", replace(
                emulated, config=spread, base=replace(emulated.base, config=spread))))
        figures = {}
        for mode, resolved in modes:
            folder = out / f"{jobs.replace(':', '-').replace(',', '-')}-r{rounds}" / mode.replace(" ", "-")
            print(f"{label}: {mode} into {folder}/", file=sys.stderr)
            summary = cluster.run(resolved, OutputFolder(folder, False),
                                  report=lambda line: print(line, file=sys.stderr))
            rows = [r for r in read_jobs_csv(folder) if r.status == "finished"]
            figures[mode] = _row(summary, mean(r.setup_s for r in rows))
            scale = f" (time scale {summary.time_scale:g})" if mode.startswith("emulate") else ""
            print(f"| {label} | {mode}{scale} | " + " | ".join(f"{v:.3f}" for v in figures[mode]) + " |")
        print(f"| {label} | simulate vs emulate | {_errors(figures['simulate'], figures['emulate'])} | |")
        for mode in [m for m in figures if m.startswith("emulate on")]:
            print(f"| {label} | {mode} vs one host | {_errors(figures[mode], figures['emulate'])} | |")
    return 0


def _errors(figures: list[float], against: list[float]) -> str:
    """Each figure's error against ``against``'s, the wall-clock time left out; none of a figure that is all but 0."""
    return " | ".join(f"{100 * (f - a) / a:+.1f} %" if a >= 1e-3 else "-" for f, a in zip(figures[:-1], against[:-1]))


def _row(summary: ClusterSummary, set_up: float) -> list[float]:
    return [summary.mean_jct_s or 0.0, summary.median_jct_s or 0.0, summary.p99_jct_s or 0.0,
            summary.mean_queue_s or 0.0, set_up, summary.makespan_s or 0.0, summary.wall_s]


if __name__ == "__main__":
    sys.exit(main())
