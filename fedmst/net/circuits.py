"""Optical circuits in the data plane: every circuit gets, at the sender of each fibre direction it
crosses, its own htb class whose rate and ceiling are its wavelength's rate, so it never goes
faster than the wavelength it holds, nor slower because of another circuit on the same fibre.

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
from dataclasses import dataclass
from typing import Mapping, Sequence

from fedmst.net.queues import HANDLE

FIRST_CIRCUIT = 0x200
"""The first circuit class's minor on an interface (the fair queue's leaves sit below it)."""
CIRCUIT_PRIO = 1
"""The circuits' filter priority: ahead of the fair classifier's."""
_NETEM_BASE = 0x1000
"""A circuit's netem handle is this plus its class's minor (clear of the fair leaves' handles)."""


@dataclass(frozen=True)
class Circuit:
    """One circuit as the data plane needs it: its ``path`` (a stretch of fibres), the rate of its
    wavelength on each hop in Mbit/s on the host's clock, and the endpoint ``addresses`` of the
    transfers it carries."""

    path: tuple[str, ...]
    mbps: tuple[float, ...]
    addresses: tuple[str, ...]


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


__all__ = ["CIRCUIT_PRIO", "FIRST_CIRCUIT", "Circuit", "CircuitClasses", "circuit_commands", "classifier",
           "filter_command"]
