"""A user's own dataset, model or worker backend that cannot work is refused by the real command
in one line, exit 1, before any network is built (see test_bad_input.py for the checks)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from test_bad_input import _command, error_line, fedmst

pytestmark = pytest.mark.host

MODULES = {
    "nandata.py": ("import torch\n"
                   "def make():\n"
                   "    y = torch.arange(200) % 4\n"
                   "    x = torch.randn(200, 3, 4, 4)\n"
                   "    x[7, 0, 1, 1] = float('nan')\n"
                   "    return x, y, x[:40], y[:40]\n"),
    "narrow.py": ("from torch import nn\n"
                  "def make(num_classes, input_shape):\n"
                  "    return nn.Sequential(nn.Flatten(), nn.Linear(64, 6))\n"),
    "mybackend.py": "class Workers:\n    pass\n",
}


@pytest.mark.parametrize("extra, fragments", [
    (["--dataset", "nandata:make"], ("dataset 'nandata:make'", "x_train has NaN or infinite values in 1 of 200")),
    (["--model", "narrow:make"], ("model 'narrow:make'", "outputs 6 scores", "dataset 'digits' has 10 classes")),
    (["--workers", "kubernetes"], ("unknown worker backend 'kubernetes'", "docker, process", "package.module:Class")),
    (["--workers", "mybackend:Workers"], ("worker backend 'mybackend:Workers'", "not a concrete subclass")),
], ids=["nan-dataset", "narrow-model", "unknown-backend", "backend-not-a-subclass"])
def test_a_plugin_that_cannot_work_is_one_line(tmp_path: Path, extra: list[str], fragments: tuple[str, ...]) -> None:
    for name, text in MODULES.items():
        (tmp_path / name).write_text(text)
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    line = error_line(fedmst(tmp_path, *_command("run", extra, "out"), env={"PYTHONPATH": path}))
    assert all(f in line for f in fragments), line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
