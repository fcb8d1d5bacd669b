"""Rendezvous and control across hosts, on real sockets: the run's key-value store
(:mod:`fedmst.hosts.store`) answers every operation gloo uses, and two gloo ends whose stores are
one server reached directly and through a relay (:mod:`fedmst.hosts.relay`, Unix socket to TCP)
find each other and move a tensor. No network namespaces: the hosts' network is loopback here."""

from __future__ import annotations

import subprocess
import sys
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
import datetime, sys, torch, torch.distributed as dist
from fedmst.hosts.store import RemoteStore
rank, path = int(sys.argv[1]), sys.argv[2]
store = RemoteStore(path, prefix="pair-0/")
opts = dist.ProcessGroupGloo._Options()
opts._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
opts._timeout = datetime.timedelta(seconds=30)
group = dist.ProcessGroupGloo(store, rank, 2, opts)
t = torch.arange(1000.0) if rank == 0 else torch.zeros(1000)
(group.send([t], 1, 0) if rank == 0 else group.recv([t], 0, 0)).wait()
print(float(t.sum()))
"""


def test_gloo_ends_meet_through_one_store_one_of_them_relayed(server: StoreServer, tmp_path: Path) -> None:
    """The sender reaches the store directly (the coordinator's host), the receiver through a relay
    (another host's): gloo's rendezvous completes and the tensor arrives whole."""
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
