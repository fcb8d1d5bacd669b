"""Model registry: what a task trains, by name or as ``package.module:factory``.

A factory is called as ``factory(num_classes=..., input_shape=...)`` and returns an
``nn.Module``. Besides the built-ins, models come from ``register_model``, from the
``fedmst.models`` entry-point group (loaded on first lookup; a broken plugin only warns), or
directly from an importable ``package.module:factory`` spec. The default is big enough
(~4.5 MB of weights) that moving it dominates a round's fixed overheads, which is what makes
the schedulers' routing measurable.
"""

from __future__ import annotations

import math
import warnings
from importlib.metadata import entry_points
from typing import Callable

from torch import nn

from fedmst.fl.aggregation import flatten
from fedmst.errors import ModelError
from fedmst.fl.plugins import import_object, one_line

Factory = Callable[..., nn.Module]
"""Called as ``factory(num_classes=..., input_shape=...)``."""

ENTRY_POINT_GROUP = "fedmst.models"


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


MODELS: dict[str, Factory] = {
    "mlp": _mlp((64,)),
    "cnn": _cnn,
    "mlp-large": _mlp((1024, 1024)),
    "mlp-xl": _mlp((4096, 2688)),  # 45 MB: the large end of a regime map (fedmst sweep --models)
}
_plugins_loaded = False


def register_model(name: str, factory: Factory) -> None:
    """Make ``factory`` available to every command as ``name``."""
    if name in MODELS:
        raise ModelError(f"model {name!r} is already registered; pick another name")
    MODELS[name] = factory


def _load_plugins() -> None:
    """Register the ``fedmst.models`` entry points once; a plugin that fails is skipped."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            register_model(ep.name, ep.load())
        except Exception as exc:  # noqa: BLE001 - one broken plugin must not break the rest
            warnings.warn(
                f"skipping model plugin {ep.name!r} ({ep.value}): {one_line(exc)}",
                stacklevel=2,
            )


def model_names() -> list[str]:
    """Every registered model name, plugins included."""
    _load_plugins()
    return sorted(MODELS)


def _resolve(spec: str) -> Factory:
    if ":" not in spec:
        _load_plugins()
        try:
            return MODELS[spec]
        except KeyError:
            raise ModelError(
                f"unknown model {spec!r}; choose one of: {', '.join(sorted(MODELS))}, "
                f"or give package.module:factory (did you forget to register it?)"
            ) from None
    return import_object(spec, "model", ModelError)


def build_model(spec: str, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """A fresh model for ``spec`` (a registered name or ``package.module:factory``), checked."""
    factory = _resolve(spec)
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
