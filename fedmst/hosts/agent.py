"""The host agent: one host's share of an emulation placed on several, built where it runs.

A coordinator starts one :class:`HostAgent` per host as a Ray actor pinned to that host's node
(:func:`start_host_agents`); each claims the run's id on its host, builds the nodes placed there
with a tunnel end for each link to another host (:class:`fedmst.net.emulation.Emulation` with a
:class:`fedmst.net.tunnels.HostShare`), and answers the coordinator's calls about them. Whatever
it made goes when it closes, or, where it was killed, with ``fedmst clean`` on its host.
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

import networkx as nx

from fedmst.core.plan import LinkDir
from fedmst.net.cleanup import RunState
from fedmst.net.emulation import Emulation
from fedmst.net.routes import Flow
from fedmst.net.tunnels import HostShare


class HostAgent:
    """This host's share of run ``run_id``: ``build`` it, drive it, ``close`` it."""

    def __init__(self, host: str, run_id: str) -> None:
        self.host = host
        self._run = RunState(run_id)
        self._emulation: Emulation | None = None

    def build(self, graph: nx.Graph, share: HostShare, options: Mapping[str, Any]) -> list[str]:
        """Build the nodes ``share`` places here (``options``: :class:`Emulation`'s keywords);
        returns their names."""
        emulation = Emulation(graph, share=share, run=self._run, **options)
        self._emulation = emulation.__enter__()
        return emulation.here

    @property
    def emulation(self) -> Emulation:
        if self._emulation is None:
            raise RuntimeError(f"host {self.host}: nothing built yet")
        return self._emulation

    def install_flows(self, paths: Mapping[str, Sequence[str]], background: bool = False) -> dict[str, Flow]:
        return self.emulation.install_flows(paths, background=background)

    def counters(self) -> dict[LinkDir, int]:
        return self.emulation.meters.counters()

    def tunnel_overhead(self) -> dict[str, int]:
        return self.emulation.meters.tunnel_overhead()

    def cmd(self, node: str, command: str) -> str:
        return self.emulation.cmd(node, command)

    def clock(self) -> float:
        """This host's monotonic clock, which its agents time their phases on (:mod:`fedmst.hosts.clock`)."""
        return time.monotonic()

    def close(self) -> None:
        """Take the share down and give the run's id back on this host. Safe to call twice."""
        if self._emulation is not None:
            self._emulation.close()
            self._emulation = None
        self._run.remove()


def start_host_agents(run_id: str, hosts: Mapping[str, str]) -> dict[str, Any]:
    """One :class:`HostAgent` actor per host (name -> Ray node id), each pinned to its node, on the
    cluster this process joined (:func:`fedmst.run.distributed.connect`)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(num_cpus=0)(HostAgent)
    return {host: remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                                 max_concurrency=4).remote(host, run_id)
            for host, node in hosts.items()}


def cluster_hosts() -> dict[str, str]:
    """The hosts of the Ray cluster this process joined that can run an emulation: each node's
    address (the host's name in every record) -> its Ray node id, in address order."""
    import ray

    from fedmst.run.distributed import SLOT

    nodes = {n["NodeManagerAddress"]: n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get(SLOT)}
    return dict(sorted(nodes.items(), key=lambda item: tuple(int(p) if p.isdigit() else p
                                                              for p in item[0].split("."))))
