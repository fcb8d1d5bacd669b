"""The control channel between the coordinator and its agents: JSON lines over a Unix socket.

A Unix-domain socket lives on the filesystem, which every Mininet host shares, so control
traffic (round start, timings, results) never crosses an emulated link and never shows up in the
link byte counters. Each line is one :mod:`fedmst.protocol` message, JSON, never a pickle. An
agent proves it was started by this coordinator with a per-run random token.
"""

from __future__ import annotations

import base64
import json
import select
import socket
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from fedmst.errors import EmulationError, WorkerDied
from fedmst.protocol import Command, Failed, Files, ProtocolError, Reply, decode, encode


class Channel:
    """One JSON-lines connection carrying protocol messages (either way)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""

    def send(self, msg: Command | Reply | Files) -> None:
        self._send_json(encode(msg))

    def recv(self) -> Command | Reply | Files | None:
        """The next message, or None when the peer closed the connection. A line that is no
        message raises :class:`ProtocolError` once it is consumed, so the next one can be read."""
        obj = self._recv_json()
        return None if obj is None else decode(obj)

    def _send_json(self, obj: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(obj).encode() + b"\n")

    def _recv_json(self) -> Any:
        while b"\n" not in self._buf:
            try:
                data = self.sock.recv(1 << 16)
            except ConnectionResetError:  # the peer died with data unread: closed all the same
                return None
            if not data:
                return None
            self._buf += data
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            raise ProtocolError(f"control channel: not JSON: {line[:80]!r}") from None

    def has_message(self) -> bool:
        return b"\n" in self._buf

    def close(self) -> None:
        self.sock.close()


def connect(path: str, *, node: str, token: str) -> Channel:
    """Agent side: connect and introduce ourselves."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    chan = Channel(sock)
    chan._send_json({"hello": node, "token": token})
    return chan


def write_files(files: Files, folders: Sequence[Path]) -> None:
    """Write what a relay sent into the coordinator's copies of the run's ``folders``, only there."""
    for name, data in files.data.items():
        path = Path(name).resolve()
        if not any(path.is_relative_to(folder) for folder in folders):
            raise ProtocolError(f"a relay sent {name}, outside the run's folders")
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("r+b" if path.exists() else "wb") as f:
            f.seek(files.offsets[name])
            f.write(base64.b64decode(data))


