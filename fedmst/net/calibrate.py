"""What one emulated link of this host really carries: its ceiling, measured once per boot.

htb shapes a link to whatever rate it is given, but every packet crosses a veth pair, and with the
userspace delay mode a delay line, in software: above a rate set by the host's CPUs a link carries
what the CPU manages, not its configured capacity (a 1 Pbit/s link on a 2-core host moves about
1 Gbit/s). A run compares each link's capacity with this ceiling and names the links above it
(``emulated.bandwidth_cpu_bound`` in summary.json), so a prediction that cannot hold is never
presented as emulated.

The measurement builds a two-host emulation as a run would (htb far above any real rate, the same
delay mechanism, 0.1 ms of delay so a delay line is in the path), sends one TCP stream across it for
a fraction of a second, and takes the best rate the sender's interface counter shows over short
windows. The result is cached in fedmst's state directory for this boot, delay mode (and delay
line) and MTU.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import networkx as nx

from fedmst.net.cleanup import STATE_DIR
from fedmst.net.delayline import running_kind
from fedmst.errors import EmulationError
from fedmst.net.emulation import Capabilities, Emulation

CACHE = STATE_DIR / "link-ceiling"
"""JSON ``{"boot_id": ..., "ceilings": {"userspace/1500": Mbit/s, ...}}``; not ``*.json``, which
``fedmst clean`` reads as run records."""
PROBE_S = 0.6
WINDOW_S = 0.1
_PORT = 29500


def link_ceiling_mbps(delay_mode: str, mtu: int, capabilities: Capabilities,
                      report: Callable[[str], None] = print) -> float:
    """The most one emulated link of this host carries, in Mbit/s (measured once per boot; one
    measurement at a time on the host, so two runs starting together do not halve each other's).
    Raises :class:`EmulationError` if it cannot be measured."""
    # the delay lines' own cost per packet sets much of it: the compiled and the Python line differ
    key = f"{delay_mode}-{running_kind()}/{mtu}" if delay_mode == "userspace" else f"{delay_mode}/{mtu}"
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ceilings = _cached(boot)
        if key not in ceilings:
            report(f"measuring what one emulated link of this host carries ({delay_mode} delay; once per boot)")
            ceilings[key] = measure_ceiling_mbps(delay_mode, mtu, capabilities)
            try:
                fd, tmp = tempfile.mkstemp(dir=STATE_DIR, prefix="link-ceiling.", suffix=".tmp")
                with os.fdopen(fd, "w") as out:
                    out.write(json.dumps({"boot_id": boot, "ceilings": ceilings}))
                os.replace(tmp, CACHE)
            except OSError:  # not cached: measured again next time
                pass
    return ceilings[key]


def _cached(boot: str) -> dict[str, float]:
    """The ceilings cached for boot ``boot``; none if the cache is missing, unreadable or older."""
    try:
        cached = json.loads(CACHE.read_text())
        if cached.get("boot_id") == boot:
            return {str(k): float(v) for k, v in cached["ceilings"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return {}


def cpu_bound_links(graph: nx.Graph, ceiling_mbps: float) -> list[str]:
    """The links whose capacity is above ``ceiling_mbps``, as ``u-v``.

    >>> g = nx.Graph([("a", "b", {"capacity_mbps": 1e9}), ("b", "c", {"capacity_mbps": 100.0})])
    >>> cpu_bound_links(g, 900.0)
    ['a-b']
    """
    return sorted(f"{u}-{v}" for u, v, c in graph.edges(data="capacity_mbps") if float(c) > ceiling_mbps)


def measure_ceiling_mbps(delay_mode: str, mtu: int, capabilities: Capabilities) -> float:
    """Send one TCP stream across a fresh two-host emulation; its best ``WINDOW_S`` rate in Mbit/s."""
    graph = nx.Graph([("a", "b", {"capacity_mbps": 1e7, "delay_s": 1e-4})])
    with tempfile.TemporaryDirectory(prefix="fedmst-calibrate-") as scratch, \
            Emulation(graph, delay_mode=delay_mode, mtu=mtu, capabilities=capabilities) as emu:
        flow = emu.install_flows({"probe": ("a", "b")})["probe"]
        logs = Path(scratch)
        sink = emu.spawn("b", f"{__name__}:sink", [flow.dst_addr], env={}, log=logs / "sink.log", name="probe",
                         warm=False)
        source = emu.spawn("a", f"{__name__}:source", [flow.dst_addr, str(PROBE_S)], env={},
                           log=logs / "source.log", name="probe", warm=False)
        samples: list[tuple[float, int]] = []
        deadline = time.monotonic() + PROBE_S + 10
        while source.poll() is None and time.monotonic() < deadline:
            samples.append((time.monotonic(), emu.meters.counters()[("a", "b")]))
            time.sleep(WINDOW_S / 4)
        for proc, log in ((source, "source.log"), (sink, "sink.log")):
            try:
                code = proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
            if code != 0:
                text = (logs / log).read_text().strip().splitlines() or ["(no output)"]
                raise EmulationError(f"calibrating the link ceiling failed: {log}: {text[-1]}")
    return best_rate_mbps(samples, WINDOW_S)


def best_rate_mbps(samples: Sequence[tuple[float, int]], window_s: float) -> float:
    """The highest rate over any span of at least ``window_s`` between (time, bytes) samples.

    >>> best_rate_mbps([(0.0, 0), (0.1, 1_250_000), (0.2, 1_250_000), (0.3, 1_500_000)], 0.1)
    100.0
    """
    best = 0.0
    for i, (t0, b0) in enumerate(samples):
        for t1, b1 in samples[i + 1:]:
            if t1 - t0 >= window_s:
                best = max(best, (b1 - b0) * 8 / (t1 - t0) / 1e6)
                break
    if best <= 0:
        raise EmulationError("calibrating the link ceiling failed: no traffic crossed the probe link")
    return round(best, 1)


# the two ends of the probe stream, forked into the hosts by the emulation's fork server -------------
def sink(args: Sequence[str]) -> int:
    """Accept one connection on ``args[0]`` and read it to the end."""
    with socket.create_server((args[0], _PORT)) as server:
        server.settimeout(10)
        conn, _ = server.accept()
        with conn:
            while conn.recv(1 << 20):
                pass
    return 0


def source(args: Sequence[str]) -> int:
    """Connect to ``args[0]`` (retrying until the sink listens) and send for ``args[1]`` seconds."""
    addr, seconds = args[0], float(args[1])
    deadline = time.monotonic() + 10
    while True:
        try:
            conn = socket.create_connection((addr, _PORT), timeout=10)
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    chunk = bytes(1 << 20)
    with conn:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            conn.sendall(chunk)
    return 0

