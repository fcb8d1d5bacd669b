#!/usr/bin/env python3
"""Benchmark interleaving (``--interleave cassini``) against none, tasks on their own clocks.

Contended: the dumbbell (``topologies/dumbbell.json``: access links 1 Gbit/s, a 100 Mbit/s
bottleneck, 1 ms each) with two tasks whose G's sit on one side and whose local models share the
three nodes on the other (``topologies/workloads/dumbbell-2tasks.json``): every broadcast and every
upload of both tasks crosses the bottleneck, and with ``--compute-s`` comparable to one transfer
the tasks can take turns on it. Uncontended: two tasks on the same dumbbell that share no link
direction (``dumbbell-apart.json``): interleaving must leave them alone and cost nothing.

For each link queue (``--queue``: one FIFO, or fair queues, which the prediction assumes),
scenario and interleaving it runs the real thing (``fedmst run --clock independent``)
``--repeats`` times and prints the mean iteration time (a task's round: broadcast start to upload
end, over every task and round) measured beside the fluid prediction of
:func:`fedmst.core.contention.simulate`, and the ratio none / cassini.

Run as root from the repository: ``.venv/bin/python scripts/bench_interleave.py [--rounds 6]
[--compute-s 0.8] [--epochs 1] [--mtu 9000] [--queues fifo,fair] [--repeats 3] [--out runs/bench-interleave]``.
Prints a markdown table to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import mean, stdev

from fedmst.run.config import RunConfig
from fedmst.run.prepare import resolve
from fedmst.run.engine import run
from fedmst.run.folders import choose

WORKLOADS = Path(__file__).resolve().parents[1] / "topologies" / "workloads"
SCENARIOS = {"contended": WORKLOADS / "dumbbell-2tasks.json", "uncontended": WORKLOADS / "dumbbell-apart.json"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--compute-s", type=float, default=0.8)
    parser.add_argument("--epochs", type=int, default=1,
                        help="real local training per round; keep it under --compute-s on this host's cores")
    parser.add_argument("--mtu", type=int, default=9000, help="jumbo frames keep the host's CPU off the critical path")
    parser.add_argument("--model", default="mlp-large")
    parser.add_argument("--queues", default="fifo,fair", help="comma-separated link queues to compare")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="runs/bench-interleave")
    args = parser.parse_args()
    args.out = choose(Path(args.out), given=False).path  # a fresh folder: runs/bench-x, then runs/bench-x-2 ...
    print(f"results in {args.out}/", file=sys.stderr)

    rows = []
    for queue, (scenario, workload) in ((q, item) for q in args.queues.split(",") for item in SCENARIOS.items()):
        measured: dict[str, list[float]] = {}
        predicted: dict[str, float] = {}
        for interleave in ("none", "cassini"):
            for i in range(args.repeats):
                config = RunConfig(topology="dumbbell", workload=str(workload), clock="independent",
                                   interleave=interleave, compute_s=args.compute_s, rounds=args.rounds,
                                   epochs=args.epochs, mtu=args.mtu, model=args.model, scheduler="mst", queue=queue,
                                   out=str(Path(args.out) / f"{queue}-{scenario}-{interleave}-{i}"))
                print(f"{queue}, {scenario}, {interleave}, run {i + 1}/{args.repeats}", file=sys.stderr)
                summary = run(resolve(config)[0], report=lambda line: print("  " + line, file=sys.stderr))
                measured.setdefault(interleave, []).append(summary.round_latency_s)
                predicted[interleave] = summary.predicted_round_latency_s or float("nan")
                offsets = summary.start_offsets_s
        for interleave, values in measured.items():
            spread = f" ± {stdev(values):.2f}" if len(values) > 1 else ""
            rows.append((queue, scenario, interleave, f"{mean(values):.2f}{spread}", f"{predicted[interleave]:.2f}",
                         ", ".join(f"{v:.2f}" for v in values),
                         ", ".join(f"{n} {o:.2f}" for n, o in offsets.items()) if interleave == "cassini" else ""))
        ratio = mean(measured["none"]) / mean(measured["cassini"])
        rows.append((queue, scenario, "none / cassini", f"{ratio:.2f}x",
                     f"{predicted['none'] / predicted['cassini']:.2f}x", "", ""))
    print("| queue | scenario | interleave | mean round latency (s), measured | predicted (s) | each run "
          "| start offsets (s) |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"\n{args.rounds} rounds, compute {args.compute_s:g} s, {args.epochs} epoch(s) of real training, "
          f"MTU {args.mtu}, model {args.model}, {args.repeats} run(s) each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
