"""Datasets from the formats researchers have on disk: LEAF's JSON folders, plain tensor files.

``--dataset`` takes, besides a built-in name or ``package.module:factory``:

- ``leaf:femnist:ROOT``, ``leaf:shakespeare:ROOT``: LEAF's JSON files (``users``,
  ``num_samples``, ``user_data``), from ROOT's ``train/`` and ``test/`` folders where LEAF's
  preprocessing split them, else from every ``*.json`` in ROOT, each user's samples split 90/10 by
  a seeded rule (LEAF's default ``--tf 0.9``). FEMNIST's images are 784 values (28x28, one
  channel), 62 classes; Shakespeare's inputs are 80-character lines and its label the next
  character, both as indices into LEAF's 80 letters (floats, as every input here: the ``lstm``
  model embeds them). Every training sample keeps its user, for ``--partition natural``.
- ``imagefolder:ROOT``: torchvision's ``ImageFolder`` layout, one folder of images per class (the
  classes in the order of their folders' names), read with Pillow into ``[C, H, W]`` floats in
  ``[0, 1]`` (every image one size and mode); each class's images split 80/20 into train and
  test by a seeded rule (:func:`train_test_split_seeded`).
- ``PATH.npz`` or ``PATH.pt``: ``x_train``, ``y_train``, ``x_test``, ``y_test`` (an ``.npz``'s
  arrays, or a ``.pt`` file's dict of tensors), and optionally ``groups_train`` (a natural id per
  training sample).

Nothing is downloaded: a missing root or file says in one line where to put it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedmst.errors import DatasetError, TaskError

LEAF_TASKS = ("femnist", "shakespeare")
LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
"""LEAF's 80 letters: Shakespeare's characters are their indices here."""
FEMNIST_PIXELS = 28 * 28
SHAKESPEARE_LINE = 80
TRAIN_FRACTION = 0.9
"""Of each user's samples, where ROOT has no train/test folders (LEAF's own default, ``--tf 0.9``)."""
TENSOR_KEYS = ("x_train", "y_train", "x_test", "y_test")


Tensors = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""``(x_train, y_train, x_test, y_test)``."""


@dataclass(frozen=True)
class Loaded:
    """A dataset read from disk: its four tensors and, where it has them, a natural id per
    training sample (a LEAF user: a writer, a speaker)."""

    tensors: Tensors
    groups: np.ndarray | None = None


def is_on_disk(spec: str) -> bool:
    """Whether ``spec`` names a dataset in an on-disk format (not a built-in or a factory).

    >>> is_on_disk("leaf:femnist:/data/femnist"), is_on_disk("data/x.npz"), is_on_disk("pkg.mod:make")
    (True, True, False)
    """
    return spec.startswith(("leaf:", "imagefolder:")) or spec.endswith((".npz", ".pt"))


def read(spec: str) -> Loaded:
    """The dataset ``spec`` names on disk (:func:`is_on_disk`), or :class:`DatasetError` in one line."""
    if spec.startswith("leaf:"):
        task, colon, root = spec.removeprefix("leaf:").partition(":")
        if task not in LEAF_TASKS or not colon or not root:
            raise DatasetError(f"dataset {spec!r}: give leaf:TASK:ROOT with TASK one of {', '.join(LEAF_TASKS)}")
        return _leaf(spec, task, Path(root))
    if spec.startswith("imagefolder:"):
        return _image_folder(spec, Path(spec.removeprefix("imagefolder:")))
    return _tensor_file(spec, Path(spec))


def _leaf(spec: str, task: str, root: Path) -> Loaded:
    if not root.is_dir():
        raise DatasetError(f"dataset {spec!r}: no folder {root}; put LEAF's {task} there (the JSON files its "
                           f"preprocess.sh writes: data/train and data/test, or data/all_data)")
    if (root / "train").is_dir() and (root / "test").is_dir():
        train, test = _users(spec, root / "train"), _users(spec, root / "test")
    else:
        train, test = _split(_users(spec, root))
    if not train:
        raise DatasetError(f"dataset {spec!r}: the JSON files in {root} hold no user with samples")
    decode = _femnist if task == "femnist" else _shakespeare
    names = sorted(train)
    x_train, y_train = decode(spec, [train[u] for u in names])
    x_test, y_test = decode(spec, [test[u] for u in sorted(test)])
    groups = np.concatenate([np.full(len(train[u][1]), i, dtype=np.int64) for i, u in enumerate(names)])
    return Loaded((x_train, y_train, x_test, y_test), groups)


Samples = tuple[list[Any], list[Any]]


def _users(spec: str, folder: Path) -> dict[str, Samples]:
    """Every user's (x, y) in ``folder``'s JSON files (a user in several files: their samples together)."""
    files = sorted(folder.glob("*.json"))
    if not files:
        raise DatasetError(f"dataset {spec!r}: {folder} holds no .json file (LEAF's format: users, num_samples, "
                           "user_data)")
    users: dict[str, Samples] = {}
    for path in files:
        try:
            data = json.loads(path.read_text())
            for user in data["users"]:
                samples = data["user_data"][user]
                x, y = users.setdefault(str(user), ([], []))
                if len(samples["x"]) != len(samples["y"]):
                    raise DatasetError(f"dataset {spec!r}: {path}: user {user} has {len(samples['x'])} inputs and "
                                       f"{len(samples['y'])} labels")
                x.extend(samples["x"])
                y.extend(samples["y"])
        except (OSError, ValueError) as exc:
            raise DatasetError(f"dataset {spec!r}: cannot read {path}: {' '.join(str(exc).split())[:160]}") from None
        except (KeyError, TypeError):
            raise DatasetError(f"dataset {spec!r}: {path} is not in LEAF's format (users, num_samples, "
                               "user_data with x and y for each user)") from None
    return {u: s for u, s in users.items() if s[1]}


