#!/usr/bin/env python3
"""Benchmark fedmst under faults: an MST-vs-SPFF compare on NSFNET with one link failure and one
dead worker, both in the same round, through the real ``fedmst`` runs.

The link and the worker are chosen from the MST plan of the task so that both schedulers are
hit: the link is the first hop of MST's broadcast tree out of G (SPFF's star leaves G over the
same few links), the worker is a node that holds a local model and aggregates for others in MST's
tree (a relay). The link fails 0.3 s into round 2's broadcast, under the transfers (they stall
for ``--stall`` seconds, then the tree is re-planned and the broadcast runs again), the worker
is killed during round 2's training (re-plan before the upload), and the link comes back at
round 3 (re-plan again).

For each scheduler it prints the rounds completed, each re-plan's time split into scheduling,
route installation and reconnecting the agents, how long the dead worker took to be noticed,
the bytes the failed link's queues held when it went down and those of the aborted broadcast,
and per round the local models that
took part, the measured round latency beside the Plans' prediction, and the link bytes.

Run as root from the repository: ``.venv/bin/python scripts/bench_faults.py [--local-models 8]
[--rounds 3] [--out runs/bench-faults]``. Prints markdown tables to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from fedmst.run.config import RunConfig
from fedmst.run.prepare import resolve
from fedmst.run.experiments import compare
from fedmst.run.folders import OutputFolder, choose
from fedmst.run.results import read_csv


def pick_faults(config: RunConfig) -> tuple[str, str]:
    """The link (first hop of MST's broadcast tree out of G) and the relay worker to break."""
    plan = resolve(config, ["mst"])[0].workload.plans[0]
    g = plan.task.global_node
    first = next(t.path for t in plan.phase("broadcast") if t.path[0] == g)
    relays = sorted(n for n in plan.aggregation_nodes if n != g and n in plan.task.local_nodes)
    if not relays:
        sys.exit("bench_faults: MST's tree has no relay holding a local model; try another --seed")
    return f"{first[0]}-{first[1]}", relays[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default="nsfnet")
    parser.add_argument("--local-models", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="mlp-large")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--stall", type=float, default=3.0, help="stall timeout of the transfers (s)")
    parser.add_argument("--out", default="runs/bench-faults")
    args = parser.parse_args()
    args.out = choose(Path(args.out), given=False).path  # a fresh folder: runs/bench-x, then runs/bench-x-2 ...
    print(f"results in {args.out}/", file=sys.stderr)

    base = RunConfig(topology=args.topology, local_models=args.local_models, rounds=args.rounds, model=args.model,
                     seed=args.seed, save_models=False)
    link, node = pick_faults(base)
    base = replace(base, fail_links=(f"{link}@2+0.3-3",), kill_workers=(f"{node}@2",), stall_s=args.stall)
    print(f"## {args.topology}, {args.local_models} local models, {args.model}: link {link} down 0.3 s into "
          f"round 2's broadcast and back at 3, worker on node {node} killed in round 2's training, "
          f"stall timeout {args.stall:g} s\n")
    started = time.monotonic()
    summaries = compare(base, ["spff", "mst"], OutputFolder(Path(args.out)),
                        report=lambda line: print(line, file=sys.stderr))
    print(f"both schedulers done in {time.monotonic() - started:.0f} s", file=sys.stderr)

    print("| scheduler | round | event | scheduling (s) | routes (s) | reconnect (s) | re-plan (s) | warm-up (MB) "
          "| noticed after (s) | in flight lost (B) | aborted attempt (MB) | local models dropped |")
    print("|---" * 12 + "|")
    for scheduler in summaries:
        for e in json.loads((Path(args.out) / scheduler / "faults.json").read_text()):
            noticed = ", ".join(f"{n}: {s:.2f}" for n, s in e.get("detected_s", {}).items()) or "-"
            dropped = "; ".join(f"{i} ({why})" for d in e["dropped"].values() for i, why in d.items()) or "-"
            print(f"| {scheduler} | {e['round']} | {e['event']} | {e['scheduling_s']:.3f} | {e['routes_s']:.3f} "
                  f"| {e['reconnect_s']:.3f} | {e['replan_s']:.3f} | {e['setup_link_bytes'] / 1e6:.1f} | {noticed} "
                  f"| {e['in_flight_lost_bytes']} "
                  f"| {e['aborted']['link_bytes'] / 1e6 if 'aborted' in e else 0:.1f} | {dropped} |")

    print("\n| scheduler | round | local models | round latency (s) | predicted comm. (s) | link bytes (MB) "
          "| accuracy |")
    print("|---|---|---|---|---|---|---|")
    for scheduler, summary in summaries.items():
        for r in read_csv(Path(args.out) / scheduler / "rounds.csv"):
            predicted = float(r["predicted_broadcast_s"]) + float(r["predicted_upload_s"])
            print(f"| {scheduler} | {r['round']} | {r['local_models']} | {float(r['round_s']):.2f} | {predicted:.2f} "
                  f"| {int(r['bytes_measured']) / 1e6:.1f} | {float(r['accuracy']):.3f} |")
        print(f"| {scheduler} | **rounds completed** | {summary.rounds} of {summary.rounds_planned} "
              f"({summary.status}) | | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
