"""The relay: how an agent on one host reaches its coordinator on another.

An agent's namespace has no route to the hosts' own network, and must not have one: weights
would bypass the emulated links. It keeps talking to a Unix socket, a file every namespace of its
host can reach, as on one host; on a host other than the coordinator's, a :class:`Relay` listens
there and carries each connection, byte for byte, to the coordinator's TCP listener on the hosts'
network. What crosses is control lines and rendezvous keys, never a tensor.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from fedmst.protocol import RELAYED_STORE, Files, encode

CHUNK = 1 << 16
FOLDER_FIELDS = ("progress_dir", "dir")
"""The fields of the commands that name a folder the coordinator made for the agents to write into."""


class Relay:
    """Every connection made to Unix socket ``path`` is carried to TCP ``target`` (host, port),
    both ways, until either end closes; :meth:`close` ends the listener and every connection. Given
    ``lines``, the connections carry JSON lines, each handed to ``lines(line, towards_agent, send)``
    to send on (translated, or with others before it) instead of the bytes as they come."""

    def __init__(self, path: Path, target: tuple[str, int],
                 lines: Callable[[bytes, bool, Callable[[bytes], None]], None] | None = None) -> None:
        self.path = path
        self.target = target
        self._lines = lines
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
            for a, b, towards_agent in ((inner, outer, False), (outer, inner, True)):
                threading.Thread(target=self._pump, args=(a, b, towards_agent, ended), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, towards_agent: bool, ended: list[int]) -> None:
        """Copy ``source`` to ``sink`` until ``source`` ends, then end ``sink``'s sending side; the
        second pump of a connection to end closes both its sockets."""
        def send(data: bytes) -> None:
            sink.sendall(data)
            with self._lock:
                self.carried += len(data)

        pending = b""
        try:
            while data := source.recv(CHUNK):
                if self._lines is None:
                    send(data)
                    continue
                pending += data
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    self._lines(line + b"\n", towards_agent, send)
        except Exception:  # noqa: BLE001 - a connection gone, a line that is no message: the connection ends
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
        end_sockets([self._listener, *socks])
        self.path.unlink(missing_ok=True)


def end_sockets(socks: Iterable[socket.socket]) -> None:
    """Shut each socket down, then close it: shutting down wakes a thread blocked in its accept() or
    recv(), which close() alone does not."""
    for sock in socks:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()



@dataclass(frozen=True)
class HostPaths:
    """How the coordinator's folders and clock map to this host's: each coordinator folder
    (its scratch, the run folder) has a folder of its own here, and this host's monotonic clock is
    ``offset_s`` ahead of the coordinator's (:mod:`fedmst.hosts.clock`).

    >>> paths = HostPaths({"/tmp/fedmst-abc-x": "/tmp/fedmst-abc-y/c0"}, offset_s=2.5)
    >>> paths.to_host({"type": "Broadcast", "progress_dir": "/tmp/fedmst-abc-x/progress-1", "round": 1})
    {'type': 'Broadcast', 'progress_dir': '/tmp/fedmst-abc-y/c0/progress-1', 'round': 1}
    >>> paths.to_host({"type": "RunRounds", "start_at": 10.0})["start_at"]
    12.5
    >>> paths.to_coordinator("/tmp/fedmst-abc-y/c0/progress-1/3.arrived")
    '/tmp/fedmst-abc-x/progress-1/3.arrived'
    """

    folders: Mapping[str, str]
    """Coordinator folder -> this host's."""
    offset_s: float = 0.0

    def to_host(self, obj: Any) -> Any:
        """A command (a JSON object) as this host's agents need it: folders and start times theirs."""
        if isinstance(obj, dict):
            return {k: v + self.offset_s if k == "start_at" and isinstance(v, (int, float)) else self.to_host(v)
                    for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.to_host(v) for v in obj]
        if isinstance(obj, str):
            return _moved(obj, self.folders)
        return obj

    def to_coordinator(self, path: str) -> str:
        return _moved(path, {here: there for there, here in self.folders.items()})


def _moved(path: str, folders: Mapping[str, str]) -> str:
    """``path`` in the other folders, a rendezvous place's (``socket:PATH#SPACE``) too."""
    scheme = RELAYED_STORE if path.startswith(RELAYED_STORE) else ""
    path = path[len(scheme):]
    for old, new in folders.items():
        if path == old or path.startswith(old + "/"):
            return scheme + new + path[len(old):]
    return scheme + path


