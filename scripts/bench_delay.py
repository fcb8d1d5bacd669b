#!/usr/bin/env python3
"""Benchmark fedmst's link delay and loss emulation end to end, through ``Emulation`` itself.

Every measurement builds its network with :class:`fedmst.net.emulation.Emulation` and
``delay_mode="userspace"`` (one NFQUEUE delay line per link direction, started and stopped by
the emulation); nothing is started by hand. It measures, beside what was configured:

* two nodes ``a - b``, one link, for one-way delays of 0.1, 1, 10 and 50 ms and link rates of
  10, 100 and 1000 Mbit/s:
  - ping RTT (``ping -U``: user-to-user time; without ``-U`` ping uses the kernel's receive
    stamp, taken before the reply waits in a's delay line) against 2 x delay, and against
    2 x delay + the RTT measured on the same link with ``delay_mode="off"``;
  - TCP goodput a->b (``iperf3 -c b -t T -O O``, slow start omitted) against the configured
    rate and against the wire maximum rate x 1448/1514 (TCP payload per 1500-byte-MTU frame);
    the same at MTU 9000 for 1000 Mbit/s; and with ``delay_mode="off"`` (the no-delay-line
    ceiling of this machine). The delay lines' CPU use is measured during each transfer.
* loss: two nodes, 10 ms, ``Emulation(loss=p)`` for p = 0.01 and 0.1: ping loss against the
  round-trip loss 1-(1-p)^2, and the delay lines' own counters (lost / received) against p;
* NSFNET (100 Mbit/s, 5 us/km): ping RTT along a few multi-hop paths routed with
  ``install_flows`` against 2 x the sum of the path's link delays, and one iperf3 transfer
  along a multi-hop path against 100 Mbit/s.

Goals (the issue's): RTT within max(5 %, 0.1 ms) of configured; goodput >= 90 % of the
configured rate; loss rate within 10 % (relative) of configured.

Run as root from the repository: ``.venv/bin/python scripts/bench_delay.py`` (``--quick`` for
fewer, shorter points). Prints markdown tables to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import networkx as nx

from fedmst.net.emulation import Emulation
from fedmst.core.topology import load_topology

PAYLOAD_PER_FRAME = {1500: 1448 / 1514, 9000: 8948 / 9014}
"""TCP payload per Ethernet frame (IPv4 20 + TCP 20 + timestamps 12, Ethernet header 14)."""
TCP_BUFFERS = ("net.ipv4.tcp_rmem='4096 131072 33554432' net.ipv4.tcp_wmem='4096 16384 33554432'")
"""Room for 1 Gbit/s x 100 ms RTT (12.5 MB) in flight; the namespace default stops at 6 MB / 4 MB."""
TICK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def two_node(capacity_mbps: float, delay_ms: float) -> nx.Graph:
    g = nx.Graph(name=f"pair-{capacity_mbps:g}M-{delay_ms:g}ms", source="bench_delay")
    g.add_node("a")
    g.add_node("b")
    g.add_edge("a", "b", capacity_mbps=float(capacity_mbps), delay_s=delay_ms / 1e3, length_km=None)
    return g


def link_addr(emu: Emulation, node: str) -> str:
    intf = emu.interfaces(node)[0]
    m = re.search(r"inet (\S+)/", emu.cmd(node, f"ip -4 -o addr show dev {intf}"))
    if not m:
        raise RuntimeError(f"no address on {node}:{intf}")
    return m.group(1)


def ping(emu: Emulation, node: str, args: str, quiet: bool = False) -> dict[str, float]:
    out = emu.cmd(node, f"ping -U -n {'-q ' if quiet else ''}{args}")
    sent = re.search(r"(\d+) packets transmitted, (\d+) received", out)
    rtt = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms", out)
    if not sent:
        raise RuntimeError(f"ping failed: {out.strip()[-300:]}")
    res = {"sent": int(sent.group(1)), "received": int(sent.group(2))}
    if rtt:
        res.update(min=float(rtt.group(1)), avg=float(rtt.group(2)), max=float(rtt.group(3)), mdev=float(rtt.group(4)))
    times = sorted(float(t) for t in re.findall(r"time=([\d.]+) ms", out))
    if times:
        res["median"] = times[len(times) // 2]
    return res


def _cpu_ticks(pid: int) -> int:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])  # utime + stime (fields 14, 15)


def _busy_ticks() -> tuple[int, int]:
    f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = f[3] + f[4]
    return sum(f) - idle, sum(f)


def line_pids(emu: Emulation) -> dict[str, int]:
    """The emulation's delay-line processes by link direction (read for CPU accounting only)."""
    return emu.delay_line_pids()


