from __future__ import annotations

import numpy as np
import pytest
import torch

from fedmst.fl import data
from fedmst.errors import TaskError


@pytest.fixture(scope="module")
def train_labels() -> np.ndarray:
    X, y = data.load_digits_dataset()
    return data.train_test_split_seeded(X, y, seed=0)[1].numpy()


def test_digits_are_real_and_scaled() -> None:
    X, y = data.load_digits_dataset()
    assert X.shape == (1797, *data.INPUT_SHAPE) and X.dtype == torch.float32
    assert y.shape == (1797,) and y.dtype == torch.int64
    assert X.min() == 0 and X.max() == 1
    assert sorted(y.unique().tolist()) == list(range(data.NUM_CLASSES))


def test_split_is_deterministic_disjoint_and_complete() -> None:
    X, y = data.load_digits_dataset()
    ids = torch.arange(len(y))  # split sample ids in place of images to check disjointness
    train, y_train, test, y_test = data.train_test_split_seeded(ids, y, seed=3)
    assert torch.equal(y[train], y_train) and torch.equal(y[test], y_test)
    assert len(test) == pytest.approx(0.2 * len(y), abs=1)
    assert sorted(train.tolist() + test.tolist()) == list(range(len(y)))
    again = data.train_test_split_seeded(X, y, seed=3)
    assert torch.equal(again[2], X[test]) and torch.equal(again[3], y_test)
    assert not torch.equal(data.train_test_split_seeded(ids, y, seed=4)[2], test)


def test_split_rejects_bad_fraction() -> None:
    X, y = data.load_digits_dataset()
    with pytest.raises(TaskError, match="test fraction"):
        data.train_test_split_seeded(X, y, 1.0, seed=0)


@pytest.mark.parametrize("k, alpha", [(1, 0.5), (5, 0.1), (10, 0.5), (60, 0.1)])
def test_shards_partition_every_index_once(train_labels: np.ndarray, k: int, alpha: float) -> None:
    shards = data.dirichlet_shards(train_labels, k, alpha, seed=1)
    assert len(shards) == k
    assert all(len(s) >= 10 for s in shards)
    assert np.array_equal(np.sort(np.concatenate(shards)), np.arange(len(train_labels)))


def test_shards_are_deterministic_by_seed(train_labels: np.ndarray) -> None:
    a = data.dirichlet_shards(train_labels, 5, 0.5, seed=7)
    b = data.dirichlet_shards(torch.from_numpy(train_labels), 5, 0.5, seed=7)
    c = data.dirichlet_shards(train_labels, 5, 0.5, seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_small_alpha_is_non_iid(train_labels: np.ndarray) -> None:
    def skew(alpha: float) -> float:
        """Mean total-variation distance of each shard's label mix from the global mix."""
        shards = data.dirichlet_shards(train_labels, 5, alpha, seed=2)
        overall = np.bincount(train_labels, minlength=10) / len(train_labels)
        mixes = [np.bincount(train_labels[s], minlength=10) / len(s) for s in shards]
        return float(np.mean([0.5 * np.abs(m - overall).sum() for m in mixes]))

    assert skew(0.1) > 0.5
    assert skew(1000.0) < 0.1


def test_too_many_shards_is_a_one_line_task_error(train_labels: np.ndarray) -> None:
    n = len(train_labels)
    with pytest.raises(TaskError) as info:
        data.dirichlet_shards(train_labels, n // 10 + 1, 0.5, seed=0)
    assert str(info.value) == (
        f"cannot split {n} training samples into {n // 10 + 1} shards of at least 10: "
        f"use fewer local models"
    )


def test_local_and_test_datasets_line_up() -> None:
    X_test, y_test = data.test_dataset(seed=0)
    locals_ = [data.local_dataset(seed=0, k=4, alpha=0.5, index=i) for i in range(4)]
    assert sum(len(y) for _, y in locals_) + len(y_test) == 1797
    X, y = locals_[2]
    assert X.shape[1:] == data.INPUT_SHAPE and len(X) == len(y) >= 10
    with pytest.raises(TaskError, match="index 4 is out of range"):
        data.local_dataset(seed=0, k=4, alpha=0.5, index=4)
