"""Small hand-built graphs in the topology convention, shared by the scheduling tests.

Every edge gets ``capacity_mbps``, ``delay_s`` and ``length_km``; by default all links are alike
(100 Mbit/s, 100 km, 0.5 ms), so shortest paths are fewest-hop paths.
"""

from __future__ import annotations

import random
from typing import Iterable

import networkx as nx

CAPACITY_MBPS = 100.0
LENGTH_KM = 100.0
DELAY_S = 0.0005


def graph_from(edges: Iterable[tuple[str, str]], **link: float) -> nx.Graph:
    """Graph over ``edges``, every link with the default parameters unless overridden."""
    params = {"capacity_mbps": CAPACITY_MBPS, "length_km": LENGTH_KM, "delay_s": DELAY_S, **link}
    g = nx.Graph()
    g.add_edges_from(edges, **params)
    return g


def line(*nodes: str) -> nx.Graph:
    """Path graph through ``nodes`` in order."""
    return graph_from(zip(nodes, nodes[1:]))


def random_connected_graph(seed: int, n: int, p: float, uniform: bool) -> nx.Graph:
    """Seeded connected graph on nodes ``n0..n{n-1}``: a random spanning tree plus each other
    pair with probability ``p``. ``uniform`` gives every link the default parameters; otherwise
    capacities and lengths vary per link (delay 5 us/km)."""
    rng = random.Random(seed)
    nodes = [f"n{i}" for i in range(n)]
    order = nodes[:]
    rng.shuffle(order)
    pairs = {tuple(sorted((v, rng.choice(order[:i])))) for i, v in enumerate(order) if i}
    pairs |= {(u, v) for i, u in enumerate(nodes) for v in nodes[i + 1 :] if rng.random() < p}
    g = nx.Graph()
    g.add_nodes_from(nodes)
    for u, v in sorted(pairs):
        if uniform:
            g.add_edge(u, v, capacity_mbps=CAPACITY_MBPS, length_km=LENGTH_KM, delay_s=DELAY_S)
        else:
            km = rng.uniform(10.0, 1000.0)
            mbps = rng.choice([10.0, 40.0, 100.0, 1000.0])
            g.add_edge(u, v, capacity_mbps=mbps, length_km=km, delay_s=km * 5e-6)
    return g
