"""FL tasks: where a task's global model G and its local models L1..Lk sit on the network.

A task is pure data; the model it trains and the data shards are resolved elsewhere
(``fedmst.fl.models``, ``fedmst.fl.data``). Placement is seeded so that ``fedmst compare`` can run
both schedulers on identical tasks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from fedmst.errors import TaskError
from fedmst.wording import counted

if TYPE_CHECKING:  # the option schema reads this module's defaults before networkx is loaded
    import networkx as nx

DEFAULT_MODEL, DEFAULT_DATASET = "mlp-large", "digits"
"""What a task trains unless told otherwise (also ``--model``'s and ``--dataset``'s defaults)."""


@dataclass(frozen=True)
class Task:
    """One FL task: G on ``global_node``, local model ``i`` on ``local_nodes[i]``.

    ``model_bytes`` is the size of the weights one transfer carries (float32 payload); the
    schedulers weigh links with it and the Plan predicts link bytes from it. A task also has its
    ``model`` and ``dataset``, ``rounds``, a ``compute_s`` (its local training lasts at least that
    long, standing for a model whose compute takes that long on real accelerators) and a
    ``start_s`` (when it starts, on its own clock): a run's tasks carry the run's options where the
    workload file (:class:`fedmst.core.workload.TaskEntry`) says nothing, so nothing downstream
    defaults them again.
    """

    name: str
    global_node: str
    local_nodes: tuple[str, ...]
    model_bytes: int
    rounds: int = 1
    compute_s: float = 0.0
    start_s: float = 0.0
    model: str = DEFAULT_MODEL
    dataset: str = DEFAULT_DATASET
    sums_in_path: bool = True
    """Whether relays may add its updates up (its server strategy needs only their weighted sum);
    False: every update must reach G whole, so the plan forwards each (:func:`fedmst.core.plan.forward_each`)."""

    @property
    def k(self) -> int:
        return len(self.local_nodes)

    def models_at(self, node: str) -> tuple[int, ...]:
        """Indices of the local models hosted on ``node``."""
        return tuple(i for i, n in enumerate(self.local_nodes) if n == node)

    @property
    def terminals(self) -> frozenset[str]:
        """Nodes a schedule must reach: G's node and every local model's node."""
        return frozenset((self.global_node, *self.local_nodes))


def compute_nodes(graph: nx.Graph) -> list[str]:
    """The nodes that can hold G or a local model, in name order: all but the all-optical ones."""
    from fedmst.core.topology import optical_nodes  # networkx, loaded only once a graph exists

    optical = optical_nodes(graph)
    return sorted((n for n in graph.nodes if n not in optical), key=str)


def place_task(
    graph: nx.Graph,
    *,
    name: str,
    local_models: int,
    model_bytes: int,
    seed: int,
    global_node: str | None = None,
    local_nodes: Sequence[str] | None = None,
) -> Task:
    """Place a task on ``graph``: explicit nodes where given, seeded random ones otherwise.

    Random placement puts G on a random node and the local models on distinct other nodes,
    drawing again from all other nodes once each has one, so several local models share a
    node only when k exceeds the number of other nodes. Only :func:`compute_nodes` are drawn, and
    an explicit all-optical node is refused: light passes through it, nothing computes there.

    >>> import networkx as nx
    >>> g = nx.path_graph(["a", "b", "c"])
    >>> place_task(g, name="t", local_models=2, model_bytes=8, seed=0, global_node="a").local_nodes
    ('b', 'c')
    """
    if local_models < 1:
        raise TaskError(f"task {name}: --local-models must be at least 1, got {local_models}")
    nodes = compute_nodes(graph)
    for node in [global_node, *(local_nodes or [])]:
        if node is not None and node not in graph:
            raise TaskError(
                f"task {name}: node {node!r} is not in topology {graph.graph.get('name', '?')!r}"
            )
        if node is not None and node not in nodes:
            raise TaskError(f"task {name}: node {node} is all-optical (light passes through it): "
                            "it cannot hold G or a local model")
    rng = random.Random(seed)
    g = global_node if global_node is not None else rng.choice(nodes)
    if local_nodes is not None:
        if len(local_nodes) != local_models:
            raise TaskError(
                f"task {name}: {counted(len(local_nodes), 'local node')} given for "
                f"{counted(local_models, 'local model')}"
            )
        placed = tuple(local_nodes)
    else:
        others = [n for n in nodes if n != g] or [g]
        picks: list[str] = []
        while len(picks) < local_models:
            round_ = others[:]
            rng.shuffle(round_)
            picks.extend(round_[: local_models - len(picks)])
        placed = tuple(picks)
    return Task(name=name, global_node=g, local_nodes=placed, model_bytes=model_bytes)
