"""A run spread over hosts (``--ray``), decided before anything is built: the hosts it uses, what
the hosts' network carries between them, and where each node goes (docs/multi-host.md).

:func:`check_spread` asks the Ray cluster (joined here) which hosts offer an emulation slot,
checks ``--hosts`` and the pin file against them and measures the hosts' network between each
pair (:mod:`fedmst.hosts.throughput`); :func:`spread_over` places the nodes by the plans' bytes
(:mod:`fedmst.core.placement`, pure), and :func:`check_cut` refuses a cut the hosts' network cannot
carry, all before the run folder or any namespace exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import networkx as nx

from fedmst.core.placement import Placement, overloaded, parse_pins, place, random_balanced
from fedmst.core.plan import Plan
from fedmst.core.topology import optical_nodes
from fedmst.errors import FedmstError
from fedmst.run.config import RunConfig


@dataclass(frozen=True)
class SpreadHosts:
    """The hosts a spread run uses: address -> Ray node id (pinned hosts first), each one's cores
    (Ray's CPU resource), the pinned nodes (node -> host) and the Mbit/s the hosts' network carried
    from the first host of each pair to the second."""

    hosts: Mapping[str, str]
    cores: Mapping[str, int]
    pins: Mapping[str, str]
    network_mbps: Mapping[tuple[str, str], float]


@dataclass(frozen=True)
class Spread:
    """A run's nodes on ``on``'s hosts: ``placed`` to cut the fewest bytes of the traffic it was
    placed by (``per``: what those bytes add up to, a round or a cluster's trace), beside a random
    balanced placement's (``baseline``)."""

    on: SpreadHosts
    placed: Placement
    baseline: Placement
    per: str

    def record(self) -> dict[str, object]:
        """summary.json's ``placement``: what it predicted, and the hosts' network it was checked against."""
        return {"per": self.per, "cut_bytes": self.placed.cut_bytes,
                "random_balanced_cut_bytes": self.baseline.cut_bytes, "host_cpu_s": dict(self.placed.load_s),
                "hosts_network_mbps": {f"{a}->{b}": round(m, 1) for (a, b), m in self.on.network_mbps.items()}}


def check_spread(config: RunConfig, graph: nx.Graph) -> SpreadHosts:
    """What a run spread over hosts needs before anything is built: a topology it can spread (no
    all-optical node yet), a pin file naming its nodes and the cluster's hosts, a Ray cluster at
    ``--ray`` with ``--hosts`` hosts offering a slot (joined here; the run builds on it), and the
    hosts' network between them, measured."""
    if optical_nodes(graph):
        raise FedmstError(f"--ray: a fabric with all-optical nodes ({config.topology}) cannot span hosts yet; "
                          "run it on one host")
    import ray

    from fedmst.hosts.raycluster import cluster_hosts, connect
    from fedmst.hosts.throughput import between

    pins = _pins(config.pin, graph) if config.pin is not None else {}
    connect(config.ray)  # type: ignore[arg-type]
    found = cluster_hosts(others=True)
    if len(found) < config.hosts:
        raise FedmstError(f"--hosts {config.hosts}: the Ray cluster at {config.ray} has {len(found)} host(s) "
                          "other than this one offering an emulation slot")
    for node, host in pins.items():
        if host not in found:
            raise FedmstError(f"pin file {config.pin}: host {host} (for node {node}) is not one of the Ray cluster's "
                              f"hosts offering an emulation slot: {', '.join(found)}")
    pinned = list(dict.fromkeys(pins.values()))
    if len(pinned) > config.hosts:
        raise FedmstError(f"pin file {config.pin}: pins nodes to {len(pinned)} hosts, more than --hosts {config.hosts}")
    hosts = {h: found[h] for h in [*pinned, *(h for h in found if h not in pinned)][:config.hosts]}
    cores = {n["NodeManagerAddress"]: max(1, int(n["Resources"].get("CPU", 1))) for n in ray.nodes()
             if n["Alive"] and n["NodeManagerAddress"] in hosts}
    return SpreadHosts(hosts, {h: cores[h] for h in hosts}, pins, between(hosts))


def _pins(path: str, graph: nx.Graph) -> dict[str, str]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise FedmstError(f"pin file {path}: cannot read it ({exc.strerror or exc})") from None
    return parse_pins(text, graph, path)


def spread_over(on: SpreadHosts, graph: nx.Graph, plans: Sequence[Plan], per: str, *, seed: int, mtu: int) -> Spread:
    """``graph``'s nodes on ``on``'s hosts, cutting the fewest bytes ``plans`` put on its links
    (what they add up to: ``per``), the pinned nodes where the pin file says."""
    return Spread(on, place(graph, plans, on.cores, pinned=on.pins, mtu=mtu),
                  random_balanced(graph, plans, on.cores, seed=seed, mtu=mtu), per)


def check_cut(spread: Spread, graph: nx.Graph) -> None:
    """Refuse, in one line, a placement whose links cut between two hosts could carry more than the
    hosts' network did between them; ``graph`` as the run emulates it (slowed by its time scale)."""
    if (why := overloaded(spread.placed.hosts, graph, spread.on.network_mbps)) is not None:
        raise FedmstError(why)
