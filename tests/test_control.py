"""The control channel treats a peer that vanished as closed, however the kernel reports it."""

from __future__ import annotations

import socket

from pathlib import Path

import pytest

from fedmst.workers.control import Channel, ControlServer, connect
from fedmst.errors import WorkerDied


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


def _server_with_agents(tmp_path: Path, nodes: list[str]) -> tuple[ControlServer, dict[str, Channel]]:
    """A real ControlServer on a Unix socket with one connected agent channel per node."""
    server = ControlServer(tmp_path / "control.sock", token="t")
    agents = {n: connect(str(tmp_path / "control.sock"), node=n, token="t") for n in nodes}
    server.accept(nodes, timeout_s=5, check=lambda: None)
    return server, agents


def test_a_dead_worker_is_dropped_when_the_phase_can_survive_it(tmp_path: Path) -> None:
    server, agents = _server_with_agents(tmp_path, ["a", "b"])
    dead = set()

    def check() -> None:
        if "b" in dead:
            dead.discard("b")  # reported once, as Workers.check does
            raise WorkerDied("b", "agent on node b exited with code -9")

    agents["a"].send({"ok": True, "losses": {}})
    dead.add("b")
    agents["b"].close()
    replies = server.run({"cmd": "train"}, timeout_s=5, check=check, survive=True)
    assert replies == {"a": {"ok": True, "losses": {}}}
    assert server.lost == {"b": "agent on node b exited with code -9"} and set(server.agents) == {"a"}
    server.close()


def test_a_dead_worker_ends_a_phase_that_cannot_survive_it(tmp_path: Path) -> None:
    server, agents = _server_with_agents(tmp_path, ["c"])
    agents["c"].close()

    def check() -> None:
        raise WorkerDied("c", "agent on node c exited with code -9")

    with pytest.raises(WorkerDied, match="node c"):
        server.run({"cmd": "upload"}, timeout_s=5, check=check)
    server.close()


def test_only_the_agents_it_started_are_accepted(tmp_path: Path) -> None:
    """A connection without the run's token, or for a node not in the run, is refused."""
    from fedmst.errors import EmulationError

    server = ControlServer(tmp_path / "control.sock", token="secret")
    intruders = [connect(str(tmp_path / "control.sock"), node="a", token="guess"),
                 connect(str(tmp_path / "control.sock"), node="zz", token="secret")]
    with pytest.raises(EmulationError, match="node.s. a did not connect"):
        server.accept(["a"], timeout_s=1, check=lambda: None)
    assert server.agents == {}
    for chan in intruders:
        assert chan.recv() is None  # the server closed them
    server.close()