def _split(users: dict[str, Samples]) -> tuple[dict[str, Samples], dict[str, Samples]]:
    """Each user's samples split :data:`TRAIN_FRACTION` / the rest, shuffled by a seed of its own:
    the same split on every host and in every run."""
    train, test = {}, {}
    for user, (x, y) in users.items():
        order = np.random.default_rng(list(user.encode())).permutation(len(y))
        cut = len(y) if len(y) < 2 else min(len(y) - 1, max(1, round(TRAIN_FRACTION * len(y))))
        train[user] = ([x[i] for i in order[:cut]], [y[i] for i in order[:cut]])
        if cut < len(y):
            test[user] = ([x[i] for i in order[cut:]], [y[i] for i in order[cut:]])
    return train, test


def _femnist(spec: str, users: list[Samples]) -> tuple[torch.Tensor, torch.Tensor]:
    x = [v for u in users for v in u[0]]
    y = [v for u in users for v in u[1]]
    try:
        images = np.asarray(x, dtype=np.float32).reshape(-1, 1, 28, 28)
    except ValueError:
        raise DatasetError(f"dataset {spec!r}: FEMNIST's inputs are {FEMNIST_PIXELS} values each (28x28)") from None
    return torch.from_numpy(images), torch.as_tensor(np.asarray(y, dtype=np.int64))


def _shakespeare(spec: str, users: list[Samples]) -> tuple[torch.Tensor, torch.Tensor]:
    lines = [v for u in users for v in u[0]]
    nexts = [v for u in users for v in u[1]]
    index = {c: i for i, c in enumerate(LETTERS)}
    try:
        x = np.array([[index[c] for c in line] for line in lines], dtype=np.float32).reshape(len(lines), -1)
        y = np.array([index[c] for c in nexts], dtype=np.int64)
    except KeyError as exc:
        raise DatasetError(f"dataset {spec!r}: character {exc.args[0]!r} is not one of LEAF's 80 letters") from None
    except (TypeError, ValueError):
        raise DatasetError(f"dataset {spec!r}: Shakespeare's inputs are lines of {SHAKESPEARE_LINE} characters and "
                           "its labels single characters") from None
    return torch.from_numpy(x), torch.from_numpy(y)


def _tensor_file(spec: str, path: Path) -> Loaded:
    if not path.is_file():
        raise DatasetError(f"dataset {spec!r}: no file {path} (an .npz or .pt with {', '.join(TENSOR_KEYS)})")
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as f:
                found = {k: torch.from_numpy(f[k]) for k in f.files}
        else:
            found = torch.load(path, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - whatever the file holds, it is not ours
        raise DatasetError(f"dataset {spec!r}: cannot read {path}: {' '.join(str(exc).split())[:160]}") from None
    if not isinstance(found, dict) or not set(TENSOR_KEYS) <= set(found):
        held = ", ".join(map(str, found)) or "nothing" if isinstance(found, dict) else type(found).__name__
        raise DatasetError(f"dataset {spec!r}: {path} must hold {', '.join(TENSOR_KEYS)}; it holds {held}")
    groups = found.get("groups_train")
    return Loaded(tuple(found[k] for k in TENSOR_KEYS),  # type: ignore[arg-type]
                  None if groups is None else np.asarray(groups, dtype=np.int64))


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")
"""The image files an image folder's class folders are read for (torchvision's ``IMG_EXTENSIONS``)."""
TEST_FRACTION = 0.2


def _image_folder(spec: str, root: Path) -> Loaded:
    from PIL import Image, UnidentifiedImageError

    if not root.is_dir():
        raise DatasetError(f"dataset {spec!r}: no folder {root}; put one folder of images per class there")
    classes = sorted(p for p in root.iterdir() if p.is_dir())
    files = [(f, c) for c, folder in enumerate(classes) for f in sorted(folder.rglob("*"))
             if f.suffix.lower() in IMAGE_SUFFIXES]
    if len(classes) < 2 or not files:
        raise DatasetError(f"dataset {spec!r}: {root} holds {len(classes)} class folder(s) and {len(files)} image(s); "
                           "give one folder of images per class, two classes or more")
    arrays, shapes = [], set()
    for path, _ in files:
        try:
            with Image.open(path) as image:
                pixels = np.asarray(image, dtype=np.float32)
        except (OSError, UnidentifiedImageError) as exc:
            raise DatasetError(f"dataset {spec!r}: cannot read {path}: {' '.join(str(exc).split())[:160]}") from None
        arrays.append(pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1))
        shapes.add(arrays[-1].shape)
    if len(shapes) > 1:
        shown = ", ".join("x".join(map(str, s)) for s in sorted(shapes)[:3])
        raise DatasetError(f"dataset {spec!r}: its images come in {len(shapes)} shapes (channels x height x width: "
                           f"{shown}); give images of one size and mode")
    x = torch.from_numpy(np.stack(arrays) / 255.0).float()
    y = torch.tensor([c for _, c in files])
    return Loaded(train_test_split_seeded(x, y, TEST_FRACTION, seed=0))


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
