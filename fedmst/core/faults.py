"""Faults and re-scheduling, the pure half: which faults a run injects, and the tasks that remain
to be scheduled once links are down and workers are dead.

A failed link is taken out of the graph the schedulers see; a dead worker's node is taken out too
(it can no longer relay or aggregate, so no tree may branch there), and its local models leave
their task: the round goes on with the survivors, whose aggregation weights are renormalised. A
local model cut off from its G by the failures leaves as well. Each remaining task keeps, for each
of its local models, the index it had in the original task, so weights and saved models keep
their names across re-plans.

>>> import networkx as nx
>>> from fedmst.core.tasks import Task
>>> g = nx.cycle_graph(["a", "b", "c", "d"])
>>> t = Task(name="t", global_node="a", local_nodes=("b", "c", "d"), model_bytes=8)
>>> left = remaining_tasks(g, [t], down_links=[("a", "b")], dead_nodes=["c"])
>>> left[0].task.local_nodes, left[0].models  # b's only way to a was through c
(('d',), (2,))
>>> left[0].dropped
{0: 'node b is cut off from G on node a', 1: 'its worker on node c died'}
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Collection, Iterable, Mapping, Sequence

import networkx as nx

from fedmst.errors import FedmstError
from fedmst.core.optical.policies import OCSPolicy
from fedmst.core.optical.slots import DEFAULT_FRAME, Frame
from fedmst.core.tasks import Task
from fedmst.core.topology import optical_nodes
from fedmst.core.workload import WorkloadPlan, schedule_workload


@dataclass(frozen=True)
class LinkFailure:
    """Link ``link`` goes down at the start of round ``round`` or, with ``after_s``, that many
    seconds into the round's broadcast, under the transfers; if ``until`` is given it comes
    back up at the start of round ``until``."""

    link: tuple[str, str]
    round: int
    until: int | None = None
    after_s: float | None = None


@dataclass(frozen=True)
class WorkerKill:
    """The worker (agent) on ``node`` is killed while round ``round``'s local training runs or,
    with ``after_s``, that many seconds into the round's broadcast, under the transfers."""

    node: str
    round: int
    after_s: float | None = None


def parse_link_failure(spec: str, graph: nx.Graph, rounds: int) -> LinkFailure:
    """``A-B@R[+S][-R2]``: a link of ``graph``, the round it fails in (``+S``: S seconds into
    that round's broadcast) and the round it is back in.

    >>> g = nx.path_graph(["x-1", "y"])
    >>> parse_link_failure("x-1-y@2-3", g, rounds=4)
    LinkFailure(link=('x-1', 'y'), round=2, until=3, after_s=None)
    >>> parse_link_failure("y-x-1@1+0.25", g, rounds=4)
    LinkFailure(link=('y', 'x-1'), round=1, until=None, after_s=0.25)
    """
    where, at, when = spec.rpartition("@")
    if not at:
        raise FedmstError(f"--fail-link {spec}: give LINK@ROUND, e.g. 3-5@2 (3-5@2+0.5: 0.5 s into round 2's "
                          "broadcast; 3-5@2-4: back at round 4)")
    links = [(where[:i], where[i + 1:]) for i, ch in enumerate(where) if ch == "-"]
    found = [(u, v) for u, v in links if graph.has_edge(u, v)]
    if not found:
        raise FedmstError(f"--fail-link {spec}: {where!r} is not a link of topology {graph.graph.get('name', '?')!r}")
    first, dash, last = when.partition("-")
    first, plus, after = first.partition("+")
    after_s = _seconds(spec, after, "--fail-link") if plus else None
    start = _round(spec, first, rounds, "--fail-link")
    until = _round(spec, last, rounds + 1, "--fail-link") if dash else None
    if until is not None and until <= start:
        raise FedmstError(f"--fail-link {spec}: the link must come back after round {start}, not at {until}")
    return LinkFailure(link=found[0], round=start, until=until, after_s=after_s)


def _refuse_optical(node: str, graph: nx.Graph, given: str) -> None:
    """Refuse a fault on an all-optical node (:func:`~fedmst.core.topology.optical_nodes`): no
    worker runs there to die or be slow, and light keeps passing through it."""
    if node in optical_nodes(graph):
        raise FedmstError(f"{given}: node {node!r} is all-optical: no worker runs there")


