"""Local training and evaluation: what a local model does between broadcast and upload.

Plain minibatch SGD with cross entropy. Shuffling draws from its own seeded
``torch.Generator``, so a local model's update is reproducible from its seed regardless of
what else touched the global RNG.
"""

from __future__ import annotations

import torch
from torch import nn


def train_local(
    model: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    seed: int,
) -> float:
    """Train ``model`` in place on ``(X, y)``; return the mean loss over the last epoch."""
    if len(X) == 0 or len(X) != len(y):
        raise ValueError(
            f"need a non-empty dataset with one label per sample, "
            f"got {len(X)} samples and {len(y)} labels"
        )
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs and batch_size must be at least 1, got {epochs} and {batch_size}")
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    total = 0.0
    for _ in range(epochs):
        total = 0.0
        for batch in torch.randperm(len(X), generator=generator).split(batch_size):
            optimizer.zero_grad()
            loss = loss_fn(model(X[batch]), y[batch])
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch)
    return total / len(X)


def accuracy(model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of ``X`` that ``model`` classifies as ``y``."""
    if len(X) == 0:
        raise ValueError("cannot measure accuracy on an empty dataset")
    model.eval()
    with torch.no_grad():
        return (model(X).argmax(dim=1) == y).float().mean().item()
