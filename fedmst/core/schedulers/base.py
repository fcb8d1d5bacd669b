"""The scheduler interface: one class with a ``name`` and a ``plan`` method (pure, no I/O)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Mapping

import networkx as nx

from fedmst.core.plan import LinkDir, Plan
from fedmst.core.tasks import Task

LinkState = Mapping[LinkDir, float]
"""Bytes per round already planned on each link direction by tasks scheduled earlier."""


class Scheduler(ABC):
    """Decides how one task's weights travel: which transfers, over which paths."""

    name: str

    @abstractmethod
    def plan(self, graph: nx.Graph, task: Task, link_state: LinkState | None = None) -> Plan:
        """Return the plan for ``task`` on ``graph``, given the load already on its links."""