class ControlServer:
    """Coordinator side: accepts exactly the agents it started and runs commands on all of them.
    It listens on Unix socket ``path`` and, given ``tcp`` (address, port; port 0: any, :attr:`port`
    says which), on TCP too, for the agents of other hosts, whose relays carry their connections
    (:mod:`fedmst.hosts.relay`) and send what those agents wrote into the folders under
    ``mirrored`` (:class:`~fedmst.protocol.Files`), on their connections ahead of their replies and
    on one connection of each host's own."""

    def __init__(self, path: Path, *, token: str, tcp: tuple[str, int] | None = None,
                 mirrored: Iterable[Path] = ()) -> None:
        self.path = path
        self.token = token
        self.mirrored = [folder.resolve() for folder in mirrored]
        self.agents: dict[str, Channel] = {}
        self.hosts: dict[str, Channel] = {}
        """Each relaying host's own connection, by host: only :class:`~fedmst.protocol.Files` come on it."""
        self.lost: dict[str, str] = {}
        """Agents that died in a command run with ``survive``: node -> what was reported."""
        self._listeners = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)]
        self._listeners[0].bind(str(path))
        if tcp is not None:
            self._listeners.append(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            self._listeners[1].setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listeners[1].bind(tcp)
        for listener in self._listeners:
            listener.listen(128)
        self.port: int | None = self._listeners[1].getsockname()[1] if tcp is not None else None

    def accept(self, nodes: Iterable[str], *, timeout_s: float, check: Callable[[], None]) -> None:
        """Wait until every node in ``nodes`` has connected with the right token."""
        expected = set(nodes)
        deadline = time.monotonic() + timeout_s
        while expected - self.agents.keys():
            check()
            if time.monotonic() > deadline:
                missing = ", ".join(sorted(expected - self.agents.keys()))
                raise EmulationError(f"agents on node(s) {missing} did not connect within {timeout_s:.0f} s")
            ready, _, _ = select.select(self._listeners, [], [], 0.5)
            if not ready:
                continue
            conn, _ = ready[0].accept()
            if conn.family == socket.AF_INET:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            chan = Channel(conn)
            conn.settimeout(5)
            try:
                hello = chan._recv_json()
            except (ProtocolError, OSError):  # garbage, or silence: not one of ours
                hello = None
            conn.settimeout(None)
            node = hello.get("hello") if isinstance(hello, dict) else None
            if isinstance(hello, dict) and hello.get("token") == self.token and isinstance(hello.get("host"), str):
                self.hosts[hello["host"]] = chan  # a relay's own connection
                continue
            if not hello or hello.get("token") != self.token or node not in expected or node in self.agents:
                chan.close()  # not one of ours: refuse it
                continue
            self.agents[node] = chan

    def run(self, cmd: Command, *, timeout_s: float, check: Callable[[], None],
            survive: bool = False, tolerate_errors: bool = False) -> dict[str, Reply]:
        """Send ``cmd`` to every agent and collect one reply from each.

        ``check`` is called while waiting and raises if an agent process died, so a dead agent
        is reported within a second instead of hanging the run. With ``survive``, a
        :class:`WorkerDied` only drops that agent (recorded in :attr:`lost`) and the others'
        replies are collected; otherwise it ends the run. A :class:`Failed` reply becomes an
        :class:`EmulationError` naming the node, unless ``tolerate_errors`` (a fault was injected
        under the command) asks for every reply, failed or not.
        """
        name = type(cmd).__name__.lower()

        def checked(gone: str | None = None) -> None:
            """Run ``check``; when ``gone``'s connection closed, give its process up to 2 s to be
            seen dead (the socket closes a moment before the process can be reaped)."""
            deadline = time.monotonic() + (2.0 if gone else 0.0)
            while True:
                try:
                    check()
                except WorkerDied as exc:
                    if not survive or exc.node not in self.agents:
                        raise
                    self.drop(exc.node, str(exc))
                if gone is None or gone not in self.agents or time.monotonic() > deadline:
                    return
                time.sleep(0.05)

        for node, chan in list(self.agents.items()):
            if node not in self.agents:  # dropped while another agent's death was looked into
                continue
            try:
                chan.send(cmd)
            except OSError:  # BrokenPipe / ConnectionReset: the agent is gone
                checked(node)
                if node in self.agents:
                    raise EmulationError(
                        f"agent on node {node} closed its control connection before {name}"
                    ) from None
        replies: dict[str, Reply] = {}
        deadline = time.monotonic() + timeout_s
        while self.agents.keys() - replies.keys():
            by_sock = {chan.sock: node for node, chan in self.agents.items()}
            waiting = [c.sock for n, c in self.agents.items() if n not in replies]
            ready = [c.sock for n, c in self.agents.items() if n not in replies and c.has_message()]
            if not ready:
                ready, _, _ = select.select(waiting + [c.sock for c in self.hosts.values()], [], [], 0.5)
            for sock in ready:
                if sock not in by_sock:
                    self._take_files(sock)
                    continue
                node = by_sock[sock]
                if node not in self.agents:  # dropped while another agent's death was looked into
                    continue
                try:
                    reply = self.agents[node].recv()
                    while isinstance(reply, Files):  # what the agent wrote on its host, before its reply
                        self.write(reply)
                        reply = self.agents[node].recv()
                except ProtocolError as exc:
                    raise ProtocolError(f"agent on node {node}, in {name}: {exc}") from None
                if reply is None:
                    checked(node)
                    if node not in self.agents:
                        continue
                    raise EmulationError(f"agent on node {node} closed its control connection during {name}")
                if not isinstance(reply, Reply):
                    raise ProtocolError(f"agent on node {node} answered {name} with a {type(reply).__name__}")
                if isinstance(reply, Failed) and not tolerate_errors:
                    raise EmulationError(f"agent on node {node} failed in {name}: {reply.error}")
                replies[node] = reply
            if self.agents.keys() - replies.keys():
                checked()
                if time.monotonic() > deadline:
                    late = ", ".join(sorted(set(self.agents) - replies.keys()))
                    raise EmulationError(f"{name} timed out after {timeout_s:.0f} s waiting for node(s) {late}")
        return {node: reply for node, reply in replies.items() if node in self.agents}

    def _take_files(self, sock: socket.socket) -> None:
        """Read what a host's own connection brought (its agents' files); a closed one is forgotten."""
        host = next(h for h, c in self.hosts.items() if c.sock is sock)
        chan = self.hosts[host]
        while True:
            msg = chan.recv()
            if msg is None:
                self.hosts.pop(host).close()
                return
            if not isinstance(msg, Files):
                raise ProtocolError(f"host {host}'s relay sent a {type(msg).__name__}")
            self.write(msg)
            if not chan.has_message():
                return

    def write(self, files: Files) -> None:
        write_files(files, self.mirrored)

    def drop(self, node: str, reason: str) -> None:
        """Forget the agent on ``node``, which died; the others go on without it."""
        self.lost[node] = reason
        self.agents.pop(node).close()

    def close(self) -> None:
        for chan in [*self.agents.values(), *self.hosts.values()]:
            chan.close()
        for listener in self._listeners:
            listener.close()
        self.path.unlink(missing_ok=True)
