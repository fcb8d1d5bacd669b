"""The control channel treats a peer that vanished as closed, however the kernel reports it."""

from __future__ import annotations

import socket

from fedmst.control import Channel


def test_a_peer_reset_reads_as_closed() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    chan = Channel(ours)
    chan.send({"cmd": "broadcast"})
    theirs.close()  # closed with our message unread: the kernel resets the connection
    assert chan.recv() is None


def test_messages_round_trip_as_json_lines() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    Channel(theirs).send({"ok": True, "seconds": 0.5})
    Channel(theirs).send({"ok": False})
    chan = Channel(ours)
    assert chan.recv() == {"ok": True, "seconds": 0.5}
    assert chan.recv() == {"ok": False}
