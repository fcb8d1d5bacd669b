"""Real data, split non-IID: a dataset by name (built in, :func:`register_dataset`, or the
``fedmst.datasets`` entry-point group) or ``package.module:factory``, sharded per class by
Dirichlet(alpha).

A factory is called with no arguments and returns ``(x_train, y_train, x_test, y_test)``:
float inputs of any shape ``[N, ...]`` and integer labels ``[N]`` in ``0..C-1``. The model's input
shape and class count come from those tensors. The built-in ``digits`` (1,797 8x8 images, the UCI
handwritten digits as scikit-learn ships them, in ``digits.csv.gz`` beside this module) needs
no download. Every split is a pure function of its seed, so each agent rebuilds its own shard
from ``(seed, k, alpha, index)`` instead of receiving it over the emulated network.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from fedmst.errors import DatasetError, TaskError
from fedmst.plugins import Registry, one_line

MAX_DRAWS = 100

Tensors = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
Factory = Callable[[], Tensors]
"""Called with no arguments; returns ``(x_train, y_train, x_test, y_test)``."""


@dataclass(frozen=True)
class Dataset:
    """A dataset checked once: train and test tensors, and what a model needs to know of them."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def num_classes(self) -> int:
        return int(max(self.y_train.max(), self.y_test.max())) + 1


