"""What an agent keeps on disk for the coordinator: a task's checkpoint at a round boundary (its
global model and its strategy, with the strategy's state), taken up again by the agents of a later
run of it, and the trained local models and new global models saved for exactness checks.

A task's G writes and reads the global model; every node of the task reads the strategy (each that
ends an upload steps it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from fedmst.workers.roles import TaskRole


def checkpoint(roles: Sequence[TaskRole], node: str, folder: Path) -> None:
    """At each task's G (``node``), write its global model and its strategy into ``folder``."""
    for role in roles:
        if node == role.spec.global_node and role.global_weights is not None:
            torch.save(role.global_weights, folder / f"{role.name}-global.pt")
            torch.save(role.strategy, folder / f"{role.name}-strategy.pt")


def restore(roles: Sequence[TaskRole], node: str, folder: Path) -> None:
    """Take up each task's checkpoint from ``folder``: its strategy on every node of the task, its
    global model at G, which the next round broadcasts."""
    for role in roles:
        strategy = folder / f"{role.name}-strategy.pt"
        if not strategy.is_file():
            raise FileNotFoundError(f"{role.name}: no checkpoint in {folder}")
        role.strategy = torch.load(strategy, weights_only=False)
        if node == role.spec.global_node:
            role.global_weights = torch.load(folder / f"{role.name}-global.pt")
            role.base = role.global_weights.clone()


def save(roles: Sequence[TaskRole], folder: Path) -> None:
    """Write this node's trained local models and new global models into ``folder``."""
    for role in roles:
        for i, flat in role.trained.items():
            torch.save(flat, folder / f"{role.name}-local{i}.pt")
        if role.global_weights is not None:
            torch.save(role.global_weights, folder / f"{role.name}-global.pt")


__all__ = ["checkpoint", "restore", "save"]
