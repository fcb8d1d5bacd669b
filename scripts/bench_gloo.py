#!/usr/bin/env python3
"""Benchmark the floor gloo sets under a transfer: the CPU of a small send and receive between
two processes on loopback, with nothing emulated and no agent around it.

Each transfer of a run is its own two-rank gloo process group (:mod:`fedmst.workers.transport`),
so an agent keeps one connection a transfer, each with an event-loop thread. This opens
``--connections`` such connections between two processes (127.0.0.x addresses, loops started
with the run's timer slack), measures what the idle connections cost each process a second, then
moves ``--transfers`` messages of ``--bytes`` three ways: all over one connection in turn, taking
turns over every connection (each wakes a loop that has slept), and from ``--threads`` threads at
once, one connection each. It prints, per way, each end's CPU per transfer and the two together,
against the idle cost over the same time (what the transfers themselves add is the difference).

Run from the repository: ``.venv/bin/python scripts/bench_gloo.py [--connections 120]
[--transfers 600] [--bytes 19000] [--threads 30]``. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from functools import partial
from pathlib import Path

import torch

from fedmst.workers import dataflow, transport


def _cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def _end(rank: int, store: Path, args: argparse.Namespace, out: Path) -> None:
    """One process's part: open, measure the idle cost, then each way; write its lines to ``out``."""
    numel = args.bytes // 4
    pairs = [transport.open_pair(str(store), str(i), rank=rank, address=f"127.0.{i // 250}.{i % 250 + 1}",
                                 timeout_s=120, numel=numel) for i in range(args.connections)]
    tensor, lines = torch.zeros(numel), []
    start, cpu = time.monotonic(), _cpu_s()
    time.sleep(2)
    idle = (_cpu_s() - cpu) / (time.monotonic() - start)
    lines.append(f"idle {idle}")

    def move(pair: transport.Pair, count: int, first_tag: int) -> None:
        for tag in range(first_tag, first_tag + count):
            post = transport.post_send if rank == transport.SENDER else transport.post_recv
            transport.wait(post(pair, tensor, tag), pair)

    ways = {
        "one connection, in turn": lambda: move(pairs[0], args.transfers, 0),
        f"{args.connections} connections, in turn": lambda: [move(pairs[j % len(pairs)], 1, 10_000 + j)
                                                            for j in range(args.transfers)],
        f"{args.threads} threads at once": lambda: dataflow.run_all(
            [partial(move, pairs[i % len(pairs)], args.transfers // args.threads, 20_000 + 1000 * i)
             for i in range(args.threads)]),
    }
    for name, way in ways.items():
        start, cpu = time.monotonic(), _cpu_s()
        way()
        lines.append(f"{name}\t{_cpu_s() - cpu}\t{time.monotonic() - start}")
    out.write_text("\n".join(lines))
    for pair in pairs:
        transport.close_pair(pair)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=120)
    parser.add_argument("--transfers", type=int, default=600)
    parser.add_argument("--bytes", type=int, default=19_000)
    parser.add_argument("--threads", type=int, default=30)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-gloo-"))
    pid = os.fork()
    rank = transport.RECEIVER if pid == 0 else transport.SENDER
    try:
        _end(rank, folder, args, folder / f"rank{rank}.txt")
    finally:
        if pid == 0:
            os._exit(0)
    os.waitpid(pid, 0)
    results = [(folder / f"rank{r}.txt").read_text().splitlines() for r in (transport.SENDER, transport.RECEIVER)]
    idle = [float(lines[0].split()[1]) for lines in results]
    print(f"{args.connections} connections between two processes on loopback, {args.bytes:,} B a transfer; "
          f"idle: {1e3 * idle[0]:.0f} / {1e3 * idle[1]:.0f} ms of CPU a second (sender / receiver)\n")
    print("| way | transfers | wall s | sender ms a transfer | receiver ms | both ms | both, idle taken off |")
    print("|---|---|---|---|---|---|---|")
    for sent, received in zip(results[0][1:], results[1][1:]):
        name, cpu_s, wall_s = sent.split("\t")
        cpu_r = float(received.split("\t")[1])
        each = [1e3 * float(cpu_s) / args.transfers, 1e3 * cpu_r / args.transfers]
        busy = 1e3 * float(wall_s) * sum(idle) / args.transfers
        print(f"| {name} | {args.transfers} | {float(wall_s):.2f} | {each[0]:.3f} | {each[1]:.3f} | "
              f"{sum(each):.3f} | {sum(each) - busy:.3f} |")


if __name__ == "__main__":
    main()
