"""Local training and evaluation: what a local model does between broadcast and upload.

Minibatch training with cross entropy and one of :data:`OPTIMIZERS`, whose state starts afresh
every round (a client keeps nothing but the weights it is sent, as in FedAvg). Shuffling draws
from its own seeded ``torch.Generator``, so a local model's update is reproducible from its seed
regardless of what else touched the global RNG.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch
from torch import nn

OPTIMIZERS: dict[str, Callable[[Iterable[nn.Parameter], float], torch.optim.Optimizer]] = {
    "sgd": lambda params, lr: torch.optim.SGD(params, lr=lr),
    "momentum": lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9),
    "adam": lambda params, lr: torch.optim.Adam(params, lr=lr),
}
"""Local optimizers by name: plain SGD, SGD with momentum 0.9, and Adam."""


def train_local(
    model: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    seed: int,
    optimizer: str = "sgd",
) -> float:
    """Train ``model`` in place on ``(X, y)`` with ``optimizer`` (a name in :data:`OPTIMIZERS`);
    return the mean loss over the last epoch."""
    if len(X) == 0 or len(X) != len(y):
        raise ValueError(
            f"need a non-empty dataset with one label per sample, "
            f"got {len(X)} samples and {len(y)} labels"
        )
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs and batch_size must be at least 1, got {epochs} and {batch_size}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of: {', '.join(OPTIMIZERS)}")
    generator = torch.Generator().manual_seed(seed)
    opt = OPTIMIZERS[optimizer](model.parameters(), lr)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    total = 0.0
    for _ in range(epochs):
        total = 0.0
        for batch in torch.randperm(len(X), generator=generator).split(batch_size):
            opt.zero_grad()
            loss = loss_fn(model(X[batch]), y[batch])
            loss.backward()
            opt.step()
            total += loss.item() * len(batch)
    return total / len(X)


def local_seed(task_seed: int, round_: int, index: int) -> int:
    """The training seed of local model ``index`` of a task in ``round_``: a different shuffle for
    every model and round, the same in every run of the task.

    >>> local_seed(7, 2, 3)
    7203
    """
    return task_seed * 1000 + round_ * 100 + index


def accuracy(model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of ``X`` that ``model`` classifies as ``y``."""
    if len(X) == 0:
        raise ValueError("cannot measure accuracy on an empty dataset")
    model.eval()
    with torch.no_grad():
        return (model(X).argmax(dim=1) == y).float().mean().item()
