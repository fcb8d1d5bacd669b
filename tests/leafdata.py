"""Small datasets generated in their on-disk formats (no download, no shipped copy): LEAF FEMNIST's
28x28 images as 784 values per sample with a writer per user, Shakespeare's 80-character lines
with the next character as the label, a speaker per user. Each class (or next character) has its
own pattern, so a model can learn them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedmst.fl.sources import LETTERS


def femnist(root: Path, users: int = 12, per_user: int = 30, classes: int = 10, split: bool = True,
            seed: int = 0) -> Path:
    """``root`` with LEAF FEMNIST JSON: ``train/`` and ``test/`` (``split``), else one all_data file."""
    rng = np.random.default_rng(seed)
    patterns = rng.random((classes, 784))
    data: dict[str, dict[str, list]] = {}
    for u in range(users):
        labels = rng.integers(0, classes, per_user)
        x = np.clip(patterns[labels] + rng.normal(0, 0.2, (per_user, 784)), 0, 1)
        data[f"f{u:04d}_{u % 7:02d}"] = {"x": x.round(3).tolist(), "y": labels.tolist()}
    return _write(root, data, split)


def shakespeare(root: Path, users: int = 10, per_user: int = 30, split: bool = True, seed: int = 0) -> Path:
    """``root`` with LEAF Shakespeare JSON: each line a repeated phrase, its next character the label."""
    rng = np.random.default_rng(seed)
    phrases = ["to be or not to be ", "all the world's a stage ", "the rest is silence "]
    data: dict[str, dict[str, list]] = {}
    for u in range(users):
        text = "".join(rng.choice(phrases) for _ in range(40))
        starts = rng.integers(0, len(text) - 81, per_user)
        data[f"HAMLET_{u}"] = {"x": [text[s:s + 80] for s in starts], "y": [text[s + 80] for s in starts]}
    assert all(c in LETTERS for c in "".join(phrases))
    return _write(root, data, split)


def _write(root: Path, data: dict[str, dict[str, list]], split: bool) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if not split:
        _dump(root / "all_data_0.json", data)
        return root
    train = {u: {k: v[: len(v) * 9 // 10] for k, v in d.items()} for u, d in data.items()}
    test = {u: {k: v[len(v) * 9 // 10:] for k, v in d.items()} for u, d in data.items()}
    for name, part in (("train", train), ("test", test)):
        (root / name).mkdir(exist_ok=True)
        _dump(root / name / f"{name}_0.json", part)
    return root


def _dump(path: Path, data: dict[str, dict[str, list]]) -> None:
    users = sorted(data)
    path.write_text(json.dumps({"users": users, "num_samples": [len(data[u]["y"]) for u in users],
                                "user_data": data}))


def image_folder(root: Path, classes: int = 3, per_class: int = 20, size: int = 32, seed: int = 0) -> Path:
    """``root`` in torchvision's ImageFolder layout: a folder of RGB PNGs per class, each class a
    colour of its own under noise."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for c in range(classes):
        folder = root / f"class{c}"
        folder.mkdir(parents=True, exist_ok=True)
        colour = rng.integers(0, 256, 3)
        for i in range(per_class):
            pixels = np.clip(colour + rng.normal(0, 30, (size, size, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(folder / f"{i}.png")
    return root
