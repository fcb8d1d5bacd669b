"""Background traffic generators: real UDP or TCP flows between emulated hosts.

Each flow is two processes forked into their hosts (:meth:`fedmst.net.emulation.Emulation.spawn`):
a sink at the destination that reads and discards, and a sender at the source that waits for its
start time, sends at its rate until its end time, and writes what it sent to a JSON file. The rate
is paced in frames on the wire (payload, UDP/TCP and IP headers, Ethernet header), as link
capacities are counted, in bursts of at most 2 ms. A TCP sender is paced to at most its rate and
backs off under congestion like any TCP flow; a UDP sender does not back off.

Hand-written rather than iperf3: it is started and stopped on the emulation's own clock
(``time.monotonic``, shared by every namespace), it reports the bytes it really sent, and it
needs no system package on a bare host.
"""

from __future__ import annotations

import errno
import json
import signal
import socket
import time
from pathlib import Path
from typing import Sequence

_ETH = 14
_IP_UDP = 28
_IP_TCP = 40
_BLOCK = 64 * 1024
_BURST_S = 0.002


def sink(args: Sequence[str]) -> int:
    """``PROTOCOL ADDRESS PORT``: read and discard everything sent to ``ADDRESS:PORT`` until killed."""
    protocol, address, port = args
    kind = socket.SOCK_DGRAM if protocol == "udp" else socket.SOCK_STREAM
    sock = socket.socket(socket.AF_INET, kind)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, int(port)))
    if protocol == "udp":
        while True:
            sock.recv(1 << 16)
    sock.listen(4)
    while True:
        conn, _ = sock.accept()
        while conn.recv(1 << 20):
            pass
        conn.close()


def send(args: Sequence[str]) -> int:
    """``PROTOCOL SRC DST PORT MBPS MTU START_AT END_AT STATS``: send to ``DST:PORT`` from ``SRC`` at
    ``MBPS`` (on the wire) between the monotonic times ``START_AT`` and ``END_AT`` (``inf``: until
    killed), then write ``{"sent_bytes", "seconds"}`` (wire bytes) to the file ``STATS``."""
    protocol, src, dst, port, mbps, mtu, start_at, end_at, stats = args
    rate = float(mbps) * 1e6 / 8
    begin, end = float(start_at), float(end_at)
    sent, stopped = 0, False
    first = last = None

    def stop(*_: object) -> None:
        nonlocal stopped
        stopped = True

    signal.signal(signal.SIGTERM, stop)
    time.sleep(max(0.0, begin - time.monotonic()))
    try:
        if protocol == "udp":
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind((src, 0))
            sock.connect((dst, int(port)))
            payload = b"\0" * (int(mtu) - _IP_UDP)
            frame = len(payload) + _IP_UDP + _ETH
        else:
            sock = socket.create_connection((dst, int(port)), timeout=30, source_address=(src, 0))
            payload = b"\0" * _BLOCK
            mss = int(mtu) - _IP_TCP
            frame = _BLOCK + -(-_BLOCK // mss) * (_IP_TCP + _ETH)
        first = time.monotonic()
        while not stopped and (now := time.monotonic()) < end:
            due = first + sent / rate  # when the bytes sent so far are paid for
            if now < due:
                time.sleep(min(due - now, _BURST_S))
                continue
            try:
                if protocol == "udp":
                    sock.send(payload)
                else:
                    sock.sendall(payload)
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:  # the sender's queue is full: that packet is lost
                    time.sleep(_BURST_S)
                    continue
                break  # the network is going down around us (teardown): stop quietly
            sent += frame
        last = time.monotonic()
    finally:
        seconds = 0.0 if first is None else (last or time.monotonic()) - first
        Path(stats).write_text(json.dumps({"sent_bytes": sent, "seconds": seconds}))
    return 0
