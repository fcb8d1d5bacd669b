from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from fedmst.fl.aggregation import fedavg, flatten, load_flat, sample_weights, weighted_sum
from fedmst.fl.data import load_dataset
from fedmst.fl.models import build_model
from fedmst.fl.training import accuracy, train_local

DIGITS = load_dataset("digits")
INPUT_SHAPE, NUM_CLASSES = DIGITS.input_shape, DIGITS.num_classes


class WithBuffers(nn.Module):
    """Float and integer buffers: the float one travels, the counter does not."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)
        self.register_buffer("running", torch.arange(4, dtype=torch.float64))
        self.register_buffer("steps", torch.tensor(5))


def test_flatten_is_float32_in_state_dict_order() -> None:
    model = WithBuffers()
    flat = flatten(model)
    assert flat.dtype == torch.float32 and flat.dim() == 1 and flat.is_contiguous()
    assert list(model.state_dict()) == ["running", "steps", "linear.weight", "linear.bias"]
    expected = torch.cat(
        [model.running.float(), model.linear.weight.reshape(-1), model.linear.bias]
    )
    assert torch.equal(flat, expected)


def test_load_flat_round_trip_is_exact() -> None:
    torch.manual_seed(0)
    source = build_model("cnn", NUM_CLASSES, INPUT_SHAPE)
    target = build_model("cnn", NUM_CLASSES, INPUT_SHAPE)
    assert not torch.equal(flatten(source), flatten(target))
    load_flat(target, flatten(source))
    assert torch.equal(flatten(target), flatten(source))
    for a, b in zip(source.state_dict().values(), target.state_dict().values()):
        assert torch.equal(a, b)


def test_load_flat_writes_float_buffers_and_keeps_their_dtype() -> None:
    model = WithBuffers()
    flat = torch.arange(flatten(model).numel(), dtype=torch.float32)
    load_flat(model, flat)
    assert model.running.dtype == torch.float64
    assert model.running.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert model.linear.bias.tolist() == [10.0, 11.0]
    assert model.steps.item() == 5


def test_load_flat_size_mismatch_names_both_sizes() -> None:
    model = WithBuffers()
    with pytest.raises(ValueError, match="expected 12 elements, received 11"):
        load_flat(model, torch.zeros(11))


def test_weighted_sum_matches_hand_computation() -> None:
    a, b = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0, 20.0, 30.0])
    assert torch.allclose(weighted_sum([a, b], [0.25, 0.75]), torch.tensor([7.75, 15.5, 23.25]))
    with pytest.raises(ValueError, match="one weight per vector"):
        weighted_sum([a, b], [1.0])
    with pytest.raises(ValueError, match="shapes"):
        weighted_sum([a, torch.zeros(2)], [0.5, 0.5])


def test_sample_weights() -> None:
    assert sample_weights([1, 3]) == [0.25, 0.75]
    with pytest.raises(ValueError):
        sample_weights([0, 0])


def test_fedavg() -> None:
    v = torch.randn(100)
    assert torch.allclose(fedavg([v, v.clone(), v.clone()], [5, 17, 30]), v)
    a, b = torch.zeros(4), torch.ones(4)
    assert torch.allclose(fedavg([a, b], [30, 10]), torch.full((4,), 0.25))


def test_training_lowers_loss_and_beats_chance() -> None:
    X_train, y_train, X_test, y_test = DIGITS.x_train, DIGITS.y_train, DIGITS.x_test, DIGITS.y_test
    torch.manual_seed(0)
    model = build_model("mlp", NUM_CLASSES, INPUT_SHAPE)
    before = accuracy(model, X_test, y_test)
    first = train_local(model, X_train, y_train, epochs=1, batch_size=32, lr=0.1, seed=0)
    later = train_local(model, X_train, y_train, epochs=2, batch_size=32, lr=0.1, seed=1)
    assert later < first
    after = accuracy(model, X_test, y_test)
    assert after > 0.5 and after > before


def test_training_is_deterministic_by_seed() -> None:
    X, y = DIGITS.x_train, DIGITS.y_train

    def run(seed: int) -> torch.Tensor:
        torch.manual_seed(0)
        model = build_model("mlp", NUM_CLASSES, INPUT_SHAPE)
        train_local(model, X[:200], y[:200], epochs=1, batch_size=16, lr=0.05, seed=seed)
        return flatten(model)

    assert torch.equal(run(3), run(3))
    assert not torch.equal(run(3), run(4))


@pytest.mark.parametrize("optimizer,lr", [("sgd", 0.1), ("momentum", 0.05), ("adam", 0.003)])
def test_every_optimizer_learns_and_starts_afresh_each_call(optimizer: str, lr: float) -> None:
    """Two calls with the same seed from the same weights give the same update: no optimizer state
    (momentum, Adam's moments) is carried from one round to the next."""
    X_train, y_train, X_test, y_test = DIGITS.x_train, DIGITS.y_train, DIGITS.x_test, DIGITS.y_test
    torch.manual_seed(0)
    model = build_model("mlp", NUM_CLASSES, INPUT_SHAPE)
    start = flatten(model)
    train_local(model, X_train, y_train, epochs=3, batch_size=32, lr=lr, seed=0, optimizer=optimizer)
    assert accuracy(model, X_test, y_test) > 0.8
    once = flatten(model)
    load_flat(model, start)
    train_local(model, X_train, y_train, epochs=3, batch_size=32, lr=lr, seed=0, optimizer=optimizer)
    assert torch.equal(flatten(model), once)


def test_an_unknown_optimizer_names_the_choices() -> None:
    model = build_model("mlp", NUM_CLASSES, INPUT_SHAPE)
    with pytest.raises(ValueError, match="unknown optimizer 'rmsprop'; choose one of: sgd, momentum, adam"):
        train_local(model, torch.zeros(4, *INPUT_SHAPE), torch.zeros(4, dtype=torch.int64), epochs=1, batch_size=2,
                    lr=0.1, seed=0, optimizer="rmsprop")


@pytest.mark.parametrize("name,reference", [
    ("sgd", lambda params, lr: torch.optim.SGD(params, lr=lr)),
    ("momentum", lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9)),
    ("adam", lambda params, lr: torch.optim.Adam(params, lr=lr)),
])
def test_the_local_optimizers_follow_torch_optim_step_by_step(name: str, reference: object) -> None:
    from fedmst.fl.training import LocalOptimizer

    torch.manual_seed(3)
    ours, theirs = build_model("mlp", NUM_CLASSES, INPUT_SHAPE), build_model("mlp", NUM_CLASSES, INPUT_SHAPE)
    theirs.load_state_dict(ours.state_dict())
    start = flatten(ours)
    opts = (LocalOptimizer(name, ours.parameters(), 0.05), reference(theirs.parameters(), 0.05))  # type: ignore[operator]
    x, y = torch.randn(32, *INPUT_SHAPE), torch.randint(0, NUM_CLASSES, (32,))
    for _ in range(5):
        for model, opt in zip((ours, theirs), opts):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    for a, b in zip(ours.state_dict().values(), theirs.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert not torch.equal(flatten(ours), start), "five steps must move the weights"


def test_training_does_not_import_torch_dynamo() -> None:
    """torch.optim's first step imports torch._dynamo: 2 s of CPU in every worker that trains."""
    code = ("import sys, torch; from fedmst.fl.training import train_local; from fedmst.fl.models import build_model; "
            "m = build_model('mlp', 10, (64,)); "
            "train_local(m, torch.zeros(8, 64), torch.zeros(8, dtype=torch.int64), epochs=1, batch_size=4, lr=0.1, "
            "seed=0, optimizer='adam'); print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_adam_counts_steps_per_parameter_as_torch_does() -> None:
    """A parameter without a gradient in some steps: torch steps it (and bias-corrects) only
    when it has one."""
    from fedmst.fl.training import LocalOptimizer

    torch.manual_seed(5)
    ours, theirs = nn.Linear(4, 3), nn.Linear(4, 3)
    theirs.load_state_dict(ours.state_dict())
    opts = (LocalOptimizer("adam", ours.parameters(), 0.01), torch.optim.Adam(theirs.parameters(), lr=0.01))
    x = torch.randn(8, 4)
    for step in range(6):
        for model, opt in zip((ours, theirs), opts):
            opt.zero_grad()
            out = model(x) if step % 2 else x @ model.weight.T  # odd steps only: the bias gets a gradient
            out.square().sum().backward()
            opt.step()
    for a, b in zip(ours.state_dict().values(), theirs.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["sgd", "momentum", "adam"])
def test_each_optimizer_keeps_the_copies_of_the_weights_the_memory_floor_counts(name: str) -> None:
    """:data:`fedmst.fl.training.STATE_COPIES`, which the memory check counts, is what the optimizer keeps."""
    from fedmst.fl.training import STATE_COPIES, LocalOptimizer

    layer = torch.nn.Linear(3, 2)
    opt = LocalOptimizer(name, layer.parameters(), 0.1)
    layer(torch.ones(1, 3)).sum().backward()
    opt.step()
    assert [len(s) for s in opt.state] == [STATE_COPIES[name]] * 2
    assert all(t.shape == p.shape for s, p in zip(opt.state, opt.params) for t in s)
