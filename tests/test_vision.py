"""torchvision's models and datasets (``--model torchvision:NAME``, ``--dataset torchvision:NAME:ROOT``).

Run in the virtual environment ``scripts/setup.sh --vision --venv .venv-vision`` makes (scripts/test.sh
does), where torchvision imports; data generated here in formats torchvision reads without a checksum
(MNIST's idx files, image folders): no download, no shipped copy of a dataset."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from conftest import assert_fedavg, fedmst_cli
from leafdata import image_folder
from fedmst.errors import DatasetError, ModelError
from fedmst.fl import aggregation, data, models, training

pytestmark = pytest.mark.vision


def idx_files(root: Path, name: str = "FashionMNIST", train: int = 120, test: int = 30, seed: int = 0) -> Path:
    """``root/NAME/raw``'s four idx files as torchvision's MNIST family reads them: 28x28 images,
    each class a brightness of its own under noise."""
    raw = root / name / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for prefix, n in (("train", train), ("t10k", test)):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = np.clip(labels[:, None, None] * 25 + rng.normal(0, 20, (n, 28, 28)), 0, 255).astype(np.uint8)
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 0x803, n, 28, 28) + images.tobytes())
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 0x801, n) + labels.tobytes())
    return root


def test_resnet18_is_sized_to_the_classes_with_the_small_image_stem() -> None:
    small = models.build_model("torchvision:resnet18", num_classes=7, input_shape=(3, 32, 32))
    large = models.build_model("torchvision:resnet18", num_classes=7, input_shape=(3, 224, 224))
    assert small.fc.out_features == large.fc.out_features == 7
    assert (small.conv1.kernel_size, small.conv1.stride, type(small.maxpool)) == ((3, 3), (1, 1), nn.Identity)
    assert (large.conv1.kernel_size, large.conv1.stride, type(large.maxpool)) == ((7, 7), (2, 2), nn.MaxPool2d)
    small.eval()
    assert small(torch.rand(2, 3, 32, 32)).shape == (2, 7)
    # ResNet-18's 11.2 M parameters and its batch norms' running means and variances, 4 bytes each
    floats = sum(p.numel() for p in small.parameters()) + sum(
        b.numel() for n, b in small.named_buffers() if n.endswith(("running_mean", "running_var")))
    assert models.model_bytes(small) == 4 * floats and 44.5e6 < models.model_bytes(small) < 45e6


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small", "efficientnet_b0"])
def test_a_grayscale_dataset_gets_a_first_convolution_of_one_channel(name: str) -> None:
    model = models.build_model(f"torchvision:{name}", num_classes=62, input_shape=(1, 28, 28))
    first = next(m for m in model.modules() if isinstance(m, nn.Conv2d))
    assert first.in_channels == 1
    model.eval()
    assert model(torch.rand(2, 1, 28, 28)).shape == (2, 62)


def test_batch_norm_buffers_travel_and_are_averaged_as_the_weights() -> None:
    """Two models' wire vectors averaged and loaded: each running mean is the average of theirs;
    the integer batch counter is not on the wire and stays each model's own."""
    a, b = (models.build_model("torchvision:resnet18", num_classes=3, input_shape=(3, 16, 16)) for _ in range(2))
    for model, shift in ((a, 1.0), (b, 3.0)):
        training.train_local(model, torch.rand(8, 3, 16, 16) + shift, torch.arange(8) % 3, epochs=1, batch_size=4,
                             lr=0.01, seed=0)
    mean = aggregation.fedavg([aggregation.flatten(a), aggregation.flatten(b)], [1, 3])
    expected = 0.25 * a.bn1.running_mean + 0.75 * b.bn1.running_mean
    aggregation.load_flat(a, mean)
    assert torch.allclose(a.bn1.running_mean, expected, atol=1e-6)
    assert int(a.bn1.num_batches_tracked) == 2


@pytest.mark.parametrize("spec, said", [
    ("torchvision:resnet19", "has no classification model 'resnet19'"),
    ("torchvision:fasterrcnn_resnet50_fpn", "has no classification model"),  # a detection model
])
def test_an_unknown_torchvision_model_is_one_line(spec: str, said: str) -> None:
    with pytest.raises(ModelError, match=said) as caught:
        models.build_model(spec, num_classes=10, input_shape=(3, 32, 32))
    assert "\n" not in str(caught.value)


def test_a_torchvision_dataset_is_read_from_its_own_files(tmp_path: Path) -> None:
    root = idx_files(tmp_path)
    dataset = data.load_dataset(f"torchvision:FashionMNIST:{root}")
    assert dataset.input_shape == (1, 28, 28) and dataset.x_train.dtype == torch.float32
    assert (len(dataset.y_train), len(dataset.y_test), dataset.num_classes) == (120, 30, 10)
    assert 0 <= float(dataset.x_train.min()) and float(dataset.x_train.max()) <= 1
    raw = (root / "FashionMNIST" / "raw" / "train-labels-idx1-ubyte").read_bytes()[8:]
    assert dataset.y_train.tolist() == list(raw)


