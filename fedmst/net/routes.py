"""Routes for overlay transfers: each gets its own pair of /32 endpoint addresses, routed hop by
hop along its planned physical path (and back along it for ACKs), so every transfer follows its
path whatever else shares the nodes. The endpoint routes carry a ``src`` hint so that unbound
sockets (gloo's connecting side) pick the flow's own address, TCP's congestion control
(``congctl``: the run's, not whatever this host's default is) and, in a slowed run, TCP's
retransmission-timeout floor (``rto_min``), which the kernel does not slow by itself."""

from __future__ import annotations

import ipaddress
import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Sequence

from fedmst.errors import EmulationError

if TYPE_CHECKING:  # the option schema imports this module for its choices: no graphs at import
    from fedmst.core.plan import LinkDir
    from fedmst.net.link import EmulatedLink

FLOW_NET = ipaddress.ip_network("10.128.0.0/9")
BACKGROUND_NET = ipaddress.ip_network("10.64.0.0/10")
"""Background flows' endpoints: one iptables rule per receiving interface counts what they put on a link."""


@dataclass(frozen=True)
class Flow:
    """One transfer's route: the physical path and the two endpoint addresses it owns."""

    key: str
    path: tuple[str, ...]
    src_addr: str
    dst_addr: str


class FlowRoutes:
    """Hands out endpoint addresses (transfers' and background flows' from separate pools) and
    installs each flow's routes with one ``ip -batch`` per node of ``nodes`` (this host's; every host
    of a run placed on several hands out the same addresses for the same calls). ``congestion_control`` and
    ``rto_min_s``, where given, are set on the routes of the flows' two ends, where their sockets
    (connecting and accepting alike) look them up."""

    def __init__(self, nodes: Sequence[str], hops: Mapping[LinkDir, EmulatedLink],
                 ip_batch: Callable[[str, list[str]], None], rto_min_s: float | None = None,
                 congestion_control: str | None = None) -> None:
        self._nodes = list(nodes)
        self._end = ("" if congestion_control is None else f" congctl {congestion_control}") + (
            "" if rto_min_s is None else f" rto_min {rto_min_s * 1e3:.0f}ms")
        self._hops = hops
        self._ip_batch = ip_batch
        self._pools: dict[bool, Iterator[ipaddress.IPv4Address]] = {
            False: FLOW_NET.hosts(), True: BACKGROUND_NET.hosts()}  # type: ignore[dict-item]
        self._lock = threading.Lock()  # a cluster's jobs install their routes while others run

    def install(self, paths: Mapping[str, Sequence[str]], *, background: bool = False) -> dict[str, Flow]:
        """Give each keyed path its two endpoint addresses and route it hop by hop."""
        with self._lock:
            return self._install(paths, background)

    def _install(self, paths: Mapping[str, Sequence[str]], background: bool) -> dict[str, Flow]:
        pool = self._pools[background]
        flows: dict[str, Flow] = {}
        cmds: dict[str, list[str]] = defaultdict(list)
        for key, path in paths.items():
            path = tuple(path)
            for hop in zip(path, path[1:]):
                if hop not in self._hops:
                    raise EmulationError(f"flow {key}: path {path} uses missing link {hop[0]}-{hop[1]}")
            a, b = str(next(pool)), str(next(pool))
            flows[key] = Flow(key=key, path=path, src_addr=a, dst_addr=b)
            cmds[path[0]].append(f"addr add {a}/32 dev lo")
            cmds[path[-1]].append(f"addr add {b}/32 dev lo")
            for j, node in enumerate(path):
                if j + 1 < len(path):
                    src = f" src {a}{self._end}" if j == 0 else ""
                    cmds[node].append(f"route add {b}/32 via {self._via(node, path[j + 1])}{src}")
                if j > 0:
                    src = f" src {b}{self._end}" if j == len(path) - 1 else ""
                    cmds[node].append(f"route add {a}/32 via {self._via(node, path[j - 1])}{src}")
        for node in self._nodes:  # this host's: a node on another host is routed there
            if cmds[node]:
                self._ip_batch(node, cmds[node])
        return flows

    def _via(self, a: str, b: str) -> str:
        return self._hops[(a, b)].next_hop(a, b)
