"""Which host runs which node, where one emulation spans several hosts: a balanced partition of
the topology that cuts the fewest predicted bytes (docs/multi-host.md, section 1).

A link whose ends sit on different hosts becomes a tunnel through the hosts' own network, which
then carries that link's bytes: the scarce, unshaped resource. So each link weighs the bytes per
round the plans put on it (both directions, plus one so that idle links still prefer to stay
inside a host), each node weighs the host CPU it costs per round (its local models' training and
its agent's handling of the bytes it sends, receives, relays and sums, by the host costs
:mod:`fedmst.core.timescale` measured), and METIS (``pymetis``, k-way) finds the partition with the
fewest cut bytes whose parts' weights follow the hosts' core counts. Pinned nodes go where the pin
file says, whatever the partition chose.

Pure: no I/O.

>>> import networkx as nx
>>> from fedmst.core.schedulers import schedule
>>> from fedmst.core.tasks import Task
>>> g = nx.path_graph(["a", "b", "c", "d"]); nx.set_edge_attributes(g, 100.0, "capacity_mbps")
>>> nx.set_edge_attributes(g, 0.001, "delay_s")
>>> plans = [schedule(g, Task("t0", "a", ("b",), 1_000_000), "spff"),
...          schedule(g, Task("t1", "d", ("c",), 1_000_000), "spff")]
>>> placed = place(g, plans, {"h1": 2, "h2": 2})
>>> placed.cut, placed.cut_bytes, placed.hosts["a"] == placed.hosts["b"] != placed.hosts["c"] == placed.hosts["d"]
((('b', 'c'),), 0.0, True)
>>> random_balanced(g, plans, {"h1": 2, "h2": 2}, seed=0).cut  # a random balanced one cuts the models' links
(('a', 'b'), ('c', 'd'))
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

from fedmst.core.plan import Plan
from fedmst.core.timescale import MEASURED_COSTS, HostCosts
from fedmst.core.topology import link_name, node_order
from fedmst.core.wire import DEFAULT_MTU
from fedmst.core.workload import link_state
from fedmst.errors import FedmstError

if TYPE_CHECKING:
    import networkx as nx

Link = tuple[str, str]


@dataclass(frozen=True)
class Placement:
    """Each node's host, the links that cross hosts (ends in node order), the predicted bytes per
    round that cross (both directions of the cut links) and each host's predicted CPU seconds per
    round (of the network's time, on one core)."""

    hosts: Mapping[str, str]
    cut: tuple[Link, ...]
    cut_bytes: float
    load_s: Mapping[str, float]

    def describe(self, per: str = "a round") -> str:
        """One line for the console: the cut and each host's load, ``per`` what the plans placed by add
        up to (a run's round; a cluster's trace)."""
        links = ", ".join(link_name(u, v) for u, v in self.cut) or "none"
        load = ", ".join(f"{h} {s:.3g} s" for h, s in self.load_s.items())
        return (f"{len(self.cut)} link(s) cross hosts ({links}): {self.cut_bytes / 1e6:.3g} MB {per}; "
                f"predicted CPU {per}: {load}")


def link_bytes(graph: nx.Graph, plans: Sequence[Plan], mtu: int = DEFAULT_MTU) -> dict[Link, float]:
    """Bytes per round on each link of ``graph``, both directions together (ends in node order)."""
    out: dict[Link, float] = {_ends(u, v): 0.0 for u, v in graph.edges}
    for (u, v), b in link_state(tuple(plans), mtu=mtu).items():
        out[_ends(u, v)] += b
    return out


def node_load_s(graph: nx.Graph, plans: Sequence[Plan],
                costs: HostCosts = MEASURED_COSTS["compiled"]) -> dict[str, float]:
    """Host CPU seconds per round each node costs: its local models' training (their tasks'
    ``compute_s`` each) and its agent's handling of the bytes it sends, receives, relays and sums
    (``costs.per_agent_byte_s`` a byte)."""
    out = dict.fromkeys(graph, 0.0)
    for plan in plans:
        for node in plan.task.local_nodes:
            out[node] += plan.task.compute_s
        for t in plan.transfers:
            payload = t.payload(plan.task.model_bytes) * costs.per_agent_byte_s
            out[t.src] += payload
            out[t.dst] += payload
    return out


def place(graph: nx.Graph, plans: Sequence[Plan], cores: Mapping[str, int], *,
          pinned: Mapping[str, str] | None = None, mtu: int = DEFAULT_MTU) -> Placement:
    """The nodes of ``graph`` on the hosts of ``cores`` (host -> its cores, in the order parts are
    numbered), cutting the fewest of the bytes ``plans`` put on the links per round, each host's
    share of the nodes' CPU following its share of the cores; ``pinned`` nodes on the host named.
    One host: every node on it."""
    import pymetis  # METIS k-way: imported only where an emulation spans hosts

    names = list(cores)
    _check(graph, cores, pinned or {})
    nodes = sorted(graph, key=node_order)
    if len(names) == 1:
        return evaluate(graph, plans, dict.fromkeys(nodes, names[0]), mtu=mtu)
    index = {n: i for i, n in enumerate(nodes)}
    weight = link_bytes(graph, plans, mtu)
    xadj, adjncy, eweights = [0], [], []
    for n in nodes:
        for m in sorted(graph[n], key=node_order):
            adjncy.append(index[m])
            eweights.append(int(weight[_ends(n, m)] // 1000) + 1)  # KB a round, at least 1
        xadj.append(len(adjncy))
    load = node_load_s(graph, plans)
    vweights = [int(load[n] * 1e6) + 1 for n in nodes]  # microseconds a round, at least 1
    total = sum(cores.values())
    _, parts = pymetis.part_graph(len(names), pymetis.CSRAdjacency(xadj, adjncy), eweights=eweights,
                                  vweights=vweights, tpwgts=[cores[h] / total for h in names])
    hosts = {n: names[p] for n, p in zip(nodes, parts)}
    return evaluate(graph, plans, {**hosts, **(pinned or {})}, mtu=mtu)


def random_balanced(graph: nx.Graph, plans: Sequence[Plan], cores: Mapping[str, int], seed: int = 0, *,
                    mtu: int = DEFAULT_MTU) -> Placement:
    """A placement that ignores the links: the nodes in a random order, each host taking them until
    its share of the nodes' CPU (by its cores) is reached: the baseline :func:`place` is weighed against."""
    load = node_load_s(graph, plans)
    nodes = sorted(graph, key=node_order)
    random.Random(seed).shuffle(nodes)
    total_cores = sum(cores.values())
    filled = dict.fromkeys(cores, 0.0)
    hosts = {}
    for n in nodes:  # each node to the host least filled against its share of the cores
        host = min(cores, key=lambda h: (filled[h] * total_cores / cores[h], h))
        hosts[n] = host
        filled[host] += load[n] + 1e-6  # a node of no load still counts one
    return evaluate(graph, plans, hosts, mtu=mtu)


def evaluate(graph: nx.Graph, plans: Sequence[Plan], hosts: Mapping[str, str], *, mtu: int = DEFAULT_MTU) -> Placement:
    """The cut, its predicted bytes and each host's load of the node -> host assignment ``hosts``."""
    weight = link_bytes(graph, plans, mtu)
    cut = tuple(sorted((e for e in weight if hosts[e[0]] != hosts[e[1]]), key=lambda e: tuple(map(node_order, e))))
    load: dict[str, float] = defaultdict(float)
    for n, s in node_load_s(graph, plans).items():
        load[hosts[n]] += s
    return Placement(dict(hosts), cut, sum(weight[e] for e in cut), dict(sorted(load.items())))


def overloaded(hosts: Mapping[str, str], graph: nx.Graph,
               throughput_mbps: Mapping[tuple[str, str], float]) -> str | None:
    """Why the hosts' network cannot carry the links cut by ``hosts`` (node -> host), in one line, or
    None: for a pair of hosts, the capacity of the links cut between them (each direction) above the
    throughput measured between them (``throughput_mbps``, either order of the pair; a pair not
    measured is not judged).

    >>> import networkx as nx
    >>> g = nx.path_graph("abc"); nx.set_edge_attributes(g, 100.0, "capacity_mbps")
    >>> overloaded({"a": "h1", "b": "h2", "c": "h1"}, g, {("h2", "h1"): 250.0}) is None
    True
    >>> overloaded({"a": "h1", "b": "h2", "c": "h1"}, g, {("h1", "h2"): 150.0})[:62]
    'the links cut between hosts h1 and h2 carry up to 200 Mbit/s e'
    """
    between: dict[tuple[str, str], float] = defaultdict(float)
    for u, v, capacity in graph.edges(data="capacity_mbps"):
        if hosts[u] != hosts[v]:
            a, b = sorted((hosts[u], hosts[v]))
            between[a, b] += float(capacity)
    for (a, b), mbps in sorted(between.items()):
        measured = throughput_mbps.get((a, b), throughput_mbps.get((b, a)))
        if measured is not None and mbps > measured:
            return (f"the links cut between hosts {a} and {b} carry up to {mbps:g} Mbit/s each way, more than the "
                    f"{measured:.0f} Mbit/s measured between them: pin nodes (or use fewer hosts, or a larger "
                    "--time-scale) so that less crosses")
    return None


def parse_pins(text: str, graph: nx.Graph, where: str) -> dict[str, str]:
    """A pin file's nodes and the hosts they go on: a ``NODE,HOST`` line each (``#`` starts a
    comment; blank lines and a ``node,host`` header are skipped). ``where`` names the file in errors.

    >>> import networkx as nx
    >>> parse_pins("node,host\\na,10.0.0.1  # a's data lives there\\n\\nb, 10.0.0.2\\n", nx.path_graph("ab"), "p.csv")
    {'a': '10.0.0.1', 'b': '10.0.0.2'}
    >>> parse_pins("a 10.0.0.1\\n", nx.path_graph("ab"), "p.csv")
    Traceback (most recent call last):
    ...
    fedmst.errors.FedmstError: pin file p.csv, line 1: give NODE,HOST, got 'a 10.0.0.1'
    """
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.partition("#")[0].strip()
        if not line or (number == 1 and line.replace(" ", "").lower() == "node,host"):
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 2 or not all(fields):
            raise FedmstError(f"pin file {where}, line {number}: give NODE,HOST, got {line!r}")
        node, host = fields
        if node not in graph:
            raise FedmstError(f"pin file {where}, line {number}: node {node!r} is not in topology "
                              f"{graph.graph.get('name', '?')!r}")
        if pins.get(node, host) != host:
            raise FedmstError(f"pin file {where}, line {number}: node {node!r} is pinned to {pins[node]} already")
        pins[node] = host
    return pins


def _check(graph: nx.Graph, cores: Mapping[str, int], pinned: Mapping[str, str]) -> None:
    if not cores or any(not isinstance(c, int) or c < 1 for c in cores.values()):
        raise FedmstError(f"hosts to place on need one core or more each, got {dict(cores)}")
    for node, host in pinned.items():
        if node not in graph:
            raise FedmstError(f"pin file: node {node!r} is not in topology {graph.graph.get('name', '?')!r}")
        if host not in cores:
            raise FedmstError(f"pin file: host {host!r} (for node {node}) is not one of the run's: {', '.join(cores)}")


def _ends(u: str, v: str) -> Link:
    a, b = sorted((u, v), key=node_order)
    return (a, b)


__all__ = ["Placement", "evaluate", "link_bytes", "node_load_s", "overloaded", "parse_pins", "place",
           "random_balanced"]