@pytest.mark.parametrize("spec, said", [
    ("torchvision:CIFAR10:{tmp}/nowhere", "put its files in {tmp}/nowhere/cifar-10-batches-py"),
    ("torchvision:FashionMNIST:{tmp}", "put its files in {tmp}/FashionMNIST/raw .* or add --download"),
    ("torchvision:CIFAR11:{tmp}", "has no dataset 'CIFAR11'"),
    ("torchvision:CocoDetection:{tmp}", "has no train/test split"),
    ("torchvision:EMNIST:{tmp}", "torchvision's EMNIST has no split called train and test"),
    ("torchvision:CIFAR10", "give torchvision:NAME:ROOT"),
])
def test_a_missing_or_unknown_torchvision_dataset_is_one_line(tmp_path: Path, spec: str, said: str) -> None:
    with pytest.raises(DatasetError, match=said.format(tmp=tmp_path)) as caught:
        data.load_dataset(spec.format(tmp=tmp_path))
    assert "\n" not in str(caught.value)


@pytest.mark.integration
def test_resnet18_on_an_image_folder_runs_both_schedules_to_the_same_model(clean_host: None, tmp_path: Path) -> None:
    """The issue's command: NSFNET, 4 local models of ResNet-18 on generated 32x32 images split by
    Dirichlet(0.5); MST's global model is SPFF's, each G's the FedAvg of its local models."""
    root = image_folder(tmp_path / "images", classes=4, per_class=25)
    done = fedmst_cli("compare", "--topology", "nsfnet", "--local-models", "4", "--rounds", "2", "--model",
                      "torchvision:resnet18", "--dataset", f"imagefolder:{root}", "--partition", "dirichlet:0.5",
                      "--batch-size", "8", "--save-models", "--out", tmp_path / "out", timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    dataset = data.load_dataset(f"imagefolder:{root}")
    for scheduler in ("spff", "mst"):
        summary = json.loads((tmp_path / "out" / scheduler / "summary.json").read_text())
        assert summary["model_bytes"] == models.sized_model("torchvision:resnet18", dataset)
        assert summary["partition"]["partition"] == "dirichlet:0.5"
        assert sum(m["samples"] for m in summary["partition"]["tasks"]["task0"]) == len(dataset.y_train)
        for saved in sorted((tmp_path / "out" / scheduler / "models").iterdir()):
            assert_fedavg(saved)
    # Round 1's global models differ only by the order of the sums (MST's in path, SPFF's at G): float
    # rounding, 2e-7 of an entry when measured. Round 2's local models start from those and train with
    # batch norm over batches of 8, which magnifies the difference (1.1e-4 at most, in 55 of 11.2 M entries).
    for round_, tolerance in (("round1", 1e-6), ("round2", 1e-3)):
        spff, mst = (torch.load(tmp_path / "out" / s / "models" / round_ / "task0-global.pt") for s in ("spff", "mst"))
        off = ((spff - mst).abs() / mst.abs().clamp(min=1)).max().item()
        assert off <= tolerance, f"{round_}: MST's global model is {off:g} off SPFF's"


@pytest.mark.integration
def test_a_torchvision_dataset_runs_with_a_torchvision_model(clean_host: None, tmp_path: Path) -> None:
    """FashionMNIST's idx files read by torchvision, a MobileNet v3 for one channel: the run learns."""
    root = idx_files(tmp_path / "data", train=200, test=50)
    done = fedmst_cli("run", "--topology", "small", "--local-models", "3", "--rounds", "2", "--model",
                      "torchvision:mobilenet_v3_small", "--dataset", f"torchvision:FashionMNIST:{root}",
                      "--partition", "iid", "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["dataset"] == f"torchvision:FashionMNIST:{root}" and summary["status"] == "completed"
    assert summary["rounds"] == 2 and summary["model"] == "torchvision:mobilenet_v3_small"


CUDA = pytest.mark.skipif(not torch.cuda.is_available(),
                          reason="this host has no CUDA GPU (torch.cuda.is_available() is False); the same trainer "
                                 "runs on the CPU in tests/test_host_trainer.py")


@CUDA
@pytest.mark.integration
def test_resnet18_trains_on_the_gpu_in_one_trainer_with_bounded_memory(clean_host: None, tmp_path: Path) -> None:
    """``--device cuda``: every local model trains on the GPU in the host trainer; each node's peak
    of GPU memory is ResNet-18's weights, gradients and momentum, the images and one batch's
    activations (under 1 GB, whatever the number of agents), and the run's models aggregate exactly."""
    root = image_folder(tmp_path / "images", classes=4, per_class=25)
    done = fedmst_cli("compare", "--topology", "nsfnet", "--local-models", "4", "--rounds", "2", "--model",
                      "torchvision:resnet18", "--dataset", f"imagefolder:{root}", "--partition", "dirichlet:0.5",
                      "--batch-size", "8", "--device", "cuda", "--save-models", "--out", tmp_path / "out", timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    for scheduler in ("spff", "mst"):
        summary = json.loads((tmp_path / "out" / scheduler / "summary.json").read_text())
        trained = summary["training"]
        assert (trained["device"], trained["trainer"]) == ("cuda:0", "host")
        assert set(trained["peak_bytes"]) == set(summary["local_nodes"])
        assert all(3 * 44.7e6 < peak < 1e9 for peak in trained["peak_bytes"].values()), trained["peak_bytes"]
        assert trained["host_peak_bytes"] == max(trained["peak_bytes"].values())
        for saved in sorted((tmp_path / "out" / scheduler / "models").iterdir()):
            assert_fedavg(saved)
