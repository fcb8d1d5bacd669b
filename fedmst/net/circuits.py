"""Optical lightpaths in the data plane: every lightpath gets, at the sender of each fibre direction
it crosses, its own htb class whose rate and ceiling are its wavelength's rate, so it never goes
faster than the wavelength it holds, nor slower because of another lightpath on the same fibre; a
time-sliced (OTS) one also passes a timeslot gate (:mod:`fedmst.net.slotgate`) where each of its
directions enters the fibre, so that it sends only in its slots (:class:`SlotGates`).

A circuit's class hangs off the interface's root beside the link's own class (``5:1``, which
keeps the fibre's whole capacity for anything not on a circuit), so it borrows from nobody. A
classic BPF filter, ahead of every other (``--queue fair``'s comes after it), sends a packet to
its circuit's class by its source address: a transfer's data leaves from its source address and
its ACKs from its destination address, and both are the circuit's. Each installation (the first
plan, then every re-plan) first removes the classes and filters of the one before, so an
interface's circuit classes are exactly the circuits held.

>>> cmds = circuit_commands("x-eth0", 0x200, 25.0, mtu=1500)
>>> cmds[0].split(" htb ")[1]
'rate 25.000000Mbit ceil 25.000000Mbit burst 15k cburst 15k quantum 1514'
>>> classifier({"10.128.0.1": 0x200}).split(",")[0]
'7'
"""

from __future__ import annotations

import ipaddress
import json
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from fedmst.core.optical.slots import Frame
from fedmst.errors import EmulationError
from fedmst.net.queues import HANDLE
from fedmst.net.slotgate import GatedPath, GateTable

FIRST_CIRCUIT = 0x200
"""The first circuit class's minor on an interface (the fair queue's leaves sit below it)."""
CIRCUIT_PRIO = 1
"""The circuits' filter priority: ahead of the fair classifier's."""
_NETEM_BASE = 0x1000
"""A circuit's netem handle is this plus its class's minor (clear of the fair leaves' handles)."""


@dataclass(frozen=True)
class Circuit:
    """One lightpath as the data plane needs it: its ``path`` (a stretch of fibres), the rate of its
    wavelength on each hop in Mbit/s on the host's clock, the endpoint ``addresses`` of the
    transfers it carries, and the ``slots`` of every frame it holds on a time-sliced wavelength
    (none for a circuit, which holds its wavelength all the time)."""

    path: tuple[str, ...]
    mbps: tuple[float, ...]
    addresses: tuple[str, ...]
    slots: tuple[int, ...] = ()


def circuit_commands(intf: str, minor: int, mbps: float, *, mtu: int, netem: str | None = None) -> list[str]:
    """The ``tc`` commands of one circuit's class on ``intf``: ``mbps`` guaranteed and never
    exceeded, with ``netem`` (its arguments) below it where netem applies the delay."""
    classid = f"{HANDLE}:{minor:x}"
    cmds = [f"class add dev {intf} parent {HANDLE}:0 classid {classid} htb rate {mbps:f}Mbit ceil {mbps:f}Mbit "
            f"burst 15k cburst 15k quantum {mtu + 14}"]
    if netem is not None:
        cmds.append(f"qdisc add dev {intf} parent {classid} handle {_NETEM_BASE + minor:x}: netem {netem}")
    return cmds


def filter_command(intf: str, prio: int, classes: Mapping[str, int]) -> str:
    """The filter that puts a packet whose source is one of ``classes``' addresses in its class."""
    return (f"filter add dev {intf} parent {HANDLE}:0 protocol all prio {prio} "
            f"bpf bytecode \"{classifier(classes)}\" flowid {HANDLE}:1")


def classifier(classes: Mapping[str, int]) -> str:
    """Classic BPF for ``tc filter ... bpf bytecode``: an IPv4 packet whose source address is in
    ``classes`` goes to that class (minor); any other packet is no match (0: the next filter)."""
    program = [(0x28, 0, 0, 12), (0x15, 1, 0, 0x0800), (0x06, 0, 0, 0), (0x20, 0, 0, 26)]
    for addr, minor in classes.items():
        program += [(0x15, 0, 1, int(ipaddress.IPv4Address(addr))), (0x06, 0, 0, (HANDLE << 16) | minor)]
    program.append((0x06, 0, 0, 0))
    return f"{len(program)}," + ",".join(" ".join(map(str, op)) for op in program)


