"""The run's TCP on its emulated network: the congestion control, registered under the run's own
name for the emulation's life where it is a BPF one (:mod:`fedmst.net.congestion`), ECN markers
on the link senders where it marks (:mod:`fedmst.net.ecn`), what both counted, read before the
hosts go, and socket buffers that cover the network's bandwidth-delay product."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

import networkx as nx

from fedmst.core.plan import LinkDir
from fedmst.net import ecn
from fedmst.net.congestion import ITERATION_BYTES, Registration, Transport, dump_map, register


_BUFFERS = ("tcp_rmem", "tcp_wmem")


def _ceiling(name: str) -> int:
    """This host's ceiling of ``net.ipv4.NAME`` (a new namespace starts with it)."""
    return int(Path(f"/proc/sys/net/ipv4/{name}").read_text().split()[2])


class RunTcp:
    """``transport`` in one emulation: :meth:`start` once the run has its id, :meth:`stop` after
    its hosts are gone (None: the host's default congestion control, no marking)."""

    def __init__(self, transport: Transport | None, graph: nx.Graph, mtu: int = 1500) -> None:
        self.transport, self.mtu = transport, mtu
        self.rtt_s = ecn.longest_round_trip_s(graph)
        largest = max((float(c) for _, _, c in graph.edges(data="capacity_mbps")), default=0.0)
        self.buffer_bytes = max(round(2 * largest * 1e6 / 8 * self.rtt_s), *(_ceiling(name) for name in _BUFFERS))
        """What each host's TCP may grow a socket's send and receive buffers to: twice the network's
        largest bandwidth-delay product (the fastest link over the longest round trip; a slowed
        run's capacity and delay scale inversely, so it is the network's figure too), or this
        host's own ceiling where that is higher."""
        self.congestion_control: str | None = None
        """The name the kernel knows it by (a BPF one's: the run's own), from :meth:`start` on."""
        self.iteration_bytes_map: int | None = None
        """The id of the algorithm's ``iteration_bytes`` map, where it has one (the agents write it)."""
        self.ecn_k_bytes: dict[LinkDir, int] = {}
        """Each link direction's marking threshold, where it marks."""
        self.ecn_marks: dict[LinkDir, ecn.MarkCounts] = {}
        self.maps: dict[str, list[dict]] = {}
        """The BPF algorithm's own maps (name -> entries), as :meth:`read` found them."""
        self._registration: Registration | None = None
        self._map_ids: dict[str, int] = {}
        """The BPF algorithm's own maps by name, found once it is registered."""

    def start(self, run_id: str) -> None:
        """Name the congestion control for run ``run_id``, and register a BPF one as its own."""
        if self.transport is not None:
            self.congestion_control = self.transport.kernel_name(run_id)
        if self.transport is not None and self.transport.obj is not None:
            self._registration = register(self.transport.obj, self.congestion_control)
            self._map_ids = self._registration.maps()
            self.iteration_bytes_map = self._map_ids.get(ITERATION_BYTES)

    def buffer_command(self) -> str:
        """Set a host's TCP buffer ceilings (``tcp_rmem``/``tcp_wmem``, autotuning's maximum) to
        :attr:`buffer_bytes`: a window can then cover the longest path."""
        return "; ".join(f"read a b c < /proc/sys/net/ipv4/{name}; sysctl -qw net.ipv4.{name}=\"$a $b "
                         f"{self.buffer_bytes}\"" for name in _BUFFERS)

    def marking(self, hop: LinkDir, interface: str, capacity_mbps: float) -> list[str]:
        """The tc commands of ECN marking on link direction ``hop``'s sending ``interface``, if the run marks."""
        if self.transport is None or self.transport.ecn is None:
            return []
        self.ecn_k_bytes[hop] = k = self.transport.ecn.k_for(capacity_mbps, self.rtt_s, self.mtu)
        return ecn.tc_commands(interface, ecn.marker(capacity_mbps, k))

    def read(self, senders: Iterable[tuple[LinkDir, str, Callable[[str], str]]]) -> None:
        """Collect the markers' counts, from each link direction's sending interface and a way to
        run a command in its host, and the algorithm's maps."""
        if self.transport is not None and self.transport.ecn is not None:
            for hop, interface, cmd in senders:
                program = ecn.program_id(cmd(f"tc -j filter show dev {interface} egress"))
                counts = ecn.read(program) if program is not None else None
                if counts is not None:
                    self.ecn_marks[hop] = counts
        self.maps = {name: dump_map(map_id) for name, map_id in self._map_ids.items()}

    def stop(self) -> None:
        """Unregister the run's BPF algorithm (once its connections are gone). Safe to call twice."""
        if self._registration is not None:
            self._registration.unregister()
            self._registration = None

    def terms(self) -> dict[str, object]:
        """The keys it adds to summary.json's ``emulated``."""
        transport = self.transport
        if transport is None:
            return {"congestion_control": "host default", "tcp_buffer_bytes": self.buffer_bytes}
        marking = transport.ecn is not None
        return {"congestion_control": transport.asked, "congestion_control_kernel": self.congestion_control,
                "congestion_control_knobs": dict(transport.knobs), "ecn_k": transport.ecn.shown() if marking else None,
                "ecn_marked": sum(c.marked for c in self.ecn_marks.values()) if marking else None,
                "tcp_buffer_bytes": self.buffer_bytes}
