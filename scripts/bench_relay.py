#!/usr/bin/env python3
"""Benchmark the control latency a run spread over hosts adds: one command and its reply through a
host's control relay, against the same exchange on one host.

On one host an agent's control connection is a Unix socket to the coordinator. Spread over hosts,
the agent still talks to a Unix socket on its own host, and that host's relay
(:class:`fedmst.hosts.relay.ControlRelay`) carries each line to the coordinator over TCP,
translating every command to the host's folders and clock and sending what the host's agents
wrote in the live folder (progress marks, phase spans) ahead of each reply. This runs both ends
here, over loopback, so the figure is the relay's own cost per round trip; across real hosts the
hosts' network's round trip adds to it. The live folder holds ``--files`` files in earlier phases'
progress folders, 14 a folder (a phase's marks on NSFNET), and each command names a fresh one, as
a run's phases do: before each reply the relay looks for what changed in the folders the last
commands named.

``.venv/bin/python scripts/bench_relay.py [--exchanges 2000] [--files 0,100,1000]``: prints a
markdown table of the median and 99th percentile round trip, direct and relayed, in µs.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

from fedmst.hosts.relay import ControlRelay, HostPaths, Mirror

COMMAND = {"type": "Broadcast", "round": 1, "progress_dir": "", "start_at": 0.0}
REPLY = b'{"type": "Done", "node": "3", "round": 1, "seconds": 0.01}\n'


def agent(conn: socket.socket, exchanges: int) -> None:
    """Answer each command line with a reply line, as an agent does."""
    reader = conn.makefile("rb")
    for _ in range(exchanges):
        if not reader.readline():
            return
        conn.sendall(REPLY)


def round_trips(conn: socket.socket, exchanges: int, command: bytes) -> list[float]:
    """The coordinator's side: each command's round trip until its reply (a files line may come first)."""
    reader, out = conn.makefile("rb"), []
    for _ in range(exchanges):
        start = time.perf_counter()
        conn.sendall(command)
        while b'"Done"' not in reader.readline():
            pass
        out.append(time.perf_counter() - start)
    return out


def direct(exchanges: int, folder: Path) -> list[float]:
    path = folder / "direct.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    client = socket.socket(socket.AF_UNIX)
    client.connect(str(path))
    coordinator, _ = server.accept()
    threading.Thread(target=agent, args=(client, exchanges), daemon=True).start()
    command = json.dumps({**COMMAND, "progress_dir": str(folder / "live")}).encode() + b"\n"
    try:
        return round_trips(coordinator, exchanges, command)
    finally:
        for s in (coordinator, client, server):
            s.close()


def relayed(exchanges: int, folder: Path, files: int) -> list[float]:
    coordinator_live, host_live = folder / "c-live", folder / "h-live"
    for live in (coordinator_live, host_live):
        live.mkdir()
    for i in range(files):  # earlier phases' marks, written (and sent) before these exchanges
        phase = host_live / "progress" / f"{i // 14:04d}"
        phase.mkdir(parents=True, exist_ok=True)
        (phase / f"{i % 14}.arrived").write_text("1")
    listener = socket.create_server(("127.0.0.1", 0))
    paths = HostPaths({str(coordinator_live): str(host_live)})
    mirror = Mirror(paths, str(host_live))
    relay = ControlRelay(folder / "control.sock", listener.getsockname(), paths, mirror, host="127.0.0.1",
                         token="bench")
    host_conn, _ = listener.accept()  # the relay's own connection (its hello), read by nobody here
    client = socket.socket(socket.AF_UNIX)
    client.connect(str(folder / "control.sock"))
    coordinator, _ = listener.accept()
    threading.Thread(target=agent, args=(client, exchanges), daemon=True).start()
    command = json.dumps({**COMMAND, "progress_dir": str(coordinator_live / "progress" / "now")}).encode() + b"\n"
    try:
        return round_trips(coordinator, exchanges, command)
    finally:
        relay.close()
        for s in (coordinator, client, host_conn, listener):
            s.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exchanges", type=int, default=2000)
    parser.add_argument("--files", default="0,100,1000", help="files in the live folder, comma-separated")
    args = parser.parse_args()
    print("| path | files in the live folder | median (µs) | p99 (µs) |\n|---|---|---|---|")

    def row(name: str, files: str, times: list[float]) -> None:
        times = sorted(times)
        print(f"| {name} | {files} | {statistics.median(times) * 1e6:.0f} | "
              f"{times[int(0.99 * (len(times) - 1))] * 1e6:.0f} |")

    with tempfile.TemporaryDirectory() as scratch:
        row("direct (one host: Unix socket)", "-", direct(args.exchanges, Path(scratch)))
    for files in (int(f) for f in args.files.split(",")):
        with tempfile.TemporaryDirectory() as scratch:
            row("relayed (Unix socket, relay, TCP)", str(files), relayed(args.exchanges, Path(scratch), files))


if __name__ == "__main__":
    main()
