#!/usr/bin/env python3
"""Benchmark what a VXLAN tunnel costs the hosts' CPUs per packet, against a veth.

A line a-b-c-d of fast links without delay lines (so that the kernel's forwarding is what costs),
built by host agents of a Ray cluster of two hosts: once with a-b on the first host and c-d on the
second (b-c a tunnel through the hosts' network), once with all four on the first (b-c a veth).
The same TCP transfer crosses it from a to d each time; the CPU time every core spent (user,
system, interrupts: /proc/stat, the whole machine) over the transfer is divided by the packets
the tunnel carried both ways (its VXLAN overhead over 50 bytes), and the difference between the
two layouts is the tunnel's own cost per packet. The namespaced hosts of
``scripts/ray-local.sh start 2 --namespaces`` share one kernel, so both tunnel ends' cost is
counted (on real hosts each pays its end); on a loaded 2-core host this is noisy: runs alternate
and the median is printed.

``.venv/bin/python scripts/bench_tunnel.py --ray ADDRESS [--megabytes 200] [--mbps 1000] [--runs 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import networkx as nx

from fedmst.hosts.agent import start_host_agents
from fedmst.hosts.raycluster import cluster_hosts, connect
from fedmst.net.tunnels import VXLAN_OVERHEAD, HostShare


def busy_s() -> float:
    """CPU seconds every core of this machine spent busy so far (all but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def transfer(layout: dict[str, int], hosts: dict[str, str], megabytes: int, mbps: float, run: str,
             folder: Path) -> tuple[float, int, float]:
    """(busy CPU seconds, packets through the tunnel both ways, seconds) of one transfer a -> d."""
    import ray

    graph = nx.path_graph(["a", "b", "c", "d"])
    nx.set_edge_attributes(graph, mbps, "capacity_mbps")
    nx.set_edge_attributes(graph, 0.0, "delay_s")
    names = list(hosts)
    placed = {node: names[i] for node, i in layout.items()}
    used = {h: hosts[h] for h in dict.fromkeys(placed.values())}
    agents = start_host_agents(run, used)
    try:
        ray.get([agents[h].build.remote(graph, HostShare(h, placed, {n: n for n in names}), {}) for h in used])
        flow = ray.get(agents[placed["a"]].install_flows.remote({"x": ["a", "b", "c", "d"]}))["x"]
        if placed["d"] != placed["a"]:
            ray.get(agents[placed["d"]].install_flows.remote({"x": ["a", "b", "c", "d"]}))
        out = folder / f"{run}.out"
        sink = (f"{sys.executable} -c \"import socket; s = socket.socket(); s.bind(('{flow.dst_addr}', 5001)); "
                f"s.listen(); c, _ = s.accept(); n = 0\nwhile (b := c.recv(1 << 20)): n += len(b)\nprint(n)\" "
                f"> {out} 2>&1 &")
        ray.get(agents[placed["d"]].cmd.remote("d", sink))
        time.sleep(1.0)
        send = (f"{sys.executable} -c \"import socket; s = socket.create_connection(('{flow.dst_addr}', 5001), "
                f"source_address=('{flow.src_addr}', 0)); b = bytes(1 << 20); "
                f"[s.sendall(b) for _ in range({megabytes})]; s.close()\" 2>&1")
        cpu, start = busy_s(), time.monotonic()
        said = ray.get(agents[placed["a"]].cmd.remote("a", send)).strip()
        while not out.read_text().strip():
            time.sleep(0.01)
        cpu, seconds = busy_s() - cpu, time.monotonic() - start
        if said or out.read_text().strip() != str(megabytes << 20):
            sys.exit(f"bench_tunnel: the transfer failed: {said or out.read_text()}")
        overhead = sum(sum(ray.get(a.meter.remote("tunnel_overhead")).values()) for a in agents.values())
        return cpu, overhead // VXLAN_OVERHEAD, seconds
    finally:
        ray.get([a.close.remote() for a in agents.values()])
        for a in agents.values():
            ray.kill(a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ray", required=True, metavar="ADDRESS")
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--mbps", type=float, default=1000.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    connect(args.ray)
    hosts = cluster_hosts(others=True)
    if len(hosts) < 2:
        sys.exit(f"bench_tunnel: the cluster at {args.ray} has {len(hosts)} host(s) with a slot besides this one")
    layouts = {"tunnel": {"a": 0, "b": 0, "c": 1, "d": 1}, "veth": {"a": 0, "b": 0, "c": 0, "d": 0}}
    found: dict[str, list[tuple[float, int, float]]] = {name: [] for name in layouts}
    with tempfile.TemporaryDirectory() as scratch:
        for i in range(args.runs):
            for name, layout in layouts.items():
                found[name].append(transfer(layout, hosts, args.megabytes, args.mbps, f"bt{name[0]}{i}", Path(scratch)))
                print(f"{name} run {i + 1}: {found[name][-1][0]:.2f} CPU s in {found[name][-1][2]:.2f} s",
                      file=sys.stderr)
    packets = statistics.median(p for _, p, _ in found["tunnel"])
    cpu = {name: statistics.median(c for c, _, _ in runs) for name, runs in found.items()}
    print("| layout | median CPU s | µs per tunnel packet |\n|---|---|---|")
    for name in layouts:
        print(f"| b-c a {name} | {cpu[name]:.2f} | {cpu[name] / packets * 1e6:.1f} |")
    print(f"\n{args.megabytes} MB a->d at {args.mbps:g} Mbit/s, {args.runs} runs each; {packets:,.0f} packets through "
          f"the tunnel both ways; the tunnel's own cost: {(cpu['tunnel'] - cpu['veth']) / packets * 1e6:.1f} µs of "
          "CPU per packet (both ends)")


if __name__ == "__main__":
    main()
