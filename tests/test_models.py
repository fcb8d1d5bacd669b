from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from fedmst import plugins
from fedmst.fl import models
from fedmst.fl.data import load_dataset
from fedmst.errors import ModelError
from fedmst.core.tasks import DEFAULT_MODEL
from fedmst.fl.models import build_model, model_bytes, register_model, sized_model
from fedmst.plugins import Registry

DIGITS = load_dataset("digits")
INPUT_SHAPE, NUM_CLASSES = DIGITS.input_shape, DIGITS.num_classes


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Registry:
    """A private copy of the registry, so tests can register models without leaking them."""
    fresh = models.MODELS.copy()
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


@pytest.mark.parametrize("name", [n for n in models.MODELS.names() if n != "lstm"])  # lstm reads lines: test_sources
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


def test_register_model_and_duplicate(registry: Registry) -> None:
    register_model("linear", lambda num_classes, input_shape: nn.Linear(64, num_classes))
    assert isinstance(build_model("linear", 10, (64,)), nn.Linear)
    with pytest.raises(ModelError, match="'linear' is already registered"):
        register_model("linear", lambda num_classes, input_shape: nn.Linear(64, num_classes))


@pytest.mark.parametrize(
    "spec, message",
    [
        ("resnet9000", "unknown model 'resnet9000'; choose one of: cnn, lstm, mlp, mlp-large"),
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
    plugin_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def entry(name: str, value: str) -> SimpleNamespace:
        def load():
            module, _, attr = value.partition(":")
            return getattr(__import__(module), attr)

        return SimpleNamespace(name=name, value=value, load=load)

    groups: list[str] = []

    def entry_points(group: str) -> list[SimpleNamespace]:
        groups.append(group)
        return [entry("tiny", f"{plugin_module}:tiny"), entry("ghost", f"{plugin_module}:gone")]

    monkeypatch.setattr(plugins, "entry_points", entry_points)
    fresh = Registry("model", "fedmst.models", ModelError, {"mlp": models.MODELS.lookup("mlp")}, accepts=callable)
    monkeypatch.setattr(models, "MODELS", fresh)
    assert groups == []  # nothing loaded before the first lookup
    with pytest.warns(UserWarning, match="skipping model plugin 'ghost'"):
        model = build_model("tiny", 4, INPUT_SHAPE)
    assert model(torch.zeros(1, *INPUT_SHAPE)).shape == (1, 4)
    assert fresh.names() == ("mlp", "tiny") and groups == ["fedmst.models"]  # loaded once


@pytest.mark.parametrize("body, message", [
    ("nn.Sequential(nn.Flatten(), nn.Linear(64, 6))",
     "model '{m}:f': outputs 6 scores per sample but dataset 'digits' has 10 classes: build the last layer with "
     "num_classes outputs"),
    ("nn.Sequential(nn.Flatten(), nn.Linear(32, num_classes))",
     "model '{m}:f': a batch of dataset 'digits' (inputs [1, 8, 8]) raised RuntimeError: mat1 and mat2 shapes"),
    ("nn.Sequential(nn.Linear(8, num_classes))",
     "model '{m}:f': a batch of 2 gives [2, 1, 8, 10], not [batch, classes]"),
])
def test_a_model_that_does_not_fit_the_dataset_is_refused_in_one_line(
    tmp_path, monkeypatch: pytest.MonkeyPatch, body: str, message: str
) -> None:
    (tmp_path / "fedmst_test_misfit.py").write_text(f"from torch import nn\ndef f(num_classes, input_shape):\n"
                                                    f"    return {body}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fedmst_test_misfit", raising=False)
    with pytest.raises(ModelError) as info:
        sized_model("fedmst_test_misfit:f", DIGITS)
    assert str(info.value).startswith(message.format(m="fedmst_test_misfit")) and "\n" not in str(info.value)


def test_sized_model_is_the_wire_size_and_wider_outputs_still_train(registry: Registry) -> None:
    assert sized_model("mlp", DIGITS) == model_bytes(build_model("mlp", NUM_CLASSES, INPUT_SHAPE))
    assert sized_model("cnn", DIGITS) == model_bytes(build_model("cnn", NUM_CLASSES, INPUT_SHAPE))
    register_model("wide", lambda num_classes, input_shape: nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes + 2)))
    assert sized_model("wide", DIGITS) == 4 * (64 * 12 + 12)  # unused scores cost bytes, not correctness