def parse_worker_kill(spec: str, graph: nx.Graph, rounds: int) -> WorkerKill:
    """``NODE@R[+S]``: the node whose worker dies in round R (``+S``: S seconds into its broadcast).

    >>> parse_worker_kill("7@2", nx.path_graph(["7", "8"]), rounds=3)
    WorkerKill(node='7', round=2, after_s=None)
    >>> parse_worker_kill("7@2+0.5", nx.path_graph(["7", "8"]), rounds=3).after_s
    0.5
    """
    node, at, when = spec.rpartition("@")
    if not at:
        raise FedmstError(f"--kill-worker {spec}: give NODE@ROUND, e.g. 7@2 (7@2+0.5: 0.5 s into round 2's broadcast)")
    if node not in graph:
        raise FedmstError(f"--kill-worker {spec}: node {node!r} is not in topology {graph.graph.get('name', '?')!r}")
    _refuse_optical(node, graph, f"--kill-worker {spec}")
    first, plus, after = when.partition("+")
    return WorkerKill(node=node, round=_round(spec, first, rounds, "--kill-worker"),
                      after_s=_seconds(spec, after, "--kill-worker") if plus else None)


def parse_slow_node(spec: str, graph: nx.Graph) -> tuple[str, float]:
    """``NODE:FACTOR``: the node whose worker computes FACTOR times slower (a straggler).

    >>> parse_slow_node("4:2.5", nx.path_graph(["4", "5"]))
    ('4', 2.5)
    """
    node, colon, factor = spec.rpartition(":")
    if not colon:
        raise FedmstError(f"--slow-node {spec}: give NODE:FACTOR, e.g. 4:3 for a node 3 times slower")
    if node not in graph:
        raise FedmstError(f"--slow-node {spec}: node {node!r} is not in topology {graph.graph.get('name', '?')!r}")
    _refuse_optical(node, graph, f"--slow-node {spec}")
    try:
        slow = float(factor)
    except ValueError:
        slow = 0.0
    if not slow >= 1:
        raise FedmstError(f"--slow-node {spec}: the factor must be a number of at least 1, got {factor!r}")
    return node, slow


def check_strike_offset(link_failures: Sequence[LinkFailure], kills: Sequence[WorkerKill], broadcast_s: float,
                        scheduler: str) -> None:
    """Refuse, in one line, a fault asked ``+S`` seconds into a broadcast that ``scheduler``'s plan
    predicts to be over by then (``broadcast_s``, in the network's seconds): it would strike at the
    phase's end, not under its transfers. Only the first such fault is judged, and only where
    nothing re-plans before it (a fault at an earlier round's start or under an earlier phase),
    since a re-planned round runs another plan (and a broadcast given up runs again).

    >>> link = LinkFailure(link=("10", "11"), round=1, after_s=99.0)
    >>> check_strike_offset([link], [], broadcast_s=0.1, scheduler="mst")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    fedmst.errors.FedmstError: --fail-link 10-11@1+99: mst's plan predicts round 1's broadcast ... over after 0.1 s, ...
    >>> check_strike_offset([LinkFailure(("9", "10"), round=1), link], [], 0.1, "mst")  # re-planned first: not judged
    """
    strikes = sorted([(f.round, f.after_s, "--fail-link", f"{f.link[0]}-{f.link[1]}@{f.round}", "the link would fail",
                       "at the round's start") for f in link_failures if f.after_s is not None]
                     + [(k.round, k.after_s, "--kill-worker", f"{k.node}@{k.round}", "the worker would die",
                         "during the round's training") for k in kills if k.after_s is not None])
    if not strikes:
        return
    round_, after_s, option, spec, what, instead = strikes[0]
    replanned = ([f.round <= round_ for f in link_failures if f.after_s is None]
                 + [k.round < round_ for k in kills if k.after_s is None])
    if any(replanned) or after_s < broadcast_s:
        return
    raise FedmstError(f"{option} {spec}+{after_s:g}: {scheduler}'s plan predicts round {round_}'s broadcast to be over "
                      f"after {broadcast_s:.3g} s, so {after_s:g} s into it {what} at its end; give an offset below "
                      f"{broadcast_s:.3g} s ({spec}: {instead})")


