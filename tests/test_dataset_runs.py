"""Runs on datasets in LEAF's on-disk format, generated here (no download): FEMNIST split by
writer and Shakespeare split by speaker, MST and SPFF in real Mininet, their global models the
same (in-path sums are exact), the split recorded in summary.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import assert_fedavg, fedmst_cli
from leafdata import femnist, image_folder, shakespeare
from fedmst.fl import data, models as models_

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("task, model", [("femnist", "cnn"), ("shakespeare", "lstm")])
def test_a_leaf_dataset_split_by_its_users_runs_both_schedules_to_the_same_model(
        clean_host: None, tmp_path: Path, task: str, model: str) -> None:
    root = (femnist if task == "femnist" else shakespeare)(tmp_path / task, users=10, per_user=30)
    spec = f"leaf:{task}:{root}"
    done = fedmst_cli("compare", "--topology", "small", "--local-models", "4", "--rounds", "2", "--model", model,
                      "--dataset", spec, "--partition", "natural", "--save-models", "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr[-2000:]
    summaries = {s: json.loads((tmp_path / "out" / s / "summary.json").read_text()) for s in ("spff", "mst")}
    dataset = data.load_dataset(spec)
    assert dataset.groups is not None
    for scheduler, summary in summaries.items():
        split = summary["partition"]
        assert split["partition"] == "natural" and list(split["tasks"]) == ["task0"]
        models = split["tasks"]["task0"]
        assert len(models) == 4 and sum(m["samples"] for m in models) == len(dataset.y_train)  # every sample once
        assert all(sum(m["classes"].values()) == m["samples"] for m in models)
        assert [m["samples"] % 27 for m in models] == [0] * 4  # whole writers: 27 training samples each
        assert summary["model_bytes"] == models_.sized_model(model, dataset)
        saved = tmp_path / "out" / scheduler / "models"
        assert_fedavg(sorted(saved.iterdir())[-1])
    last = sorted((tmp_path / "out" / "spff" / "models").iterdir())[-1].name
    spff, mst = (torch.load(tmp_path / "out" / s / "models" / last / "task0-global.pt") for s in ("spff", "mst"))
    assert torch.allclose(spff, mst, atol=1e-6), (spff - mst).abs().max()


def test_an_image_folder_split_one_class_a_local_model_runs_to_the_same_model(clean_host: None,
                                                                                tmp_path: Path) -> None:
    """32x32 RGB images in ImageFolder's layout, ``--partition classes:1``: each local model holds
    one class (summary.json says which), and MST's global model is SPFF's."""
    root = image_folder(tmp_path / "images", classes=3, per_class=20)
    done = fedmst_cli("compare", "--topology", "small", "--local-models", "3", "--rounds", "1", "--model", "cnn",
                      "--dataset", f"imagefolder:{root}", "--partition", "classes:1", "--save-models",
                      "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr[-2000:]
    split = json.loads((tmp_path / "out" / "mst" / "summary.json").read_text())["partition"]
    held = [m["classes"] for m in split["tasks"]["task0"]]
    assert split["partition"] == "classes:1" and sorted(next(iter(c)) for c in held) == ["0", "1", "2"]
    assert [sum(c.values()) for c in held] == [16, 16, 16]
    last = sorted((tmp_path / "out" / "spff" / "models").iterdir())[-1].name
    spff, mst = (torch.load(tmp_path / "out" / s / "models" / last / "task0-global.pt") for s in ("spff", "mst"))
    assert torch.allclose(spff, mst, atol=1e-6), (spff - mst).abs().max()
