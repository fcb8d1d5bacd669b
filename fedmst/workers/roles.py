"""One task's state on one node (:class:`TaskRole`): what an agent runs each command on, and
what :mod:`fedmst.workers.snapshots` keeps on disk."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fedmst.fl.strategies import Strategy
from fedmst.protocol import TaskSpec, TransferSpec
from fedmst.workers import learners, transport


@dataclass
class TaskRole:
    """One task's state on this node: its spec, the transfers that start or end here (with their
    pairs while open), and the models it holds. Models, shards and trained weights outlive a
    re-plan; the spec, transfers and pairs are replaced."""

    spec: TaskSpec
    transfers: tuple[TransferSpec, ...]
    strategy: Strategy
    """The task's server strategy, on every node that takes part (it steps where an upload ends)."""
    pairs: dict[str, transport.Pair] = field(default_factory=dict)
    """Connection key -> this node's end of it, while connected."""
    global_weights: torch.Tensor | None = None
    """At G: the global model (flat), the one the last upload ended with."""
    judge: learners.Judge | None = None
    """At G: the accuracy of a global model."""
    local: dict[int, learners.Learner] = field(default_factory=dict)
    """Original local-model index -> what trains it here (fedmst's model on its shard, or a Flower client)."""
    trained: dict[int, torch.Tensor] = field(default_factory=dict)
    """Original local-model index -> weights after this round's training (absent when late)."""
    base: torch.Tensor | None = None
    """The global model (flat) this node's models started the round from: what updates are taken
    against, and what a strategy steps from."""
    kept: list[tuple[int, torch.Tensor]] = field(default_factory=list)
    """At G: each round's global model since the last evaluation (:attr:`RunRounds.evaluate`)."""

    @property
    def name(self) -> str:
        return self.spec.name


__all__ = ["TaskRole"]
