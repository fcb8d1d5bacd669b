"""steiner-opt: the exact minimum Steiner tree (fewest links), with MST's in-path aggregation.

``mst`` joins G and the local models with a Steiner-tree *approximation* over load-aware link
weights. This scheduler solves the problem exactly, as the bound ``mst`` approximates: the tree
with the fewest links that joins G's node and every local model's node. Among trees with that
many links it takes the one with the least total propagation delay, so its transfers are no
slower than they need be. It ignores the load earlier tasks put on the links: the bound is a
property of one task on the topology.

The tree comes from an integer program (a directed multi-commodity flow formulation: one unit of
flow from G to each terminal, each arc used by a flow must be bought, each link bought in at most
one direction) solved by HiGHS through :func:`scipy.optimize.milp`. NSFNET with 8 local models is
about 500 variables and solves in milliseconds; programs above :data:`MAX_VARIABLES` are refused
with a clear error rather than left to run for hours.
"""

from __future__ import annotations

import numpy as np
import networkx as nx

from fedmst.core.plan import Plan
from fedmst.core.schedulers.base import LinkState, Scheduler
from fedmst.core.schedulers.mst import tree_plan
from fedmst.core.tasks import Task
from fedmst.errors import SchedulerError

MAX_VARIABLES = 200_000
"""The largest program solved: (links x 2) x (terminals) flow variables and the links' own."""
TIME_LIMIT_S = 60.0


def min_steiner_tree(graph: nx.Graph, root: str, terminals: set[str] | frozenset[str]) -> nx.Graph:
    """The tree with the fewest edges joining ``root`` and ``terminals`` in ``graph``; ties go
    to the least total ``delay_s`` (0 where absent). An edge counts its ``hops`` (1 where absent):
    a lightpath of the transparent overlay is that many physical links.

    >>> g = nx.cycle_graph(["a", "b", "c", "d", "e"])  # a ring: the short way round wins
    >>> sorted(map(sorted, min_steiner_tree(g, "a", {"c"}).edges))
    [['a', 'b'], ['b', 'c']]
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import lil_matrix

    sinks = sorted(set(terminals) - {root}, key=str)
    if not sinks:
        tree = nx.Graph()
        tree.add_node(root)
        return tree
    nodes = sorted(graph.nodes, key=str)
    at = {n: i for i, n in enumerate(nodes)}
    edges = sorted((tuple(sorted((u, v), key=str)) for u, v in graph.edges), key=lambda e: (str(e[0]), str(e[1])))
    arcs = [a for u, v in edges for a in ((u, v), (v, u))]
    n_arcs, n_flows = len(arcs), len(sinks)
    size = n_arcs * (n_flows + 1)
    if size > MAX_VARIABLES:
        raise SchedulerError(f"steiner-opt: the exact program for {len(edges)} links and {len(sinks) + 1} "
                             f"terminals has {size} variables, more than the {MAX_VARIABLES} it solves; use mst")
    # variables: y_a for every arc (bought), then f^t_a for every sink t and arc (flow)
    delays = np.array([float(graph.edges[u, v].get("delay_s", 0.0)) for u, v in arcs])
    tie = 1.0 / (2 * delays.sum() + 1.0)  # all delays together weigh less than one link
    hops = np.array([float(graph.edges[u, v].get("hops", 1)) for u, v in arcs])
    cost = np.concatenate([hops + tie * delays, np.zeros(n_arcs * n_flows)])
    rows = lil_matrix((len(nodes) * n_flows + n_arcs * n_flows + len(edges), size))
    lower, upper = [], []
    r = 0
    for k, sink in enumerate(sinks):  # conservation: one unit leaves the root and reaches the sink
        base = n_arcs * (k + 1)
        for j, (u, v) in enumerate(arcs):
            rows[r + at[u], base + j] += 1.0  # out of u
            rows[r + at[v], base + j] -= 1.0  # into v
        for n in nodes:
            want = 1.0 if n == root else -1.0 if n == sink else 0.0
            lower.append(want)
            upper.append(want)
        r += len(nodes)
    for k in range(n_flows):  # an arc carries flow only if it is bought
        for j in range(n_arcs):
            rows[r, n_arcs * (k + 1) + j] = 1.0
            rows[r, j] = -1.0
            lower.append(-np.inf)
            upper.append(0.0)
            r += 1
    for i in range(len(edges)):  # a link is bought in one direction at most
        rows[r, 2 * i] = rows[r, 2 * i + 1] = 1.0
        lower.append(0.0)
        upper.append(1.0)
        r += 1
    integrality = np.concatenate([np.ones(n_arcs), np.zeros(n_arcs * n_flows)])
    result = milp(cost, integrality=integrality, bounds=Bounds(0.0, 1.0),
                  constraints=LinearConstraint(rows.tocsr(), lower, upper),
                  options={"time_limit": TIME_LIMIT_S, "mip_rel_gap": 0.0})
    if result.status != 0 or result.x is None:
        raise SchedulerError(f"steiner-opt: no optimal tree joining {root} and {', '.join(map(str, sinks))} "
                             f"({result.message})")
    tree = nx.Graph((u, v) for (u, v), bought in zip(arcs, result.x[:n_arcs]) if bought > 0.5)
    tree.add_node(root)
    if not nx.is_tree(tree) or not set(sinks) <= set(tree):
        raise SchedulerError(f"steiner-opt: the solver's answer is not a tree joining {root} and the local models")
    return tree


class SteinerOptScheduler(Scheduler):
    """The exact minimum Steiner tree (fewest links, then least delay), aggregating wherever
    upload branches meet, as ``mst`` does: the bound that ``mst``'s approximation aims at."""

    name = "steiner-opt"

    def plan(self, graph: nx.Graph, task: Task, link_state: LinkState | None = None) -> Plan:
        if task.terminals == {task.global_node}:
            return Plan(scheduler=self.name, task=task, transfers=())
        return tree_plan(self.name, min_steiner_tree(graph, task.global_node, task.terminals), task)