def iperf(emu: Emulation, server: str, client: str, dst: str, seconds: int, omit: int,
          tmp: Path, bind_src: str | None = None) -> dict[str, float]:
    """One iperf3 transfer client->server; goodput of the non-omitted part, and CPU use meanwhile."""
    for node in (server, client):
        emu.cmd(node, f"sysctl -qw {TCP_BUFFERS}")
    bind = f" -B {dst}" if bind_src else ""
    with open(tmp / f"iperf3-{server}.log", "w") as f:
        srv = emu.popen(server, ["iperf3", "-s", "-1", *bind.split()], env=dict(os.environ), log_file=f)
        deadline = time.monotonic() + 10
        while ":5201" not in emu.cmd(server, "ss -ltnH"):
            if srv.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"iperf3 server did not start: {(tmp / f'iperf3-{server}.log').read_text()}")
            time.sleep(0.05)
        pids = line_pids(emu)
        cpu0 = {k: _cpu_ticks(p) for k, p in pids.items()}
        busy0, t0 = _busy_ticks()
        out = emu.cmd(client, f"iperf3 -c {dst}{' -B ' + bind_src if bind_src else ''} -t {seconds} -O {omit} -J")
        busy1, t1 = _busy_ticks()
        cpu1 = {k: _cpu_ticks(p) for k, p in pids.items()}
        srv.wait(timeout=10)
    res = json.loads(out[out.index("{"):])
    if "error" in res:
        raise RuntimeError(f"iperf3: {res['error']}")
    recv = res["end"]["sum_received"]
    wall = (t1 - t0) / TICK / os.cpu_count()  # /proc/stat counts ticks of every CPU
    return {
        "goodput_mbps": recv["bytes"] * 8 / recv["seconds"] / 1e6,
        "seconds": recv["seconds"],
        "retransmits": res["end"]["sum_sent"].get("retransmits", 0),
        "host_busy_pct": 100 * (busy1 - busy0) / max(t1 - t0, 1),
        "line_cpu_pct": {k: 100 * (cpu1[k] - cpu0[k]) / TICK / wall for k in pids} if wall else {},
    }


def drops(stats: dict[str, dict[str, object]]) -> dict[str, int]:
    return {k: int(s["overflow"]) + int(s.get("kernel_queue_dropped", 0)) + int(s.get("kernel_user_dropped", 0))  # type: ignore[arg-type]
            for k, s in stats.items()}


# the measurements ----------------------------------------------------------------------------------
def pair_run(capacity: float, delay_ms: float, mode: str, mtu: int, pings: int, seconds: int, omit: int,
             tmp: Path, do_ping: bool = True, do_iperf: bool = True) -> dict[str, object]:
    row: dict[str, object] = {"capacity_mbps": capacity, "delay_ms": delay_ms, "mode": mode, "mtu": mtu}
    t = time.monotonic()
    with Emulation(two_node(capacity, delay_ms), delay_mode=mode, mtu=mtu) as emu:
        b = link_addr(emu, "b")
        if do_ping:
            emu.cmd("a", f"ping -c 3 -i 0.05 -W 1 {b}")  # ARP, warm-up
            row["ping"] = ping(emu, "a", f"-c {pings} -i 0.02 -W 2 {b}")
        if do_iperf:
            row["iperf"] = iperf(emu, "b", "a", b, seconds, omit, tmp)
    row["line_drops"] = drops(emu.delay_stats)
    row["release_err_us"] = {k: round(float(s["release_error_mean_s"]) * 1e6, 1) for k, s in emu.delay_stats.items()}  # type: ignore[arg-type]
    row["wall_s"] = time.monotonic() - t
    mbps = row.get("iperf", {}).get("goodput_mbps")  # type: ignore[union-attr]
    rtt = row.get("ping", {}).get("avg")  # type: ignore[union-attr]
    log(f"{mode} {capacity:g} Mbit/s {delay_ms:g} ms MTU {mtu}: rtt {rtt} ms, "
        f"goodput {mbps and round(mbps, 1)} Mbit/s, {row['wall_s']:.0f} s")
    return row


