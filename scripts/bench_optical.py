#!/usr/bin/env python3
"""Benchmark the optical policies on a spine-leaf fabric: how many fewer wavelengths do time slices
need, at what latency price, and does ``joint`` beat ``size``?

Runs every scheduler under every ``--optical`` policy at every number of concurrent tasks, for real
(one run at a time, each at the time scale ``--time-scale auto`` picks), and prints one markdown
table: per tasks, scheduler and policy, the round's measured latency (the mean over tasks of
broadcast + upload, rounds.csv) beside the plans' prediction, the wavelengths lit (summed over the
fibres, and the most on one fibre: what a fibre must carry for no task to block), the tasks
blocked, the share of the slots held on the fibres that hold any, and the share of the time-sliced
bytes the captures found outside their slots, each lightpath's measured rate over what it holds
(the least and the most, optical.csv's ``measured_mbps``) and the final accuracy. Every run's folder is kept
under ``--out``, and ``optical.json`` holds the figures.

Run as root from the repository: ``.venv/bin/python scripts/bench_optical.py [--tasks 1,8,30]
[--policies ocs,ots,size,joint] [--schedulers spff,mst,hier] [--local-models 4] [--model mlp]
[--out runs/bench-optical]``, or ``--table DIR/optical.json`` to print the table again. Prints the
table to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from statistics import mean
from typing import Any

from fedmst.run.config import RunConfig
from fedmst.run.engine import run
from fedmst.run.folders import choose
from fedmst.run.prepare import resolve
from fedmst.run.results import read_csv


def rate_over_held(folder: Path) -> list[float]:
    """Each lightpath's measured rate over what it holds, where optical.csv could measure it."""
    return [float(r["measured_mbps"]) / float(r["reserved_mbps"]) for r in read_csv(folder / "optical.csv")
            if r.get("measured_mbps")]


def measure(config: RunConfig) -> dict[str, Any]:
    """One real run's figures: the round's transfer time measured and predicted, and the optical terms."""
    resolved = resolve(config)[0]
    summary = run(resolved, report=lambda line: print("    " + line, file=sys.stderr))
    rounds = read_csv(Path(config.out) / "rounds.csv")
    optical = summary.optical or {}
    used = optical.get("wavelengths_used", {})
    return {
        "scale": resolved.time_scale,
        "comm_s": mean(float(r["broadcast_s"]) + float(r["upload_s"]) for r in rounds),
        "predicted_comm_s": mean(float(r["predicted_broadcast_s"]) + float(r["predicted_upload_s"]) for r in rounds),
        "wavelengths": sum(used.values()), "most_on_a_fibre": max(used.values(), default=0),
        "blocked": summary.tasks_blocked, "tasks": summary.tasks,
        "slot_utilisation": optical.get("slot_utilisation", 0.0),
        "outside": optical.get("slots_outside_share"), "accuracy": summary.final_accuracy,
        "rate_vs_held": (min(ratios), max(ratios)) if (ratios := rate_over_held(Path(config.out))) else None,
    }


def print_table(results: list[dict[str, Any]]) -> None:
    """The table of the module docstring; ``vs ocs`` compares the wavelengths lit with ``ocs``'s."""
    ocs = {(r["tasks"], r["scheduler"]): r for r in results if r["policy"] == "ocs"}
    print("| tasks | scheduler | policy | comm. (s) | predicted (s) | wavelengths lit (vs ocs) | most on a fibre "
          "| blocked | slots held | outside slots | rate / held | accuracy |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        base = ocs.get((r["tasks"], r["scheduler"]))
        fewer = f" ({r['wavelengths'] / base['wavelengths'] - 1:+.0%})" if base and base is not r else ""
        outside = "" if r["outside"] is None else f"{r['outside']:.2%}"
        util = f"{r['slot_utilisation']:.0%}" if r["policy"] != "ocs" else ""
        rate = "{:.2f}-{:.2f}".format(*r["rate_vs_held"]) if r["rate_vs_held"] else ""
        print(f"| {r['tasks']} | {r['scheduler']} | {r['policy']} | {r['comm_s']:.3f} | {r['predicted_comm_s']:.3f} "
              f"| {r['wavelengths']}{fewer} | {r['most_on_a_fibre']} | {r['blocked']} | {util} | {outside} "
              f"| {rate} | {r['accuracy']:.3f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default="spine-leaf:4,8,2")
    parser.add_argument("--tasks", default="1,8,30", help="comma-separated numbers of concurrent tasks")
    parser.add_argument("--policies", default="ocs,ots,size,joint")
    parser.add_argument("--schedulers", default="spff,mst,hier")
    parser.add_argument("--local-models", type=int, default=4)
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", default="runs/bench-optical")
    parser.add_argument("--table", metavar="OPTICAL_JSON", help="run nothing: print the table from an optical.json")
    args = parser.parse_args()
    if args.table:
        print_table(json.loads(Path(args.table).read_text()))
        return 0
    out = choose(Path(args.out), given=False).path  # a fresh folder: runs/bench-x, then runs/bench-x-2 ...
    print(f"results in {out}/", file=sys.stderr)
    results: list[dict[str, Any]] = []
    for tasks in map(int, args.tasks.split(",")):
        for scheduler in args.schedulers.split(","):
            for policy in args.policies.split(","):
                name = f"{tasks}-{scheduler}-{policy}"
                print(name, file=sys.stderr)
                config = RunConfig(topology=args.topology, tasks=tasks, local_models=args.local_models,
                                   model=args.model, rounds=args.rounds, scheduler=scheduler, optical=policy,
                                   out=str(Path(out) / name))
                results.append({"tasks": tasks, "scheduler": scheduler, "policy": policy, **measure(config)})
                (Path(out) / "optical.json").write_text(json.dumps(results, indent=1))
    print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
