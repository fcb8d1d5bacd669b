"""Pure weight helpers: the wire format of a model, and the FedAvg sums built from it.

A model travels as one contiguous float32 vector of every floating-point ``state_dict`` entry
(parameters and float buffers) in ``state_dict`` order. Aggregating nodes only ever add such
vectors scaled by sample weights, so the in-network result can be checked against
:func:`fedavg` computed in one place. No I/O and no ``torch.distributed`` here.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn


def _float_entries(model: nn.Module) -> list[torch.Tensor]:
    """The tensors that make up the wire vector; integer buffers (counters) are not sent."""
    return [t for t in model.state_dict().values() if t.is_floating_point()]


def flatten(model: nn.Module) -> torch.Tensor:
    """``model``'s weights as one contiguous float32 1-D vector (a copy)."""
    parts = [t.detach().reshape(-1).to(torch.float32) for t in _float_entries(model)]
    if not parts:
        return torch.empty(0, dtype=torch.float32)
    return torch.cat(parts)


def load_flat(model: nn.Module, flat: torch.Tensor) -> None:
    """Write a vector made by :func:`flatten` back into ``model``'s weights, in place."""
    entries = _float_entries(model)
    expected = sum(t.numel() for t in entries)
    if flat.dim() != 1 or flat.numel() != expected:
        raise ValueError(
            f"weight vector of shape {tuple(flat.shape)} does not fit {type(model).__name__}: "
            f"expected {expected} elements, received {flat.numel()}"
        )
    offset = 0
    with torch.no_grad():
        for t in entries:
            t.copy_(flat[offset : offset + t.numel()].view_as(t))
            offset += t.numel()


def sample_weights(sample_counts: Sequence[int]) -> list[float]:
    """FedAvg weights ``n_i / sum(n)``: each local model counts as much as the data it saw."""
    if not sample_counts or any(n < 0 for n in sample_counts) or sum(sample_counts) == 0:
        raise ValueError(
            f"sample counts must be non-negative with a positive sum, got {list(sample_counts)}"
        )
    total = sum(sample_counts)
    return [n / total for n in sample_counts]


def weighted_sum(vectors: Sequence[torch.Tensor], weights: Sequence[float]) -> torch.Tensor:
    """``sum(w_i * v_i)`` as a new float32 vector; what one aggregating node computes."""
    if not vectors or len(vectors) != len(weights):
        raise ValueError(
            f"need one weight per vector, got {len(vectors)} vectors and {len(weights)} weights"
        )
    shape = vectors[0].shape
    out = torch.zeros(shape, dtype=torch.float32)
    for v, w in zip(vectors, weights):
        if v.shape != shape:
            raise ValueError(
                f"cannot sum weight vectors of shapes {tuple(shape)} and {tuple(v.shape)}"
            )
        out.add_(v.to(torch.float32), alpha=float(w))
    return out


def fedavg(vectors: Sequence[torch.Tensor], sample_counts: Sequence[int]) -> torch.Tensor:
    """The FedAvg global model: the reference the in-network aggregation must reproduce."""
    return weighted_sum(vectors, sample_weights(sample_counts))