def loss_run(p: float, pings: int, interval: float, tmp: Path) -> dict[str, object]:
    t = time.monotonic()
    with Emulation(two_node(100, 10), delay_mode="userspace", loss=p) as emu:
        b = link_addr(emu, "b")
        emu.cmd("a", f"ping -c 3 -i 0.05 -W 1 {b}")  # ARP first: its replies are IPv4-free, not lost
        # -l 50: up to 50 echo requests in flight; without it ping sends about one per RTT, not per -i
        res = ping(emu, "a", f"-c {pings} -i {interval} -l 50 -W 1 {b}", quiet=True)
    stats = emu.delay_stats
    lines = {k: {"received": s["received"], "lost": s["lost"]} for k, s in stats.items()}
    row = {"loss": p, "ping": res, "lines": lines, "wall_s": time.monotonic() - t}
    log(f"loss {p}: ping {res['sent'] - res['received']}/{res['sent']} lost; lines {row['lines']}")
    return row


def nsfnet_run(paths: Sequence[Sequence[str]], iperf_path: Sequence[str], pings: int, seconds: int, omit: int,
               tmp: Path) -> dict[str, object]:
    g = load_topology("nsfnet")
    t = time.monotonic()
    rows = []
    with Emulation(g, delay_mode="userspace") as emu:
        setup = time.monotonic() - t
        flows = emu.install_flows({f"p{i}": p for i, p in enumerate(paths)} | {"iperf": iperf_path})
        for i, path in enumerate(paths):
            flow = flows[f"p{i}"]
            emu.cmd(path[0], f"ping -c 2 -i 0.05 -W 1 -I {flow.src_addr} {flow.dst_addr}")  # ARP on every hop
            res = ping(emu, path[0], f"-c {pings} -i 0.05 -W 2 -I {flow.src_addr} {flow.dst_addr}")
            one_way = sum(g.edges[u, v]["delay_s"] for u, v in zip(path, path[1:])) * 1e3
            rows.append({"path": list(path), "one_way_ms": one_way, "ping": res})
            log(f"nsfnet {'-'.join(path)}: rtt {res.get('avg')} vs {2 * one_way:.3f} ms")
        flow = flows["iperf"]
        emu.cmd(iperf_path[0], f"ping -c 2 -i 0.05 -W 1 -I {flow.src_addr} {flow.dst_addr}")
        perf = iperf(emu, iperf_path[-1], iperf_path[0], flow.dst_addr, seconds, omit, tmp, bind_src=flow.src_addr)
        log(f"nsfnet iperf {'-'.join(iperf_path)}: {perf['goodput_mbps']:.1f} Mbit/s")
    one_way = sum(g.edges[u, v]["delay_s"] for u, v in zip(iperf_path, iperf_path[1:])) * 1e3
    return {"setup_s": setup, "wall_s": time.monotonic() - t, "pings": rows, "lines": len(emu.delay_stats),
            "line_drops": sum(drops(emu.delay_stats).values()),
            "iperf": {"path": list(iperf_path), "one_way_ms": one_way, **perf}}


# the tables -------------------------------------------------------------------------------------------
def rtt_ok(measured: float, target: float) -> bool:
    return abs(measured - target) <= max(0.05 * target, 0.1)


def rtt_cell(p: dict[str, float]) -> str:
    return f"{p['avg']:.3f} ({p['median']:.3f}; {p['min']:.3f}/{p['max']:.3f}) ms"


def yes(ok: bool) -> str:
    return "pass" if ok else "**FAIL**"


