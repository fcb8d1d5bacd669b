"""How a link direction's sender queues what it cannot send yet: one FIFO, or one queue per transfer.

``fifo`` is Mininet's shape: one htb class at the link's capacity over the interface's packet
FIFO (1000 packets). Two TCP transfers in one FIFO do not share it evenly: the one that started
first, or got a little ahead, has the larger window and keeps most of the link until it is done,
so tasks that start together drift apart and partly interleave by themselves.

``fair`` serves every transfer from its own queue, in turn (deficit round robin, one full packet
each), like the fair queues of switches and of Linux's sfq or fq_codel, which this kernel does not
have. It is built from what the kernel has: htb with one leaf class per queue (each guaranteed
1/:data:`FAIR_CLASSES` of the link, all borrowing up to the whole of it) and a classic BPF filter
that puts each packet in the queue of its transfer. Transfers get their endpoint addresses in
pairs from pools that start at an odd address (``.1`` and ``.2``, then ``.3`` and ``.4``...), so
``(source address - 1) >> 1`` numbers the transfer, the same for its data and its ACKs, and
:data:`FAIR_CLASSES` consecutive transfers never share a queue (nor do the two ends of a link's
``/30``). This is the sharing the contention prediction (:mod:`fedmst.core.contention`) assumes.

>>> [c.split(" classid ")[1].split()[0] for c in shaping("fm1-eth0", 100, queue="fifo", mtu=1500)[1:]]
['5:1']
>>> len(leaves("fair"))
64
"""

from __future__ import annotations

QUEUES = ("fifo", "fair")
FAIR_CLASSES = 64
"""Leaf queues per fair link direction: more concurrent transfers than this share queues."""
_FIRST_LEAF = 0x10
HANDLE = 5
"""The root htb's handle on every link sender."""
_FAIR_PRIO = 0xFFFF
"""The fair classifier's filter priority: after every optical circuit's (:mod:`fedmst.net.circuits`)."""


def leaves(queue: str) -> list[str]:
    """The htb classes packets wait in (``5:1`` for fifo), under which netem goes."""
    if queue == "fifo":
        return [f"{HANDLE}:1"]
    return [f"{HANDLE}:{_FIRST_LEAF + i:x}" for i in range(FAIR_CLASSES)]


def shaping(intf: str, capacity_mbps: float, *, queue: str, mtu: int, netem: str | None = None) -> list[str]:
    """The ``tc`` commands that shape ``intf`` to ``capacity_mbps`` with ``queue``, each queue
    ending in ``netem`` (its arguments) where netem applies the delay."""
    root = f"{HANDLE}:1" if queue == "fifo" else leaves(queue)[0]
    cmds = [f"qdisc add dev {intf} root handle {HANDLE}:0 htb default {root.split(':')[1]}",
            f"class add dev {intf} parent {HANDLE}:0 classid {HANDLE}:1 htb rate {capacity_mbps:f}Mbit burst 15k"]
    if queue == "fair":
        cmds += [f"class add dev {intf} parent {HANDLE}:1 classid {leaf} {_leaf_rate(capacity_mbps, mtu)}"
                 for leaf in leaves(queue)]
        cmds.append(f"filter add dev {intf} parent {HANDLE}:0 protocol all prio {_FAIR_PRIO} "
                    f"bpf bytecode \"{transfer_classifier()}\" flowid {root}")
    if netem is not None:
        cmds += [f"qdisc add dev {intf} parent {leaf} handle {_netem_handle(i)}: netem {netem}"
                 for i, leaf in enumerate(leaves(queue))]
    return cmds


def rate_change(intf: str, capacity_mbps: float, *, queue: str, mtu: int) -> list[str]:
    """The ``tc`` commands that set ``intf``'s capacity to ``capacity_mbps``, live."""
    cmds = [f"class change dev {intf} parent {HANDLE}:0 classid {HANDLE}:1 htb rate {capacity_mbps:f}Mbit burst 15k"]
    if queue == "fair":
        cmds += [f"class change dev {intf} parent {HANDLE}:1 classid {leaf} {_leaf_rate(capacity_mbps, mtu)}"
                 for leaf in leaves(queue)]
    return cmds


def netem_change(intf: str, netem: str, *, queue: str) -> list[str]:
    """The ``tc`` commands that give every queue of ``intf`` the netem arguments ``netem``, live."""
    return [f"qdisc change dev {intf} parent {leaf} handle {_netem_handle(i)}: netem {netem}"
            for i, leaf in enumerate(leaves(queue))]


def transfer_classifier(classes: int = FAIR_CLASSES) -> str:
    """Classic BPF for ``tc filter ... bpf bytecode``: the class of an IPv4 packet's transfer, and
    -1 (htb's default class) for anything else. cls_bpf sees the packet from its Ethernet header
    and takes a non-zero return as the class id."""
    first = (HANDLE << 16) | _FIRST_LEAF
    program = [
        (0x28, 0, 0, 12),          # ldh [12]          EtherType
        (0x15, 0, 6, 0x0800),      # jeq #IPv4, next, else return -1
        (0x20, 0, 0, 26),          # ld [26]           IPv4 source address
        (0x14, 0, 0, 1),           # sub #1
        (0x74, 0, 0, 1),           # rsh #1            the transfer's number
        (0x94, 0, 0, classes),     # mod #classes
        (0x04, 0, 0, first),       # add #5:10         its class id
        (0x16, 0, 0, 0),           # ret a
        (0x06, 0, 0, 0xFFFFFFFF),  # ret #-1
    ]
    return f"{len(program)}," + ",".join(" ".join(map(str, op)) for op in program)


def _leaf_rate(capacity_mbps: float, mtu: int) -> str:
    """A fair leaf: its share guaranteed, the whole link when the others are idle, and a quantum of
    one full frame so every busy queue sends one packet per turn."""
    return (f"htb rate {capacity_mbps / FAIR_CLASSES:f}Mbit ceil {capacity_mbps:f}Mbit burst 15k cburst 15k "
            f"quantum {mtu + 14}")


def _netem_handle(i: int) -> str:
    return "10" if i == 0 else f"{0x100 + i:x}"


__all__ = ["FAIR_CLASSES", "HANDLE", "QUEUES", "leaves", "netem_change", "rate_change", "shaping",
           "transfer_classifier"]
