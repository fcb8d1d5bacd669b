"""Schedulers: pure functions of (topology, task, link state) to a :class:`Plan`.

A scheduler is one class with a ``name`` and a ``plan`` method. The built-ins are listed in
``_registry``; another package adds one through the ``fedmst.schedulers`` entry-point group
(``name = "package.module:Class"``) and every command can then use it by name.
Every scheduler must pass the shared contract in ``tests/test_scheduler_contract.py``.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from importlib.metadata import entry_points
from typing import Mapping

import networkx as nx

from fedmst.errors import SchedulerError
from fedmst.core.plan import LinkDir, Plan, check_plan
from fedmst.core.tasks import Task

LinkState = Mapping[LinkDir, float]
"""Bytes per round already planned on each link direction by tasks scheduled earlier."""


class Scheduler(ABC):
    """Decides how one task's weights travel: which transfers, over which paths."""

    name: str

    @abstractmethod
    def plan(self, graph: nx.Graph, task: Task, link_state: LinkState | None = None) -> Plan:
        """Return the plan for ``task`` on ``graph``, given the load already on its links."""


def _registry() -> dict[str, type[Scheduler]]:
    # imported here: the scheduler modules import Scheduler from this package
    from fedmst.core.schedulers.mst import MSTScheduler
    from fedmst.core.schedulers.spff import SPFFScheduler

    registry: dict[str, type[Scheduler]] = {"spff": SPFFScheduler, "mst": MSTScheduler}
    for ep in entry_points(group="fedmst.schedulers"):
        if ep.name in registry:
            warnings.warn(f"scheduler plugin {ep.name!r} ({ep.value}) clashes with a built-in; skipped", stacklevel=2)
            continue
        try:
            registry[ep.name] = ep.load()
        except Exception as exc:  # noqa: BLE001 - one broken plugin must not break the others
            warnings.warn(
                f"skipping scheduler plugin {ep.name!r} ({ep.value}): {type(exc).__name__}: {exc}", stacklevel=2
            )
    return registry


def scheduler_names() -> tuple[str, ...]:
    """Names of every registered scheduler, sorted (the CLI's choices, the contract's cases)."""
    return tuple(sorted(_registry()))


def get_scheduler(name: str) -> Scheduler:
    """The scheduler registered as ``name``; an unknown name fails with the valid choices."""
    try:
        return _registry()[name]()
    except KeyError:
        raise SchedulerError(
            f"unknown scheduler {name!r}; choose one of: {', '.join(scheduler_names())}"
        ) from None


def schedule(graph: nx.Graph, task: Task, scheduler: str, link_state: LinkState | None = None) -> Plan:
    """Plan ``task`` with the scheduler named ``scheduler`` and check the plan's contract.

    The scheduler sees only the part of ``graph`` that G's node reaches: after link failures the
    rest of the network may be cut off, and no scheduler need handle a disconnected graph.
    """
    reach = nx.node_connected_component(graph, task.global_node) if task.global_node in graph else set()
    if len(reach) < graph.number_of_nodes():
        graph = graph.subgraph(reach)
    plan = get_scheduler(scheduler).plan(graph, task, link_state)
    check_plan(plan, graph)
    return plan


__all__ = ["LinkState", "Plan", "Scheduler", "get_scheduler", "schedule", "scheduler_names"]
