"""Background traffic in an emulation: each flow a sink and a sender (:mod:`fedmst.net.generator`)
forked into their hosts, and the iptables rules that count what the flows put on each link."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Callable, Mapping, Sequence

from fedmst.core.traffic import BackgroundFlow
from fedmst.core.wire import ETH_HEADER
from fedmst.errors import EmulationError
from fedmst.net.processes import Process
from fedmst.net.routes import BACKGROUND_NET, Flow
from fedmst.net.shell import HostShell

BACKGROUND_PORT = 5201
_COUNTING_RULE = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+--\s+(\S+)\s+\*\s+(\S+)\s+0\.0\.0\.0/0\s*$", re.MULTILINE)
"""A counting rule (no target) of ``iptables -t raw -L PREROUTING -v -x -n``: packets, bytes,
in-interface, source (the background's addresses, or ``0.0.0.0/0``: every packet)."""
EVERY = "0.0.0.0/0"


class BackgroundTraffic:
    """The background flows started so far: their senders (until stopped) and sinks."""

    def __init__(self) -> None:
        self.counting = False
        self._senders: list[tuple[str, Process, Path]] = []
        self._sinks: list[tuple[str, Process, Path]] = []

    def keys(self, n: int) -> list[str]:
        """The keys of the next ``n`` flows: numbered on from those running."""
        return [f"bg{len(self._senders) + i}" for i in range(n)]

    def count_on(self, shells: Mapping[str, HostShell], ports: Mapping[str, Sequence[str]]) -> None:
        """Add, once, on every link interface, two rules that count the packets arriving there,
        the background's and all: what crossed the link (a packet the sender's queue dropped never
        arrives), counted first thing at ingress, before a delay line may drop it as lost. Both
        are read in one listing (:func:`arrived_bytes`), so the weights' bytes (all less the
        background's) are never a moment's background off, however fast it comes."""
        if self.counting:
            return
        for node, shell in shells.items():
            if ports[node]:
                rules = [rule for i in ports[node]
                         for rule in (f"-I PREROUTING 1 -i {i} -s {BACKGROUND_NET}", f"-I PREROUTING 1 -i {i}")]
                shell.iptables_restore(["*raw", *rules, "COMMIT"], f"counting background traffic on node {node}")
        self.counting = True

    def start(self, routes: Mapping[str, Flow], flows: Sequence[BackgroundFlow], start_at: float, log_dir: Path,
              spawn: Callable[..., Process], mtu: int) -> None:
        """Start each routed flow: its sink now, its sender waiting until ``start_at`` (monotonic)
        plus the flow's start."""
        for (key, route), flow in zip(routes.items(), flows):
            end = "inf" if flow.end_s is None else repr(start_at + flow.end_s)
            sink_log = log_dir / f"{key}-sink.log"
            sink = spawn(flow.dst, "fedmst.net.generator:sink", [flow.protocol, route.dst_addr, str(BACKGROUND_PORT)],
                         env={}, log=sink_log, name=f"sink{key[2:]}", warm=False)
            self._sinks.append((key, sink, sink_log))
            stats = log_dir / f"{key}.json"
            sender = spawn(flow.src, "fedmst.net.generator:send",
                           [flow.protocol, route.src_addr, route.dst_addr, str(BACKGROUND_PORT), repr(flow.mbps),
                            str(mtu), repr(start_at + flow.start_s), end, str(stats)],
                           env={}, log=log_dir / f"{key}.log", name=f"send{key[2:]}", warm=False)
            self._senders.append((key, sender, stats))

    def stop(self) -> dict[str, dict[str, float]]:
        """Stop every sender and return what each sent (flow key -> sent bytes, seconds)."""
        for _, sender, _ in self._senders:
            if sender.poll() is None:
                sender.terminate()
        out = {}
        for key, sender, stats in self._senders:
            try:
                sender.wait(timeout=5)
                out[key] = json.loads(stats.read_text())
            except (subprocess.TimeoutExpired, OSError, ValueError) as exc:
                raise EmulationError(f"background flow {key}: its sender left no record of what it sent "
                                     f"({exc})") from None
        self._senders.clear()
        return out

    def watched(self) -> list[tuple[str, Process, Path]]:
        """(what, process, log) of every sink, and of every sender that exited with an error."""
        out = [(f"background flow {key}'s sink", proc, log) for key, proc, log in self._sinks]
        return out + [(f"background flow {key}'s sender", proc, stats.with_suffix(".log"))
                      for key, proc, stats in self._senders if proc.poll()]


def arrived_bytes(shell: HostShell) -> tuple[dict[str, int], dict[str, int]]:
    """Bytes counted arriving on each of the host's interfaces, of the background and of every
    packet, in one snapshot (frames, Ethernet header included, as interface counters count them)."""
    out = shell.cmd("iptables -t raw -L PREROUTING -v -x -n")
    counted: dict[str, dict[str, int]] = {str(BACKGROUND_NET): {}, EVERY: {}}
    for pkts, size, intf, source in _COUNTING_RULE.findall(out):
        if source in counted:
            counted[source][intf] = int(size) + ETH_HEADER * int(pkts)
    return counted[str(BACKGROUND_NET)], counted[EVERY]
