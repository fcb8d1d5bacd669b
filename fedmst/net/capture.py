"""Packet captures of link directions, for Wireshark, tshark or scapy: ``--pcap LINKS|all``.

One ``tcpdump`` per link direction, on the interface the direction is sent on and only its
outgoing frames (``-Q out``): a capture holds the frames that direction's tx counter counts, the
very bytes ``links.csv`` reports, seen after the link's queue (a frame the queue dropped is in
neither). Captures run from just before round 1 to just after the last round, so connection
set-up and warm-up are not in them. Headers only by default (``--pcap-snaplen``, 128 bytes:
Ethernet, IP and TCP with options); each record keeps the frame's original length.

In a slowed run (``--time-scale N``) the captures' timestamps are rewritten to the network's
time once they are closed (``t0 + (t - t0) / N``), so the gaps and rates Wireshark shows are the
emulated network's, as every other figure of the run is. Classic pcap has no comments, so
``pcap/index.json`` says which run, node and interface each file comes from.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import struct
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Iterable, Mapping, Protocol, Sequence

import networkx as nx

from fedmst.core.route import LinkDir
from fedmst.errors import SET_UP_ALL, EmulationError, FedmstError

DEFAULT_SNAPLEN = 128
"""Bytes kept of each frame: Ethernet (14), IPv4 (20) and TCP with options (up to 60), and more."""
READY_S = 10.0
"""How long a tcpdump may take to say it listens."""
_STATS = re.compile(r"(\d+) packets? (captured|dropped by kernel)")


def parse_links(spec: str, graph: nx.Graph) -> tuple[LinkDir, ...]:
    """The link directions ``--pcap`` names: ``all``, or comma-separated links as ``links.csv``
    names them (``a-b``: both directions); a link the topology lacks is refused, naming it.

    >>> g = nx.Graph([("a", "b"), ("b", "c")])
    >>> parse_links("a-b", g)
    (('a', 'b'), ('b', 'a'))
    >>> len(parse_links("all", g))
    4
    >>> parse_links("a-c", g)
    Traceback (most recent call last):
    ...
    fedmst.errors.FedmstError: --pcap a-c: 'a-c' is not a link of the topology (its links: a-b, b-c)
    """
    links = {f"{u}-{v}": (u, v) for u, v in graph.edges} | {f"{v}-{u}": (u, v) for u, v in graph.edges}
    if spec.strip() == "all":
        chosen = list(graph.edges)
    else:
        chosen = []
        for name in filter(None, (part.strip() for part in spec.split(","))):
            if name not in links:
                shown = ", ".join(f"{u}-{v}" for u, v in list(graph.edges)[:12])
                raise FedmstError(f"--pcap {spec}: {name!r} is not a link of the topology (its links: {shown}"
                                  f"{', ...' if graph.number_of_edges() > 12 else ''})")
            chosen.append(links[name])
        if not chosen:
            raise FedmstError(f"--pcap {spec!r}: give link names as links.csv writes them (a-b,c-d) or all")
    return tuple(hop for u, v in dict.fromkeys(chosen) for hop in ((u, v), (v, u)))


def file_name(hop: LinkDir) -> str:
    """The capture of direction ``hop``: ``src-dst.pcap``, any character a file name should not
    carry replaced.

    >>> file_name(("New York", "b/1"))
    'New_York-b_1.pcap'
    """
    return "-".join(re.sub(r"[^A-Za-z0-9_.+]", "_", n) for n in hop) + ".pcap"


class Host(Protocol):
    """What capturing needs of the emulation."""

    def sender_interface(self, u: str, v: str) -> str: ...

    def popen(self, node: str, argv: Sequence[str], *, env: Mapping[str, str],
              log_file: IO[str]) -> subprocess.Popen: ...


@dataclass(frozen=True)
class CaptureFile:
    """One link direction's capture, as ``pcap/index.json`` lists it."""

    src: str
    dst: str
    file: str
    node: str
    interface: str
    packets: int
    """Frames tcpdump captured."""
    bytes: int
    """Their original lengths summed. Over the rounds' phases that is what ``links.csv`` counts; the
    capture also holds what crossed between them (a re-plan's connections) and background flows."""
    dropped_by_kernel: int
    """Frames the kernel dropped before tcpdump read them: a capture with any is incomplete."""


def require_tcpdump() -> str:
    path = shutil.which("tcpdump")
    if path is None:
        raise FedmstError("--pcap needs tcpdump, which this host lacks "
                          f"(apt install tcpdump; {SET_UP_ALL} does)")
    return path


