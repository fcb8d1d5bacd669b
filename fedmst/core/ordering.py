"""The order in which a workload's tasks are admitted and scheduled (``--order sjf-contention``).

Order matters twice: each task is scheduled on the link state the tasks before it planned (so
the first tasks get the emptiest links), and wavelengths go to the first tasks that ask (so the
last ones are the ones blocked). ``--order fifo`` keeps the workload's order; ``sjf-contention``
admits the shortest job first counting contention, an idea of seed 003 (Yu et al.'s SJF-BCO) but
not its algorithm, which also places jobs and bisects a makespan bound: a job's length is its rounds
times its round as predicted *with the contention* of the tasks already admitted on the links it
would use; at each step the shortest such job is admitted next. A job that would share a
busy link therefore waits behind one of the same size that would not.

>>> import networkx as nx
>>> from fedmst.core.tasks import Task
>>> g = nx.path_graph(["a", "b", "c"])
>>> nx.set_edge_attributes(g, 100.0, "capacity_mbps"); nx.set_edge_attributes(g, 0.001, "delay_s")
>>> long = Task("long", "a", ("c",), 10_000_000, rounds=4, compute_s=1.0)
>>> short = Task("short", "a", ("b",), 10_000_000, rounds=1, compute_s=1.0)
>>> [t.name for t in shortest_jobs_first(g, [long, short], "mst", chunk_bytes=262144, with_delay=True)]
['short', 'long']
"""

from __future__ import annotations

from typing import Sequence

import networkx as nx

from fedmst.core.plan import Plan, predicted_phase_seconds
from fedmst.core.schedulers import schedule
from fedmst.core.tasks import Task
from fedmst.core.wire import DEFAULT_MTU
from fedmst.core.workload import link_state


def job_seconds(plan: Plan, admitted: Sequence[Plan], graph: nx.Graph, *, chunk_bytes: int, with_delay: bool,
                mtu: int = DEFAULT_MTU) -> float:
    """``plan``'s task length: its rounds times broadcast + compute + upload. A transfer phase takes
    its time alone (the overhead) plus the time the ``admitted`` plans' bytes of that phase hold its
    most contended link (the contention)."""
    task = plan.task
    phases = 0.0
    for phase in ("broadcast", "upload"):
        others = link_state(admitted, phase=phase, mtu=mtu)
        mine = link_state([plan], phase=phase, mtu=mtu)
        wait = max((others.get(hop, 0) * 8 / (float(graph.edges[hop]["capacity_mbps"]) * 1e6) for hop in mine),
                   default=0.0)
        phases += wait + predicted_phase_seconds(plan, graph, phase, chunk_bytes=chunk_bytes,
                                                 with_delay=with_delay, mtu=mtu)
    return task.rounds * (phases + task.compute_s)


def shortest_jobs_first(graph: nx.Graph, tasks: Sequence[Task], scheduler: str, *, chunk_bytes: int,
                        with_delay: bool, mtu: int = DEFAULT_MTU) -> list[Task]:
    """``tasks`` in the order sjf-contention admits them (see the module's docstring); ties keep the
    workload's order."""
    left, admitted, out = list(tasks), [], []
    while left:
        state = {hop: float(b) for hop, b in link_state(admitted, mtu=mtu).items()}
        plans = [schedule(graph, t, scheduler, state or None) for t in left]
        lengths = [job_seconds(p, admitted, graph, chunk_bytes=chunk_bytes, with_delay=with_delay, mtu=mtu)
                   for p in plans]
        best = min(range(len(left)), key=lambda i: (lengths[i], i))
        out.append(left.pop(best))
        admitted.append(plans[best])
    return out


__all__ = ["job_seconds", "shortest_jobs_first"]
