"""Telling the run's congestion control what each connection carries per iteration (MLTCP).

A BPF congestion control that scales its window by how far a connection is into its iteration's
communication (mltcp, or a user's) declares a socket-storage map named ``iteration_bytes``
(``BPF_MAP_TYPE_SK_STORAGE``; value ``{u32 iteration; u32 unused; u64 bytes}``). Before each
round's broadcast an agent writes, for every connection it sends on, the round number and the
bytes it will send on it that round (the plan knows them); a new round number restarts the
algorithm's count. The map is opened by its id (``BPF_MAP_GET_FD_BY_ID``), which the coordinator
finds when it registers the algorithm; an element is keyed by the socket's descriptor, which the
kernel resolves to the socket itself. Plain ``bpf(2)`` calls, no library: an agent needs no BPF
toolchain.
"""

from __future__ import annotations

import ctypes
import os
import platform
import socket
import struct

from fedmst.workers.transport import connection_at

_NR_BPF = {"x86_64": 321, "aarch64": 280}.get(platform.machine())
_BPF_MAP_UPDATE_ELEM, _BPF_MAP_GET_FD_BY_ID = 2, 14
_libc = ctypes.CDLL(None, use_errno=True)


def _bpf(cmd: int, attr: bytes) -> int:
    if _NR_BPF is None:
        raise OSError(f"bpf(2): no syscall number known for {platform.machine()}")
    buf = ctypes.create_string_buffer(attr, len(attr))
    result = _libc.syscall(_NR_BPF, cmd, buf, len(attr))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bpf({cmd}): {os.strerror(err)}")
    return int(result)


class IterationBytes:
    """The ``iteration_bytes`` map of the run's congestion control, open by its id."""

    def __init__(self, map_id: int) -> None:
        self.fd = _bpf(_BPF_MAP_GET_FD_BY_ID, struct.pack("=III", map_id, 0, 0))

    def tell(self, sock: socket.socket, iteration: int, nbytes: int) -> None:
        """Connection ``sock`` sends ``nbytes`` in iteration ``iteration`` (from now on)."""
        key = ctypes.c_int(sock.fileno())
        value = ctypes.create_string_buffer(struct.pack("=IIQ", iteration, 0, nbytes), 16)
        _bpf(_BPF_MAP_UPDATE_ELEM, struct.pack("=I4xQQQ", self.fd, ctypes.addressof(key),
                                               ctypes.addressof(value), 0))


class Told:
    """The connections of each task that this agent tells the congestion control about: the
    socket here and the bytes this node sends on it a round (nothing where ``map_id`` is None)."""

    def __init__(self, map_id: int | None) -> None:
        self._map = IterationBytes(map_id) if map_id is not None else None
        self._sending: dict[str, list[tuple[socket.socket, int]]] = {}
        self._iteration: dict[str, int] = {}

    def add(self, task: str, address: str, nbytes: int) -> None:
        """``task``'s connection whose end here is ``address`` sends ``nbytes`` a round from this node."""
        sock = connection_at(address) if self._map is not None and nbytes else None
        if sock is not None:
            self._sending.setdefault(task, []).append((sock, nbytes))

    def forget(self) -> None:
        """Every connection was closed (a re-plan opens others)."""
        for sock, _ in (entry for entries in self._sending.values() for entry in entries):
            sock.close()
        self._sending.clear()

    def begin_round(self, task: str) -> None:
        """A round of ``task`` begins here: each of its connections' bytes in it, as a new iteration."""
        self._iteration[task] = iteration = self._iteration.get(task, 0) + 1
        if self._map is not None:
            for sock, nbytes in self._sending.get(task, []):
                self._map.tell(sock, iteration, nbytes)
