"""Flower clients as local trainers (fedmst.fl.flower, fedmst.workers.learners), without a network:
the quickstart-style client of tests/flowerapp driven as a fedmst agent drives it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fedmst.errors import ClientError
from fedmst.fl.flower import FlowerNode, Layout, federated_accuracy, initial_layout, parse_run_config
from fedmst.protocol import AgentSpec, TaskSpec
from fedmst.workers import learners

sys.path.insert(0, str(Path(__file__).with_name("flowerapp")))
import quickstart  # noqa: E402 - from the folder put on the path above

CLIENT = "quickstart:client_fn"
NUMEL = sum(p.numel() for p in quickstart.Net().parameters())


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, body: str) -> str:
    (tmp_path / f"{name}.py").write_text("import numpy as np\nfrom flwr.client import NumPyClient\n" + body)
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}:client_fn"


def _numpy_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, *methods: str) -> str:
    """A module whose client_fn returns a NumPyClient with ``methods`` (each ``def ...:\n    return ...``)."""
    body = "".join("    " + "\n    ".join(m.splitlines()) + "\n" for m in methods) or "    pass\n"
    return _module(tmp_path, monkeypatch, name,
                   f"class C(NumPyClient):\n{body}def client_fn(context):\n    return C().to_client()\n")


ZEROS = "def get_parameters(self, config):\n    return [np.zeros(3, np.float32)]"


def test_the_initial_model_is_partition_zeros_parameters_under_the_seed() -> None:
    layout, first = initial_layout(CLIENT, 4, {}, seed=3)
    again = initial_layout(CLIENT, 4, {}, seed=3)[1]
    other = initial_layout(CLIENT, 4, {}, seed=4)[1]
    assert layout.numel == NUMEL == first.numel()
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert layout.shapes == tuple(tuple(p.shape) for p in quickstart.Net().state_dict().values())


def test_fit_trains_from_the_weights_given_and_reports_its_examples() -> None:
    layout, start = initial_layout(CLIENT, 4, {}, seed=1)
    node = FlowerNode(CLIENT, 2, 4, parse_run_config(["local-epochs=2"]))
    fitted = node.fit(layout, start, round_=1)
    assert fitted.examples == quickstart.train_examples(2)
    assert fitted.weights.shape == start.shape and not torch.equal(fitted.weights, start)
    assert fitted.loss is not None and fitted.loss > 0
    net = quickstart.Net()
    quickstart.set_weights(net, layout.arrays(fitted.weights))  # the client's own arrays, back in their shapes
    assert torch.equal(torch.cat([p.detach().reshape(-1) for p in net.state_dict().values()]), fitted.weights)


def test_the_global_accuracy_is_every_partitions_accuracy_weighted_by_its_examples() -> None:
    layout, start = initial_layout(CLIENT, 3, {}, seed=1)
    nodes = [FlowerNode(CLIENT, i, 3, {}) for i in range(3)]
    scores = [node.evaluate(layout, start, 1) for node in nodes]
    expected = sum(a * n for a, n in scores) / sum(n for _, n in scores)
    assert federated_accuracy(nodes, layout, start, 1) == pytest.approx(expected)
    assert len({n for _, n in scores}) == 3  # partitions differ, so the weighting matters


def test_an_agents_flower_holding_starts_every_node_from_gs_weights() -> None:
    spec = AgentSpec(control_socket="", store_dir="", model="mlp", dataset="digits", epochs=1, batch_size=8, lr=0.1,
                     optimizer="sgd", partition="dirichlet:0.5", chunk_bytes=1 << 18, timeout_s=10, slow={},
                     strategy="fedavg",
                     strategy_args={}, tasks=(), client=CLIENT, run_config=("local-epochs=1",))
    task = TaskSpec(name="t", global_node="g", local_nodes=("a", "b", "a"), seed=5, active=(0, 1, 2), transfers=())
    at_g, at_a = learners.hold(spec, task, "g"), learners.hold(spec, task, "a")
    assert torch.equal(at_g.initial, at_a.initial)
    assert sorted(at_a.local) == [0, 2] and not at_g.local and at_a.judge is None
    assert at_g.judge is not None and 0 <= at_g.judge(at_g.initial, 1) <= 1
    fitted = at_a.local[2].fit(at_a.initial, 1, seed=0, proximal_mu=0.0)
    assert fitted.examples == quickstart.train_examples(2)


def test_arrays_of_other_shapes_are_refused_naming_both() -> None:
    layout = Layout.of([np.zeros((4, 3), np.float32), np.zeros(3, np.float32)])
    with pytest.raises(ClientError, match=r"fit returned 2 arrays of shapes \[\[3, 4\], \[3\]\]; the model's 2 "
                                          r"arrays have shapes \[\[4, 3\], \[3\]\]"):
        layout.flatten([np.zeros((3, 4)), np.zeros(3)], "fit")
    with pytest.raises(ClientError, match="returned 1 arrays"):
        layout.flatten([np.zeros((4, 3))], "fit")


def test_a_client_fn_returning_no_client_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _module(tmp_path, monkeypatch, "notaclient", "def client_fn(context):\n    return 42\n")
    with pytest.raises(ClientError, match="client_fn returned int, not a Flower NumPyClient or Client"):
        initial_layout(spec, 2, {}, seed=1)


def test_a_client_without_get_parameters_is_told_why_it_needs_one(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _numpy_client(tmp_path, monkeypatch, "noparams")
    with pytest.raises(ClientError, match="implement get_parameters"):
        initial_layout(spec, 2, {}, seed=1)


def test_a_failing_fit_names_the_partition_and_the_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _numpy_client(tmp_path, monkeypatch, "badfit", ZEROS,
                         "def fit(self, parameters, config):\n    raise ValueError('no data\\nhere')")
    layout, start = initial_layout(spec, 2, {}, seed=1)
    with pytest.raises(ClientError, match=r"\(partition 1\): fit raised ValueError: no data here"):
        FlowerNode(spec, 1, 2, {}).fit(layout, start, 1)


def test_run_config_values_are_read_as_flower_reads_them() -> None:
    assert parse_run_config(["a=1", "b=2.5", "c=false", "d=word", 'e="two words"']) == {
        "a": 1, "b": 2.5, "c": False, "d": "word", "e": "two words"}
    for bad in ("novalue", "=3", "t=[1, 2]"):
        with pytest.raises(ClientError, match="--run-config"):
            parse_run_config([bad])


def test_an_unknown_client_module_is_one_clear_error() -> None:
    with pytest.raises(ClientError, match="cannot import module 'no_such_pkg.mod'"):
        initial_layout("no_such_pkg.mod:client_fn", 2, {}, seed=1)


def test_what_a_client_returns_is_checked_not_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    words = _numpy_client(tmp_path, monkeypatch, "words",
                          "def get_parameters(self, config):\n    return [np.array(['a', 'b'])]")
    with pytest.raises(ClientError, match=r"get_parameters returned arrays of str\d*, not numbers"):
        initial_layout(words, 2, {}, seed=1)
    odd = _numpy_client(tmp_path, monkeypatch, "oddmetrics", ZEROS,
                        "def fit(self, parameters, config):\n    return parameters, 5, {'loss': 'n/a'}",
                        "def evaluate(self, parameters, config):\n    return 0.0, 5, {'accuracy': 'high'}")
    layout, start = initial_layout(odd, 2, {}, seed=1)
    with pytest.raises(ClientError, match=r"\(partition 1\): fit returned loss = 'n/a', not a number"):
        FlowerNode(odd, 1, 2, {}).fit(layout, start, 1)
    with pytest.raises(ClientError, match="evaluate returned accuracy = 'high', not a number"):
        FlowerNode(odd, 1, 2, {}).evaluate(layout, start, 1)
    raw = _module(tmp_path, monkeypatch, "rawclient", "from flwr.client import Client\n"
                  "class C(Client):\n    def get_parameters(self, ins):\n        return [1, 2]\n"
                  "def client_fn(context):\n    return C()\n")
    with pytest.raises(ClientError, match="get_parameters returned list, not a Flower GetParametersRes"):
        initial_layout(raw, 2, {}, seed=1)


def test_seeding_a_clients_model_leaves_the_processs_random_state_as_it_was() -> None:
    import random

    torch.manual_seed(123)
    random.seed(9)
    expected = (torch.rand(3), random.random())
    torch.manual_seed(123)
    random.seed(9)
    initial_layout(CLIENT, 2, {}, seed=5)
    assert torch.equal(torch.rand(3), expected[0]) and random.random() == expected[1]
