#!/usr/bin/env python3
"""Where a run's time goes, and whether round 1 pays TCP slow start: real ``fedmst run`` commands.

For each case (NSFNET with 8 local models, Geant2012 with 16, by default) it runs ``fedmst run
--scheduler mst`` for real, times the whole command from outside, and prints its time breakdown
(``summary.json``'s ``time_breakdown_s``: prepare, network, agents, rounds, teardown) with the
fixed cost (the command's wall-clock minus the rounds) beside the goal (at most 6 s for NSFNET
with 8 local models on a 2-core host), then each round's measured broadcast and upload beside
the plans' prediction (goal: round 1 within 1.2x) and how busy the host's CPUs were meanwhile
(at 95% and more a phase is bound by the CPU, not by the links).

Run as root from the repository: ``.venv/bin/python scripts/bench_overhead.py [--rounds 2]
[--case nsfnet:8 --case topozoo/Geant2012:16] [--out runs/bench-overhead]``.
Prints markdown tables to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from fedmst.run.report import TIME_PARTS
from fedmst.run.results import read_csv
from fedmst.run.folders import choose

FEDMST = str(Path(sys.executable).with_name("fedmst"))
GOAL_FIXED_S = {("nsfnet", 8): 6.0}
GOAL_ROUND1_RATIO = 1.2


def run_case(topology: str, k: int, rounds: int, out: Path) -> tuple[float, dict, list[dict]]:
    """Run one case; return the command's wall-clock, its summary and its rounds.csv rows."""
    began = time.monotonic()
    proc = subprocess.run([FEDMST, "run", "--topology", topology, "--scheduler", "mst", "--local-models", str(k),
                           "--rounds", str(rounds), "--out", str(out)], capture_output=True, text=True)
    wall = time.monotonic() - began
    if proc.returncode != 0:
        sys.exit(f"fedmst run on {topology} failed: {proc.stderr.strip()}")
    return wall, json.loads((out / "summary.json").read_text()), read_csv(out / "rounds.csv")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", metavar="TOPOLOGY:K",
                        help="topology and local models (default: nsfnet:8 and topozoo/Geant2012:16)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("runs/bench-overhead"))
    args = parser.parse_args()
    args.out = choose(Path(args.out), given=False).path  # a fresh folder: runs/bench-x, then runs/bench-x-2 ...
    print(f"results in {args.out}/", file=sys.stderr)
    cases = [(t, int(k)) for t, _, k in (c.rpartition(":") for c in args.case or ["nsfnet:8", "topozoo/Geant2012:16"])]
    breakdown, phases = [], []
    for topology, k in cases:
        print(f"running mst on {topology} with {k} local models ...", file=sys.stderr)
        folder = args.out / f"{topology.replace('/', '_')}-k{k}"
        wall, summary, rounds = run_case(topology, k, args.rounds, folder)
        agents = len(json.loads((folder / "workers.json").read_text()))
        times = summary["time_breakdown_s"]
        goal = GOAL_FIXED_S.get((topology, k))
        breakdown.append(f"| {topology} | {k} | {agents} | "
                         + " | ".join(f"{times[p]:.2f}" for p in TIME_PARTS)
                         + f" | {wall:.2f} | **{wall - times['rounds']:.2f}** | {f'<= {goal:g}' if goal else '-'} |")
        for r in rounds:
            b, pb = float(r["broadcast_s"]), float(r["predicted_broadcast_s"])
            u, pu = float(r["upload_s"]), float(r["predicted_upload_s"])
            phases.append(f"| {topology} | {r['round']} | {b:.2f} | {pb:.2f} | {b / pb:.2f} | {u:.2f} | {pu:.2f} | "
                          f"{u / pu:.2f} | {float(r['broadcast_cpu_busy']):.0%} / {float(r['upload_cpu_busy']):.0%} |")
    print("| topology | k | agents | " + " | ".join(f"{p} (s)" for p in TIME_PARTS)
          + " | command (s) | fixed cost (s) | goal (s) |")
    print("|---" * (len(TIME_PARTS) + 6) + "|")
    print("\n".join(breakdown))
    print(f"\nRound by round, MST (goal: round 1 within {GOAL_ROUND1_RATIO}x of the prediction):\n")
    print("| topology | round | broadcast (s) | predicted (s) | ratio | upload (s) | predicted (s) | ratio "
          "| CPU busy (broadcast / upload) |")
    print("|---" * 9 + "|")
    print("\n".join(phases))


if __name__ == "__main__":
    main()