def _seconds(spec: str, text: str, option: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise FedmstError(f"{option} {spec}: {text!r} is not a number of seconds into the broadcast")
    return seconds


def _round(spec: str, text: str, rounds: int, option: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= rounds:
        raise FedmstError(f"{option} {spec}: round {text!r} is not one of 1..{rounds}")
    return int(text)


@dataclass(frozen=True)
class RemainingTask:
    """A task as it can still run: ``task`` holds the surviving local models, ``models[j]`` is
    the original index of its local model ``j``, ``dropped`` says why each other one left."""

    task: Task
    models: tuple[int, ...]
    dropped: dict[int, str] = field(default_factory=dict)


def surviving_graph(graph: nx.Graph, down_links: Iterable[tuple[str, str]], dead_nodes: Iterable[str]) -> nx.Graph:
    """``graph`` without the links that are down and the nodes whose worker is dead.

    >>> sorted(surviving_graph(nx.path_graph(3), [(0, 1)], []).edges)
    [(1, 2)]
    """
    g = graph.copy()
    g.remove_edges_from(list(down_links))
    g.remove_nodes_from(list(dead_nodes))
    return g


NOT_SELECTED = "not selected for this round"
"""Why a local model a client selection left out sits a round out (it keeps its data and model)."""


def remaining_tasks(graph: nx.Graph, tasks: Sequence[Task], *, down_links: Iterable[tuple[str, str]] = (),
                    dead_nodes: Iterable[str] = (),
                    selected: Mapping[str, Collection[int]] | None = None) -> list[RemainingTask]:
    """Each task reduced to the local models that can still take part (and, given ``selected``,
    were selected: original indices by task); a task whose G is dead or that keeps no local model
    raises, naming the task and why."""
    dead = set(dead_nodes)
    g = surviving_graph(graph, down_links, dead)
    out = []
    for task in tasks:
        if task.global_node in dead:
            raise FedmstError(f"{task.name}: the worker on node {task.global_node} held its global model and died")
        reach = nx.node_connected_component(g, task.global_node)
        kept, dropped = [], {}
        for i, node in enumerate(task.local_nodes):
            if node in dead:
                dropped[i] = f"its worker on node {node} died"
            elif node not in reach:
                dropped[i] = f"node {node} is cut off from G on node {task.global_node}"
            elif selected is not None and i not in selected.get(task.name, ()):
                dropped[i] = NOT_SELECTED
            else:
                kept.append(i)
        if not kept:
            raise FedmstError(f"{task.name}: no local model can take part any more ({'; '.join(dropped.values())})")
        reduced = replace(task, local_nodes=tuple(task.local_nodes[i] for i in kept))
        out.append(RemainingTask(task=reduced, models=tuple(kept), dropped=dropped))
    return out


def replan_workload(graph: nx.Graph, tasks: Sequence[Task], scheduler: str, *, down_links: Iterable[tuple[str, str]],
                    dead_nodes: Iterable[str], workers: Iterable[str], wavelengths: int,
                    mtu: int, load: Mapping[tuple[str, str], float] | None = None,
                    selected: Mapping[str, Collection[int]] | None = None, optical: str = OCSPolicy.name,
                    ots: int = 0, frame: Frame = DEFAULT_FRAME) -> tuple[WorkloadPlan, list[RemainingTask]]:
    """Schedule ``tasks`` again on what survives: each reduced to the local models that can still
    take part (and were ``selected``), planned on ``graph`` without the failed links and dead
    nodes, with ``load`` (bytes per round on link directions, measured) under the link state. The
    new plans may only use nodes in ``workers`` (those with a live agent), since every other node
    only forwards.
    """
    dead = set(dead_nodes)
    down = list(down_links)
    remaining = remaining_tasks(graph, tasks, down_links=down, dead_nodes=dead, selected=selected)
    workload = schedule_workload(surviving_graph(graph, down, dead), [r.task for r in remaining], scheduler,
                                 wavelengths=wavelengths, mtu=mtu, load=load, optical=optical, ots=ots, frame=frame)
    if workload.blocked:
        raise FedmstError(f"re-planning: {workload.blocked[0][0]} is blocked: {workload.blocked[0][1]}")
    missing = set().union(*(p.nodes for p in workload.plans)) - set(workers)
    if missing:
        raise FedmstError(f"the re-planned trees need a worker on node(s) {', '.join(sorted(missing))}, which run "
                          "none: inject faults with --fail-link/--kill-worker to run a worker on every node")
    return workload, remaining
