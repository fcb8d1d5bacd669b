"""Links that cross hosts: one emulation placed on several hosts, each building its share.

A link whose two nodes run on different hosts (a *cut* link) has a VXLAN device at each end in
place of a veth: made in the host's own namespace, where the hosts' network is, and moved into
the node's, so the node sends and receives plain Ethernet frames on it while the kernel carries
them, encapsulated in UDP, through the host's real interface. VXLAN is in every kernel fedmst runs
on (GRE is not, see the machine notes), carries no TCP inside TCP and copies nothing in user space.
The device counts the inner packets from their IP header on (a veth counts the whole Ethernet
frame), so its counter is read with 14 bytes a frame added (:meth:`fedmst.net.shell.HostShell.tx_bytes`)
and a cut link is shaped, delayed and measured like any other; what the encapsulation adds on the
hosts' network, :data:`VXLAN_OVERHEAD` bytes a frame, is the emulator's and reported apart.

Both hosts derive a cut link's names, addresses and VNI from the run id and the topology alone,
so they agree without asking each other.
"""

from __future__ import annotations

import json
import subprocess
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from fedmst.errors import EmulationError

if TYPE_CHECKING:
    from fedmst.net.link import EmulatedLink
    from fedmst.net.shell import HostShell

VXLAN_PORT = 4789
"""IANA's VXLAN port."""
VXLAN_OVERHEAD = 50
"""Bytes VXLAN adds to every frame on the hosts' network: outer Ethernet 14, IPv4 20, UDP 8, VXLAN 8."""
VNI_SPACE = 1 << 24


@dataclass(frozen=True)
class HostShare:
    """One host's part of an emulation placed on several: the host every node runs on, and each
    host's address on the hosts' network, where the cut links' tunnels run.

    >>> share = HostShare("h0", {"a": "h0", "b": "h0", "c": "h1"}, {"h0": "192.0.2.1", "h1": "192.0.2.2"})
    >>> share.local("a"), share.local("c"), share.cut("b", "c"), share.cut("a", "b")
    (True, False, True, False)
    >>> share.peer("b", "c")
    '192.0.2.2'
    """

    host: str
    placement: Mapping[str, str]
    addresses: Mapping[str, str] = field(repr=False)

    def __post_init__(self) -> None:
        missing = sorted({self.host, *self.placement.values()} - set(self.addresses))
        if missing:
            raise EmulationError(f"host(s) {', '.join(missing)} have no address on the hosts' network")

    def local(self, node: str) -> bool:
        return self.placement[node] == self.host

    def cut(self, u: str, v: str) -> bool:
        """Whether link u-v crosses hosts."""
        return self.placement[u] != self.placement[v]

    def peer(self, u: str, v: str) -> str:
        """The address of the host at the far end of cut link u-v, seen from this host."""
        far = v if self.local(u) else u
        return self.addresses[self.placement[far]]


def vnis(run_id: str, cut: Iterable[tuple[str, str]]) -> dict[frozenset[str], int]:
    """Each cut link's VXLAN network identifier: a hash of the run id and the link, the next free
    one where two collide (in the links' sorted order, which every host sees alike). Two runs'
    tunnels on one pair of hosts do not mix: the kernel refuses a second device with the same VNI.

    >>> ids = vnis("abc", [("a", "b"), ("b", "c")])
    >>> ids == vnis("abc", [("c", "b"), ("b", "a")]), len(set(ids.values()))
    (True, 2)
    >>> ids == vnis("abd", [("a", "b"), ("b", "c")])
    False
    """
    ids: dict[frozenset[str], int] = {}
    for u, v in sorted(tuple(sorted(map(str, link))) for link in cut):
        vni = zlib.crc32(f"{run_id}:{u}-{v}".encode()) % (VNI_SPACE - 1) + 1  # 0 is no VNI
        while vni in ids.values():
            vni = vni % (VNI_SPACE - 1) + 1
        ids[frozenset((u, v))] = vni
    return ids


@dataclass(frozen=True)
class Underlay:
    """The host's interface towards a peer host, and that interface's MTU."""

    dev: str
    local_ip: str
    mtu: int


