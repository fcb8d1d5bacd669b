#!/usr/bin/env python3
"""Benchmark one emulation spread over hosts against the same run on one host.

Runs ``fedmst compare`` twice with the same seed and options, once on this host and once with
``--ray ADDRESS --hosts N`` (one at a time), and prints one markdown table per scheduler: each
round's broadcast and upload on one host, spread, and their ratio; the largest difference between
the two runs' bytes on any link direction in any round; whether the final global models are equal;
and, for the spread run, the links across hosts, the bytes they carried and VXLAN's overhead on
the hosts' network, each host's clock offset with its error bound, and the set-up times (network,
agents) of both runs. Every run folder is kept under ``--out``.

Run as root from the repository, with a cluster whose hosts offer an emulation slot (on one machine:
``ADDRESS=$(bash scripts/ray-local.sh start 2 --namespaces | tail -n1)``):
``.venv/bin/python scripts/bench_hosts.py --ray $ADDRESS [--hosts 2] [--out runs/bench-hosts]
[-- compare options...]``; the compare options default to ``--topology nsfnet --local-models 8
--rounds 3``. Prints the table to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch

from fedmst.run.results import read_csv

FEDMST = str(Path(sys.executable).with_name("fedmst"))
DEFAULT = ["--topology", "nsfnet", "--local-models", "8", "--rounds", "3"]


def compare(out: Path, options: list[str]) -> None:
    print(f"running fedmst compare {' '.join(options)} --out {out}", file=sys.stderr)
    done = subprocess.run([FEDMST, "compare", *options, "--save-models", "--overwrite", "--out", str(out)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bench_hosts: {done.stderr.strip().splitlines()[-1]}")


def link_bytes(folder: Path) -> dict[tuple[str, str, str], int]:
    return {(r["round"], r["src"], r["dst"]): int(r["measured_bytes"]) for r in read_csv(folder / "links.csv")}


def table(scheduler: str, one: Path, spread: Path) -> list[str]:
    """The markdown lines for one scheduler."""
    lines = [f"### {scheduler}", "", "| round | broadcast one host (s) | spread (s) | ratio | upload one host (s) | "
             "spread (s) | ratio |", "|---|---|---|---|---|---|---|"]
    for a, b in zip(read_csv(one / "rounds.csv"), read_csv(spread / "rounds.csv")):
        cells = [a["round"]]
        for phase in ("broadcast_s", "upload_s"):
            cells += [f"{float(a[phase]):.3f}", f"{float(b[phase]):.3f}", f"{float(b[phase]) / float(a[phase]):.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    here, there = link_bytes(one), link_bytes(spread)
    worst = max((abs(there[k] - n) / n, k) for k, n in here.items() if n)
    weights = max((abs(there[k] - n) / n, k) for k, n in here.items() if n > 1_000_000)  # a model's transfer or more
    total = sum(there.values()) / sum(here.values()) - 1
    last = sorted((one / "models").iterdir())[-1].name
    same = torch.equal(torch.load(one / "models" / last / "task0-global.pt"),
                       torch.load(spread / "models" / last / "task0-global.pt"))
    summary = json.loads((spread / "summary.json").read_text())
    emulated, times = summary["emulated"], summary["time_breakdown_s"]
    times_one = json.loads((one / "summary.json").read_text())["time_breakdown_s"]
    offsets = ", ".join(f"{h} {o['offset_s'] * 1e6:+.0f} ± {o['error_s'] * 1e6:.0f} µs"
                        for h, o in emulated["clock_offsets"].items())
    lines += ["", f"- largest difference in a link direction's bytes in a round: {worst[0] * 100:.3f}% "
                  f"(round {worst[1][0]}, {worst[1][1]}->{worst[1][2]}); among those that carried a model or more "
                  f"(over 1 MB): {weights[0] * 100:.3f}% (round {weights[1][0]}, {weights[1][1]}->{weights[1][2]}); "
                  f"all links' bytes together: {total * 100:+.3f}%",
              f"- final global model equal: {same}",
              f"- links across hosts: {', '.join(emulated['links_across_hosts'])}; they carried "
              f"{emulated['tunnel_bytes'] / 1e6:.1f} MB, VXLAN added {emulated['tunnel_overhead_bytes'] / 1e6:.2f} MB "
              f"({emulated['tunnel_overhead_bytes'] / max(emulated['tunnel_bytes'], 1) * 100:.2f}%) on the hosts' "
              "network",
              f"- clock offsets: {offsets}",
              f"- set-up: network {times_one.get('network', 0):.1f} s on one host, {times.get('network', 0):.1f} s "
              f"spread (each host's share: " + ", ".join(f"{h} {t:.2f} s" for h, t in emulated["set_up_s"].items())
              + f"); agents {times_one.get('agents', 0):.1f} s and {times.get('agents', 0):.1f} s",
              "- the hosts' network: " + ", ".join(f"{pair} {m:.0f} Mbit/s" for pair, m in
                                                    emulated["placement"]["hosts_network_mbps"].items()), ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ray", required=True, metavar="ADDRESS")
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("runs/bench-hosts"))
    parser.add_argument("options", nargs="*", help="fedmst compare's options (after --)")
    args = parser.parse_args()
    options = args.options or DEFAULT
    compare(args.out / "one-host", options)
    compare(args.out / "spread", [*options, "--ray", args.ray, "--hosts", str(args.hosts)])
    print(f"## fedmst compare {' '.join(options)}: one host against {args.hosts} hosts\n")
    for scheduler in sorted(p.name for p in (args.out / "one-host").iterdir() if (p / "rounds.csv").exists()):
        print("\n".join(table(scheduler, args.out / "one-host" / scheduler, args.out / "spread" / scheduler)))


if __name__ == "__main__":
    main()
