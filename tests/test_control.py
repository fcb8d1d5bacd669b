"""The control channel treats a peer that vanished as closed, however the kernel reports it, and
carries typed protocol messages."""

from __future__ import annotations

import socket

from pathlib import Path

import pytest

from fedmst.errors import EmulationError, WorkerDied
from fedmst.protocol import Broadcast, Failed, PhaseDone, ProtocolError, Train, Trained, Upload
from fedmst.workers.control import Channel, ControlServer, connect


def test_a_peer_reset_reads_as_closed() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    chan = Channel(ours)
    chan.send(Broadcast(round=1, progress_dir="p"))
    theirs.close()  # closed with our message unread: the kernel resets the connection
    assert chan.recv() is None


def test_messages_round_trip_as_json_lines() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    Channel(theirs).send(PhaseDone(task_seconds={"task0": 0.25}, seconds=0.5))
    Channel(theirs).send(Failed("RuntimeError: boom"))
    Channel(theirs).send(Upload(round=2, progress_dir="p", weights={"task0": {0: 0.25, 3: 0.75}}))
    chan = Channel(ours)
    assert chan.recv() == PhaseDone(task_seconds={"task0": 0.25}, seconds=0.5)
    assert chan.recv() == Failed("RuntimeError: boom")
    assert chan.recv() == Upload(round=2, progress_dir="p", weights={"task0": {0: 0.25, 3: 0.75}})


def test_a_line_that_is_no_message_is_an_error_and_is_consumed() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    theirs.sendall(b'{"type": "Train", "version": 99, "round": 1}\nnot json\n')
    Channel(theirs).send(Train(round=1))
    chan = Channel(ours)
    with pytest.raises(ProtocolError, match="version 99"):
        chan.recv()
    with pytest.raises(ProtocolError, match="not JSON"):
        chan.recv()
    assert chan.recv() == Train(round=1)


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

    trained = Trained(task_seconds={"task0": 1.0}, losses={}, late={})
    agents["a"].send(trained)
    dead.add("b")
    agents["b"].close()
    replies = server.run(Train(round=1), timeout_s=5, check=check, survive=True)
    assert replies == {"a": trained}
    assert server.lost == {"b": "agent on node b exited with code -9"} and set(server.agents) == {"a"}
    server.close()


def test_a_dead_worker_ends_a_phase_that_cannot_survive_it(tmp_path: Path) -> None:
    server, agents = _server_with_agents(tmp_path, ["c"])
    agents["c"].close()

    def check() -> None:
        raise WorkerDied("c", "agent on node c exited with code -9")

    with pytest.raises(WorkerDied, match="node c"):
        server.run(Upload(round=1, progress_dir="p", weights={}), timeout_s=5, check=check)
    server.close()


@pytest.mark.parametrize("reported", [("a", "b"), ("b", "a")])
def test_agents_dying_at_once_are_all_dropped(tmp_path: Path, reported: tuple[str, str]) -> None:
    """Two agents close their connections in the same instant, after the command reached them;
    ``check`` reports one death per call, in either order. While the first closed socket is looked
    into, the other agent may be dropped too: it must not be read again (it once was: KeyError)."""
    server, agents = _server_with_agents(tmp_path, ["a", "b", "c"])
    for node in ("a", "b"):
        agents[node].sock.shutdown(socket.SHUT_WR)  # closed for us; the command still goes through
    agents["c"].send(PhaseDone(task_seconds={}))
    pending = list(reported)

    def check() -> None:
        if pending:
            node = pending.pop(0)
            raise WorkerDied(node, f"agent on node {node} exited with code -9")

    replies = server.run(Broadcast(round=1, progress_dir="p"), timeout_s=5, check=check, survive=True)
    assert replies == {"c": PhaseDone(task_seconds={})}
    assert set(server.lost) == {"a", "b"} and set(server.agents) == {"c"}
    for node in ("a", "b"):
        assert agents[node].recv() == Broadcast(round=1, progress_dir="p")
    server.close()


def test_a_failed_reply_names_the_node_unless_errors_are_tolerated(tmp_path: Path) -> None:
    server, agents = _server_with_agents(tmp_path, ["a", "b"])
    for _ in range(2):
        agents["a"].send(PhaseDone(task_seconds={"task0": 0.5}))
        agents["b"].send(Failed("RuntimeError: Timed out"))
    replies = server.run(Broadcast(round=1, progress_dir="p"), timeout_s=5, check=lambda: None, tolerate_errors=True)
    assert replies == {"a": PhaseDone(task_seconds={"task0": 0.5}), "b": Failed("RuntimeError: Timed out")}
    with pytest.raises(EmulationError, match="node b failed in broadcast: RuntimeError: Timed out"):
        server.run(Broadcast(round=2, progress_dir="p"), timeout_s=5, check=lambda: None)
    server.close()


def test_only_the_agents_it_started_are_accepted(tmp_path: Path) -> None:
    """A connection without the run's token, or for a node not in the run, is refused."""
    server = ControlServer(tmp_path / "control.sock", token="secret")
    intruders = [connect(str(tmp_path / "control.sock"), node="a", token="guess"),
                 connect(str(tmp_path / "control.sock"), node="zz", token="secret")]
    with pytest.raises(EmulationError, match="node.s. a did not connect"):
        server.accept(["a"], timeout_s=1, check=lambda: None)
    assert server.agents == {}
    for chan in intruders:
        assert chan.recv() is None  # the server closed them
    server.close()
