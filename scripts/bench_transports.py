#!/usr/bin/env python3
"""Benchmark the transports (``--congestion-control``) on real runs, printing measured figures
beside the fluid prediction.

``interleave``: the contended dumbbell of docs/contention.md (two tasks whose every transfer
crosses a 100 Mbit/s bottleneck, independent clocks, ``--compute-s 0.8``) under each congestion
control, with and without Cassini's shifts, over each link queue: the mean iteration time (a
task's round, broadcast start to upload end) and, into ``--out``/convergence.png, each variant's
iteration time against the iteration. Does MLTCP reach Cassini's schedule without shifts, and
how fast?

``loss``: ``fedmst compare`` (SPFF and MST) on a topology under each congestion control:
retransmissions, queue drops, ECN marks, the worst per-link weight error, round latency and the
time to accuracy, per scheduler.

``queue``: how closely the ECN marker's virtual queue (docs/transports.md) tracks the real htb
backlog of its link: TCP flows from a across a relay b to c, the b->c link ten times slower than
a->b, so that the queue builds at b (a sender's own link holds little: TCP small queues keep the
rest in the socket); both sampled side by side every few milliseconds: the mean gap, its 90th
percentile, and how often the two disagree on the queue being above K.

``distance``: a two-node line at each one-way delay and capacity (time-scaled where the host
needs it) under each congestion control: the mean broadcast time of one model against the fluid
prediction as the bandwidth-delay product grows, with the TCP buffers the run set.

Run as root from the repository, e.g.
``.venv/bin/python scripts/bench_transports.py interleave --repeats 3``,
``... loss --topology nsfnet --local-models 8 --rounds 3``,
``... distance --delays-ms 1,10,50 --capacities-mbps 100,10000``, ``... queue``.
Prints markdown tables to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from statistics import mean, stdev
from typing import Sequence

from fedmst.run.config import RunConfig
from fedmst.run.engine import run
from fedmst.run.folders import choose
from fedmst.run.prepare import resolve

WORKLOAD = Path(__file__).resolve().parents[1] / "topologies" / "workloads" / "dumbbell-2tasks.json"


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def _table(columns: Sequence[str], rows: Sequence[Sequence[object]], caption: str) -> None:
    """A markdown table on stdout, then its caption."""
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(map(str, row)) + " |")
    print(f"\n{caption}")


def _tasks_rounds(folder: Path) -> dict[str, list[float]]:
    """Each task's iteration times, round by round, from tasks.csv."""
    rounds: dict[str, list[float]] = {}
    with (folder / "tasks.csv").open() as f:
        for row in sorted(csv.DictReader(f), key=lambda r: int(r["round"])):
            rounds.setdefault(row["task"], []).append(float(row["round_s"]))
    return rounds


def interleave(args: argparse.Namespace) -> None:
    variants = [(cc, shift) for cc in args.congestion_controls.split(",") for shift in ("none", "cassini")]
    rows, curves = [], {}
    for queue in args.queues.split(","):
        for cc, shift in variants:
            means, per_round, predicted = [], [], float("nan")
            for i in range(args.repeats):
                out = Path(args.out) / f"{queue}-{cc}-{shift}-{i}"
                _say(f"interleave: queue {queue}, {cc}, {shift}, run {i + 1}/{args.repeats}")
                config = RunConfig(topology="dumbbell", workload=str(WORKLOAD), clock="independent", interleave=shift,
                                   compute_s=args.compute_s, rounds=args.rounds, epochs=1, mtu=args.mtu,
                                   model="mlp-large", scheduler="mst", queue=queue, congestion_control=cc,
                                   out=str(out))
                summary = run(resolve(config)[0], report=lambda line: None)
                means.append(summary.round_latency_s)
                predicted = summary.predicted_round_latency_s or float("nan")
                tasks = _tasks_rounds(out)
                per_round.append([mean(t[r] for t in tasks.values()) for r in range(args.rounds)])
            curves[(queue, cc, shift)] = [mean(run_[r] for run_ in per_round) for r in range(args.rounds)]
            spread = f" ± {stdev(means):.2f}" if len(means) > 1 else ""
            rows.append((queue, cc, shift, f"{mean(means):.2f}{spread}", f"{predicted:.2f}",
                         ", ".join(f"{m:.2f}" for m in means)))
    _table(("queue", "congestion control", "shifts", "mean iteration time (s), measured", "predicted (s)", "each run"),
           rows, f"{args.rounds} rounds, compute {args.compute_s:g} s, 1 epoch of real training, MTU {args.mtu}, "
                 f"model mlp-large, {args.repeats} run(s) each")
    _plot_convergence(curves, Path(args.out) / "convergence.png")


