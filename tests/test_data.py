from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from fedmst.errors import DatasetError, TaskError
from fedmst.fl import data
from fedmst.fl.partitions import Partition, split


@pytest.fixture(scope="module")
def train_labels() -> np.ndarray:
    return data.load_dataset("digits").y_train.numpy()


def test_digits_are_real_scaled_and_split_by_class() -> None:
    d = data.load_dataset("digits")
    assert d.input_shape == (1, 8, 8) and d.num_classes == 10
    assert len(d.y_train) + len(d.y_test) == 1797 and d.x_train.dtype == torch.float32
    assert d.x_train.min() == 0 and d.x_train.max() == 1
    assert d.y_test.bincount().min() >= 35  # stratified: every digit has its fifth in the test set


def test_split_is_deterministic_disjoint_and_complete() -> None:
    y = torch.arange(300) % 7
    ids = torch.arange(len(y))  # split sample ids in place of images to check disjointness
    train, y_train, test, y_test = data.train_test_split_seeded(ids, y, seed=3)
    assert torch.equal(y[train], y_train) and torch.equal(y[test], y_test)
    assert len(test) == pytest.approx(0.2 * len(y), abs=7)
    assert sorted(train.tolist() + test.tolist()) == list(range(len(y)))
    assert torch.equal(data.train_test_split_seeded(ids, y, seed=3)[2], test)
    assert not torch.equal(data.train_test_split_seeded(ids, y, seed=4)[2], test)


def test_split_rejects_bad_fraction() -> None:
    with pytest.raises(TaskError, match="test fraction"):
        data.train_test_split_seeded(torch.zeros(4), torch.zeros(4), 1.0, seed=0)


