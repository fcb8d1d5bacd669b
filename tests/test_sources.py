"""Datasets in the formats researchers have on disk: LEAF's JSON folders and tensor files,
generated here (:mod:`leafdata`), read as fedmst reads them; a dataset that is missing or in
another format is one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedmst.errors import DatasetError
from fedmst.fl import data, models, training
from fedmst.fl.partitions import Partition, split
from fedmst.fl.sources import LETTERS, read
from leafdata import femnist, image_folder, shakespeare


@pytest.mark.parametrize("split_folders", [True, False])
def test_leaf_femnist_is_images_of_its_writers(tmp_path: Path, split_folders: bool) -> None:
    root = femnist(tmp_path / "femnist", users=12, per_user=30, split=split_folders)
    loaded = read(f"leaf:femnist:{root}")
    x_train, y_train, x_test, y_test = loaded.tensors
    assert x_train.shape[1:] == (1, 28, 28) and x_test.shape[1:] == (1, 28, 28)
    assert len(x_train) + len(x_test) == 12 * 30 and len(x_train) == 12 * 27
    assert loaded.groups is not None and len(loaded.groups) == len(y_train)
    assert sorted(set(loaded.groups.tolist())) == list(range(12))  # every writer, 27 training samples each
    assert np.bincount(loaded.groups).tolist() == [27] * 12


def test_leaf_shakespeare_is_lines_of_letter_indices(tmp_path: Path) -> None:
    root = shakespeare(tmp_path / "shakespeare", users=5, per_user=20)
    x_train, y_train, _, _ = read(f"leaf:shakespeare:{root}").tensors
    assert x_train.shape == (5 * 18, 80) and x_train.dtype == torch.float32
    line = "".join(LETTERS[int(i)] for i in x_train[0])
    assert set(line) <= set("to be or not all the world's a stage rest is silence")
    assert 0 <= int(y_train.min()) and int(y_train.max()) < len(LETTERS)


def test_natural_partition_of_a_leaf_dataset_gives_each_local_model_whole_writers(tmp_path: Path) -> None:
    root = femnist(tmp_path / "femnist", users=12, per_user=30)
    dataset = data.load_dataset(f"leaf:femnist:{root}")
    shards = data.shards(dataset, 4, "natural", seed=1)
    assert dataset.groups is not None
    writers = [set(dataset.groups[s].tolist()) for s in shards]
    assert [len(w) for w in writers] == [3, 3, 3, 3] and set().union(*writers) == set(range(12))
    again = split(Partition("natural"), dataset.y_train.numpy(), 4, 1, dataset.groups)
    assert all(np.array_equal(a, b) for a, b in zip(shards, again))


def test_the_lstm_learns_the_next_character_of_generated_shakespeare(tmp_path: Path) -> None:
    root = shakespeare(tmp_path / "s", users=6, per_user=40)
    dataset = data.load_dataset(f"leaf:shakespeare:{root}")
    assert models.sized_model("lstm", dataset) == 4 * sum(
        p.numel() for p in models.build_model("lstm", dataset.num_classes, dataset.input_shape).parameters())
    torch.manual_seed(0)
    model = models.build_model("lstm", dataset.num_classes, dataset.input_shape)
    before = training.accuracy(model, dataset.x_train, dataset.y_train)
    training.train_local(model, dataset.x_train, dataset.y_train, epochs=8, batch_size=16, lr=0.05,
                         optimizer="adam", seed=0)
    assert training.accuracy(model, dataset.x_train, dataset.y_train) > max(0.4, before + 0.2)


@pytest.mark.parametrize("suffix", [".npz", ".pt"])
def test_a_tensor_file_with_natural_ids(tmp_path: Path, suffix: str) -> None:
    x, y = np.random.default_rng(0).random((40, 3), dtype=np.float32), np.arange(40) % 4
    arrays = {"x_train": x[:30], "y_train": y[:30], "x_test": x[30:], "y_test": y[30:], "groups_train": y[:30] // 2}
    path = tmp_path / f"d{suffix}"
    if suffix == ".npz":
        np.savez(path, **arrays)
    else:
        torch.save({k: torch.from_numpy(np.asarray(v)) for k, v in arrays.items()}, path)
    dataset = data.load_dataset(str(path))
    assert dataset.input_shape == (3,) and dataset.num_classes == 4 and len(dataset.x_test) == 10
    assert dataset.groups is not None and dataset.groups.tolist() == (y[:30] // 2).tolist()


def _other_format(tmp_path: Path) -> str:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "a.json").write_text(json.dumps({"images": []}))
    return f"leaf:femnist:{tmp_path / 'x'}"


def _no_users(tmp_path: Path) -> str:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "a.json").write_text(json.dumps({"users": [], "num_samples": [], "user_data": {}}))
    return f"leaf:femnist:{tmp_path / 'x'}"


def _missing_keys(tmp_path: Path) -> str:
    np.savez(tmp_path / "d.npz", x=np.zeros(3))
    return str(tmp_path / "d.npz")


@pytest.mark.parametrize("spec, said", [
    (lambda p: f"leaf:femnist:{p / 'nowhere'}", "no folder {p}/nowhere; put LEAF's femnist there"),
    (lambda p: f"leaf:mnist:{p}", "give leaf:TASK:ROOT with TASK one of femnist, shakespeare"),
    (_other_format, "is not in LEAF's format"),
    (_no_users, "hold no user with samples"),
    (lambda p: str(p / "none.npz"), "no file {p}/none.npz"),
    (_missing_keys, "must hold x_train, y_train, x_test, y_test; it holds x"),
    (lambda p: f"leaf:femnist:{p}", "holds no .json file"),
])
def test_a_missing_or_foreign_dataset_is_one_line(tmp_path: Path, spec, said: str) -> None:  # noqa: ANN001
    with pytest.raises(DatasetError) as info:
        data.load_dataset(spec(tmp_path))
    assert said.format(p=tmp_path) in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_an_image_folder_is_images_of_its_class_folders_split_by_a_seed(tmp_path: Path) -> None:
    root = image_folder(tmp_path / "images", classes=3, per_class=20)
    dataset = data.load_dataset(f"imagefolder:{root}")
    assert dataset.input_shape == (3, 32, 32) and dataset.num_classes == 3
    assert len(dataset.x_train) == 48 and np.bincount(dataset.y_test.numpy()).tolist() == [4, 4, 4]
    assert 0 <= float(dataset.x_train.min()) and float(dataset.x_train.max()) <= 1
    again = read(f"imagefolder:{root}").tensors
    assert all(torch.equal(a, b) for a, b in zip(again, (dataset.x_train, dataset.y_train, dataset.x_test,
                                                        dataset.y_test)))


def test_an_image_folder_of_mixed_sizes_or_one_class_is_one_line(tmp_path: Path) -> None:
    from PIL import Image

    root = image_folder(tmp_path / "images", classes=2, per_class=3)
    Image.new("RGB", (16, 16)).save(root / "class0" / "small.png")
    with pytest.raises(DatasetError, match=r"its images come in 2 shapes \(channels x height x width: 3x16x16, "
                                           r"3x32x32\); give images of one size and mode"):
        read(f"imagefolder:{root}")
    lonely = image_folder(tmp_path / "one", classes=1, per_class=3)
    with pytest.raises(DatasetError, match="holds 1 class folder"):
        read(f"imagefolder:{lonely}")
    with pytest.raises(DatasetError, match="no folder .*; put one folder of images per class there"):
        read(f"imagefolder:{tmp_path / 'nowhere'}")


@pytest.mark.parametrize("optimizer, mu", [("sgd", 0.0), ("adam", 0.1)])
def test_a_shard_trained_by_its_rows_is_the_model_its_copy_would_train(optimizer: str, mu: float) -> None:
    """Local models index their shard of the dataset their process holds once, batch by batch,
    instead of each copying it: the same batches in the same order, the same weights, bit for bit."""
    digits = data.load_dataset("digits")
    rows = torch.as_tensor(data.shards(digits, 4, "dirichlet:0.5", seed=3)[1])
    trained = []
    for by_rows in (False, True):
        torch.manual_seed(0)
        model = models.build_model("mlp", digits.num_classes, digits.input_shape)
        x, y = (digits.x_train, digits.y_train) if by_rows else (digits.x_train[rows], digits.y_train[rows])
        loss = training.train_local(model, x, y, rows=rows if by_rows else None, epochs=2, batch_size=16, lr=0.05,
                                    optimizer=optimizer, seed=9, proximal_mu=mu)
        trained.append((loss, [p.detach().clone() for p in model.parameters()]))
    assert trained[0][0] == trained[1][0]
    assert all(torch.equal(a, b) for a, b in zip(trained[0][1], trained[1][1]))
