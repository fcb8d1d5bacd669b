#!/usr/bin/env python3
"""Benchmark what a dataset costs a run's memory: is it held once per host, or once per agent?

Writes two datasets of FEMNIST's shape (1x28x28 float32 images, 62 classes) as ``.npz`` files, a
large one (``--samples``) and one a hundredth of its size, runs ``fedmst run`` on each (one after
the other, the same options otherwise) and samples, every 0.2 s, the proportional set size (PSS:
shared pages divided among the processes sharing them) of every process under the run (the
coordinator, its fork servers, the agents, the delay lines), keeping the peak. The difference
between the two peaks is what the larger dataset cost the run; an agent holding its own copy of
the whole dataset would add the dataset's size per agent.

``.venv/bin/python scripts/bench_memory.py [--samples 60000] [-- run options...]`` (run options
default to ``--topology nsfnet --local-models 15 --rounds 2 --model mlp``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

FEDMST = str(Path(sys.executable).with_name("fedmst"))
DEFAULT = ["--topology", "nsfnet", "--local-models", "15", "--rounds", "2", "--model", "mlp"]


def dataset(path: Path, samples: int) -> float:
    """A FEMNIST-shaped .npz of ``samples`` training samples (and a tenth as many to test); its MB in memory."""
    rng = np.random.default_rng(0)
    x = rng.random((samples + samples // 10, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 62, len(x))
    np.savez(path, x_train=x[:samples], y_train=y[:samples], x_test=x[samples:], y_test=y[samples:])
    return x.nbytes / 1e6


def peak_pss(options: list[str], out: Path) -> tuple[float, int]:
    """The run's peak PSS over all its processes (MB), and its agents (one per node with a role:
    G, a local model, an aggregation; from its summary.json)."""
    proc = subprocess.Popen([FEDMST, "run", *options, "--overwrite", "--out", str(out)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    root, peak = psutil.Process(proc.pid), 0.0
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
            total = 0
            for p in tree:
                try:
                    total += p.memory_full_info().pss
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            peak = max(peak, total / 1e6)
        except psutil.NoSuchProcess:
            pass
        time.sleep(0.2)
    if proc.returncode:
        sys.exit(f"bench_memory: {proc.stderr.read().strip().splitlines()[-1]}")
    summary = json.loads((out / "summary.json").read_text())
    return peak, len({summary["global_node"], *summary["local_nodes"], *summary["aggregation_nodes"]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=60_000)
    parser.add_argument("options", nargs="*", help="fedmst run's options (after --)")
    args = parser.parse_args()
    options = args.options or DEFAULT
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for samples in (args.samples // 100, args.samples):
            path = Path(scratch) / f"femnist-{samples}.npz"
            size = dataset(path, samples)
            print(f"running {samples:,} samples ({size:.0f} MB)", file=sys.stderr)
            rows.append((samples, size, *peak_pss([*options, "--dataset", str(path)], Path(scratch) / "run")))
    print("| training samples | dataset (MB) | peak PSS of the run (MB) | agent processes |\n|---|---|---|---|")
    for samples, size, pss, agents in rows:
        print(f"| {samples:,} | {size:.0f} | {pss:.0f} | {agents} |")
    (_, small, small_pss, _), (_, large, large_pss, agents) = rows
    print(f"\nthe larger dataset cost the run {large_pss - small_pss:.0f} MB for {large - small:.0f} MB more data; "
          f"a copy per agent would have cost {(large - small) * agents:.0f} MB ({agents} agents)")


if __name__ == "__main__":
    main()