class CircuitClasses:
    """The circuit classes each interface holds now, so that the next installation replaces them."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[str, int]] = {}
        """Interface -> its node and how many circuit classes it holds (minors from FIRST_CIRCUIT)."""

    def commands(self, circuits: Sequence[Circuit], sender: Mapping[tuple[str, str], tuple[str, str]], *,
                 mtu: int, netem: Mapping[tuple[str, str], str | None]) -> dict[str, list[str]]:
        """The ``tc`` commands, by node, that remove the circuits held so far and install
        ``circuits`` on both directions of each of their hops; ``sender`` gives a hop's sending node
        and interface, ``netem`` its netem arguments (None where netem does not apply the delay)."""
        cmds: dict[str, list[str]] = {}
        for intf, (node, count) in self._held.items():
            cmds.setdefault(node, []).append(f"filter del dev {intf} parent {HANDLE}:0 prio {CIRCUIT_PRIO}")
            cmds[node] += [f"class del dev {intf} classid {HANDLE}:{FIRST_CIRCUIT + i:x}" for i in range(count)]
        self._held = {}
        classes: dict[tuple[str, str], dict[str, int]] = {}
        for c in circuits:
            for (u, v), mbps in zip(zip(c.path, c.path[1:]), c.mbps):
                for hop in ((u, v), (v, u)):
                    node, intf = sender[hop]
                    count = self._held.get(intf, (node, 0))[1]
                    self._held[intf] = (node, count + 1)
                    cmds.setdefault(node, []).extend(
                        circuit_commands(intf, FIRST_CIRCUIT + count, mbps, mtu=mtu, netem=netem[hop]))
                    classes.setdefault(hop, {}).update({addr: FIRST_CIRCUIT + count for addr in c.addresses})
        for hop, by_addr in classes.items():
            node, intf = sender[hop]
            cmds[node].append(filter_command(intf, CIRCUIT_PRIO, by_addr))
        return cmds


class HeldCircuits:
    """Each owner's circuits (a run's, or each of a cluster's jobs'): what an emulation installs is
    all of them, on the last frame given. Take :attr:`lock` around :meth:`hold` and the installation:
    a cluster's jobs start and end in threads of their own.

    >>> held = HeldCircuits()
    >>> a, b = Circuit(("l0", "s", "l1"), (10.0, 10.0), ("10.0.0.1",)), Circuit(("l0", "s"), (10.0,), ("10.0.0.2",))
    >>> len(held.hold("j0", [a], None)), len(held.hold("j1", [b], None)), held.hold("j0", [], None) == [b]
    (1, 2, True)
    """

    def __init__(self) -> None:
        self._owned: dict[str, tuple[Circuit, ...]] = {}
        self.frame: Frame | None = None
        self.lock = threading.Lock()

    def hold(self, owner: str, circuits: Sequence[Circuit], frame: Frame | None) -> list[Circuit]:
        """Make ``circuits`` what ``owner`` holds (and ``frame``, where given, the frame); every circuit held."""
        self._owned[owner] = tuple(circuits)
        self.frame = frame or self.frame
        return [c for held in self._owned.values() for c in held]


GATE_QUEUE = 65000
"""The NFQUEUE queue of a node's timeslot gate (the delay lines number theirs from 0)."""
GATE_CHAIN = "FEDMST-SLOTS"
"""The ``mangle`` chain, jumped to from ``POSTROUTING``, that feeds a node's gate."""


def gate_tables(circuits: Sequence[Circuit], sender: Mapping[tuple[str, str], tuple[str, str]], *, timeslots: int,
                slot_s: float, guard_s: float, epoch: float) -> dict[str, tuple[GateTable, list[tuple[str, str]]]]:
    """Each node's gate: its table and the (interface, source address) pairs it gates, for the
    time-sliced ``circuits``, on the host's clock. A lightpath is gated at both its ends, where each
    of its directions enters the fibre (``sender`` gives a hop's sending node and interface).

    >>> c = Circuit(("l0", "s", "l1"), (10.0, 10.0), ("10.0.0.1", "10.0.0.2"), slots=(3,))
    >>> sender = {("l0", "s"): ("l0", "l0-eth1"), ("l1", "s"): ("l1", "l1-eth1")}
    >>> tables = gate_tables([c], sender, timeslots=8, slot_s=0.008, guard_s=0.0008, epoch=5.0)
    >>> sorted(tables), tables["l0"][0].paths[0].bytes_per_s, tables["l1"][1][0]
    (['l0', 'l1'], 1250000.0, ('l1-eth1', '10.0.0.1'))
    """
    paths: dict[str, list[GatedPath]] = {}
    matches: dict[str, list[tuple[str, str]]] = {}
    for c in circuits:
        if not c.slots:
            continue
        for hop, mbps in (((c.path[0], c.path[1]), c.mbps[0]), ((c.path[-1], c.path[-2]), c.mbps[-1])):
            node, intf = sender[hop]
            paths.setdefault(node, []).append(GatedPath(c.addresses, c.slots, mbps * 1e6 / 8))
            matches.setdefault(node, []).extend((intf, addr) for addr in c.addresses)
    return {node: (GateTable(timeslots, slot_s, guard_s, epoch, tuple(gated)), matches[node])
            for node, gated in paths.items()}


