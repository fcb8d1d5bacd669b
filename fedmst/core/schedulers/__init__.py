"""Schedulers: pure functions of (topology, task, link state) to a :class:`Plan`.

A scheduler is one class with a ``name`` and a ``plan`` method. Besides the built-ins, one comes
from :func:`register_scheduler`, from the ``fedmst.schedulers`` entry-point group (loaded on first
lookup; a broken plugin only warns), or directly as ``package.module:Class``, like models.
Every scheduler must pass the shared contract in ``tests/test_scheduler_contract.py``.
"""

from __future__ import annotations

from functools import cache

import networkx as nx

from fedmst.errors import SchedulerError
from fedmst.plugins import Registry, one_line
from fedmst.core.optical.fabric import check_terminals, check_transparent, expand, transparent_overlay
from fedmst.core.plan import Plan, check_plan, forward_each
from fedmst.core.schedulers.base import LinkState, Scheduler
from fedmst.core.schedulers.binomial import BinomialScheduler
from fedmst.core.schedulers.hier import HierScheduler
from fedmst.core.schedulers.mst import MSTLatencyScheduler, MSTScheduler
from fedmst.core.schedulers.ring import RingScheduler
from fedmst.core.schedulers.spff import SPFFScheduler
from fedmst.core.schedulers.steiner_opt import SteinerOptScheduler
from fedmst.core.tasks import Task
from fedmst.core.topology import optical_nodes

SCHEDULERS: Registry[type[Scheduler]] = Registry(
    "scheduler", "fedmst.schedulers", SchedulerError,
    {cls.name: cls for cls in (SPFFScheduler, MSTScheduler, MSTLatencyScheduler, SteinerOptScheduler, HierScheduler,
                               RingScheduler, BinomialScheduler)},
    accepts=lambda cls: isinstance(cls, type) and issubclass(cls, Scheduler),
    requirement="a subclass of fedmst.api.Scheduler")


def register_scheduler(name: str, cls: type[Scheduler]) -> None:
    """Make ``cls`` available to every command as ``name``; a name already taken is refused."""
    SCHEDULERS.register(name, cls)


def scheduler_names() -> tuple[str, ...]:
    """Names of every registered scheduler, sorted (the CLI's choices, the contract's cases)."""
    return SCHEDULERS.names()


@cache
def get_scheduler(spec: str) -> Scheduler:
    """The scheduler registered as ``spec``, or the class ``package.module:Class``; an unknown
    name fails with the valid choices. One instance per spec: schedulers are pure."""
    cls = SCHEDULERS.lookup(spec)
    try:
        return cls()
    except Exception as exc:  # noqa: BLE001 - a constructor that fails is the plugin's fault
        raise SchedulerError(f"scheduler {spec!r}: {cls.__name__}() raised {one_line(exc)}") from exc


def schedule(graph: nx.Graph, task: Task, scheduler: str, link_state: LinkState | None = None) -> Plan:
    """Plan ``task`` with the scheduler named ``scheduler`` and check the plan's contract.

    The scheduler sees only the part of ``graph`` that G's node reaches: after link failures the
    rest of the network may be cut off, and no scheduler need handle a disconnected graph. Where
    some nodes are all-optical, it plans on the transparent overlay (electrical nodes only, joined
    by lightpaths, with the load of each lightpath's busiest hop), and its plan, refused if it stops
    at an optical node, is expanded onto the physical paths (:mod:`fedmst.core.optical.fabric`).
    """
    reach = nx.node_connected_component(graph, task.global_node) if task.global_node in graph else set()
    if len(reach) < graph.number_of_nodes():
        graph = graph.subgraph(reach)
    optical = optical_nodes(graph)
    if not optical:
        plan = _planned(graph, task, scheduler, link_state)
    else:
        check_terminals(task, optical)
        overlay = transparent_overlay(graph)
        plan = _planned(overlay.graph, task, scheduler, overlay.load(link_state))
        check_transparent(plan, optical)
        check_plan(plan, overlay.graph)
        plan = expand(plan, overlay)
    check_plan(plan, graph)
    return plan


def _planned(graph: nx.Graph, task: Task, scheduler: str, link_state: LinkState | None) -> Plan:
    """The scheduler's plan of ``task`` on ``graph``, each update forwarded whole where the task
    must not sum in the network; a plugin's failure or wrong answer is its fault, in one line."""
    try:
        plan = get_scheduler(scheduler).plan(graph, task, link_state)
    except SchedulerError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's bug is reported as its fault, in one line
        raise SchedulerError(f"scheduler {scheduler!r} failed to plan {task.name}: {one_line(exc)}") from exc
    if not isinstance(plan, Plan):
        raise SchedulerError(f"scheduler {scheduler!r} returned {type(plan).__name__}, not a fedmst.api.Plan")
    return plan if task.sums_in_path else forward_each(plan)


__all__ = ["SCHEDULERS", "LinkState", "Plan", "Scheduler", "get_scheduler", "register_scheduler", "schedule",
           "scheduler_names"]
