"""Real data, split among local models: a dataset by name (built in, :func:`register_dataset`, or
the ``fedmst.datasets`` entry-point group), ``package.module:factory``, or a file or folder in a
format researchers have on disk (:mod:`fedmst.fl.sources`: LEAF, image folders, tensor files;
:mod:`fedmst.fl.vision`: torchvision's datasets), split by
``--partition`` (:mod:`fedmst.fl.partitions`).

A factory is called with no arguments and returns ``(x_train, y_train, x_test, y_test)``:
float inputs of any shape ``[N, ...]`` and integer labels ``[N]`` in ``0..C-1``. The model's input
shape and class count come from those tensors. The built-in ``digits`` (1,797 8x8 images, the UCI
handwritten digits as scikit-learn ships them, in ``digits.csv.gz`` beside this module) needs
no download. Every split is a pure function of its seed, so each agent rebuilds its own shard
from ``(seed, k, partition, index)`` instead of receiving it over the emulated network.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from fedmst.errors import DatasetError
from fedmst.fl import partitions, sources, vision
from fedmst.fl.sources import train_test_split_seeded
from fedmst.plugins import Registry, one_line

Tensors = sources.Tensors
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
    groups: np.ndarray | None = None
    """Each training sample's natural id (a LEAF user), for ``--partition natural``; None: none."""

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
    """The dataset ``spec`` names (a built-in name, ``package.module:factory`` or a format on disk),
    checked; loaded once per process, so agents forked from a process that loaded it share its memory."""
    reader = vision.read if vision.is_vision(spec) else sources.read if sources.is_on_disk(spec) else None
    if reader is not None:
        loaded = reader(spec)
        tensors, groups = loaded.tensors, loaded.groups
    else:
        factory = DATASETS.lookup(spec)
        try:
            tensors, groups = factory(), None
        except Exception as exc:  # noqa: BLE001 - any factory failure is the spec's fault
            raise DatasetError(f"dataset {spec!r}: factory raised {one_line(exc)}") from exc
    checked = check_tensors(spec, tensors)
    if groups is not None and len(groups) != len(checked[1]):
        raise DatasetError(f"dataset {spec!r}: {len(groups)} natural ids for {len(checked[1])} training samples")
    return Dataset(spec, *checked, groups=groups)


def shards(dataset: Dataset, k: int, partition: str, seed: int) -> list[np.ndarray]:
    """The training sample indices of each of ``k`` local models under ``--partition partition``
    (:func:`fedmst.fl.partitions.split`)."""
    return partitions.split(partitions.parse_partition(partition), np.asarray(dataset.y_train), k, seed,
                            dataset.groups)


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
