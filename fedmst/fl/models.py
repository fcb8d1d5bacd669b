"""Model registry: what a task trains, by name or as ``package.module:factory``.

A factory is called as ``factory(num_classes=..., input_shape=...)`` and returns an
``nn.Module``. Besides the built-ins, models come from ``register_model``, from the
``fedmst.models`` entry-point group (loaded on first lookup; a broken plugin only warns), or
directly from an importable ``package.module:factory`` spec, and any of torchvision's
classification models as ``torchvision:NAME`` (:mod:`fedmst.fl.vision`). The default is big enough
(~4.5 MB of weights) that moving it dominates a round's fixed overheads, which is what makes
the schedulers' routing measurable.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from fedmst.fl.aggregation import flatten
from fedmst.errors import ModelError
from fedmst.fl import vision
from fedmst.fl.data import Dataset
from fedmst.plugins import Registry, one_line

Factory = Callable[..., nn.Module]
"""Called as ``factory(num_classes=..., input_shape=...)``."""


def _mlp(hidden: tuple[int, ...]) -> Factory:
    def build(num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
        sizes = (math.prod(input_shape), *hidden)
        layers: list[nn.Module] = [nn.Flatten()]
        for a, b in zip(sizes, sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(sizes[-1], num_classes))

    return build


def _cnn(num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """Two 3x3 convolutions and a 2x2 pool, sized for 1x8x8 digit images."""
    channels, height, width = input_shape
    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * (height // 2) * (width // 2), 64),
        nn.ReLU(),
        nn.Linear(64, num_classes),
    )


class CharLSTM(nn.Module):
    """LEAF's Shakespeare model: each input a line of character indices (floats, as every input
    here), embedded in 8 dimensions, two LSTM layers of 256, the next character's scores from the
    last step (Caldas et al. 2018; 3.3 MB of weights for LEAF's 80 letters)."""

    def __init__(self, num_classes: int, input_shape: tuple[int, ...]) -> None:
        super().__init__()
        from fedmst.fl.sources import LETTERS

        if len(input_shape) != 1:
            raise ValueError(f"lstm takes lines of character indices [N, length], not inputs of shape {input_shape}")
        self.embed = nn.Embedding(max(num_classes, len(LETTERS)), 8)
        self.lstm = nn.LSTM(8, 256, num_layers=2, batch_first=True)
        self.out = nn.Linear(256, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        steps, _ = self.lstm(self.embed(x.long()))
        return self.out(steps[:, -1])


MODELS: Registry[Factory] = Registry("model", "fedmst.models", ModelError, {
    "mlp": _mlp((64,)),
    "cnn": _cnn,
    "mlp-large": _mlp((1024, 1024)),
    "mlp-xl": _mlp((4096, 2688)),  # 45 MB: the large end of a regime map (fedmst sweep --models)
    "lstm": CharLSTM,  # LEAF's Shakespeare (--dataset leaf:shakespeare:ROOT)
}, accepts=callable, requirement="callable", form="package.module:factory")


def register_model(name: str, factory: Factory) -> None:
    """Make ``factory`` available to every command as ``name``."""
    MODELS.register(name, factory)


def build_model(spec: str, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """A fresh model for ``spec`` (a registered name or ``package.module:factory``), checked."""
    factory = vision.model_factory(spec) if vision.is_vision(spec) else MODELS.lookup(spec)
    try:
        model = factory(num_classes=num_classes, input_shape=tuple(input_shape))
    except Exception as exc:  # noqa: BLE001 - report any factory failure as the spec's fault
        raise ModelError(f"model {spec!r}: factory raised {one_line(exc)}") from exc
    if not isinstance(model, nn.Module):
        raise ModelError(
            f"model {spec!r}: factory returned {type(model).__name__}, not a torch.nn.Module"
        )
    if not any(p.is_floating_point() for p in model.parameters()):
        raise ModelError(f"model {spec!r}: model has no floating-point parameters to train")
    return model


def model_bytes(model: nn.Module) -> int:
    """Size of ``model``'s wire vector (see :func:`fedmst.fl.aggregation.flatten`) in bytes."""
    return flatten(model).numel() * 4


def sized_model(spec: str, dataset: Dataset) -> int:
    """Bytes of the wire vector of ``spec``'s model for ``dataset``, after one forward pass on two
    of its training samples: a model that cannot take the dataset's inputs, or gives fewer scores
    than the dataset has classes, is refused here in one line, before any network exists, instead
    of failing inside every agent once the run has started."""
    model = build_model(spec, num_classes=dataset.num_classes, input_shape=dataset.input_shape)
    model.eval()  # layers like batch norm must not need a full batch to say their output shape
    try:
        with torch.no_grad():
            out = model(dataset.x_train[:2])
    except Exception as exc:  # noqa: BLE001 - any forward failure is the model's fault
        raise ModelError(f"model {spec!r}: a batch of dataset {dataset.name!r} (inputs "
                         f"{list(dataset.input_shape)}) raised {one_line(exc)}") from exc
    shape = tuple(out.shape) if isinstance(out, torch.Tensor) else None
    if shape is None or len(shape) != 2 or shape[0] != len(dataset.x_train[:2]):
        raise ModelError(f"model {spec!r}: a batch of {len(dataset.x_train[:2])} gives "
                         f"{list(shape) if shape else type(out).__name__}, not [batch, classes]")
    if shape[1] < dataset.num_classes:
        raise ModelError(f"model {spec!r}: outputs {shape[1]} scores per sample but dataset {dataset.name!r} "
                         f"has {dataset.num_classes} classes: build the last layer with num_classes outputs")
    return model_bytes(model)
