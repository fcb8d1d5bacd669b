#!/usr/bin/env python3
"""Benchmark the data plane's cost: the host's CPU per transfer, per GB and per packet.

For each scenario and scheduler it runs the real thing (``fedmst run``, lockstep) and reads where
the host's CPU went in the broadcast and upload phases (``cpu.csv``: the agents, the delay lines,
the coordinator), then divides by what those phases moved: the plans' transfers, the weights'
bytes summed over every link direction they crossed (link GB), and the packets that crossed the
links (the weights' bytes in MTU-sized frames, the rest as ACKs of 66 bytes: every packet passes
one delay line, at its receiver's ingress). Beside them, two bare baselines of 40 MB each across
the same kind of emulated path, two 100 Mbit/s hops with their delay lines: one plain TCP stream
(a Python socket sending 1 MiB writes as fast as it can) and one gloo transfer in 256 KB chunks
(as an agent sends, without the agent), and the CPU their two ends and the delay lines spent per
GB and per packet.

Scenarios: ``one-task`` (NSFNET, one task of 4 local models, ``mlp-large``, 2 rounds) and
``poster`` (the default sweep's 15-local-model point: 30 tasks of 15 local models, the 19 KB
``mlp``, 120 wavelengths, one round).

Each is run with each delay line (``--delay-lines python,compiled``: the Python line, as every
run had it before the compiled one, and the compiled one), so the table shows both side by side;
the bare transfers also with none, and with the whole host's CPU per packet: what the delay lines
add to the host is the difference to that row (the kernel's work for a packet a line releases,
forwarding it on, is charged to the line's process, and would be done without it too).

Run as root from the repository: ``.venv/bin/python scripts/bench_dataplane.py [--scenarios
one-task,poster] [--schedulers spff,mst] [--delay-lines python,compiled] [--time-scale 1] [--out
runs/bench-dataplane]``. Prints a markdown table to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import networkx as nx
import psutil
import torch  # noqa: F401  (the warm fork server's children, the bare gloo ends, find it imported)

from fedmst.core.wire import DEFAULT_MTU
from fedmst.net.congestion import prepare_transport
from fedmst.net.delayline import CHOICE_ENV
from fedmst.net.emulation import Emulation
from fedmst.run.config import SWEEP, RunConfig
from fedmst.run.engine import run
from fedmst.run.prepare import resolve
from fedmst.run.results import read_csv
from fedmst.run.folders import choose

SCENARIOS = {
    "one-task": dict(topology="nsfnet", local_models=4, model="mlp-large", rounds=2),
    "poster": dict(topology="nsfnet", local_models=15, tasks=30, model="mlp", rounds=1,
                   ocs_wavelengths=SWEEP["ocs_wavelengths"]["default"], stall_s=SWEEP["stall_s"]["default"]),
}
TRANSFER = ("broadcast", "upload")
ACK_BYTES = 66
"""An ACK on the wire: Ethernet, IP and TCP headers with timestamps."""


def measure_run(config: RunConfig) -> dict[str, float]:
    """One run's transfer phases: CPU seconds by kind, transfers, link GB and packets."""
    run(resolve(config)[0], report=lambda line: print("  " + line, file=sys.stderr))
    out = Path(config.out)
    cpu: dict[str, float] = defaultdict(float)
    for row in read_csv(out / "cpu.csv"):
        if row["phase"] in TRANSFER:
            cpu[row["process"]] += float(row["cpu_s"])
    plan = json.loads((out / "plan.json").read_text())
    transfers = sum(1 for task in plan["tasks"] for f in task["flows"] if f["phase"] in TRANSFER) * config.rounds
    links = read_csv(out / "links.csv")
    weight = sum(int(r["measured_weight_bytes"]) for r in links)
    other = sum(int(r["measured_other_bytes"]) for r in links)
    packets = weight / (config.mtu + 14) + other / ACK_BYTES
    return {**cpu, "transfers": transfers, "gb": weight / 1e9, "packets": packets}


