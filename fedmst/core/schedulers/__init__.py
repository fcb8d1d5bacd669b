"""Schedulers: pure functions of (topology, task, link state) to a :class:`Plan`.

A scheduler is one class with a ``name`` and a ``plan`` method. Besides the built-ins, one comes
from :func:`register_scheduler`, from the ``fedmst.schedulers`` entry-point group (loaded on first
lookup; a broken plugin only warns), or directly as ``package.module:Class``, like models.
Every scheduler must pass the shared contract in ``tests/test_scheduler_contract.py``.
"""

from __future__ import annotations

import importlib
import warnings
from functools import cache
from importlib.metadata import entry_points

import networkx as nx

from fedmst.errors import SchedulerError
from fedmst.core.plan import Plan, check_plan
from fedmst.core.schedulers.base import LinkState, Scheduler
from fedmst.core.schedulers.binomial import BinomialScheduler
from fedmst.core.schedulers.hier import HierScheduler
from fedmst.core.schedulers.mst import MSTLatencyScheduler, MSTScheduler
from fedmst.core.schedulers.ring import RingScheduler
from fedmst.core.schedulers.spff import SPFFScheduler
from fedmst.core.schedulers.steiner_opt import SteinerOptScheduler
from fedmst.core.tasks import Task

_REGISTRY: dict[str, type[Scheduler]] = {}
_plugins_loaded = False


def register_scheduler(name: str, cls: type[Scheduler]) -> None:
    """Make ``cls`` available to every command as ``name``; a name already taken is refused."""
    if name in _load_registry():
        raise SchedulerError(f"scheduler {name!r} is already registered; pick another name")
    if not (isinstance(cls, type) and issubclass(cls, Scheduler)):
        raise SchedulerError(f"scheduler {name!r}: {cls!r} is not a subclass of fedmst.api.Scheduler")
    _REGISTRY[name] = cls


def _load_registry() -> dict[str, type[Scheduler]]:
    """The built-ins, then the ``fedmst.schedulers`` entry points, once; a plugin that fails to
    load or clashes with a name already taken only warns, so it cannot break the others."""
    global _plugins_loaded
    if not _plugins_loaded:
        _plugins_loaded = True
        for builtin in (SPFFScheduler, MSTScheduler, MSTLatencyScheduler, SteinerOptScheduler, HierScheduler,
                        RingScheduler, BinomialScheduler):
            _REGISTRY[builtin.name] = builtin
        for ep in entry_points(group="fedmst.schedulers"):
            try:
                register_scheduler(ep.name, ep.load())
            except Exception as exc:  # noqa: BLE001 - one broken plugin must not break the others
                warnings.warn(f"skipping scheduler plugin {ep.name!r} ({ep.value}): {type(exc).__name__}: {exc}",
                              stacklevel=2)
    return _REGISTRY


def scheduler_names() -> tuple[str, ...]:
    """Names of every registered scheduler, sorted (the CLI's choices, the contract's cases)."""
    return tuple(sorted(_load_registry()))


def _import_spec(spec: str) -> type[Scheduler]:
    """The class named by ``package.module:Class``, checked to be a Scheduler."""
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the spec's fault
        raise SchedulerError(f"scheduler {spec!r}: cannot import module {module_name!r} "
                             f"({type(exc).__name__}: {' '.join(str(exc).split())})") from exc
    cls = getattr(module, attr, None)
    if cls is None:
        raise SchedulerError(f"scheduler {spec!r}: module {module_name!r} has no attribute {attr!r}")
    if not (isinstance(cls, type) and issubclass(cls, Scheduler)):
        raise SchedulerError(f"scheduler {spec!r}: {attr} is not a subclass of fedmst.api.Scheduler")
    return cls


@cache
def get_scheduler(spec: str) -> Scheduler:
    """The scheduler registered as ``spec``, or the class ``package.module:Class``; an unknown
    name fails with the valid choices. One instance per spec: schedulers are pure."""
    if ":" in spec:
        cls = _import_spec(spec)
    else:
        try:
            cls = _load_registry()[spec]
        except KeyError:
            raise SchedulerError(
                f"unknown scheduler {spec!r}; choose one of: {', '.join(scheduler_names())}, "
                "or give package.module:Class (did you forget to register it?)"
            ) from None
    try:
        return cls()
    except Exception as exc:  # noqa: BLE001 - a constructor that fails is the plugin's fault
        raise SchedulerError(f"scheduler {spec!r}: {cls.__name__}() raised {type(exc).__name__}: {exc}") from exc


def schedule(graph: nx.Graph, task: Task, scheduler: str, link_state: LinkState | None = None) -> Plan:
    """Plan ``task`` with the scheduler named ``scheduler`` and check the plan's contract.

    The scheduler sees only the part of ``graph`` that G's node reaches: after link failures the
    rest of the network may be cut off, and no scheduler need handle a disconnected graph.
    """
    reach = nx.node_connected_component(graph, task.global_node) if task.global_node in graph else set()
    if len(reach) < graph.number_of_nodes():
        graph = graph.subgraph(reach)
    try:
        plan = get_scheduler(scheduler).plan(graph, task, link_state)
    except SchedulerError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's bug is reported as its fault, in one line
        raise SchedulerError(f"scheduler {scheduler!r} failed to plan {task.name}: {type(exc).__name__}: "
                             f"{' '.join(str(exc).split())}") from exc
    if not isinstance(plan, Plan):
        raise SchedulerError(f"scheduler {scheduler!r} returned {type(plan).__name__}, not a fedmst.api.Plan")
    check_plan(plan, graph)
    return plan


__all__ = ["LinkState", "Plan", "Scheduler", "get_scheduler", "register_scheduler", "schedule", "scheduler_names"]