def digits() -> Tensors:
    """The UCI handwritten digits, ``[N, 1, 8, 8]`` in ``[0, 1]``, 80/20 split stratified by label."""
    with gzip.open(Path(__file__).with_name("digits.csv.gz"), "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    X = torch.from_numpy(table[:, :-1] / 16.0).reshape(-1, 1, 8, 8)
    y = torch.from_numpy(table[:, -1].astype(np.int64))
    return train_test_split_seeded(X, y, seed=0)


DATASETS: Registry[Factory] = Registry("dataset", "fedmst.datasets", DatasetError, {"digits": digits},
                                       accepts=callable, requirement="callable", form="package.module:factory")


def register_dataset(name: str, factory: Factory) -> None:
    """Make ``factory`` available as ``name`` in this process. Agents run in processes (or
    containers) of their own that see only what they import: for a run, register a dataset
    through the ``fedmst.datasets`` entry-point group, or name it as ``package.module:factory``."""
    DATASETS.register(name, factory)


@cache
def load_dataset(spec: str) -> Dataset:
    """The dataset ``spec`` names (a built-in name or ``package.module:factory``), checked; loaded
    once per process, so agents forked from a process that loaded it share its memory."""
    factory = DATASETS.lookup(spec)
    try:
        tensors = factory()
    except Exception as exc:  # noqa: BLE001 - any factory failure is the spec's fault
        raise DatasetError(f"dataset {spec!r}: factory raised {one_line(exc)}") from exc
    return Dataset(spec, *check_tensors(spec, tensors))


def check_tensors(spec: str, tensors: object) -> Tensors:
    """``tensors`` as four tensors with inputs as float32, or :class:`DatasetError` saying what is wrong.

    >>> x, y = torch.zeros(4, 2), torch.tensor([0, 1, 0, 1])
    >>> check_tensors("toy", (x, y, x, y.float()))
    Traceback (most recent call last):
    ...
    fedmst.errors.DatasetError: dataset 'toy': y_test must hold integer labels, got torch.float32
    """
    names = ("x_train", "y_train", "x_test", "y_test")
    if not isinstance(tensors, (tuple, list)) or len(tensors) != 4:
        raise DatasetError(f"dataset {spec!r}: the factory must return (x_train, y_train, x_test, y_test)")
    for name, t in zip(names, tensors):
        if not isinstance(t, torch.Tensor):
            raise DatasetError(f"dataset {spec!r}: {name} is a {type(t).__name__}, not a torch.Tensor")
    xtr, ytr, xte, yte = tensors
    for x, y, part in ((xtr, ytr, "train"), (xte, yte, "test")):
        if not x.is_floating_point():
            raise DatasetError(f"dataset {spec!r}: x_{part} must hold floats, got {x.dtype}")
        if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
            raise DatasetError(f"dataset {spec!r}: y_{part} must hold integer labels, got {y.dtype}")
        if y.dim() != 1 or len(x) != len(y) or len(y) == 0:
            raise DatasetError(f"dataset {spec!r}: x_{part} {tuple(x.shape)} and y_{part} {tuple(y.shape)} "
                               "must be [N, ...] and [N] with N > 0")
        if int(y.min()) < 0:
            raise DatasetError(f"dataset {spec!r}: y_{part} has negative labels; use 0..C-1")
        if not bool(torch.isfinite(x).all()):
            bad = int((~torch.isfinite(x)).reshape(len(x), -1).any(1).sum())
            raise DatasetError(f"dataset {spec!r}: x_{part} has NaN or infinite values in {bad} of {len(x)} "
                               "samples; a model would learn nothing but NaN from them")
    if xtr.shape[1:] != xte.shape[1:]:
        raise DatasetError(f"dataset {spec!r}: train inputs are {tuple(xtr.shape[1:])}, test inputs "
                           f"{tuple(xte.shape[1:])}")
    return xtr.float().contiguous(), ytr.long(), xte.float().contiguous(), yte.long()


def train_test_split_seeded(X: torch.Tensor, y: torch.Tensor, test_fraction: float = 0.2, *, seed: int) -> Tensors:
    """``(X_train, y_train, X_test, y_test)``, stratified by label so the test set is balanced:
    each class gives ``round(test_fraction * n_c)`` random samples to the test set.

    >>> X, y = torch.arange(10.0), torch.tensor([0] * 5 + [1] * 5)
    >>> [t.tolist() for t in train_test_split_seeded(X, y, 0.4, seed=1)][3]
    [0, 0, 1, 1]
    """
    if not 0 < test_fraction < 1:
        raise TaskError(f"test fraction must be between 0 and 1, got {test_fraction}")
    rng = np.random.default_rng(seed)
    labels = np.asarray(y)
    test = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        test.extend(rng.choice(members, size=round(test_fraction * len(members)), replace=False).tolist())
    is_test = np.zeros(len(labels), dtype=bool)
    is_test[test] = True
    train_idx, test_idx = torch.from_numpy(np.flatnonzero(~is_test)), torch.from_numpy(np.flatnonzero(is_test))
    return X[train_idx], y[train_idx], X[test_idx], y[test_idx]


def _draw(labels: np.ndarray, k: int, alpha: float, rng: np.random.Generator) -> list[list[int]]:
    """One Dirichlet partition: each class is cut among the shards in Dirichlet(alpha) shares.

    As in the usual recipe (Yurochkin et al. 2019), a shard already holding its fair share N/k
    takes no more, which keeps shard sizes from collapsing onto a few shards.
    """
    shards: list[list[int]] = [[] for _ in range(k)]
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        rng.shuffle(members)
        p = rng.dirichlet(np.full(k, alpha))
        p *= np.array([len(s) < len(labels) / k for s in shards])
        cuts = (np.cumsum(p / p.sum()) * len(members)).astype(int)[:-1]
        for shard, part in zip(shards, np.split(members, cuts)):
            shard.extend(part.tolist())
    return shards


def _top_up(shards: list[list[int]], min_size: int, rng: np.random.Generator) -> None:
    """Move random samples from the largest shards into those below ``min_size``."""
    for small in shards:
        while len(small) < min_size:
            large = max(shards, key=len)
            small.append(large.pop(int(rng.integers(len(large)))))


def dirichlet_shards(
    labels: np.ndarray | torch.Tensor, k: int, alpha: float, seed: int, min_size: int = 10
) -> list[np.ndarray]:
    """Split sample indices into ``k`` non-IID shards (sorted index arrays), deterministically.

    Smaller ``alpha`` means more skewed label mixes. A draw with a shard under ``min_size``
    is redrawn; if ``MAX_DRAWS`` draws all fail (tiny alpha, many shards), the best one is
    topped up from the largest shards, so any feasible ``k`` succeeds.
    """
    labels = np.asarray(labels)
    n = len(labels)
    if k < 1:
        raise TaskError(f"need at least one local model, got {k}")
    if alpha <= 0:
        raise TaskError(f"Dirichlet alpha must be positive, got {alpha}")
    if k * min_size > n:
        raise TaskError(
            f"cannot split {n} training samples into {k} shards of at least {min_size}: "
            f"use fewer local models"
        )
    rng = np.random.default_rng(seed)
    best: list[list[int]] = []
    for _ in range(MAX_DRAWS):
        shards = _draw(labels, k, alpha, rng)
        if not best or min(map(len, shards)) > min(map(len, best)):
            best = shards
        if min(map(len, best)) >= min_size:
            break
    else:
        _top_up(best, min_size, rng)
    return [np.sort(np.asarray(s, dtype=np.int64)) for s in best]
