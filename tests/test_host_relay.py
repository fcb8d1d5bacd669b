"""Rendezvous and control across hosts, on real sockets: the run's key-value store
(:mod:`fedmst.hosts.store`) answers every operation gloo uses, and two gloo ends whose stores are
one server reached directly and through a relay (:mod:`fedmst.hosts.relay`, Unix socket to TCP)
find each other and move a tensor. No network namespaces: the hosts' network is loopback here."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from fedmst.hosts.relay import Relay
from fedmst.hosts.store import RemoteStore, StoreServer


@pytest.fixture
def server(tmp_path: Path):
    served = StoreServer(tmp_path / "store.sock", tcp=("127.0.0.1", 0))
    yield served
    served.close()


def test_the_store_answers_what_gloo_asks(server: StoreServer, tmp_path: Path) -> None:
    store = RemoteStore(str(server.path), timeout=timedelta(seconds=5))
    store.set("a", b"\x00\x01")
    assert store.get("a") == b"\x00\x01"
    assert store.add("n", 2) == 2 and store.add("n", 3) == 5
    assert store.compare_set("c", b"", b"first") == b"first"
    assert store.compare_set("c", b"other", b"second") == b"first"
    assert store.check(["a", "c"]) and not store.check(["a", "missing"])
    assert store.num_keys() == 3
    assert store.delete_key("a") and not store.delete_key("a")
    begun = time.monotonic()
    with pytest.raises(RuntimeError, match="timed out after 0 s waiting for late"):
        store.wait(["late"], timedelta(seconds=0.3))
    assert time.monotonic() - begun >= 0.3
    store.close()


def test_a_key_set_by_one_end_wakes_the_other_through_the_relay(server: StoreServer, tmp_path: Path) -> None:
    relay = Relay(tmp_path / "relay.sock", ("127.0.0.1", server.port))
    try:
        near, far = RemoteStore(str(server.path)), RemoteStore(str(relay.path))
        far.set("k", "v")
        assert near.get("k") == b"v" and far.get("k") == b"v"
        assert relay.carried > 0
        near.close()
        far.close()
    finally:
        relay.close()
    assert not (tmp_path / "relay.sock").exists()


PAIR = """
import sys, torch
from fedmst.protocol import RELAYED_STORE
from fedmst.workers import transport
rank, path = int(sys.argv[1]), sys.argv[2]
pair = transport.open_pair(f"{RELAYED_STORE}{path}#store-1", "task0-000-broadcast", rank=rank,
                           address="127.0.0.1", timeout_s=30, numel=1000)
