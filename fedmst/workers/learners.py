"""What trains a node's local models and judges G's global model: fedmst's own (a model factory
and a data shard) or a Flower client (:mod:`fedmst.fl.flower`), behind one small interface.

A :class:`Learner` trains from the round's global model (a wire vector) and returns what the
upload carries; a judge scores a global model. The agent moves vectors and never needs to know
which kind it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Callable, Protocol

import torch

from fedmst.fl import aggregation, data, models, training
from fedmst.fl.flower import (SEEDING, Fitted, FlowerNode, Layout, federated_accuracy, initial_layout,
                              parse_run_config)
from fedmst.protocol import AgentSpec, TaskSpec
from fedmst.workers.gputrainer import FitRequest, TrainerClient

Judge = Callable[[torch.Tensor, int], float]
"""The accuracy of a global model (a wire vector) after a round."""


class Learner(Protocol):
    samples: int | None
    """The examples it trains on, where known before training (a Flower client says with each fit)."""

    def fit(self, start: torch.Tensor, round_: int, seed: int, proximal_mu: float) -> Fitted:
        """Train from ``start`` (the round's global model) with ``seed``; FedProx's ``proximal_mu``."""
        ...


@dataclass
class Holding:
    """One task's models on one node: the task's initial global model, the local models placed
    here, and at G the judge of its global model."""

    initial: torch.Tensor
    local: dict[int, Learner]
    judge: Judge | None


class TorchLearner:
    """A fedmst model (``--model``) training on its shard of ``--dataset`` (``--partition``)."""

    def __init__(self, spec: AgentSpec, model: torch.nn.Module, dataset: data.Dataset, rows: torch.Tensor) -> None:
        self.spec, self.model, self.dataset, self.rows = spec, model, dataset, rows
        """``rows``: its shard, indices into the dataset this process holds once for all its models."""
        self.samples: int | None = len(rows)

    def fit(self, start: torch.Tensor, round_: int, seed: int, proximal_mu: float) -> Fitted:
        spec, dataset = self.spec, self.dataset
        aggregation.load_flat(self.model, start)
        loss = training.train_local(self.model, dataset.x_train, dataset.y_train, rows=self.rows, epochs=spec.epochs,
                                    batch_size=spec.batch_size, lr=spec.lr, optimizer=spec.optimizer, seed=seed,
                                    proximal_mu=proximal_mu)
        return Fitted(aggregation.flatten(self.model), len(self.rows), loss)


class HostTrainedLearner:
    """A fedmst model trained by the host's trainer (``--device cuda``, ``--host-trainer``): the agent
    holds its shard's size, not the model; the trainer rebuilds the shard from the same seed."""

    def __init__(self, spec: AgentSpec, task: TaskSpec, node: str, index: int, samples: int) -> None:
        self.spec, self.task, self.node, self.index, self.samples = spec, task, node, index, samples

    def fit(self, start: torch.Tensor, round_: int, seed: int, proximal_mu: float) -> Fitted:
        spec, (model, dataset) = self.spec, kind(self.spec, self.task)
        ask = FitRequest(node=self.node, model=model, dataset=dataset, partition=spec.partition,
                         local_models=len(self.task.local_nodes), task_seed=self.task.seed, index=self.index,
                         seed=seed, epochs=spec.epochs, batch_size=spec.batch_size, lr=spec.lr,
                         optimizer=spec.optimizer, proximal_mu=proximal_mu)
        reply, weights = _trainer(spec.trainer_socket).fit(ask, start)
        return Fitted(weights, reply.samples, reply.loss, busy_s=reply.busy_s)


@cache
def _trainer(path: str) -> TrainerClient:
    """This process's connection to the host trainer (its local models train one after another)."""
    return TrainerClient(path)


class FlowerLearner:
    """A Flower client (``--client``) for one partition; it trains however its ``fit`` does."""

    samples: int | None = None

    def __init__(self, node: FlowerNode, layout: Layout) -> None:
        self.node, self.layout = node, layout

    def fit(self, start: torch.Tensor, round_: int, seed: int, proximal_mu: float) -> Fitted:
        return self.node.fit(self.layout, start, round_, proximal_mu)


def kind(spec: AgentSpec, task: TaskSpec) -> tuple[str, str]:
    """``task``'s model and dataset: its own, or the run's."""
    return task.model or spec.model, task.dataset or spec.dataset


def build_model(spec: AgentSpec, task: TaskSpec, seed: int | None = None) -> torch.nn.Module:
    """A fresh model of ``task``'s; with ``seed``, initialised from it (under a lock: the seed is
    the process's)."""
    model, name = kind(spec, task)
    dataset = data.load_dataset(name)
    with SEEDING:
        if seed is not None:
            torch.manual_seed(seed)
        return models.build_model(model, num_classes=dataset.num_classes, input_shape=dataset.input_shape)


def flower_start(spec: AgentSpec, task: TaskSpec) -> tuple[Layout, torch.Tensor]:
    """The Flower client's layout and the task's initial global model (partition 0's weights)."""
    layout, initial = _flower_start(spec.client, spec.run_config, len(task.local_nodes), task.seed)
    return layout, initial.clone()


@cache
def _flower_start(client: str, run_config: tuple[str, ...], partitions: int, seed: int) -> tuple[Layout, torch.Tensor]:
    return initial_layout(client, partitions, parse_run_config(run_config), seed)


def hold(spec: AgentSpec, task: TaskSpec, node: str) -> Holding:
    """Build ``task``'s models placed on ``node``: every model of a task starts from the same
    seeded weights (a plan may broadcast nothing: a ring all-reduce)."""
    at_g = node == task.global_node
    mine = [i for i, n in enumerate(task.local_nodes) if n == node]
    k = len(task.local_nodes)
    if spec.client:
        layout, initial = flower_start(spec, task)
        run_config = parse_run_config(spec.run_config)
        nodes = {i: FlowerNode(spec.client, i, k, run_config) for i in (range(k) if at_g else mine)}
        judge = (lambda flat, round_: federated_accuracy(list(nodes.values()), layout, flat, round_)) if at_g else None
        return Holding(initial, {i: FlowerLearner(nodes[i], layout) for i in mine}, judge)
    dataset = data.load_dataset(kind(spec, task)[1])
    shards = data.shards(dataset, k, spec.partition, seed=task.seed)
    seeded = build_model(spec, task, seed=task.seed)
    local: dict[int, Learner] = {}
    for i in mine:
        local[i] = (HostTrainedLearner(spec, task, node, i, len(shards[i])) if spec.trainer_socket else
                    TorchLearner(spec, build_model(spec, task), dataset, torch.as_tensor(shards[i])))
    judge = None
    if at_g:
        def judge(flat: torch.Tensor, round_: int) -> float:
            aggregation.load_flat(seeded, flat)
            return training.accuracy(seeded, dataset.x_test, dataset.y_test)
    return Holding(aggregation.flatten(seeded), local, judge)
