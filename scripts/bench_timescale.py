#!/usr/bin/env python3
"""Benchmark virtual time (``--time-scale``): one run at several scales, beside the prediction.

Runs the same seeded run (default: NSFNET, 4 local models, ``mlp-large``, 2 rounds, MST: a run
this host's CPUs keep up with) once per scale and prints, per scale, each phase's mean reported
time (the network's) beside the plan's prediction, the host's wall-clock of the rounds, the
busiest phase's CPU use and the link bytes; then how far each scale's phases and bytes are from
the first scale's. A slowed run is honest when its phases and bytes match the real-time run's
where the host keeps up, and come near the prediction where it does not.

Run as root from the repository: ``.venv/bin/python scripts/bench_timescale.py [--scales 1,4]
[--topology nsfnet] [--local-models 4] [--model mlp-large] [--rounds 2] [--scheduler mst] [--tasks 1]
[--out runs/bench-timescale]``. Prints a markdown table to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import mean

from fedmst.run.config import RunConfig
from fedmst.run.engine import run
from fedmst.run.prepare import resolve
from fedmst.run.results import read_csv
from fedmst.run.folders import choose

PHASES = ("broadcast", "train", "upload")


def measure(config: RunConfig) -> dict[str, float]:
    """One real run: its phases' mean reported seconds, predictions, wall-clock and bytes."""
    summary = run(resolve(config)[0], report=lambda line: print(line, file=sys.stderr))
    rounds = read_csv(Path(config.out) / "rounds.csv")
    out = {p: mean(float(r[f"{p}_s"]) for r in rounds) for p in PHASES}
    out |= {f"predicted_{p}": mean(float(r[f"predicted_{p}_s"]) for r in rounds) for p in ("broadcast", "upload")}
    out["cpu_busy"] = max(float(r[f"{p}_cpu_busy"]) for r in rounds for p in ("broadcast", "upload"))
    out["rounds_wall_s"] = summary.time_breakdown_s["rounds"]
    out["link_bytes"] = summary.link_bytes_measured
    out["weight_bytes"] = summary.weight_bytes_measured
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="1,4", help="comma-separated time scales; the first is the reference")
    parser.add_argument("--topology", default="nsfnet")
    parser.add_argument("--local-models", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=1)
    parser.add_argument("--model", default="mlp-large")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scheduler", default="mst")
    parser.add_argument("--out", default="runs/bench-timescale")
    args = parser.parse_args()
    args.out = choose(Path(args.out), given=False).path  # a fresh folder: runs/bench-x, then runs/bench-x-2 ...
    print(f"results in {args.out}/", file=sys.stderr)

    scales = [float(s) for s in args.scales.split(",")]
    results = {}
    for scale in scales:
        print(f"time scale {scale:g}", file=sys.stderr)
        results[scale] = measure(RunConfig(
            topology=args.topology, local_models=args.local_models, tasks=args.tasks, model=args.model,
            rounds=args.rounds, scheduler=args.scheduler, time_scale=f"{scale:g}",
            out=str(Path(args.out) / f"scale{scale:g}")))
    ref = results[scales[0]]
    print(f"{args.topology}, {args.tasks} task(s) x {args.local_models} local models, {args.model}, "
          f"{args.rounds} rounds, {args.scheduler}; times per round (mean), the network's\n")
    print("| scale | broadcast (s) | predicted | train (s) | upload (s) | predicted | busiest phase CPU "
          "| rounds on the host (s) | link bytes (MB) | weights (MB) | phases vs scale "
          f"{scales[0]:g} | bytes vs scale {scales[0]:g} |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for scale, r in results.items():
        apart = max(abs(r[p] / ref[p] - 1) for p in ("broadcast", "upload"))
        print(f"| {scale:g} | {r['broadcast']:.3f} | {r['predicted_broadcast']:.3f} | {r['train']:.3f} "
              f"| {r['upload']:.3f} | {r['predicted_upload']:.3f} | {r['cpu_busy']:.0%} | {r['rounds_wall_s']:.1f} "
              f"| {r['link_bytes'] / 1e6:.2f} | {r['weight_bytes'] / 1e6:.2f} | {apart:.1%} "
              f"| {r['link_bytes'] / ref['link_bytes'] - 1:+.2%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
