"""The run's TCP on its emulated network: the congestion control, registered under the run's own
name for the emulation's life where it is a BPF one (:mod:`fedmst.net.congestion`), ECN markers
on the link senders where it marks (:mod:`fedmst.net.ecn`), and what both counted, read before the
hosts go."""

from __future__ import annotations

from typing import Callable, Iterable

from fedmst.core.plan import LinkDir
from fedmst.net import ecn
from fedmst.net.congestion import ITERATION_BYTES, Registration, Transport, dump_map, register


class RunTcp:
    """``transport`` in one emulation: :meth:`start` once the run has its id, :meth:`stop` after
    its hosts are gone (None: the host's default congestion control, no marking)."""

    def __init__(self, transport: Transport | None, rtt_s: float = 0.0, mtu: int = 1500) -> None:
        self.transport, self.rtt_s, self.mtu = transport, rtt_s, mtu
        self.congestion_control: str | None = transport.asked if transport and transport.obj is None else None
        """The name the kernel knows it by (a BPF one's: the run's own, from :meth:`start` on)."""
        self.iteration_bytes_map: int | None = None
        """The id of the algorithm's ``iteration_bytes`` map, where it has one (the agents write it)."""
        self.ecn_k_bytes: dict[LinkDir, int] = {}
        """Each link direction's marking threshold, where it marks."""
        self.ecn_marks: dict[LinkDir, ecn.MarkCounts] = {}
        self.maps: dict[str, list[dict]] = {}
        """The BPF algorithm's own maps (name -> entries), as :meth:`read` found them."""
        self._registration: Registration | None = None

    def start(self, run_id: str) -> None:
        """Register a BPF algorithm as run ``run_id``'s own."""
        if self.transport is not None and self.transport.obj is not None:
            self.congestion_control = self.transport.kernel_name(run_id)
            self._registration = register(self.transport.obj, self.congestion_control)
            self.iteration_bytes_map = self._registration.maps().get(ITERATION_BYTES)

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
        if self._registration is not None:
            self.maps = {name: dump_map(map_id) for name, map_id in self._registration.maps().items()}

    def stop(self) -> None:
        """Unregister the run's BPF algorithm (once its connections are gone). Safe to call twice."""
        if self._registration is not None:
            self._registration.unregister()
            self._registration = None

    def terms(self) -> dict[str, object]:
        """The keys it adds to summary.json's ``emulated``."""
        transport = self.transport
        if transport is None:
            return {"congestion_control": "host default"}
        marking = transport.ecn is not None
        return {"congestion_control": transport.asked, "congestion_control_kernel": self.congestion_control,
                "congestion_control_knobs": dict(transport.knobs), "ecn_k": transport.ecn.shown() if marking else None,
                "ecn_marked": sum(c.marked for c in self.ecn_marks.values()) if marking else None}
