"""The relay: how an agent on one host reaches its coordinator on another.

An agent's namespace has no route to the hosts' own network, and must not have one: weights
would bypass the emulated links. It keeps talking to a Unix socket, a file every namespace of its
host can reach, as on one host; on a host other than the coordinator's, a :class:`Relay` listens
there and carries each connection, byte for byte, to the coordinator's TCP listener on the hosts'
network. What crosses is control lines and rendezvous keys, never a tensor.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

CHUNK = 1 << 16


class Relay:
    """Every connection made to Unix socket ``path`` is carried to TCP ``target`` (host, port),
    both ways, until either end closes; :meth:`close` ends the listener and every connection."""

    def __init__(self, path: Path, target: tuple[str, int]) -> None:
        self.path = path
        self.target = target
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(128)
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self.carried = 0
        """Bytes carried so far, both ways: what the relay put on the hosts' network for its agents."""
        threading.Thread(target=self._accept, name=f"relay {path.name}", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                inner, _ = self._listener.accept()
            except OSError:  # closed
                return
            try:
                outer = socket.create_connection(self.target, timeout=10)
            except OSError:
                inner.close()  # the agent sees its connection close: the coordinator is unreachable
                continue
            outer.settimeout(None)
            outer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed:
                    inner.close()
                    outer.close()
                    return
                self._open |= {inner, outer}
            ended = [0]  # pumps of this connection that have ended: the second closes both sockets
            for a, b in ((inner, outer), (outer, inner)):
                threading.Thread(target=self._pump, args=(a, b, ended), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, ended: list[int]) -> None:
        """Copy ``source`` to ``sink`` until ``source`` ends, then end ``sink``'s sending side; the
        second pump of a connection to end closes both its sockets."""
        try:
            while data := source.recv(CHUNK):
                sink.sendall(data)
                with self._lock:
                    self.carried += len(data)
        except OSError:
            pass
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        with self._lock:
            ended[0] += 1
            last = ended[0] == 2
            if last:
                self._open -= {source, sink}
        if last:
            source.close()
            sink.close()

    def close(self) -> None:
        """Stop listening, end every connection carried, remove the socket file. Safe to call twice."""
        with self._lock:
            self._closed = True
            socks, self._open = list(self._open), set()
        self._listener.close()
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self.path.unlink(missing_ok=True)