def gate_rules(matches: Sequence[tuple[str, str]], *, first: bool) -> list[str]:
    """``iptables-restore --noflush`` input that makes :data:`GATE_CHAIN` feed the gate's queue with
    exactly ``matches`` (declaring the chain empties it), and on the ``first`` installation jumps to
    it from ``POSTROUTING``.

    >>> print("\\n".join(gate_rules([("l0-eth1", "10.0.0.1")], first=True)))
    *mangle
    :FEDMST-SLOTS - [0:0]
    -A POSTROUTING -j FEDMST-SLOTS
    -A FEDMST-SLOTS -o l0-eth1 -s 10.0.0.1/32 -j NFQUEUE --queue-num 65000
    COMMIT
    """
    return ["*mangle", f":{GATE_CHAIN} - [0:0]", *([f"-A POSTROUTING -j {GATE_CHAIN}"] if first else []),
            *(f"-A {GATE_CHAIN} -o {intf} -s {addr}/32 -j NFQUEUE --queue-num {GATE_QUEUE}" for intf, addr in matches),
            "COMMIT"]


class SlotGates:
    """The timeslot gates of a run: one process per node where a time-sliced lightpath enters a
    fibre, started at the first installation that needs it and given each later one's table
    (a re-plan's) on SIGUSR1. Frame 0 begins at the first installation (:attr:`epoch`, wall clock)."""

    def __init__(self) -> None:
        self._gates: dict[str, tuple[object, Path]] = {}
        """Node -> its gate process and table file."""
        self.epoch: float | None = None

    @staticmethod
    def argv(table: Path) -> list[str]:
        """The arguments of the gate that runs ``table`` (:func:`fedmst.net.slotgate.main`)."""
        return ["--queue", str(GATE_QUEUE), "--table", str(table), "--stats", str(SlotGates.stats_file(table))]

    @staticmethod
    def stats_file(table: Path) -> Path:
        """Where the gate that runs ``table`` writes its counters when it stops."""
        return table.with_suffix(".stats.json")

    def counters(self) -> dict[str, int]:
        """What the stopped gates counted, together: the bytes they let go, the packets they
        dropped past their queues' bound and the most packets one lightpath had waiting (empty
        where no gate ran)."""
        rows = [row for _, table in self._gates.values() if self.stats_file(table).exists()
                for row in json.loads(self.stats_file(table).read_text())]
        if not rows:
            return {}
        return {"released_bytes": sum(r["released_bytes"] for r in rows), "dropped": sum(r["dropped"] for r in rows),
                "most_held": max(r["most_held"] for r in rows)}

    def install(self, circuits: Sequence[Circuit], sender: Mapping[tuple[str, str], tuple[str, str]], frame: Frame,
                *, scratch: Path, start: Callable[[str, Path], object], rules: Callable[[str, list[str]], None],
                bound: Callable[[str], None]) -> None:
        """Gate the time-sliced ``circuits`` (and nothing else) on ``frame`` (in the host's
        microseconds), between phases (a gate takes its new table a moment after its rules change):
        ``start(node, table)`` starts a node's gate on its table file (in ``scratch``), ``bound(node)``
        returns once it has bound its queue and ``rules(node, lines)`` installs ``iptables-restore``
        input in the node."""
        if self.epoch is None and any(c.slots for c in circuits):
            self.epoch = time.time()
        if self.epoch is None:
            return
        timeslots, slot_s, guard_s = frame.timeslots, frame.slot_us / 1e6, frame.guard_us / 1e6
        tables = gate_tables(circuits, sender, timeslots=timeslots, slot_s=slot_s, guard_s=guard_s, epoch=self.epoch)
        for node in self._gates.keys() | tables.keys():
            table, matches = tables.get(node, (GateTable(timeslots, slot_s, guard_s, self.epoch, ()), []))
            if node in self._gates:
                proc, path = self._gates[node]
                path.write_text(table.to_json())
                proc.send_signal(signal.SIGUSR1)  # type: ignore[attr-defined]
                rules(node, gate_rules(matches, first=False))
            else:
                path = scratch / f"gate-{node}.json"
                path.write_text(table.to_json())
                self._gates[node] = (start(node, path), path)
                bound(node)
                rules(node, gate_rules(matches, first=True))


def wait_bound(node: str, pid: int, check: Callable[[], None], timeout_s: float = 60.0) -> None:
    """Return once the timeslot gate in the namespace of process ``pid`` (node ``node``'s host)
    has bound :data:`GATE_QUEUE`: until then its lightpaths' packets are dropped (``check`` raises
    if the emulation broke meanwhile)."""
    table = Path(f"/proc/{pid}/net/netfilter/nfnetlink_queue")
    deadline = time.monotonic() + timeout_s
    while not (table.exists() and any(line.split()[:1] == [str(GATE_QUEUE)]
                                      for line in table.read_text().splitlines())):
        check()
        if time.monotonic() > deadline:
            raise EmulationError(f"the timeslot gate of node {node} did not bind its queue in {timeout_s:.0f} s")
        time.sleep(0.05)


__all__ = ["CIRCUIT_PRIO", "FIRST_CIRCUIT", "GATE_CHAIN", "GATE_QUEUE", "Circuit", "CircuitClasses", "SlotGates",
           "circuit_commands", "classifier", "filter_command", "gate_rules", "gate_tables", "wait_bound"]