class Captures:
    """The captures of ``hops`` into ``folder``, running inside ``with`` (tcpdump started and
    listening on entry, stopped and its files closed on exit)."""

    def __init__(self, emu: Host, hops: Sequence[LinkDir], folder: Path, *, snaplen: int, log_dir: Path,
                 run_id: str, time_scale: float = 1.0) -> None:
        self.emu, self.hops, self.folder = emu, tuple(hops), folder
        self.snaplen, self.log_dir, self.run_id, self.time_scale = snaplen, log_dir, run_id, time_scale
        self._running: list[tuple[LinkDir, str, subprocess.Popen, Path]] = []
        self.started_at = 0.0
        """When every tcpdump listened (the host's clock, as the captures' own timestamps): the
        anchor a slowed run's timestamps are rescaled from."""
        self.files: list[CaptureFile] = []
        self.failed: list[str] = []
        """Captures that could not be read back, and why."""

    def __enter__(self) -> Captures:
        tcpdump = require_tcpdump()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
        try:
            for hop in self.hops:
                intf = self.emu.sender_interface(*hop)
                log = self.log_dir / f"tcpdump-{file_name(hop)}.log"
                # -Z root: Debian's tcpdump would otherwise write as user tcpdump, into a root-owned folder
                argv = [tcpdump, "-i", intf, "-Q", "out", "-s", str(self.snaplen or 262144), "-U", "--immediate-mode",
                        "-n", "-Z", "root", "-w", str(self.folder / file_name(hop))]
                with open(log, "w") as log_file:
                    proc = self.emu.popen(hop[0], argv, env=env, log_file=log_file)
                self._running.append((hop, intf, proc, log))
            self._wait_listening()
        except BaseException:
            self._stop()
            raise
        self.started_at = time.time()
        return self

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + READY_S
        waiting = list(self._running)
        while waiting:
            hop, _, proc, log = waiting[0]
            text = log.read_text()
            if "listening on" in text:
                waiting.pop(0)
            elif proc.poll() is not None or time.monotonic() > deadline:
                said = " ".join(text.split()) or f"exit {proc.poll()}"
                raise EmulationError(f"--pcap: tcpdump on {hop[0]}->{hop[1]} did not start: {said}")
            else:
                time.sleep(0.02)

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _stop(self) -> None:
        """End every tcpdump (SIGINT: it flushes and says what it captured), then list the files."""
        for _, _, proc, _ in self._running:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for _, _, proc, _ in self._running:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        running, self._running = self._running, []
        for hop, intf, _, log in running:
            stats = {kind: int(n) for n, kind in _STATS.findall(log.read_text())}
            path = self.folder / file_name(hop)
            try:
                if self.time_scale != 1.0 and self.started_at:
                    rescale_times(path, self.started_at, self.time_scale)
                captured = sum(orig for _, orig, _ in records(path))
            except (OSError, FedmstError) as exc:  # a tcpdump killed before it wrote a header: say so, go on
                self.failed.append(f"{file_name(hop)}: {' '.join(str(exc).split())}")
                continue
            self.files.append(CaptureFile(hop[0], hop[1], path.name, hop[0], intf, stats.get("captured", 0),
                                          captured, stats.get("dropped by kernel", 0)))

    def index(self) -> dict[str, object]:
        """``pcap/index.json``: what was captured where, and how."""
        return {"run": self.run_id, "snaplen": self.snaplen, "time_scale": self.time_scale,
                "started_at": self.started_at, "unreadable": self.failed,
                "window": "from just before round 1 to just after the last round (set-up and warm-up excluded)",
                "direction": "each file holds one link direction: the frames its sender's interface sent",
                "captures": [asdict(f) for f in self.files]}


# classic pcap ------------------------------------------------------------------------------------
_MAGICS = {0xA1B2C3D4: 1e6, 0xA1B23C4D: 1e9}
"""Classic pcap's magic numbers and the fraction of a second each one's timestamps count in."""


def records(path: Path) -> Iterable[tuple[float, int, bytes]]:
    """Each record of a classic pcap file: its timestamp (seconds), the frame's original length,
    and the bytes captured of it."""
    with open(path, "rb") as f:
        head = f.read(24)
        order, per_s = _format(head, path)
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return
            sec, frac, incl, orig = struct.unpack(order + "IIII", rec)
            yield sec + frac / per_s, orig, f.read(incl)


def rescale_times(path: Path, start: float, factor: float) -> None:
    """Rewrite ``path``'s timestamps as ``start + (t - start) / factor`` in place (atomically): a
    capture of a run ``factor`` times slower than its network, in the network's time."""
    tmp = path.with_suffix(".pcap.tmp")
    with open(path, "rb") as src, open(tmp, "wb") as dst:
        head = src.read(24)
        order, per_s = _format(head, path)
        dst.write(head)
        while True:
            rec = src.read(16)
            if len(rec) < 16:
                break
            sec, frac, incl, orig = struct.unpack(order + "IIII", rec)
            t = start + (sec + frac / per_s - start) / factor
            whole = int(t)
            dst.write(struct.pack(order + "IIII", whole, min(int(round((t - whole) * per_s)), int(per_s) - 1),
                                  incl, orig))
            dst.write(src.read(incl))
    os.replace(tmp, path)


def _format(head: bytes, path: Path) -> tuple[str, float]:
    if len(head) < 24:
        raise FedmstError(f"{path}: not a pcap file (too short)")
    for order in ("<", ">"):
        (magic,) = struct.unpack(order + "I", head[:4])
        if magic in _MAGICS:
            return order, _MAGICS[magic]
    raise FedmstError(f"{path}: not a classic pcap file")