class Mirror:
    """What this host's agents have written under its folders since the last look, as the
    coordinator's :class:`~fedmst.protocol.Files` (paths translated by ``paths``). While the run
    goes, only the folder the coordinator reads during it (``live``: its scratch folder, where the
    progress marks and phase spans are); the others (the run folder's logs and saved models, which
    the coordinator reads once the run is over, or an agent is dead) when it asks."""

    def __init__(self, paths: HostPaths, live: str) -> None:
        self._paths = paths
        self.live = live
        self._sent: dict[str, dict[str, int]] = {}
        """Per reader (the replies' path, the host's own connection, the end), how far each file was sent:
        each sends all that is new to it, so a reply never waits on bytes another path took (a file
        written twice at one offset is the same file)."""
        self._lock = threading.Lock()
        self.ignored: set[str] = set()
        """Files the coordinator wrote here (an agent's spec, an abort mark): it has them."""

    def begin(self, reader: str) -> None:
        """Start ``reader`` from what the live folder holds now: a session's relay carries what its own
        agents write, not what the run's earlier sessions' agents wrote (their relays carried that)."""
        with self._lock:
            self._sent[reader] = dict(_files(self.live))

    def end(self, reader: str) -> None:
        with self._lock:
            self._sent.pop(reader, None)

    def changes(self, reader: str, everywhere: bool = False, limit: int = 1 << 24,
                under: Sequence[str] = ()) -> Files | None:
        """The bytes added since ``reader``'s last call to every file of the live folder (``everywhere``:
        of every folder; ``under``: of these folders only), at most about ``limit`` of them (the rest
        next time); None: nothing new."""
        data: dict[str, str] = {}
        offsets: dict[str, int] = {}
        taken = 0
        roots = under or (self._paths.folders.values() if everywhere else [self.live])
        with self._lock:
            sent_to = self._sent.setdefault(reader, {})
            for root in roots:
                for path, size in _files(root):
                    sent = sent_to.get(path, 0)
                    if size <= sent or path in self.ignored or taken >= limit:
                        continue  # the common case costs a stat, not an open and a read
                    try:
                        with open(path, "rb") as f:
                            f.seek(sent)
                            added = f.read(limit - taken)
                    except OSError:  # gone between the listing and the read
                        continue
                    taken += len(added)
                    there = self._paths.to_coordinator(path)
                    data[there], offsets[there] = base64.b64encode(added).decode(), sent
                    sent_to[path] = sent + len(added)
        return Files(data, offsets) if data else None


def _files(root: str) -> Iterator[tuple[str, int]]:
    """Every regular file under ``root`` with its size (sockets and the like left out)."""
    stack = [root]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    yield entry.path, entry.stat().st_size
            except OSError:
                continue


class ControlRelay:
    """The control channel's relay on a host other than the coordinator's: every agent connection
    made to Unix socket ``path`` is carried to the coordinator's TCP ``target`` line by line, each
    command translated to this host (``paths``: its folders, its clock), and what the host's agents
    wrote in the live folder since the relay began (``mirror``, the host's one) sent ahead of each
    reply, so that the coordinator reads a phase's marks once it has its replies; and every
    ``every_s`` on the host's own connection (``host``, ``token``) while the phases run, for the
    coordinator's stall watch. A run has one per session of agents (a cluster's jobs one each).

    What a reply waits for is looked for in the progress folders the last commands named (a phase's
    marks and spans are there, and nothing else the coordinator reads as the run goes): the live
    folder grows by a folder a phase, and scanning it all before each reply cost 4.4 ms with 1,000
    files in it (``scripts/bench_relay.py``); the rest goes on the host's own connection."""

    NAMED = 4
    """How many of the progress folders the commands named last a reply looks in (one a session with
    its own clock, one a lockstep phase)."""

    def __init__(self, path: Path, target: tuple[str, int], paths: HostPaths, mirror: Mirror, *, host: str,
                 token: str, every_s: float = 0.2) -> None:
        self.path, self.target, self.paths = path, target, paths
        self.mirror = mirror
        self._named: dict[str, None] = {}
        """The progress folders the last commands named, oldest first (this host's paths)."""
        self._named_lock = threading.Lock()
        self._readers = {way: f"{way} {path}" for way in ("replies", "host")}
        for reader in self._readers.values():
            mirror.begin(reader)
        self._host = socket.create_connection(target, timeout=10)
        self._host.settimeout(None)  # a coordinator between commands reads it later: wait, cut no line
        self._host.sendall(json.dumps({"host": host, "token": token}).encode() + b"\n")
        self._host_lock = threading.Lock()
        self._relay = Relay(path, target, lines=self._line)
        self._stop = threading.Event()
        self._every_s = every_s
        threading.Thread(target=self._periodically, name=f"mirror {host}", daemon=True).start()

    def _line(self, line: bytes, towards_agent: bool, send: Callable[[bytes], None]) -> None:
        obj = json.loads(line)
        if towards_agent:
            moved = self.paths.to_host(obj)
            for key in FOLDER_FIELDS:  # made by the coordinator where it named them, and here too
                if isinstance(moved.get(key), str) and moved[key] and moved[key] != obj[key]:
                    Path(moved[key]).mkdir(parents=True, exist_ok=True)
            if isinstance(moved.get("progress_dir"), str) and moved["progress_dir"]:
                with self._named_lock:
                    self._named.pop(moved["progress_dir"], None)
                    self._named[moved["progress_dir"]] = None
                    while len(self._named) > self.NAMED:
                        self._named.pop(next(iter(self._named)))
            send(json.dumps(moved).encode() + b"\n")
            return
        # an agent says who it is first
        with self._named_lock:
            named = list(self._named)
        files = None if "hello" in obj else self.mirror.changes(self._readers["replies"], under=named)
        if files is not None:
            send(json.dumps(encode(files)).encode() + b"\n")
        send(line)

    def _periodically(self) -> None:
        while not self._stop.wait(self._every_s):
            self.flush()

    def flush(self) -> None:
        """Send what the agents wrote since the last look on the host's own connection."""
        files = self.mirror.changes(self._readers["host"])
        if files is None:
            return
        with self._host_lock:
            try:
                self._host.sendall(json.dumps(encode(files)).encode() + b"\n")
            except OSError:  # the coordinator is gone: the run is over
                self._stop.set()

    def close(self) -> None:
        self._stop.set()
        self._relay.close()
        with self._host_lock:
            self._host.close()
        for reader in self._readers.values():
            self.mirror.end(reader)