def print_tables(res: dict[str, object], args: argparse.Namespace) -> None:
    pairs: list[dict] = res["pairs"]  # type: ignore[assignment]
    base = {r["capacity_mbps"]: r for r in pairs if r["mode"] == "off" and r["mtu"] == 1500}
    print("### Two nodes: ping RTT (`ping -U`, "
          f"{args.pings} pings at 20 ms), delay line at each receiver's ingress\n")
    print("| link | one-way delay | configured RTT = 2×delay | measured RTT mean (median; min/max) | error "
          "| goal ±max(5%, 0.1 ms) | base RTT (delay off) | 2×delay + base | error | vs 2×delay+base |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in pairs:
        if r["mode"] != "userspace" or "ping" not in r or r["mtu"] != 1500:
            continue
        p, cfg = r["ping"], 2 * r["delay_ms"]
        b = base[r["capacity_mbps"]]["ping"]["avg"]
        print(f"| {r['capacity_mbps']:g} Mbit/s | {r['delay_ms']:g} ms | {cfg:.3f} ms | {rtt_cell(p)} "
              f"| {p['avg'] - cfg:+.3f} ms | {yes(rtt_ok(p['avg'], cfg))} | {b:.3f} ms | {cfg + b:.3f} ms "
              f"| {p['avg'] - cfg - b:+.3f} ms | {yes(rtt_ok(p['avg'], cfg + b))} |")
    print()
    print(f"### Two nodes: TCP goodput a→b (`iperf3 -t {args.seconds} -O {args.omit}`, slow start omitted)\n")
    print("| link | MTU | one-way delay | goodput | % of configured | % of wire max | goal ≥90% of configured "
          "| retransmits | delay-line CPU a→b / b→a (% of a core) | host CPU busy (2 cores) | line overflow |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in pairs:
        if "iperf" not in r:
            continue
        i, cap = r["iperf"], r["capacity_mbps"]
        wire = cap * PAYLOAD_PER_FRAME[r["mtu"]]
        cpu = i["line_cpu_pct"]
        cpu_s = " / ".join(f"{cpu[k]:.0f}" for k in ("a->b", "b->a") if k in cpu) or "–"
        dl = "none (delay off)" if r["mode"] == "off" else f"{r['delay_ms']:g} ms"
        over = sum(r["line_drops"].values()) if r["mode"] != "off" else "–"
        print(f"| {cap:g} Mbit/s | {r['mtu']} | {dl} | {i['goodput_mbps']:.1f} Mbit/s "
              f"| {100 * i['goodput_mbps'] / cap:.1f}% "
              f"| {100 * i['goodput_mbps'] / wire:.1f}% (of {wire:.1f}) | {yes(i['goodput_mbps'] >= 0.9 * cap)} "
              f"| {i['retransmits']} | {cpu_s} | {i['host_busy_pct']:.0f}% | {over} |")
    print()
    print("### Loss: two nodes, 100 Mbit/s, 10 ms, `Emulation(loss=p)` on both directions, "
          "`ping -U -q -i 0.0005 -l 50`\n")
    print("| configured p | what | configured | measured | relative error | goal within 10% |")
    print("|---|---|---|---|---|---|")
    for r in res["loss"]:  # type: ignore[union-attr]
        p = r["loss"]
        rt = 1 - (1 - p) ** 2
        pg = r["ping"]
        m = (pg["sent"] - pg["received"]) / pg["sent"]
        print(f"| {p:g} | ping round trip, {pg['sent'] - pg['received']}/{pg['sent']} lost "
              f"| 1-(1-p)² = {rt:.4f} | {m:.4f} "
              f"| {100 * (m - rt) / rt:+.1f}% | {yes(abs(m - rt) <= 0.1 * rt)} |")
        for k, s in r["lines"].items():
            ml = s["lost"] / s["received"] if s["received"] else float("nan")
            print(f"| {p:g} | delay line {k}, {s['lost']}/{s['received']} lost | {p:.4f} | {ml:.4f} "
                  f"| {100 * (ml - p) / p:+.1f}% | {yes(abs(ml - p) <= 0.1 * p)} |")
    print()
    ns = res.get("nsfnet")
    if ns:
        print(f"### NSFNET (14 nodes, 21 links × 2 directions = {ns['lines']} delay lines, 100 Mbit/s, 5 µs/km): "
              f"routed flows (`install_flows`), `ping -U -c {args.ns_pings} -i 0.05`\n")
        print("| path | hops | configured RTT = 2×Σ delay | measured RTT mean (median; min/max) | error "
              "| goal ±max(5%, 0.1 ms) |")
        print("|---|---|---|---|---|---|")
        for r in ns["pings"]:
            p, cfg = r["ping"], 2 * r["one_way_ms"]
            print(f"| {'-'.join(r['path'])} | {len(r['path']) - 1} | {cfg:.3f} ms | {rtt_cell(p)} "
                  f"| {p['avg'] - cfg:+.3f} ms ({100 * (p['avg'] - cfg) / cfg:+.2f}%) | {yes(rtt_ok(p['avg'], cfg))} |")
        i = ns["iperf"]
        print()
        print("| iperf3 path | hops | one-way delay | goodput | % of 100 Mbit/s | % of wire max | goal ≥90% "
              "| retransmits | host CPU busy |")
        print("|---|---|---|---|---|---|---|---|---|")
        wire = 100 * PAYLOAD_PER_FRAME[1500]
        print(f"| {'-'.join(i['path'])} | {len(i['path']) - 1} | {i['one_way_ms']:.1f} ms "
              f"| {i['goodput_mbps']:.1f} Mbit/s "
              f"| {i['goodput_mbps']:.1f}% | {100 * i['goodput_mbps'] / wire:.1f}% | {yes(i['goodput_mbps'] >= 90)} "
              f"| {i['retransmits']} | {i['host_busy_pct']:.0f}% |")
        print(f"\nNSFNET emulation with {ns['lines']} delay lines built in {ns['setup_s']:.1f} s; "
              f"delay-line overflow/kernel drops: {ns['line_drops']}.")
    print()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer points, shorter transfers (a smoke run)")
    p.add_argument("--json", type=Path, default=None, help="also write every raw measurement here")
    p.add_argument("--no-nsfnet", action="store_true")
    args = p.parse_args()
    delays = (1.0, 50.0) if args.quick else (0.1, 1.0, 10.0, 50.0)
    caps = (10.0, 100.0, 1000.0) if not args.quick else (100.0, 1000.0)
    args.pings = 50 if args.quick else 100
    args.seconds, args.omit = (4, 1) if args.quick else (10, 3)
    args.ns_pings = 20
    # 100,000 samples at p = 0.01 give a standard error of 3% of p per direction, so the 10% goal
    # is a 3-sigma test of the mechanism, not of luck; 20,000 at p = 0.1 likewise (2%)
    loss_plan = ((0.1, 2000, 0.0005),) if args.quick else ((0.01, 100000, 0.0005), (0.1, 20000, 0.0005))
    start = time.monotonic()
    res: dict[str, object] = {"pairs": [], "loss": []}
    with tempfile.TemporaryDirectory(prefix="fedmst-bench-delay-") as tmp_s:
        tmp = Path(tmp_s)
        pairs: list = res["pairs"]  # type: ignore[assignment]
        for cap in caps:
            pairs.append(pair_run(cap, 0.0, "off", 1500, args.pings, args.seconds, args.omit, tmp))
            for d in delays:
                pairs.append(pair_run(cap, d, "userspace", 1500, args.pings, args.seconds, args.omit, tmp))
        if 1000.0 in caps:
            # jumbo frames: a sixth of the packets per second through the delay lines
            for mode, d in [("off", 0.0)] + [("userspace", d) for d in delays]:
                pairs.append(pair_run(1000.0, d, mode, 9000, args.pings, args.seconds, args.omit, tmp, do_ping=False))
        for loss, n, interval in loss_plan:
            res["loss"].append(loss_run(loss, n, interval, tmp))  # type: ignore[union-attr]
        if not args.no_nsfnet:
            g = load_topology("nsfnet")
            ends = [("0", "13"), ("1", "11"), ("6", "10")] if not args.quick else [("0", "13")]
            paths = [nx.shortest_path(g, u, v, weight="delay_s") for u, v in ends]
            longest = max(paths, key=len)
            res["nsfnet"] = nsfnet_run(paths, longest, args.ns_pings, args.seconds, args.omit, tmp)
    elapsed = time.monotonic() - start
    print_tables(res, args)
    print(f"Total bench time {elapsed / 60:.1f} min ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{os.cpu_count()} cores, kernel {os.uname().release}).")
    res["elapsed_s"] = elapsed
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
