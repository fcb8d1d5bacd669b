"""What the hosts' network carries between two hosts, measured before a spread run builds.

The tunnels of every link cut between two hosts share the hosts' network, unshaped: where the cut
links' capacities add up to more than it carries, those links would measure the hosts' network,
not the emulated links, and the run is refused (:func:`fedmst.core.placement.overloaded`). One TCP
stream for :data:`MEASURE_S` from one host agent to another, counted by the receiver: what one
bulk transfer gets, a floor for the many flows a cut carries (no netperf or iperf needed on the
hosts).
"""

from __future__ import annotations

import itertools
import socket
import struct
import threading
import time
from typing import Mapping

MEASURE_S = 0.5
"""How long one measurement sends: long enough for TCP to leave slow start on a LAN."""
ACCEPT_S = 30.0
"""How long a sink waits for its sender before it gives up (the coordinator asks it right away)."""
_CHUNK = 1 << 20
_COUNT = struct.Struct("!Q")


class Sink:
    """A TCP listener on ``address`` that takes one connection, reads it to its end and answers with
    the bytes it got; gone after that (or after :data:`ACCEPT_S` without a sender)."""

    def __init__(self, address: str) -> None:
        self._server = socket.create_server((address, 0))
        self._server.settimeout(ACCEPT_S)
        self.port: int = self._server.getsockname()[1]
        threading.Thread(target=self._serve, name=f"sink:{self.port}", daemon=True).start()

    def _serve(self) -> None:
        try:
            conn, _ = self._server.accept()
        except OSError:
            return
        finally:
            self._server.close()
        with conn:
            buffer, got = bytearray(_CHUNK), 0
            while n := conn.recv_into(buffer):
                got += n
            conn.sendall(_COUNT.pack(got))


def send_for(address: str, port: int, seconds: float = MEASURE_S) -> float:
    """Mbit/s from here to the :class:`Sink` at ``address:port``: the bytes it got over the time from
    the first byte sent to its answer."""
    payload = bytes(_CHUNK)
    with socket.create_connection((address, port), timeout=ACCEPT_S) as conn:
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while len(answer) < _COUNT.size and (part := conn.recv(_COUNT.size - len(answer))):
            answer += part
        elapsed = time.monotonic() - start
    if len(answer) < _COUNT.size:
        raise ConnectionError(f"the sink at {address}:{port} closed without answering")
    return _COUNT.unpack(answer)[0] * 8 / elapsed / 1e6


class Probe:
    """A Ray actor on one host that measures its side of the hosts' network (:func:`between`)."""

    def __init__(self, host: str) -> None:
        self.host = host

    def sink(self) -> int:
        return Sink(self.host).port

    def send_to(self, host: str, port: int) -> float:
        return send_for(host, port)


def between(hosts: Mapping[str, str]) -> dict[tuple[str, str], float]:
    """Mbit/s over the hosts' network for each pair of ``hosts`` (address -> Ray node id), from the
    first (in the mapping's order) to the second, one pair after another (two at once would share
    the hosts' CPUs and network), on the cluster this process joined; a host lost is one line."""
    import ray

    from fedmst.errors import FedmstError
    from fedmst.hosts.raycluster import on_each

    probes = on_each(Probe, hosts)
    try:
        out = {}
        for a, b in itertools.combinations(hosts, 2):
            port = ray.get(probes[b].sink.remote(), timeout=60)
            out[a, b] = ray.get(probes[a].send_to.remote(b, port), timeout=60)
        return out
    except (ray.exceptions.RayError, TimeoutError) as exc:
        raise FedmstError(f"measuring the hosts' network: {' '.join(str(exc).split())[:200]}") from None
    finally:
        for probe in probes.values():
            ray.kill(probe)