t = torch.arange(1000.0) if rank == 0 else torch.zeros(1000)
(pair.group.send([t], 1, 0) if rank == 0 else pair.group.recv([t], 0, 0)).wait()
print(float(t.sum()))
"""


def test_gloo_ends_meet_through_one_store_one_of_them_relayed(server: StoreServer, tmp_path: Path) -> None:
    """Two agents' ends of one transfer (:func:`fedmst.workers.transport.open_pair`), the sender
    reaching the run's store directly (the coordinator's host), the receiver through a relay
    (another host's): gloo's rendezvous completes, both sizes agree, and the tensor arrives whole."""
    relay = Relay(tmp_path / "relay.sock", ("127.0.0.1", server.port))
    try:
        ends = [subprocess.Popen([sys.executable, "-c", PAIR, str(rank), str(path)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
                for rank, path in ((0, server.path), (1, relay.path))]
        outs = [end.communicate(timeout=120) for end in ends]
    finally:
        relay.close()
    assert [end.returncode for end in ends] == [0, 0], [err[-1500:] for _, err in outs]
    assert [float(out) for out, _ in outs] == [499500.0, 499500.0]
    assert relay.carried > 0


def test_agents_of_two_hosts_answer_one_control_server(tmp_path: Path) -> None:
    """Agent a connects to the coordinator's Unix socket (its host), agent b to a relay (another
    host's) that carries it to the coordinator's TCP listener: both are accepted with the run's
    token, a command reaches both and both replies come back; one without the token is refused
    through the relay as directly."""
    from fedmst.protocol import Done, Train
    from fedmst.workers.control import ControlServer, connect

    server = ControlServer(tmp_path / "control.sock", token="t", tcp=("127.0.0.1", 0))
    assert server.port
    relay = Relay(tmp_path / "relay.sock", ("127.0.0.1", server.port))
    try:
        intruder = connect(str(relay.path), node="b", token="guess")
        agents = {"a": connect(str(server.path), node="a", token="t"),
                  "b": connect(str(relay.path), node="b", token="t")}
        server.accept(["a", "b"], timeout_s=5, check=lambda: None)
        assert intruder.recv() is None
        for chan in agents.values():
            chan.send(Done())
        assert server.run(Train(round=1), timeout_s=5, check=lambda: None) == {"a": Done(), "b": Done()}
        assert [chan.recv() for chan in agents.values()] == [Train(round=1), Train(round=1)]
    finally:
        server.close()
        relay.close()


def test_a_relayed_agent_gets_its_host_s_folders_and_clock_and_its_files_come_back(tmp_path: Path) -> None:
    """The coordinator names its own folder and clock; the agent behind the relay gets its host's
    folder and its start time moved by the host's clock offset. What the agent writes there comes
    back into the coordinator's folder before its reply does, and, while a phase runs, without one
    (the host's own connection), in time for the coordinator's checks."""
    from fedmst.hosts.relay import ControlRelay, HostPaths, Mirror
    from fedmst.protocol import Done, RunRounds, Train
    from fedmst.workers.control import ControlServer, connect

    coordinator, here = tmp_path / "coordinator", tmp_path / "host"
    coordinator.mkdir()
    here.mkdir()
    server = ControlServer(tmp_path / "control.sock", token="t", tcp=("127.0.0.1", 0), mirrored=[coordinator])
    assert server.port
    paths = HostPaths({str(coordinator): str(here)}, offset_s=1.5)
    relay = ControlRelay(tmp_path / "relay.sock", ("127.0.0.1", server.port), paths, Mirror(paths, str(here)),
                         host="h1", token="t", every_s=0.1)
    try:
        agent = connect(str(relay.path), node="b", token="t")
        server.accept(["b"], timeout_s=5, check=lambda: None)

        def answer(write: str, wait_s: float) -> threading.Thread:
            def act() -> None:
                got.append(agent.recv())
                (here / "p").mkdir(exist_ok=True)
                with (here / "p" / "b.arrived").open("a") as f:
                    f.write(write)
                time.sleep(wait_s)
                agent.send(Done())
            thread = threading.Thread(target=act)
            thread.start()
            return thread

        got: list[object] = []
        thread = answer("t-1\n", 0.0)
        cmd = RunRounds(start_at=10.0, rounds={"t": 1}, offsets={"t": 0.0}, weights={},
                        progress_dir=str(coordinator / "p"))
        assert server.run(cmd, timeout_s=5, check=lambda: None) == {"b": Done()}
        thread.join()
        assert got == [RunRounds(start_at=11.5, rounds={"t": 1}, offsets={"t": 0.0}, weights={},
                                 progress_dir=str(here / "p"))]
        assert (coordinator / "p" / "b.arrived").read_text() == "t-1\n"  # before the reply was taken

        seen: list[str] = []
        thread = answer("t-2\n", 1.5)
        server.run(Train(round=2), timeout_s=5,
                   check=lambda: seen.append((coordinator / "p" / "b.arrived").read_text()))
        thread.join()
        assert "t-1\nt-2\n" in seen  # mirrored while the agent had not replied yet
    finally:
        server.close()
        relay.close()


def test_a_reply_brings_what_changed_in_the_folders_the_commands_named(tmp_path: Path) -> None:
    """Before a reply the relay looks only in the progress folders the last commands named (a
    phase's marks), not the whole live folder, which grows by a folder a phase; what changed
    elsewhere comes on the host's own connection."""
    from fedmst.hosts.relay import ControlRelay, HostPaths, Mirror
    from fedmst.protocol import Broadcast, Done, Train
    from fedmst.workers.control import ControlServer, connect

    coordinator, here = tmp_path / "coordinator", tmp_path / "host"
    coordinator.mkdir()
    here.mkdir()
    server = ControlServer(tmp_path / "control.sock", token="t", tcp=("127.0.0.1", 0), mirrored=[coordinator])
    paths = HostPaths({str(coordinator): str(here)})
    relay = ControlRelay(tmp_path / "relay.sock", ("127.0.0.1", server.port), paths, Mirror(paths, str(here)),
                         host="h1", token="t", every_s=3600)  # the host's connection only when flushed below
    try:
        agent = connect(str(relay.path), node="b", token="t")
        server.accept(["b"], timeout_s=5, check=lambda: None)

        def act() -> None:
            agent.recv()
            for folder in ("phase", "elsewhere"):
                (here / folder).mkdir(exist_ok=True)  # the relay made the named one
                (here / folder / "b.arrived").write_text("t-1\n")
            agent.send(Done())

        thread = threading.Thread(target=act)
        thread.start()
        assert server.run(Broadcast(round=1, progress_dir=str(coordinator / "phase")), timeout_s=5,
                          check=lambda: None) == {"b": Done()}
        thread.join()
        assert (coordinator / "phase" / "b.arrived").read_text() == "t-1\n"
        assert not (coordinator / "elsewhere").exists()
        relay.flush()  # read by the coordinator as it waits for the next replies

        def reply_later() -> None:
            agent.recv()
            time.sleep(0.5)
            agent.send(Done())

        thread = threading.Thread(target=reply_later)
        thread.start()
        assert server.run(Train(round=2), timeout_s=5, check=lambda: None) == {"b": Done()}
        thread.join()
        assert (coordinator / "elsewhere" / "b.arrived").read_text() == "t-1\n"
    finally:
        server.close()
        relay.close()
