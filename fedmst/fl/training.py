"""Local training and evaluation: what a local model does between broadcast and upload.

Minibatch training with cross entropy and one of :data:`OPTIMIZERS`, whose state starts afresh
every round (a client keeps nothing but the weights it is sent, as in FedAvg). Shuffling draws
from its own seeded ``torch.Generator``, so a local model's update is reproducible from its seed
regardless of what else touched the global RNG.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from fedmst.run.config import OPTIMIZERS


STATE_COPIES = {"sgd": 0, "momentum": 1, "adam": 2}
"""Copies of a model's weights each optimizer keeps while it trains (momentum's buffer; Adam's two moments)."""


class LocalOptimizer:
    """Plain SGD, SGD with momentum 0.9, or Adam (PyTorch's defaults otherwise), with
    ``torch.optim``'s update rules written out; the tests check them against ``torch.optim``
    step by step. Why not ``torch.optim`` itself: its first step imports ``torch._dynamo``, two
    seconds of CPU in every process that trains (each Docker worker, and every fork server)."""

    MOMENTUM, BETAS, EPS = 0.9, (0.9, 0.999), 1e-8

    def __init__(self, name: str, params: Iterable[nn.Parameter], lr: float) -> None:
        if name not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {name!r}; choose one of: {', '.join(OPTIMIZERS)}")
        self.name, self.lr = name, lr
        self.params = [p for p in params if p.requires_grad]
        self.state: list[list[torch.Tensor]] = [[] for _ in self.params]
        self.steps = [0] * len(self.params)  # per parameter: one without a gradient does not step

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for k, (p, state) in enumerate(zip(self.params, self.state)):
            if p.grad is None:
                continue
            self.steps[k] += 1
            g = p.grad
            if self.name == "sgd":
                p.add_(g, alpha=-self.lr)
            elif self.name == "momentum":  # buffer = momentum * buffer + g, starting at g
                if not state:
                    state.append(g.clone())
                else:
                    state[0].mul_(self.MOMENTUM).add_(g)
                p.add_(state[0], alpha=-self.lr)
            else:  # adam
                if not state:
                    state.extend((torch.zeros_like(p), torch.zeros_like(p)))
                m, v = state
                b1, b2 = self.BETAS
                m.lerp_(g, 1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                step = self.steps[k]
                denom = (v.sqrt() / (1 - b2 ** step) ** 0.5).add_(self.EPS)
                p.addcdiv_(m, denom, value=-self.lr / (1 - b1 ** step))




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
    proximal_mu: float = 0.0,
    rows: torch.Tensor | None = None,
) -> float:
    """Train ``model`` in place on ``(X, y)`` with ``optimizer`` (one of :data:`OPTIMIZERS`);
    return the mean loss over the last epoch (without the proximal term). ``rows``: train on these
    samples of ``(X, y)`` only (a local model's shard), each batch taken from the whole dataset as
    it is drawn, so that the shards of a host's local models are not copies beside it; the same
    batches, in the same order, as training on ``(X[rows], y[rows])``.

    ``proximal_mu`` above 0 adds FedProx's ``proximal_mu / 2 * ||w - w_0||^2`` to every batch's
    loss, ``w_0`` being the weights the model starts from (the round's global model): the squared
    norm of Li et al. (Flower's example code adds the norm itself)."""
    if len(X) == 0 or len(X) != len(y):
        raise ValueError(
            f"need a non-empty dataset with one label per sample, "
            f"got {len(X)} samples and {len(y)} labels"
        )
    n = len(X) if rows is None else len(rows)
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs and batch_size must be at least 1, got {epochs} and {batch_size}")
    opt = LocalOptimizer(optimizer, model.parameters(), lr)
    generator = torch.Generator().manual_seed(seed)
    loss_fn = nn.CrossEntropyLoss()
    anchor = [p.detach().clone() for p in model.parameters()] if proximal_mu > 0 else []
    model.train()
    total = 0.0
    for _ in range(epochs):
        total = 0.0
        for batch in torch.randperm(n, generator=generator).split(batch_size):
            if rows is not None:
                batch = rows[batch]
            opt.zero_grad()
            loss = loss_fn(model(X[batch]), y[batch])
            if anchor:
                drift = sum((p - a).pow(2).sum() for p, a in zip(model.parameters(), anchor))
                (loss + proximal_mu / 2 * drift).backward()
            else:
                loss.backward()
            opt.step()
            total += loss.item() * len(batch)
    return total / n


REHEARSAL = 64
"""The samples a rehearsal trains on: enough for a few batches of every kernel a fit uses."""


def rehearse(model: nn.Module, X: torch.Tensor, y: torch.Tensor, *, batch_size: int, optimizer: str,
             lr: float = 0.01) -> None:
    """Train ``model`` once on the first :data:`REHEARSAL` samples, so that torch's lazy imports,
    allocator and kernels (a GPU's too) are ready: round 1's training is then timed like the later
    rounds'. The weights it leaves are not meant to be kept."""
    train_local(model, X[:REHEARSAL], y[:REHEARSAL], epochs=1, batch_size=batch_size, lr=lr, seed=0,
                optimizer=optimizer)


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