def _plot_convergence(curves: dict[tuple[str, str, str], list[float]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    queues = list(dict.fromkeys(q for q, _, _ in curves))
    fig, axes = plt.subplots(1, len(queues), figsize=(5.5 * len(queues), 3.6), sharey=True, squeeze=False)
    for ax, queue in zip(axes[0], queues):
        for (q, cc, shift), times in curves.items():
            if q == queue:
                ax.plot(range(1, len(times) + 1), times, marker="o", label=f"{cc}" + (" + Cassini" if shift != "none"
                                                                                       else ""))
        ax.set_title(f"queue {queue}")
        ax.set_xlabel("iteration (round)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("iteration time (s), mean of tasks and runs")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    _say(f"convergence plot: {out}")


def loss(args: argparse.Namespace) -> None:
    rows = []
    for cc in args.congestion_controls.split(","):
        _say(f"loss: {cc}")
        config = RunConfig(topology=args.topology, local_models=args.local_models, rounds=args.rounds,
                           congestion_control=cc)
        for resolved in resolve(config, ["spff", "mst"]):  # as `fedmst compare` runs them: one clock for both
            folder = Path(args.out) / cc / resolved.config.scheduler
            summary = run(replace(resolved, config=replace(resolved.config, out=str(folder))), report=lambda line: None)
            scheduler = resolved.config.scheduler
            rounds = list(csv.DictReader((folder / "rounds.csv").open()))
            marks = sum(int(r["marked"]) for r in csv.DictReader((folder / "ecn.csv").open())) \
                if (folder / "ecn.csv").exists() else None
            errors = [abs(float(r["error_pct"])) for r in csv.DictReader((folder / "links.csv").open())
                      if r["error_pct"] not in ("", "nan") and float(r["predicted_bytes"]) > 0]
            tta = json.loads((folder / "summary.json").read_text()).get("time_to_accuracy_s")
            rows.append((cc, scheduler, sum(int(r["retransmitted_segments"]) for r in rounds),
                         sum(int(r["queue_drops"]) for r in rounds), "-" if marks is None else marks,
                         f"{max(errors, default=0):.2f}", f"{summary.round_latency_s:.2f}",
                         "-" if tta is None else f"{tta:.2f}"))
    _table(("congestion control", "scheduler", "TCP retransmissions", "queue drops", "ECN marks",
            "max per-link weight error (%)", "round latency (s)", "time to accuracy (s)"), rows,
           f"{args.topology}, {args.local_models} local models, {args.rounds} rounds, totals over the rounds")


def queue(args: argparse.Namespace) -> None:
    import subprocess
    import time

    import networkx as nx

    from fedmst.net import ecn
    from fedmst.net.congestion import prepare_transport
    from fedmst.net.emulation import Emulation

    rate = args.capacity_mbps * 1e6 / 8
    rows = []
    for cc in args.congestion_controls.split(","):
        _say(f"queue: {cc}")
        graph = nx.Graph([("a", "b", {"capacity_mbps": 10 * args.capacity_mbps, "delay_s": args.delay_ms / 1e3}),
                          ("b", "c", {"capacity_mbps": args.capacity_mbps, "delay_s": args.delay_ms / 1e3})])
        transport = prepare_transport(cc, ecn_k=args.ecn_k)
        with tempfile.TemporaryDirectory(prefix="fedmst-bench-") as scratch, \
                Emulation(graph, delay_mode="userspace", transport=transport) as emu:
            flows = emu.install_flows({f"f{i}": ("a", "b", "c") for i in range(args.flows)})
            interface = emu.sender_interface("b", "c")
            program = ecn.program_id(emu.cmd("b", f"tc -j filter show dev {interface} egress"))
            map_id = ecn.queue_map(program) if program is not None else None
            if map_id is None:
                raise SystemExit(f"no ECN marker on {interface}")
            k = emu.tcp.ecn_k_bytes[("b", "c")]
            procs = [emu.spawn(node, target, a, env={}, log=Path(scratch) / f"{name}{i}.log", name=name)
                     for i, flow in enumerate(flows.values())
                     for node, target, a, name in (("c", "fedmst.net.calibrate:sink", [flow.dst_addr], "sink"),
                                                   ("a", "fedmst.net.calibrate:source",
                                                    [flow.dst_addr, str(args.seconds)], "send"))]
            samples = []
            time.sleep(0.5)  # past the flows' start
            deadline = time.monotonic() + args.seconds - 1.0
            while time.monotonic() < deadline:
                qdiscs = json.loads(emu.cmd("b", f"tc -s -j qdisc show dev {interface}") or "[]")
                real = next(q["backlog"] for q in qdiscs if q["kind"] == "htb")
                found = json.loads(subprocess.run(["bpftool", "-j", "map", "lookup", "id", str(map_id), "key",
                                                   "0", "0", "0", "0"], capture_output=True, text=True).stdout)
                now = time.monotonic_ns()
                value = found["formatted"]["value"]
                virtual = max(0.0, value["backlog"] - (now - value["last_ns"]) * rate / 1e9)
                samples.append((real, virtual))
            for proc in procs:
                proc.wait()
        gaps = [abs(r - v) for r, v in samples]
        disagree = sum((r > k) != (v > k) for r, v in samples) / len(samples)
        rows.append((cc, f"{k:,}", len(samples), f"{mean(r for r, _ in samples) / 1e3:.1f}",
                     f"{mean(v for _, v in samples) / 1e3:.1f}", f"{mean(gaps) / 1e3:.1f}",
                     f"{sorted(gaps)[int(0.9 * len(gaps))] / 1e3:.1f}", f"{100 * disagree:.1f}"))
    _table(("congestion control", "K (bytes)", "samples", "htb backlog, mean (KB)", "virtual queue, mean (KB)",
            "gap, mean (KB)", "gap, 90th percentile (KB)", "disagree on above K (%)"), rows,
           f"{args.flows} TCP flows a->b->c, b->c {args.capacity_mbps:g} Mbit/s (a->b ten times that), "
           f"{args.delay_ms:g} ms a link, {args.seconds:g} s, ECN marking at K = {args.ecn_k}")


def distance(args: argparse.Namespace) -> None:
    rows = []
    for capacity in [float(c) for c in args.capacities_mbps.split(",")]:
        for delay_ms in [float(d) for d in args.delays_ms.split(",")]:
            with tempfile.TemporaryDirectory(prefix="fedmst-bench-line-") as tmp:
                topology = Path(tmp) / "line2.json"
                topology.write_text(json.dumps({"name": "line2", "capacity_mbps": capacity, "nodes": ["a", "b"],
                                                "links": [{"a": "a", "b": "b", "delay_ms": delay_ms}]}))
                for cc in args.congestion_controls.split(","):
                    _say(f"distance: {capacity:g} Mbit/s, {delay_ms:g} ms, {cc}")
                    config = RunConfig(topology=str(topology), local_models=1, global_node="a", local_nodes=("b",),
                                       rounds=args.rounds, epochs=1, model=args.model, congestion_control=cc,
                                       scheduler="spff", out=str(Path(args.out) / f"{capacity:g}-{delay_ms:g}-{cc}"))
                    run(resolve(config)[0], report=lambda line: None)
                    folder = Path(config.out)
                    rounds = list(csv.DictReader((folder / "rounds.csv").open()))
                    emulated = json.loads((folder / "summary.json").read_text())["emulated"]
                    measured = mean(float(r["broadcast_s"]) for r in rounds)
                    predicted = mean(float(r["predicted_broadcast_s"]) for r in rounds)
                    bdp_kb = capacity * 1e6 / 8 * 2 * delay_ms / 1e3 / 1e3
                    rows.append((f"{capacity:g}", f"{delay_ms:g}", f"{bdp_kb:,.0f}", cc, f"{measured:.3f}",
                                 f"{predicted:.3f}", f"{measured / predicted:.2f}", f"{emulated['time_scale']:g}",
                                 f"{emulated['tcp_buffer_bytes']:,}"))
    _table(("capacity (Mbit/s)", "one-way delay (ms)", "BDP (KB)", "congestion control", "broadcast (s), measured",
            "predicted (s)", "measured / predicted", "time scale", "TCP buffer (bytes)"), rows,
           f"a-b line, one local model of {args.model}, {args.rounds} rounds each")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parts = parser.add_subparsers(dest="part", required=True)
    one = parts.add_parser("interleave", help="the contended dumbbell: iteration times and convergence")
    one.add_argument("--congestion-controls", default="cubic,mltcp")
    one.add_argument("--queues", default="fifo,fair")
    one.add_argument("--rounds", type=int, default=6)
    one.add_argument("--compute-s", type=float, default=0.8)
    one.add_argument("--mtu", type=int, default=9000, help="jumbo frames keep the host's CPU off the critical path")
    one.add_argument("--repeats", type=int, default=3)
    two = parts.add_parser("loss", help="retransmissions, drops and marks of a compare")
    two.add_argument("--congestion-controls", default="cubic,bbr,dctcp")
    two.add_argument("--topology", default="nsfnet")
    two.add_argument("--local-models", type=int, default=8)
    two.add_argument("--rounds", type=int, default=3)
    three = parts.add_parser("distance", help="phase time against the prediction as the BDP grows")
    three.add_argument("--congestion-controls", default="cubic,bbr,dctcp,mltcp")
    three.add_argument("--delays-ms", default="1,10,50")
    three.add_argument("--capacities-mbps", default="100,10000")
    three.add_argument("--model", default="mlp-large")
    three.add_argument("--rounds", type=int, default=3)
    four = parts.add_parser("queue", help="the ECN marker's virtual queue against the htb backlog")
    four.add_argument("--congestion-controls", default="cubic,dctcp")
    four.add_argument("--capacity-mbps", type=float, default=20)
    four.add_argument("--delay-ms", type=float, default=5)
    four.add_argument("--flows", type=int, default=2)
    four.add_argument("--seconds", type=float, default=6)
    four.add_argument("--ecn-k", default="20p")
    for part in (one, two, three, four):
        part.add_argument("--out", default=f"runs/bench-transports-{part.prog.split()[-1]}")
    args = parser.parse_args()
    args.out = str(choose(Path(args.out), given=False).path)
    _say(f"results in {args.out}/")
    {"interleave": interleave, "loss": loss, "distance": distance, "queue": queue}[args.part](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
