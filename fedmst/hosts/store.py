"""Rendezvous across hosts: one key-value store that gloo's pairs find each other through.

On one host each transfer's two ends meet in a ``FileStore`` in the run's scratch folder; across
hosts they share no folder. So the coordinator serves one :class:`StoreServer` (on a Unix socket
for its own host's agents, on TCP for the relays of the others, :mod:`fedmst.hosts.relay`) and
each agent talks to it through :class:`RemoteStore`, a ``torch.distributed.Store`` that gloo uses as
it uses any other. The protocol is JSON lines (values base64), never a pickle.
"""

from __future__ import annotations

import base64
import json
import select
import socket
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch.distributed as dist

from fedmst.hosts.relay import end_sockets

DEFAULT_TIMEOUT = timedelta(minutes=5)


class StoreServer:
    """The run's keys, served on Unix socket ``path`` and, given ``tcp`` (address, port; port 0:
    any), on TCP; :attr:`port` is the TCP port it got. :meth:`close` ends it."""

    def __init__(self, path: Path, tcp: tuple[str, int] | None = None) -> None:
        self.path = path
        self._keys: dict[str, bytes] = {}
        self._changed = threading.Condition()
        self._listeners = [_listen(socket.AF_UNIX, str(path))]
        if tcp is not None:
            self._listeners.append(_listen(socket.AF_INET, tcp))
        self.port = self._listeners[-1].getsockname()[1] if tcp is not None else None
        self._closed = False
        self._conns: set[socket.socket] = set()
        threading.Thread(target=self._accept, name="store", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                ready, _, _ = select.select(self._listeners, [], [], 0.5)
                for listener in ready:
                    conn, _ = listener.accept()
                    threading.Thread(target=self._serve, args=(conn,), daemon=True).start()
            except (OSError, ValueError):  # closed under select
                return

    def _serve(self, conn: socket.socket) -> None:
        self._conns.add(conn)
        with conn, conn.makefile("rwb") as stream:
            for line in stream:
                try:
                    reply = self._answer(json.loads(line))
                except (ValueError, KeyError, TypeError) as exc:
                    reply = {"error": f"bad request: {exc}"}
                stream.write(json.dumps(reply).encode() + b"\n")
                stream.flush()

    def _answer(self, req: dict[str, Any]) -> dict[str, Any]:
        op, keys = req["op"], req.get("keys", [])
        with self._changed:
            if op == "set":
                self._keys[keys[0]] = base64.b64decode(req["value"])
                self._changed.notify_all()
                return {}
            if op == "add":
                value = int(self._keys.get(keys[0], b"0")) + int(req["value"])
                self._keys[keys[0]] = str(value).encode()
                self._changed.notify_all()
                return {"value": value}
            if op == "compare_set":
                now = self._keys.get(keys[0])
                expected, desired = base64.b64decode(req["expected"]), base64.b64decode(req["value"])
                if (now is None and not expected) or now == expected:
                    self._keys[keys[0]] = now = desired
                    self._changed.notify_all()
                return {"value": base64.b64encode(now if now is not None else expected).decode()}
            if op in ("get", "wait"):
                if not self._changed.wait_for(lambda: self._closed or all(k in self._keys for k in keys),
                                              timeout=req["timeout_s"]) or self._closed:
                    return {"error": f"timed out after {req['timeout_s']:.0f} s waiting for {', '.join(keys)}"}
                return {"value": base64.b64encode(self._keys[keys[0]]).decode()} if op == "get" else {}
            if op == "check":
                return {"value": all(k in self._keys for k in keys)}
            if op == "delete_key":
                return {"value": self._keys.pop(keys[0], None) is not None}
            if op == "num_keys":
                return {"value": len(self._keys)}
        return {"error": f"unknown operation {op!r}"}

    def close(self) -> None:
        """Stop listening and end every connection (a waiting request then fails in its agent)."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        end_sockets([*self._listeners, *self._conns])
        self.path.unlink(missing_ok=True)


class RemoteStore(dist.Store):
    """A ``torch.distributed.Store`` whose keys live in a :class:`StoreServer`, reached through
    Unix socket ``path`` (the server's own, or a relay's on another host), each key under ``prefix``
    (one transfer's; torch's ``PrefixStore`` cannot wrap a store written in Python). One request at
    a time."""

    def __init__(self, path: str, timeout: timedelta = DEFAULT_TIMEOUT, prefix: str = "") -> None:
        super().__init__()
        self._prefix = prefix
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(path)
        self._stream = self._sock.makefile("rwb")
        self._lock = threading.Lock()
        self._timeout = timeout

    def _ask(self, op: str, keys: list[str], **fields: Any) -> Any:
        keys = [self._prefix + key for key in keys]
        with self._lock:
            self._stream.write(json.dumps({"op": op, "keys": keys, **fields}).encode() + b"\n")
            self._stream.flush()
            line = self._stream.readline()
        if not line:
            raise RuntimeError("the rendezvous store closed the connection (its run ended)")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"rendezvous store: {reply['error']}")
        return reply.get("value")

    def _wait_s(self, timeout: timedelta | None) -> float:
        return (timeout or self._timeout).total_seconds()

    def set(self, key: str, value: bytes | str) -> None:
        self._ask("set", [key], value=base64.b64encode(_bytes(value)).decode())

    def get(self, key: str) -> bytes:
        return base64.b64decode(self._ask("get", [key], timeout_s=self._wait_s(None)))

    def add(self, key: str, value: int) -> int:
        return int(self._ask("add", [key], value=value))

    def compare_set(self, key: str, expected: bytes | str, desired: bytes | str) -> bytes:
        return base64.b64decode(self._ask("compare_set", [key], expected=base64.b64encode(_bytes(expected)).decode(),
                                          value=base64.b64encode(_bytes(desired)).decode()))

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        self._ask("wait", list(keys), timeout_s=self._wait_s(timeout))

    def check(self, keys: list[str]) -> bool:
        return bool(self._ask("check", list(keys)))

    def delete_key(self, key: str) -> bool:
        return bool(self._ask("delete_key", [key]))

    def num_keys(self) -> int:
        return int(self._ask("num_keys", []))

    def set_timeout(self, timeout: timedelta) -> None:
        self._timeout = timeout

    def close(self) -> None:
        self._stream.close()
        self._sock.close()


def _bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _listen(family: int, address: str | tuple[str, int]) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_INET:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.listen(128)
    return sock

