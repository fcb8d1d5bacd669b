"""What a running emulation's links have carried, read from the kernel: the interfaces' counters,
the background traffic's share, htb's drops, TCP's retransmissions and the tunnels' overhead.

One seam for every reader of link counters (the rounds' engines, calibration, benchmarks): an
emulation placed on several hosts reads each host's share here and puts the parts together.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Mapping, Sequence

from fedmst.core.plan import LinkDir
from fedmst.net.background import BackgroundTraffic, arrived_bytes
from fedmst.net.link import EmulatedLink, htb_drops
from fedmst.net.shell import HostShell
from fedmst.net.tunnels import Tunnels


class LinkMeters:
    """The counters of the links built on this host (``links``, the hosts' ``shells`` and their
    link ``ports``), each link direction read where its measuring end is. The collections are the
    emulation's own, filled as it builds."""

    def __init__(self, shells: Mapping[str, HostShell], links: Sequence[EmulatedLink],
                 ports: Mapping[str, Sequence[str]], background: BackgroundTraffic, tunnels: Tunnels) -> None:
        self._shells, self._links, self._ports = shells, links, ports
        self._background, self._tunnels = background, tunnels

    def counters(self) -> dict[LinkDir, int]:
        """Bytes each link direction has carried so far: the sender interface's tx counter."""
        tx: dict[str, int] = {}
        for shell in self._shells.values():
            tx.update(shell.tx_bytes(self._tunnels.ends))
        return self._per_hop(lambda link: link.sent(tx))

    def counters_and_background(self) -> tuple[dict[LinkDir, int], dict[LinkDir, int]]:
        """The bytes each link direction has carried so far and, of them, the background
        traffic's (frames, Ethernet header included, as interface counters count them): before any
        flow was started, :meth:`counters` and zeros; from then on both counted arriving at the
        link's receiver, in one snapshot of its counters (every host at once, a thread each), so
        that weight bytes (the first less the second) are exact: read at two hosts, a moment apart,
        20 Mbit/s of background made a 17 KB model's link read 8.7 KB negative."""
        if not self._background.counting:
            counted = self.counters()
            return counted, {hop: 0 for hop in counted}
        with ThreadPoolExecutor(max_workers=len(self._shells)) as pool:
            parts = list(pool.map(arrived_bytes, [s for node, s in self._shells.items() if self._ports[node]]))
        background = {intf: n for part, _ in parts for intf, n in part.items()}
        every = {intf: n for _, part in parts for intf, n in part.items()}
        # link direction u->v: counted arriving on v's interface
        return self._per_hop(lambda link: link.arrived(every)), self._per_hop(lambda link: link.arrived(background))

    def tunnel_overhead(self) -> dict[str, int]:
        """Bytes the tunnels' encapsulation added on the hosts' network so far, by tunnel end."""
        return self._tunnels.overhead_bytes(self._shells)

    def queue_drops(self) -> dict[LinkDir, int]:
        """Packets each link direction's htb queue has dropped so far: congestion at its sender."""
        drops: dict[str, int] = {}
        for shell in self._shells.values():
            drops.update(htb_drops(shell))
        return self._per_hop(lambda link: link.dropped(drops))

    def tcp_retransmits(self) -> int:
        """TCP segments all hosts have retransmitted so far (each namespace's /proc/net/snmp)."""
        return sum(shell.tcp_retransmits() for shell in self._shells.values())

    def _per_hop(self, per_link: Callable[[EmulatedLink], dict[LinkDir, int]]) -> dict[LinkDir, int]:
        """One value per link direction, in the order the links were made."""
        return {hop: n for link in self._links for hop, n in per_link(link).items()}