def host_busy_s() -> float:
    """CPU seconds every core of this host has spent busy since boot (processes and the kernel)."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq


def measure_bare(kind: str, delay_mode: str = "userspace", nbytes: int = 40_000_000,
                 capacity_mbps: float = 100.0) -> dict[str, float]:
    """One bare transfer of ``nbytes`` from a to c across a-b-c, each hop ``capacity_mbps`` with a
    0.5 ms delay line (``delay_mode`` "off": none, the baseline of what the lines add) and TCP as a
    run sets it: a plain TCP stream (``kind`` "tcp": a Python socket writing 1 MiB at a time) or a
    gloo send and receive in 256 KB chunks (``kind`` "gloo", as an agent sends, without the agent).
    The CPU of its two ends, of the delay lines and of the whole host, the bytes and packets it put
    on the links."""
    graph = nx.Graph([("a", "b", {"capacity_mbps": capacity_mbps, "delay_s": 5e-4}),
                      ("b", "c", {"capacity_mbps": capacity_mbps, "delay_s": 5e-4})])
    run = RunConfig()  # TCP and chunks as a run's defaults set them
    with tempfile.TemporaryDirectory(prefix="fedmst-bench-") as scratch, \
            Emulation(graph, delay_mode=delay_mode, transport=prepare_transport(run.congestion_control)) as emu:
        flow = emu.install_flows({"probe": ("a", "b", "c")})["probe"]
        logs, store = Path(scratch), str(Path(scratch) / "store")
        if kind == "tcp":
            ends = [("c", "fedmst.net.calibrate:sink", [flow.dst_addr], "sink"),
                    ("a", "fedmst.net.calibrate:source", [flow.dst_addr, str(nbytes * 8 / capacity_mbps / 1e6)],
                     "send")]
        else:
            ends = [(node, "fedmst.workers.transport:bare_transfer",
                     [rank, store, address, str(nbytes), str(run.chunk_bytes)], name)
                    for node, rank, address, name in (("c", "1", flow.dst_addr, "sink"),
                                                      ("a", "0", flow.src_addr, "send"))]
        before, counters, busy = emu.cpu_seconds(), emu.meters.counters(), host_busy_s()
        procs = [emu.spawn(node, target, args, env={}, log=logs / f"{name}.log", name=name)
                 for node, target, args, name in ends]
        # the two ends' CPU is read while they live (they exit when the transfer ends, and an
        # exited one is no longer counted): each kind's highest reading is its total
        last: dict[str, float] = {}
        while any(p.poll() is None for p in procs):
            last = {process: max(cpu, last.get(process, 0.0)) for process, cpu in emu.cpu_seconds().items()}
            time.sleep(0.02)
        if any(p.returncode for p in procs):
            raise SystemExit(f"the bare {kind} transfer failed: see {logs}")
        after, busy = emu.meters.counters(), host_busy_s() - busy
    data = sum(after[hop] - counters[hop] for hop in (("a", "b"), ("b", "c")))
    acks = sum(after[hop] - counters[hop] for hop in (("c", "b"), ("b", "a")))
    return {"agent": last.get("send", 0.0) + last.get("sink", 0.0),
            "delay": last.get("delay", 0.0) - before.get("delay", 0.0),
            "coordinator": 0.0, "host": busy, "transfers": 1, "gb": data / 1e9,
            "packets": data / (DEFAULT_MTU + 14) + acks / ACK_BYTES}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="one-task,poster")
    parser.add_argument("--schedulers", default="spff,mst")
    parser.add_argument("--delay-lines", default="python,compiled", help="python, compiled or both")
    parser.add_argument("--time-scale", default="1", help="a factor, or auto")
    parser.add_argument("--out", default="runs/bench-dataplane")
    args = parser.parse_args()
    args.out = choose(Path(args.out), given=False).path  # a fresh folder: runs/bench-x, then runs/bench-x-2 ...
    print(f"results in {args.out}/", file=sys.stderr)

    lines = args.delay_lines.split(",")
    rows = []
    # the bare transfers first: their ends fork from this process, which must not have started
    # threads yet (a run starts many; a gloo end forked after them can hang)
    bare = []
    for line in ["none", *lines]:  # none: the same transfers with no delay line, what the host spends anyway
        os.environ[CHOICE_ENV] = line
        for kind, label in (("tcp", "bare TCP stream"), ("gloo", "bare gloo transfer")):
            print(f"{label}, {line} delay lines", file=sys.stderr)
            bare.append((f"{label}, a-b-c (its two ends)", line,
                         measure_bare(kind, delay_mode="off" if line == "none" else "userspace")))
    for scenario in args.scenarios.split(","):
        for scheduler in args.schedulers.split(","):
            for line in lines:
                os.environ[CHOICE_ENV] = line
                print(f"{scenario}, {scheduler}, {line} delay lines, time scale {args.time_scale}", file=sys.stderr)
                config = RunConfig(**SCENARIOS[scenario], scheduler=scheduler, time_scale=args.time_scale,
                                   out=str(Path(args.out) / f"{scenario}-{scheduler}-{line}"))
                rows.append((f"{scenario}, {scheduler}", line, measure_run(config)))
    rows += bare

    print(f"CPU of the broadcast and upload phases, time scale {args.time_scale} (the bare transfers: their "
          "whole life); agents' share of a bare transfer is its two ends\n")
    print("| run | delay lines | transfers | link GB | packets (k) | agents CPU (s) | per transfer (ms) "
          "| per link GB (s) | delay lines CPU (s) | per packet (µs) | coordinator CPU (s) | host CPU per packet (µs) "
          "|")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, line, r in rows:
        agents, delay, coordinator = r.get("agent", 0.0), r.get("delay", 0.0), r.get("coordinator", 0.0)
        host = f"{1e6 * r['host'] / r['packets']:.1f}" if "host" in r else ""
        print(f"| {label} | {line} | {r['transfers']:.0f} | {r['gb']:.3f} | {r['packets'] / 1e3:.1f} | {agents:.2f} "
              f"| {1e3 * agents / r['transfers']:.2f} | {agents / r['gb']:.1f} | {delay:.2f} "
              f"| {1e6 * delay / r['packets']:.1f} | {coordinator:.2f} | {host} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
