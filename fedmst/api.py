"""fedmst's public extension API: everything a plugin needs, in one stable module.

Ten kinds of plugin, each found the same way: by a name registered in the process that looks it
up, by a name in the kind's entry-point group (loaded on the first lookup; a broken plugin only
warns), or directly as ``package.module:attribute`` wherever a name is accepted. A name taken
twice is refused; an unknown one is refused with the choices.

- scheduler: :func:`register_scheduler`, group ``fedmst.schedulers``, ``--schedulers spff,pkg.mod:Class``
- model: :func:`register_model`, group ``fedmst.models``, ``--model pkg.mod:factory``
- dataset: :func:`register_dataset`, group ``fedmst.datasets``, ``--dataset pkg.mod:factory``
- worker backend: :func:`register_backend`, group ``fedmst.backends``, ``--workers pkg.mod:Class``
- server strategy: :func:`register_strategy`, group ``fedmst.strategies``, ``--strategy pkg.mod:Class``
- client selection: group ``fedmst.selections``, ``--selection pkg.mod:Class`` (a :class:`Selection`)
- a cluster's queue order: group ``fedmst.orders``, ``fedmst cluster --order pkg.mod:Class`` (an :class:`Order`)
- a cluster's placement: group ``fedmst.placements``, ``fedmst cluster --placement pkg.mod:Class``
  (a :class:`Placement`)
- a cluster's preemption: group ``fedmst.preemptions``, ``fedmst cluster --preempt pkg.mod:Class``
  (a :class:`Preemption`, whose ``evict`` returns an :class:`Evict`)
- optical policy: group ``fedmst.optical``, ``--optical pkg.mod:Class`` (an :class:`OpticalPolicy`, whose
  ``assign`` returns an :class:`Assignment`)

Agents run in processes (or containers) of their own, which import only what the run names: a
model or dataset registered by ``register_*`` in your own process is not visible to them. For a
run, give it as ``package.module:factory`` (importable on every agent's ``PYTHONPATH``) or
publish it through its entry-point group; the same holds for strategies, which step on the
agents. Schedulers and worker backends are used only by the coordinating process (``fedmst``),
so an entry point or ``package.module:Class`` reaches them.

A scheduler is a :class:`Scheduler` subclass whose ``plan(graph, task, link_state)`` returns a
:class:`Plan` of :class:`Transfer` objects for the :class:`Task`. A transfer may carry a byte
segment of the model (:func:`equal_segments` cuts one into n), the global model or a sum, and a
step, so collectives are plans too (``fedmst/core/schedulers/ring.py``).

>>> import networkx as nx
>>> class Star(Scheduler):
...     name = "star"
...     def plan(self, graph, task, link_state=None):
...         paths = nx.single_source_dijkstra_path(graph, task.global_node, weight="delay_s")
...         remote = [(i, tuple(paths[n])) for i, n in enumerate(task.local_nodes) if n != task.global_node]
...         return Plan(self.name, task, tuple([Transfer("broadcast", p, frozenset({i})) for i, p in remote]
...                                          + [Transfer("upload", p[::-1], frozenset({i})) for i, p in remote]))
>>> g = nx.path_graph(["a", "b", "c"])
>>> nx.set_edge_attributes(g, 0.001, "delay_s")
>>> Star().plan(g, Task("t", "a", ("c",), model_bytes=1000), None).phase("broadcast")[0].path
('a', 'b', 'c')

A model is a factory ``build(num_classes, input_shape) -> torch.nn.Module`` whose output has one
score per class (checked on a sample batch before any network is built). A dataset is a factory
with no arguments returning ``(x_train, y_train, x_test, y_test)``: finite float inputs
``[N, ...]`` and integer labels ``[N]`` in ``0..C-1``; the model's input shape and class count
come from it.

>>> import torch
>>> def blobs():
...     y = torch.arange(40) % 2
...     x = torch.randn(40, 3, generator=torch.Generator().manual_seed(0)) + y[:, None]
...     return x[:30], y[:30], x[30:], y[30:]
>>> register_dataset("blobs", blobs)
>>> from fedmst.fl.data import load_dataset
>>> load_dataset("blobs").input_shape, load_dataset("blobs").num_classes
((3,), 2)
>>> register_dataset("blobs", blobs)
Traceback (most recent call last):
...
fedmst.errors.DatasetError: dataset 'blobs' is already registered; pick another name

A worker backend decides where each compute node's agent runs. It is one :class:`WorkerBackend`
subclass (``check``, ``start``, ``kill``; optionally ``up``/``down`` around the network,
``preload`` for the fork server, ``for_run`` to take ``--image`` and the container limits,
``describe`` for summary.json); the simplest extends :class:`ProcessBackend`:

>>> class Logged(ProcessBackend):
...     name = "logged"
...     def start(self, emu, node, args, *, env, log):
...         print("starting", node)
...         return super().start(emu, node, args, env=env, log=log)
>>> register_backend("logged", Logged)
>>> from fedmst.workers.backends import backend_for
>>> backend_for("logged").describe().label
'logged'
>>> backend_for("nope")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
fedmst.errors.FedmstError: unknown worker backend 'nope'; choose one of: docker, logged, process, or give ...

Names imported from here stay; modules behind them may move.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedmst.core.cluster.jobs import Job
from fedmst.core.cluster.policies import ClusterView, Evict, Order, Placed, Placement, Preemption, Running
from fedmst.core.optical.policies import Assignment, OpticalPolicy
from fedmst.core.plan import Plan, Transfer, equal_segments
from fedmst.core.schedulers import register_scheduler
from fedmst.core.schedulers.base import LinkState, Scheduler
from fedmst.core.selection import Selection, SelectionContext
from fedmst.core.tasks import Task
from fedmst.errors import FedmstError
from fedmst.fl.strategies import STRATEGIES, Strategy
from fedmst.workers.backends import ProcessBackend, WorkerBackend, register_backend

if TYPE_CHECKING:
    from fedmst.fl import data, models


def register_model(name: str, factory: models.Factory) -> None:
    """Make ``factory`` available to every command as ``name`` (imports torch when called)."""
    from fedmst.fl import models

    models.register_model(name, factory)


def register_dataset(name: str, factory: data.Factory) -> None:
    """Make ``factory`` available to this process as ``name`` (imports torch when called); agents
    see it only through the ``fedmst.datasets`` entry-point group or as ``package.module:factory``."""
    from fedmst.fl import data

    data.register_dataset(name, factory)


def register_strategy(name: str, cls: type[Strategy]) -> None:
    """Make the :class:`Strategy` dataclass ``cls`` available to this process as ``name``;
    agents see it only through the ``fedmst.strategies`` entry-point group or as
    ``package.module:Class``.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Halfway(Strategy):
    ...     fraction: float = 0.5
    ...     def step(self, round_, current, update):
    ...         return current + self.fraction * update
    >>> register_strategy("halfway", Halfway)
    """
    STRATEGIES.register(name, cls)


__all__ = ["Assignment", "ClusterView", "Evict", "FedmstError", "Job", "LinkState", "OpticalPolicy", "Order",
           "Placed", "Placement", "Plan", "Preemption", "ProcessBackend", "Running", "Scheduler", "Selection",
           "SelectionContext", "Strategy", "Task", "Transfer", "WorkerBackend", "equal_segments", "register_backend",
           "register_dataset", "register_model", "register_scheduler", "register_strategy"]
