"""Real data, split non-IID: scikit-learn's bundled digits, sharded per class by Dirichlet(alpha).

The digits (1,797 8x8 images) ship inside scikit-learn, so emulations never download anything.
Every split is a pure function of its seed, so each agent process can rebuild its own shard
from ``(seed, k, alpha, index)`` alone instead of receiving it over the emulated network.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from fedmst.errors import TaskError

INPUT_SHAPE = (1, 8, 8)
NUM_CLASSES = 10
MAX_DRAWS = 100


def load_digits_dataset() -> tuple[torch.Tensor, torch.Tensor]:
    """All digits as ``X`` float32 ``[N, 1, 8, 8]`` in ``[0, 1]`` and ``y`` int64 ``[N]``."""
    digits = load_digits()
    X = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
    return X, torch.tensor(digits.target, dtype=torch.int64)


def train_test_split_seeded(
    X: torch.Tensor, y: torch.Tensor, test_fraction: float = 0.2, *, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(X_train, y_train, X_test, y_test)``, stratified by label so the test set is balanced."""
    if not 0 < test_fraction < 1:
        raise TaskError(f"test fraction must be between 0 and 1, got {test_fraction}")
    train, test = train_test_split(
        np.arange(len(y)), test_size=test_fraction, random_state=seed, stratify=y.numpy()
    )
    train, test = torch.from_numpy(np.sort(train)), torch.from_numpy(np.sort(test))
    return X[train], y[train], X[test], y[test]


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


def test_dataset(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The held-out digits that global models are scored on, for a run seeded ``seed``."""
    X, y = load_digits_dataset()
    return train_test_split_seeded(X, y, seed=seed)[2:]


test_dataset.__test__ = False  # type: ignore[attr-defined]  # not a pytest test despite its name


def local_dataset(
    seed: int, k: int, alpha: float, index: int, min_size: int = 10
) -> tuple[torch.Tensor, torch.Tensor]:
    """The training shard of local model ``index`` out of ``k``, for a run seeded ``seed``."""
    if not 0 <= index < k:
        raise TaskError(f"local model index {index} is out of range for {k} local models")
    X, y = load_digits_dataset()
    X_train, y_train, _, _ = train_test_split_seeded(X, y, seed=seed)
    shard = torch.from_numpy(dirichlet_shards(y_train, k, alpha, seed, min_size)[index])
    return X_train[shard], y_train[shard]
