"""Link queues: the tc commands of fifo and fair, and the fair classifier's program run on packets
(by a small interpreter of the classic BPF it uses), then for real on an emulated link."""

from __future__ import annotations

import ipaddress
import re
import struct
import time
from pathlib import Path

import pytest

from fedmst.core.topology import load_topology
from fedmst.net import queues
from fedmst.net.emulation import Emulation

MASK = 0xFFFFFFFF


def run_cbpf(program: str, packet: bytes) -> int:
    """The return value of a ``tc ... bpf bytecode`` program on ``packet`` (the opcodes it uses)."""
    count, *ops = program.split(",")
    code = [tuple(int(x) for x in op.split()) for op in ops]
    assert len(code) == int(count)
    a, pc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        pc += 1
        if op == 0x28:  # ldh [k]
            a = struct.unpack_from("!H", packet, k)[0]
        elif op == 0x20:  # ld [k]
            a = struct.unpack_from("!I", packet, k)[0]
        elif op == 0x15:  # jeq #k
            pc += jt if a == k else jf
        elif op == 0x14:  # sub #k
            a = (a - k) & MASK
        elif op == 0x74:  # rsh #k
            a >>= k
        elif op == 0x94:  # mod #k
            a %= k
        elif op == 0x04:  # add #k
            a = (a + k) & MASK
        elif op == 0x16:  # ret a
            return a
        elif op == 0x06:  # ret #k
            return k
        else:
            raise AssertionError(f"opcode {op:#x} not interpreted")


def ipv4(src: str, dst: str) -> bytes:
    ether = b"\x00" * 12 + b"\x08\x00"
    header = bytes([0x45, 0]) + b"\x00" * 10 + ipaddress.IPv4Address(src).packed + ipaddress.IPv4Address(dst).packed
    return ether + header + b"\x00" * 20


def leaf_of(classid: int) -> str:
    return f"{classid >> 16}:{classid & 0xFFFF:x}"


def test_fifo_is_one_htb_class_as_before() -> None:
    assert queues.shaping("fmabc1-eth0", 100, queue="fifo", mtu=1500, netem="delay 1.000ms") == [
        "qdisc add dev fmabc1-eth0 root handle 5:0 htb default 1",
        "class add dev fmabc1-eth0 parent 5:0 classid 5:1 htb rate 100.000000Mbit burst 15k",
        "qdisc add dev fmabc1-eth0 parent 5:1 handle 10: netem delay 1.000ms",
    ]


def test_fair_leaves_share_the_link_and_each_ends_in_netem() -> None:
    cmds = queues.shaping("x", 100, queue="fair", mtu=9000, netem="delay 1.000ms")
    leaves = [c for c in cmds if c.startswith("class add") and "parent 5:1 " in c]
    assert len(leaves) == queues.FAIR_CLASSES
    rates = [float(re.search(r" rate ([\d.]+)Mbit", c).group(1)) for c in leaves]  # type: ignore[union-attr]
    assert sum(rates) == pytest.approx(100) and all(" ceil 100.000000Mbit" in c and "quantum 9014" in c for c in leaves)
    netems = [c for c in cmds if " netem " in c]
    handles = {c.split(" handle ")[1].split()[0] for c in netems}
    assert len(netems) == len(handles) == queues.FAIR_CLASSES
    assert cmds[0].endswith("htb default 10")  # the first leaf: what the filter does not place


def test_live_changes_reach_every_fair_leaf() -> None:
    assert len(queues.rate_change("x", 10, queue="fair", mtu=1500)) == 1 + queues.FAIR_CLASSES
    assert len(queues.netem_change("x", "delay 5.000ms", queue="fair")) == queues.FAIR_CLASSES
    assert queues.netem_change("x", "delay 5.000ms", queue="fifo") == [
        "qdisc change dev x parent 5:1 handle 10: netem delay 5.000ms"]


def test_a_transfers_data_and_acks_share_its_queue_and_neighbours_never_do() -> None:
    program = queues.transfer_classifier()
    pool = ipaddress.ip_network("10.128.0.0/9").hosts()  # as Emulation.install_flows hands them out
    pairs = [(str(next(pool)), str(next(pool))) for _ in range(queues.FAIR_CLASSES + 1)]
    classes = []
    for a, b in pairs:
        data, ack = run_cbpf(program, ipv4(a, b)), run_cbpf(program, ipv4(b, a))
        assert data == ack
        classes.append(leaf_of(data))
    assert len(set(classes[:-1])) == queues.FAIR_CLASSES and set(classes) <= set(queues.leaves("fair"))
    assert classes[-1] == classes[0]  # the 65th transfer shares the first one's queue
    link = [run_cbpf(program, ipv4(s, d)) for s, d in (("10.0.0.1", "10.0.0.2"), ("10.0.0.2", "10.0.0.1"))]
    assert link[0] == link[1]
    arp = b"\x00" * 12 + b"\x08\x06" + b"\x00" * 28
    assert run_cbpf(program, arp) == 0xFFFFFFFF  # htb's default class


SINK = """import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5001)); s.listen(); c, _ = s.accept(); n = 0
while (d := c.recv(1 << 20)):
    n += len(d)
print(n)
"""
SEND = """import socket, sys
s = socket.socket(); s.bind((sys.argv[1], 0)); s.connect((sys.argv[2], 5001)); s.sendall(b"x" * int(sys.argv[3]))
"""


@pytest.mark.integration
def test_each_transfer_waits_in_its_own_queue_on_a_real_link(clean_host: None, tmp_path: Path) -> None:
    """Two TCP transfers g1->sr and g2->sr through the dumbbell's sl: on sl's bottleneck
    interface each one's bytes went through a leaf class of its own, and nothing else did much."""
    (tmp_path / "sink.py").write_text(SINK)
    (tmp_path / "send.py").write_text(SEND)
    size = 2_000_000
    with Emulation(load_topology("dumbbell"), delay_mode="off", queue="fair") as emu:
        flows = emu.install_flows({"A": ["g1", "sl", "sr"], "B": ["g2", "sl", "sr"]})
        for f in flows.values():
            emu.cmd("sr", f"python3 {tmp_path}/sink.py {f.dst_addr} > {tmp_path}/{f.key}.out 2>&1 &")
        time.sleep(0.5)
        for f in flows.values():
            emu.cmd(f.path[0], f"python3 {tmp_path}/send.py {f.src_addr} {f.dst_addr} {size} &")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all((tmp_path / f"{k}.out").read_text().strip() for k in flows):
            time.sleep(0.2)
        assert [int((tmp_path / f"{k}.out").read_text()) for k in flows] == [size, size]
        stats = {intf: emu.cmd("sl", f"tc -s class show dev {intf}") for intf in emu.interfaces("sl")}
    sent = {intf: {m[0]: int(m[1]) for m in re.findall(r"class htb (5:\w+) parent 5:1 .*?\n Sent (\d+) bytes", out)}
            for intf, out in stats.items()}
    assert all(len(classes) == queues.FAIR_CLASSES for classes in sent.values()), sent
    [data] = [classes for classes in sent.values() if max(classes.values()) > size]  # sl -> sr
    busy = [b for b in data.values() if b > size]
    assert len(busy) == 2, data
    assert sum(data.values()) - sum(busy) < 0.01 * size
