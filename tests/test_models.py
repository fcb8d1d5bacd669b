from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from fedmst.fl import models
from fedmst.fl.data import load_dataset
from fedmst.errors import ModelError
from fedmst.fl.models import build_model, model_bytes, register_model
from fedmst.core.tasks import DEFAULT_MODEL

DIGITS = load_dataset("digits")
INPUT_SHAPE, NUM_CLASSES = DIGITS.input_shape, DIGITS.num_classes


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict:
    """A private copy of the registry, so tests can register models without leaking them."""
    fresh = dict(models.MODELS)
    monkeypatch.setattr(models, "MODELS", fresh)
    return fresh


@pytest.fixture
def plugin_module(tmp_path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An importable module with good and bad factories; returns its name."""
    (tmp_path / "fedmst_test_plugin.py").write_text(
        "from torch import nn\n"
        "def tiny(num_classes, input_shape):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))\n"
        "def broken(num_classes, input_shape):\n"
        "    raise RuntimeError('no GPU\\nin sight')\n"
        "def not_module(num_classes, input_shape):\n"
        "    return 42\n"
        "def frozen(num_classes, input_shape):\n"
        "    return nn.Flatten()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fedmst_test_plugin", raising=False)
    return "fedmst_test_plugin"


@pytest.mark.parametrize("name", sorted(models.MODELS))
def test_builtin_builds_and_runs_on_digits(name: str) -> None:
    X = DIGITS.x_test
    model = build_model(name, NUM_CLASSES, INPUT_SHAPE)
    assert model(X[:5]).shape == (5, NUM_CLASSES)
    assert not list(model.buffers())


def test_default_is_large_enough_to_dominate_a_round() -> None:
    assert DEFAULT_MODEL == "mlp-large"
    size = model_bytes(build_model(DEFAULT_MODEL, NUM_CLASSES, INPUT_SHAPE))
    assert 3_000_000 < size < 8_000_000


def test_model_bytes_counts_float32_weights() -> None:
    model = build_model("mlp", NUM_CLASSES, INPUT_SHAPE)
    assert model_bytes(model) == 4 * sum(p.numel() for p in model.parameters())


def test_import_spec(plugin_module: str) -> None:
    model = build_model(f"{plugin_module}:tiny", 3, INPUT_SHAPE)
    assert model(torch.zeros(2, *INPUT_SHAPE)).shape == (2, 3)


def test_register_model_and_duplicate(registry: dict) -> None:
    register_model("linear", lambda num_classes, input_shape: nn.Linear(64, num_classes))
    assert isinstance(build_model("linear", 10, (64,)), nn.Linear)
    with pytest.raises(ModelError, match="'linear' is already registered"):
        register_model("linear", lambda num_classes, input_shape: nn.Linear(64, num_classes))


@pytest.mark.parametrize(
    "spec, message",
    [
        ("resnet9000", "unknown model 'resnet9000'; choose one of: cnn, mlp, mlp-large"),
        ("no_such_pkg.mod:f", "cannot import module 'no_such_pkg.mod'"),
        ("{m}:missing", "has no attribute 'missing'"),
        ("{m}:broken", "factory raised RuntimeError: no GPU in sight"),
        ("{m}:not_module", "factory returned int, not a torch.nn.Module"),
        ("{m}:frozen", "no floating-point parameters"),
    ],
)
def test_errors_are_one_line_and_name_the_spec(
    plugin_module: str, spec: str, message: str
) -> None:
    spec = spec.format(m=plugin_module)
    with pytest.raises(ModelError) as info:
        build_model(spec, NUM_CLASSES, INPUT_SHAPE)
    text = str(info.value)
    assert "\n" not in text
    assert repr(spec) in text
    assert message in text


def test_unknown_name_hints_at_import_form() -> None:
    with pytest.raises(ModelError, match="package.module:factory.*forget to register"):
        build_model("nope", NUM_CLASSES, INPUT_SHAPE)


def test_entry_point_plugins_load_lazily_and_broken_ones_warn(
    registry: dict, plugin_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def entry(name: str, value: str) -> SimpleNamespace:
        def load():
            module, _, attr = value.partition(":")
            return getattr(__import__(module), attr)

        return SimpleNamespace(name=name, value=value, load=load)

    plugins = [entry("tiny", f"{plugin_module}:tiny"), entry("ghost", f"{plugin_module}:gone")]
    monkeypatch.setattr(models, "entry_points", lambda group: plugins)
    monkeypatch.setattr(models, "_plugins_loaded", False)
    assert "tiny" not in registry
    with pytest.warns(UserWarning, match="skipping model plugin 'ghost'"):
        model = build_model("tiny", 4, INPUT_SHAPE)
    assert model(torch.zeros(1, *INPUT_SHAPE)).shape == (1, 4)
    assert "ghost" not in registry
