"""How fast the default task learns under candidate local-training settings, without a network.

Runs federated averaging in this process exactly as the agents do it (same data, Dirichlet
shards, initial weights, per-model training seeds and sample weights; only the summation order
of the aggregate differs, by float rounding) and prints the global model's test accuracy after
every round, with the seconds one local model's training takes on this machine. The defaults of
``fedmst run`` (``--optimizer``, ``--lr``, ``--epochs``, ``--batch-size``) were chosen from it.

    .venv/bin/python scripts/bench_learning.py --local-models 8 64 --rounds 5 --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import time
from statistics import mean

import torch

from fedmst.fl import aggregation, data, models, training
from fedmst.run.config import RunConfig

CANDIDATES = [
    ("sgd", 0.05, 1, 32),
    ("sgd", 0.2, 5, 32),
    ("sgd", 0.5, 3, 32),
    ("momentum", 0.05, 2, 32),
    ("momentum", 0.05, 5, 32),
    ("momentum", 0.02, 5, 16),
    ("adam", 0.001, 2, 32),
    ("adam", 0.001, 5, 32),
    ("adam", 0.001, 5, 16),
]
"""(optimizer, lr, epochs, batch size); the first was fedmst's default until this script chose another."""


def fedavg_accuracy(model: str, k: int, rounds: int, seed: int, optimizer: str, lr: float, epochs: int,
                    batch_size: int, alpha: float = 0.5) -> tuple[list[float], float]:
    """Test accuracy after each round of one task (task0 of a run with ``--seed seed``), and the
    mean seconds of one local model's training."""
    dataset = data.load_dataset("digits")
    xtr, ytr, xte, yte = dataset.x_train, dataset.y_train, dataset.x_test, dataset.y_test
    task_seed = seed  # task i of a run is seeded with seed + i
    shards = data.dirichlet_shards(ytr, k, alpha, seed=task_seed)
    torch.manual_seed(task_seed)
    global_model = models.build_model(model, num_classes=dataset.num_classes, input_shape=dataset.input_shape)
    local = models.build_model(model, num_classes=dataset.num_classes, input_shape=dataset.input_shape)
    accuracies, seconds = [], []
    for rnd in range(1, rounds + 1):
        start = aggregation.flatten(global_model)
        updates, counts = [], []
        for i, shard in enumerate(shards):
            aggregation.load_flat(local, start)
            idx = torch.as_tensor(shard)
            began = time.perf_counter()
            training.train_local(local, xtr[idx], ytr[idx], epochs=epochs, batch_size=batch_size, lr=lr,
                                 seed=training.local_seed(task_seed, rnd, i), optimizer=optimizer)
            seconds.append(time.perf_counter() - began)
            updates.append(aggregation.flatten(local))
            counts.append(len(shard))
        aggregation.load_flat(global_model, aggregation.fedavg(updates, counts))
        accuracies.append(training.accuracy(global_model, xte, yte))
    return accuracies, mean(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=RunConfig.model)
    parser.add_argument("--local-models", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--candidates", nargs="+", metavar="OPT:LR:EPOCHS:BATCH",
                        help="settings to try instead of the built-in list, e.g. momentum:0.05:5:32")
    args = parser.parse_args()
    candidates = CANDIDATES
    if args.candidates:
        candidates = [(o, float(lr), int(e), int(b)) for o, lr, e, b in (c.split(":") for c in args.candidates)]
    torch.set_num_threads(1)  # as each agent does
    defaults = (RunConfig.optimizer, RunConfig.lr, RunConfig.epochs, RunConfig.batch_size)
    print(f"model {args.model}, Dirichlet 0.5, {args.rounds} rounds, mean over seeds {args.seeds}; "
          f"fedmst's defaults: {defaults}\n")
    print("| k | optimizer | lr | epochs | batch | accuracy per round (mean over seeds) | worst seed, last round "
          "| one local model's training (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for k in args.local_models:
        for optimizer, lr, epochs, batch in candidates:
            runs = [fedavg_accuracy(args.model, k, args.rounds, s, optimizer, lr, epochs, batch) for s in args.seeds]
            per_round = [mean(r[0][i] for r in runs) for i in range(args.rounds)]
            mark = " (default)" if (optimizer, lr, epochs, batch) == defaults else ""
            print(f"| {k} | {optimizer}{mark} | {lr:g} | {epochs} | {batch} | "
                  f"{', '.join(f'{a:.3f}' for a in per_round)} | {min(r[0][-1] for r in runs):.3f} | "
                  f"{mean(r[1] for r in runs):.3f} |", flush=True)


if __name__ == "__main__":
    main()