def _module(tmp_path, monkeypatch: pytest.MonkeyPatch, body: str) -> str:
    """An importable module holding dataset factories; returns its name."""
    (tmp_path / "fedmst_test_data.py").write_text("import torch\n" + body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fedmst_test_data", raising=False)
    data.load_dataset.cache_clear()
    return "fedmst_test_data"


def test_a_factory_gives_shape_and_classes(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = _module(tmp_path, monkeypatch, (
        "def blobs():\n"
        "    g = torch.Generator().manual_seed(0)\n"
        "    y = torch.arange(120) % 3\n"
        "    return torch.randn(120, 2, 5, generator=g).double() + y[:, None, None], y, "
        "torch.zeros(6, 2, 5), torch.tensor([0, 1, 2, 0, 1, 2], dtype=torch.int32)\n"))
    d = data.load_dataset(f"{name}:blobs")
    assert d.input_shape == (2, 5) and d.num_classes == 3
    assert d.x_train.dtype == torch.float32 and d.y_test.dtype == torch.int64
    assert data.load_dataset(f"{name}:blobs") is d  # loaded once per process


@pytest.mark.parametrize("body, message", [
    ("def f():\n    return torch.zeros(3, 2), torch.zeros(3)\n", "must return (x_train, y_train, x_test, y_test)"),
    ("def f():\n    x = torch.zeros(3, 2)\n    return x, torch.zeros(3), x, torch.zeros(3, dtype=torch.long)\n",
     "y_train must hold integer labels, got torch.float32"),
    ("def f():\n    x, y = torch.zeros(3, 2), torch.zeros(3, dtype=torch.long)\n"
     "    return x, y, torch.zeros(3, 4), y\n",
     "train inputs are (2,), test inputs (4,)"),
    ("def f():\n    x, y = torch.zeros(3, 2), torch.zeros(2, dtype=torch.long)\n    return x, y, x, y\n",
     "x_train (3, 2) and y_train (2,) must be [N, ...] and [N]"),
    ("def f():\n    x, y = torch.zeros(3, 2), -torch.ones(3, dtype=torch.long)\n    return x, y, x, y\n",
     "y_train has negative labels"),
    ("def f():\n    raise OSError('no such file: cifar')\n", "factory raised OSError: no such file: cifar"),
    ("g = 1\n", "module 'fedmst_test_data' has no attribute 'f'"),
])
def test_a_bad_factory_is_one_line(tmp_path, monkeypatch: pytest.MonkeyPatch, body: str, message: str) -> None:
    name = _module(tmp_path, monkeypatch, body)
    with pytest.raises(DatasetError) as info:
        data.load_dataset(f"{name}:f")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_an_unknown_dataset_names_the_choices() -> None:
    with pytest.raises(DatasetError, match="unknown dataset 'mnist'; choose one of: (.*, )?digits"):
        data.load_dataset("mnist")


@pytest.mark.parametrize("k, alpha", [(1, 0.5), (5, 0.1), (10, 0.5), (60, 0.1)])
def test_shards_partition_every_index_once(train_labels: np.ndarray, k: int, alpha: float) -> None:
    shards = split(Partition("dirichlet", alpha), train_labels, k, seed=1)
    assert len(shards) == k
    assert all(len(s) >= 10 for s in shards)
    assert np.array_equal(np.sort(np.concatenate(shards)), np.arange(len(train_labels)))


def test_shards_are_deterministic_by_seed(train_labels: np.ndarray) -> None:
    a = split(Partition("dirichlet", 0.5), train_labels, 5, seed=7)
    b = split(Partition("dirichlet", 0.5), torch.from_numpy(train_labels), 5, seed=7)
    c = split(Partition("dirichlet", 0.5), train_labels, 5, seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_small_alpha_is_non_iid(train_labels: np.ndarray) -> None:
    def skew(alpha: float) -> float:
        """Mean total-variation distance of each shard's label mix from the global mix."""
        shards = split(Partition("dirichlet", alpha), train_labels, 5, seed=2)
        overall = np.bincount(train_labels, minlength=10) / len(train_labels)
        mixes = [np.bincount(train_labels[s], minlength=10) / len(s) for s in shards]
        return float(np.mean([0.5 * np.abs(m - overall).sum() for m in mixes]))

    assert skew(0.1) > 0.5
    assert skew(1000.0) < 0.1


def test_too_many_shards_is_a_one_line_task_error(train_labels: np.ndarray) -> None:
    n = len(train_labels)
    with pytest.raises(TaskError) as info:
        split(Partition("dirichlet", 0.5), train_labels, n // 10 + 1, seed=0)
    assert str(info.value) == (
        f"cannot split {n} training samples into {n // 10 + 1} shards of at least 10: "
        f"use fewer local models"
    )


@pytest.mark.parametrize("bad, count", [("float('nan')", 1), ("float('inf')", 1), ("-float('inf')", 1)])
def test_inputs_that_are_not_finite_are_refused(tmp_path, monkeypatch: pytest.MonkeyPatch, bad: str,
                                                count: int) -> None:
    name = _module(tmp_path, monkeypatch, (
        "def f():\n"
        "    x, y = torch.zeros(5, 2, 3), torch.tensor([0, 1, 0, 1, 0])\n"
        f"    x[3, 1, 2] = {bad}\n"
        "    return x.clone(), y, torch.zeros(2, 2, 3), y[:2]\n"))
    with pytest.raises(DatasetError) as info:
        data.load_dataset(f"{name}:f")
    assert str(info.value) == (f"dataset '{name}:f': x_train has NaN or infinite values in {count} of 5 samples; "
                               "a model would learn nothing but NaN from them")


def test_register_dataset_and_duplicate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data, "DATASETS", data.DATASETS.copy())
    x, y = torch.ones(4, 3), torch.tensor([0, 1, 2, 0])
    data.register_dataset("tiny", lambda: (x, y, x, y))
    data.load_dataset.cache_clear()
    assert data.load_dataset("tiny").num_classes == 3 and "tiny" in data.DATASETS.names()
    with pytest.raises(DatasetError, match="^dataset 'digits' is already registered; pick another name$"):
        data.register_dataset("digits", lambda: (x, y, x, y))
    with pytest.raises(DatasetError, match="^dataset 'nope': 42 is not callable$"):
        data.register_dataset("nope", 42)  # type: ignore[arg-type]
