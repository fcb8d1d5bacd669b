#!/usr/bin/env python3
"""Benchmark virtual time (``--time-scale``): does auto's pick keep every phase within 1.1x of its
prediction, and what does the next scale up measure?

Runs each case of a matrix once at the scale ``--time-scale auto`` picks on this host and once at
twice that (or at each of ``--scales``), and prints one table: per case, auto's pick and why, each
transfer phase's measured / predicted (the worst round; on an independent clock, the mean
iteration's) and the host's CPU busy in it, at the pick and at the next scale. A second table says
where the host's CPU went at the pick (``cpu.csv``): the agents' per transfer and per MB they moved,
the delay lines' per packet, against what :data:`fedmst.core.timescale.MEASURED_COSTS` assumes.
Every run's folder is kept under ``--out``, and ``matrix.json`` holds the figures.

The cases: the README's main job (NSFNET, 8 local models, ``mlp-large``; 2 rounds here), the
poster's point (30 tasks x 15 local models, ``mlp``), Topology Zoo's Geant2012 (37 nodes) with 16
local models under spff, mst, hier and ring, a line of two 10 Gbit/s links (``mlp-xl``), and the
contended dumbbell of docs/contention.md on independent clocks, with and without Cassini, under
FIFO and fair queues.

Run as root from the repository: ``.venv/bin/python scripts/bench_timescale.py [--cases main-mst,...]
[--scales 1,4] [--out runs/bench-timescale]``, or ``--tables DIR/matrix.json ...`` to print the tables
again from earlier runs. Prints markdown tables to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from statistics import mean
from typing import Any

from fedmst.core.plan import TRANSFER_PHASES
from fedmst.run.config import RunConfig
from fedmst.run.engine import run
from fedmst.run.folders import choose
from fedmst.run.prepare import phase_loads, resolve
from fedmst.run.results import read_csv

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT / "topologies" / "workloads"
POSTER = dict(topology="nsfnet", tasks=30, local_models=15, model="mlp", rounds=1, ocs_wavelengths=120)
GEANT = dict(topology="topozoo/Geant2012", local_models=16, rounds=1, seed=4)
LINE = dict(topology=str(ROOT / "topologies" / "line3-10g.json"), global_node="a", local_nodes=("b", "c"),
            local_models=2, model="mlp-xl", rounds=2)
DUMBBELL = dict(topology="dumbbell", workload=str(WORKLOADS / "dumbbell-2tasks.json"), clock="independent",
                compute_s=0.8, rounds=6)
CASES: dict[str, dict[str, Any]] = {
    "main-spff": dict(topology="nsfnet", local_models=8, rounds=2, scheduler="spff"),
    "main-mst": dict(topology="nsfnet", local_models=8, rounds=2, scheduler="mst"),
    "poster-spff": dict(POSTER, scheduler="spff"),
    "poster-mst": dict(POSTER, scheduler="mst"),
    **{f"geant-{s}": dict(GEANT, scheduler=s) for s in ("spff", "mst", "hier", "ring")},
    "line-10g-mst": dict(LINE, scheduler="mst"),
    **{f"dumbbell-{q}-{i}": dict(DUMBBELL, queue=q, interleave=i, scheduler="mst")
       for q in ("fifo", "fair") for i in ("none", "cassini")},
}


def measure(config: RunConfig) -> dict[str, Any]:
    """One real run: per transfer phase its worst measured / predicted and CPU busy (or the mean
    iteration's on an independent clock), and where the host's CPU went."""
    resolved = resolve(config)[0]
    loads = {p: asdict(load) for p, load in zip(TRANSFER_PHASES, phase_loads(
        config, _host(resolved), resolved.graph, resolved.workload))}
    summary = run(resolved, report=lambda line: print("    " + line, file=sys.stderr))
    out = Path(config.out)
    result: dict[str, Any] = {"scale": resolved.time_scale, "reason": resolved.scale_reason, "loads": loads,
                              "flagged": summary.emulated.get("host_bound_phases", [])}
    if config.clock == "independent":
        predicted = summary.predicted_round_latency_s or float("nan")
        result["phases"] = {"iteration": {"ratio": summary.round_latency_s / predicted,
                                          "measured": summary.round_latency_s, "predicted": predicted,
                                          "busy": float(summary.emulated.get("rounds_cpu_busy") or 0.0)}}
        return result
    rounds = read_csv(out / "rounds.csv")
    cpu = read_csv(out / "cpu.csv")
    result["phases"] = {}
    for p in TRANSFER_PHASES:
        if not all(float(r[f"predicted_{p}_s"]) for r in rounds):
            continue  # nothing to move (a ring's broadcast)
        worst = max(rounds, key=lambda r: float(r[f"{p}_s"]) / float(r[f"predicted_{p}_s"]))
        spent = {row["process"]: float(row["cpu_s"]) for row in cpu
                 if row["phase"] == p and row["round"] == worst["round"]}
        result["phases"][p] = {
            "ratio": float(worst[f"{p}_s"]) / float(worst[f"predicted_{p}_s"]),
            "measured": float(worst[f"{p}_s"]), "predicted": float(worst[f"predicted_{p}_s"]),
            "busy": float(worst[f"{p}_cpu_busy"]), "host_s": float(worst[f"{p}_host_s"]), "cpu_s": spent,
            "mean_ratio": mean(float(r[f"{p}_s"]) / float(r[f"predicted_{p}_s"]) for r in rounds)}
    return result


def _host(resolved: Any) -> Any:
    from fedmst.run.prepare import Host

    return Host(delay_mode=resolved.delay_mode, netem_available=resolved.netem_available, transport=resolved.transport)


def _flagged(r: dict[str, Any]) -> str:
    return ", ".join(f"{b['phase']} (keeps up at {b['keeps_up_at']})" for b in r["flagged"]) or "none"


def _cell(r: dict[str, Any]) -> str:
    return "; ".join(f"{p} {f['ratio']:.2f}x ({f['busy']:.0%})" for p, f in r["phases"].items())


def print_tables(results: dict[str, list[dict[str, Any]]]) -> None:
    """The two tables of the module docstring, from what :func:`measure` returned per case."""
    print("| case | auto's pick (why) | at the pick: measured / predicted (CPU busy) | flagged "
          "| next scale | there: measured / predicted (CPU busy) |")
    print("|---|---|---|---|---|---|")
    for name, (first, *rest) in results.items():
        for nxt in rest or [None]:
            print(f"| {name} | {first['scale']:g} ({first['reason'] or 'given'}) | {_cell(first)} "
                  f"| {_flagged(first)} | {nxt['scale']:g} | {_cell(nxt)} |" if nxt else
                  f"| {name} | {first['scale']:g} ({first['reason'] or 'given'}) | {_cell(first)} "
                  f"| {_flagged(first)} | | |")
    print("\nWhere the host's CPU went at the pick (lockstep cases; cpu.csv over the phase, the plans' loads):\n")
    print("| case | phase | host s | agents CPU (s) | per transfer (ms) | per agent MB (ms) | delay lines CPU (s) "
          "| per packet (µs) | busiest agent's MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (first, *_) in results.items():
        for p, f in first["phases"].items():
            if "cpu_s" not in f:
                continue
            load = first["loads"][p]
            agents, lines = f["cpu_s"].get("agent", 0.0), f["cpu_s"].get("delay", 0.0)
            print(f"| {name} | {p} | {f['host_s']:.2f} | {agents:.2f} | {1e3 * agents / max(load['transfers'], 1):.2f} "
                  f"| {1e3 * agents / max(load['agent_bytes'] / 1e6, 1e-9):.3f} | {lines:.2f} "
                  f"| {1e6 * lines / max(load['packets'], 1):.1f} | {load['busiest_agent_bytes'] / 1e6:.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated case names: " + ", ".join(CASES))
    parser.add_argument("--scales", default=None,
                        help="comma-separated time scales to run every case at (default: auto's pick and twice it)")
    parser.add_argument("--out", default="runs/bench-timescale")
    parser.add_argument("--tables", nargs="+", metavar="MATRIX_JSON",
                        help="run nothing: print the tables again from earlier runs' matrix.json files (later ones "
                             "win for a case in several)")
    args = parser.parse_args()
    if args.tables:
        merged: dict[str, list[dict[str, Any]]] = {}
        for path in args.tables:
            merged |= json.loads(Path(path).read_text())
        print_tables({name: merged[name] for name in CASES if name in merged})
        return 0
    unknown = [c for c in args.cases.split(",") if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    args.out = choose(Path(args.out), given=False).path  # a fresh folder: runs/bench-x, then runs/bench-x-2 ...
    print(f"results in {args.out}/", file=sys.stderr)

    results: dict[str, list[dict[str, Any]]] = {}
    for name in args.cases.split(","):
        scales = args.scales.split(",") if args.scales else ["auto"]
        results[name] = []
        while scales:
            scale = scales.pop(0)
            print(f"{name}, time scale {scale}", file=sys.stderr)
            config = RunConfig(**CASES[name], time_scale=scale, out=str(Path(args.out) / f"{name}-{scale}"))
            results[name].append(measure(config))
            if scale == "auto":
                scales.append(f"{2 * results[name][-1]['scale']:g}")
        (Path(args.out) / "matrix.json").write_text(json.dumps(results, indent=1))

    print_tables(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
