"""The host trainer (``--device cuda``, ``--host-trainer``): one process trains every local model of
the host, one at a time, as the agent would have trained it.

On a host without a GPU the trainer runs on the CPU, the same code but for the device: its models
must be the agents' bit for bit. The GPU itself is tested in tests/test_vision.py (CUDA marker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import fedmst_cli
from fedmst.errors import EmulationError
from fedmst.fl import aggregation, data, models, training
from fedmst.workers.gputrainer import FitRequest, Trainer, TrainerClient
from fedmst.workers.hosttrainer import HostTrainer


def _ask(index: int = 1, model: str = "cnn", seed: int = 7) -> FitRequest:
    return FitRequest(node="n1", model=model, dataset="digits", partition="dirichlet:0.5", local_models=3,
                      task_seed=4, index=index, seed=seed, epochs=1, batch_size=16, lr=0.05, optimizer="momentum",
                      proximal_mu=0.0)


def _in_the_agent(ask: FitRequest, start: torch.Tensor) -> tuple[torch.Tensor, float]:
    """What the agent itself trains for ``ask`` (:class:`fedmst.workers.learners.TorchLearner`)."""
    dataset = data.load_dataset(ask.dataset)
    rows = torch.as_tensor(data.shards(dataset, ask.local_models, ask.partition, seed=ask.task_seed)[ask.index])
    model = models.build_model(ask.model, num_classes=dataset.num_classes, input_shape=dataset.input_shape)
    aggregation.load_flat(model, start)
    loss = training.train_local(model, dataset.x_train, dataset.y_train, rows=rows, epochs=ask.epochs,
                                batch_size=ask.batch_size, lr=ask.lr, seed=ask.seed, optimizer=ask.optimizer)
    return aggregation.flatten(model), loss


def _start(model: str = "cnn") -> torch.Tensor:
    dataset = data.load_dataset("digits")
    torch.manual_seed(3)
    return aggregation.flatten(models.build_model(model, num_classes=dataset.num_classes,
                                                  input_shape=dataset.input_shape))


def test_the_trainer_trains_each_shard_as_its_agent_would() -> None:
    trainer, start = Trainer("cpu"), _start()
    for index in (0, 2, 1):  # one model instance serves every local model, in any order
        reply, weights = trainer.fit(_ask(index), start)
        expected, loss = _in_the_agent(_ask(index), start)
        assert torch.equal(weights, expected) and reply.loss == loss
        assert reply.samples == len(data.shards(data.load_dataset("digits"), 3, "dirichlet:0.5", seed=4)[index])
        assert reply.busy_s > 0 and reply.peak_bytes == 0  # no device memory on a CPU
    assert set(trainer.busy) == {"n1"}


def test_a_trainer_process_serves_agents_over_its_socket(tmp_path: Path) -> None:
    host = HostTrainer("cpu", tmp_path, tmp_path / "trainer.log")
    try:
        client, start = TrainerClient(str(host.socket)), _start("mlp")
        first, weights = client.fit(_ask(model="mlp"), start)
        assert torch.equal(weights, _in_the_agent(_ask(model="mlp"), start)[0])
        with pytest.raises(RuntimeError, match="the host trainer failed: ModelError: unknown model 'nope'"):
            client.fit(_ask(model="nope"), start)
        second, _ = client.fit(_ask(index=0, model="mlp"), start)  # the connection goes on after a failure
    finally:
        host.close()
    assert host.proc.returncode == 0
    assert (host.record.device, host.record.trainer, host.record.peak_bytes) == ("cpu", "host", {"n1": 0})
    assert host.record.busy_s == {"n1": first.busy_s + second.busy_s}  # what it told each fit, summed


def test_a_trainer_that_dies_is_found_by_its_check(tmp_path: Path) -> None:
    host = HostTrainer("cpu", tmp_path, tmp_path / "trainer.log")
    try:
        host.check()
        host.proc.kill()
        host.proc.wait()
        with pytest.raises(EmulationError, match=r"the host trainer on cpu exited with status -9 \(see .*\.log\)"):
            host.check()
    finally:
        host.close()


def test_a_trainer_on_a_device_this_host_lacks_is_one_line(tmp_path: Path) -> None:
    """The device is touched before the trainer listens, so a run fails before any agent asks it."""
    if torch.cuda.device_count() > 7:
        pytest.skip("this host has 8 GPUs or more: cuda:7 exists")
    with pytest.raises(EmulationError, match=r"the host trainer on cuda:7 exited with status 1 as it started: .*Error"
                       ) as got:
        HostTrainer("cuda:7", tmp_path, tmp_path / "trainer.log")
    assert "\n" not in str(got.value)


@pytest.mark.integration
def test_a_run_with_the_host_trainer_trains_the_models_its_agents_would(clean_host: None, tmp_path: Path) -> None:
    """The same run, its local models trained by one trainer and by their agents: the same global
    models bit for bit; summary.json says where they trained and the trainer's time per node."""
    for name, extra in (("host", ["--host-trainer"]), ("agents", [])):
        done = fedmst_cli("run", "--topology", "small", "--local-models", "3", "--rounds", "2", "--scheduler", "mst",
                          "--model", "cnn", "--save-models", *extra, "--out", tmp_path / name)
        assert done.returncode == 0, done.stderr[-2000:]
    for round_ in ("round1", "round2"):
        host, agents = (torch.load(tmp_path / n / "models" / round_ / "task0-global.pt") for n in ("host", "agents"))
        assert torch.equal(host, agents), round_
    summary = json.loads((tmp_path / "host" / "summary.json").read_text())
    trained = summary["training"]
    assert (trained["device"], trained["trainer"]) == ("cpu", "host")
    assert set(trained["busy_s"]) == set(summary["local_nodes"]) and all(s > 0 for s in trained["busy_s"].values())
    by_agents = json.loads((tmp_path / "agents" / "summary.json").read_text())["training"]
    assert (by_agents["device"], by_agents["trainer"], by_agents["busy_s"]) == ("cpu", "agent", {})