def underlay(peer: str) -> Underlay:
    """How this host (the caller's namespace) reaches ``peer``: the interface, the source address
    and the MTU, from the kernel's route."""
    done = subprocess.run(["ip", "-j", "route", "get", peer], capture_output=True, text=True)
    if done.returncode != 0:
        raise EmulationError(f"no route to host {peer} on the hosts' network: {done.stderr.strip()}")
    route = json.loads(done.stdout)[0]
    link = subprocess.run(["ip", "-j", "link", "show", "dev", route["dev"]], capture_output=True, text=True)
    return Underlay(route["dev"], route["prefsrc"], int(json.loads(link.stdout)[0]["mtu"]))


def check_mtu(mtu: int, under: Underlay, peer: str) -> None:
    """Refuse an emulated MTU the tunnels cannot carry on the hosts' network.

    >>> check_mtu(1500, Underlay("eth0", "192.0.2.1", 1550), "192.0.2.2")
    >>> try:
    ...     check_mtu(1500, Underlay("eth0", "192.0.2.1", 1500), "192.0.2.2")
    ... except EmulationError as exc:
    ...     print(str(exc).split(": ")[-1])
    lower --mtu to 1450 or raise the hosts' MTU
    """
    if mtu + VXLAN_OVERHEAD > under.mtu:
        raise EmulationError(
            f"MTU {mtu} needs {mtu + VXLAN_OVERHEAD} on the hosts' network (VXLAN adds {VXLAN_OVERHEAD} bytes), "
            f"but {under.dev} towards {peer} has {under.mtu}: lower --mtu to {under.mtu - VXLAN_OVERHEAD} "
            "or raise the hosts' MTU")


def tunnel_end(intf: str, vni: int, under: Underlay, peer: str, netns_pid: int) -> list[str]:
    """The ``ip -batch`` lines that make one end of a cut link: a VXLAN device in this namespace,
    then moved into its node's (it keeps its UDP socket here, on the hosts' network).

    >>> tunnel_end("fmabc1-eth0", 7, Underlay("eth0", "192.0.2.1", 9000), "192.0.2.2", 42)[0]
    'link add fmabc1-eth0 type vxlan id 7 local 192.0.2.1 remote 192.0.2.2 dstport 4789 dev eth0'
    """
    return [f"link add {intf} type vxlan id {vni} local {under.local_ip} remote {peer} dstport {VXLAN_PORT} "
            f"dev {under.dev}", f"link set {intf} netns {netns_pid}"]


class Tunnels:
    """The links of one host's share that cross to other hosts (none without a ``share``): which
    nodes run here, the commands that make this host's links, and what the tunnels' encapsulation
    put on the hosts' network."""

    def __init__(self, share: HostShare | None, mtu: int) -> None:
        self.share = share
        self.mtu = mtu
        self.ends: dict[str, str] = {}
        """Each tunnel end made here: its interface -> its node."""

    def local(self, node: str) -> bool:
        return self.share is None or self.share.local(node)

    def commands(self, links: Sequence[EmulatedLink], pids: Mapping[str, int], run_id: str,
                 every: Sequence[EmulatedLink]) -> list[str]:
        """The ``ip -batch`` lines making ``links`` (those with an end here): a veth pair straight
        into the two namespaces, or this host's tunnel end; refuses an MTU the hosts' network cannot
        carry before anything is made. VNIs are handed out over the cut links of ``every`` link of
        the run, which every host sees alike, so both ends of a link get the same one."""
        crossing = [link for link in links if link.crosses_hosts]
        ids = vnis(run_id, [(link.u, link.v) for link in every if self.share is not None
                            and self.share.cut(link.u, link.v)])
        unders: dict[str, Underlay] = {}
        lines = [link.veth_command(pids) for link in links if not link.crosses_hosts]
        for link in crossing:
            assert self.share is not None
            (node,) = link.here
            peer = self.share.peer(link.u, link.v)
            if peer not in unders:
                unders[peer] = underlay(peer)
                check_mtu(self.mtu, unders[peer], peer)
            intf = link.ends[node].intf
            lines += tunnel_end(intf, ids[frozenset((link.u, link.v))], unders[peer], peer, pids[node])
            self.ends[intf] = node
        return lines

    def overhead_bytes(self, shells: Mapping[str, HostShell]) -> dict[str, int]:
        """The bytes VXLAN has added on the hosts' network so far, by tunnel end: 50 a frame sent."""
        sent: dict[str, tuple[int, int]] = {}
        for node in set(self.ends.values()):
            sent.update(shells[node].tx_counts())
        return {intf: VXLAN_OVERHEAD * sent[intf][1] for intf in self.ends}
