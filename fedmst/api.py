"""fedmst's public extension API: everything a plugin needs, in one stable module.

A scheduler is a :class:`Scheduler` subclass whose ``plan(graph, task, link_state)`` returns a
:class:`Plan` of :class:`Transfer` objects for the :class:`Task`; use it by name after
:func:`register_scheduler` (or the ``fedmst.schedulers`` entry-point group), or directly as
``--schedulers spff,mst,package.module:Class``. A transfer may carry a byte segment of the model
(:func:`equal_segments` cuts one into n), the global model or a sum, and a step, so collectives
are plans too (``fedmst/core/schedulers/ring.py``). A model is a factory
``build(num_classes, input_shape) -> torch.nn.Module``, used as ``--model package.module:build``
or registered with :func:`register_model` (or the ``fedmst.models`` entry-point group).

Names imported from here stay; modules behind them may move.

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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedmst.core.plan import Plan, Transfer, equal_segments
from fedmst.core.schedulers import register_scheduler
from fedmst.core.schedulers.base import LinkState, Scheduler
from fedmst.core.tasks import Task
from fedmst.errors import FedmstError

if TYPE_CHECKING:
    from fedmst.fl.models import Factory


def register_model(name: str, factory: Factory) -> None:
    """Make ``factory`` available to every command as ``name`` (imports torch when called)."""
    from fedmst.fl import models

    models.register_model(name, factory)


__all__ = ["FedmstError", "LinkState", "Plan", "Scheduler", "Task", "Transfer", "equal_segments", "register_model",
           "register_scheduler"]
