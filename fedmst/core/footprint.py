"""What a run's agents hold in memory at least: their models, by the plans (pure, no I/O).

Each local model keeps its weights between rounds; G keeps the global model and the one it judges;
a node that sums in-path keeps its sum. While a local model trains, its gradients and its
optimizer's state (``state_copies`` more copies of its weights: 0 for SGD, 1 for momentum, 2 for
Adam) come on top, for one model at a time at least. Python's and torch's own memory, the dataset
and the bytes in flight come on top of that: this is a floor, which a run that cannot fit is
refused by (:func:`fedmst.run.prepare.check_memory`), never a prediction of its peak.

>>> from fedmst.core.plan import Plan, Transfer
>>> from fedmst.core.tasks import Task
>>> task = Task("t", "g", ("a", "a", "b"), 1_000_000)
>>> plan = Plan("x", task, (Transfer("upload", ("a", "g"), frozenset({0, 1})),
...                         Transfer("upload", ("b", "g"), frozenset({2}))))
>>> held_bytes([plan], state_copies=2)  # a: two models, their sum, one training under Adam
{'a': 6000000.0, 'b': 4000000.0, 'g': 2000000.0}
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from fedmst.core.plan import Plan


def held_bytes(plans: Sequence[Plan], state_copies: int) -> dict[str, float]:
    """Node -> the model bytes its agent holds at least (module docstring), in node order of first use."""
    out: dict[str, float] = defaultdict(float)
    training: dict[str, float] = defaultdict(float)
    for plan in plans:
        b = float(plan.task.model_bytes)
        for node in plan.task.local_nodes:
            out[node] += b
            training[node] = max(training[node], b * (1 + state_copies))
        out[plan.task.global_node] += 2 * b
        for node in plan.aggregation_nodes - {plan.task.global_node}:
            out[node] += b
    for node, extra in training.items():
        out[node] += extra
    return dict(out)
