"""How a task's training samples are split among its local models (``--partition NAME[:ARG]``).

The splits FL papers compare, each a pure function of the labels (and natural ids), the number of
local models and a seed, so that every agent computes its own shard and no sample crosses the
emulated network:

- ``dirichlet:ALPHA`` (default ``dirichlet:0.5``): each class cut among the local models in
  Dirichlet(ALPHA) shares (Yurochkin et al. 2019; Hsu et al. 2019), smaller ALPHA more skewed;
- ``iid``: a seeded shuffle cut into equal parts;
- ``classes:N``: each local model sees exactly N classes (McMahan et al. 2017's pathological
  non-IID, as Flower Datasets' ``PathologicalPartitioner`` assigns it: classes to models at random,
  every class to at least one, each class's samples cut evenly among the models holding it);
- ``quantity:ALPHA``: labels IID, sizes skewed, each model's share of the samples drawn from
  Dirichlet(ALPHA);
- ``natural``: LEAF's split by writer or speaker, a local model being a group of users (users
  shuffled by the seed and dealt to the models in turn): the dataset must carry natural ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedmst.errors import TaskError

MIN_SAMPLES = 10
"""The fewest training samples a local model gets (a Dirichlet draw below it is drawn again)."""


@dataclass(frozen=True)
class Partition:
    """A parsed ``--partition``: its name and argument (None for those that take none)."""

    name: str
    arg: float | None = None

    def __str__(self) -> str:
        return self.name if self.arg is None else f"{self.name}:{self.arg:g}"


ARGS = {"dirichlet": "ALPHA > 0", "iid": None, "classes": "N >= 1 classes a local model sees",
        "quantity": "ALPHA > 0", "natural": None}
"""Each partition's argument, as its error says it (None: it takes none)."""


def parse_partition(spec: str) -> Partition:
    """``--partition NAME[:ARG]``, checked, or a one-line :class:`TaskError`.

    >>> parse_partition("dirichlet:0.1"), str(parse_partition("classes:2")), parse_partition("natural")
    (Partition(name='dirichlet', arg=0.1), 'classes:2', Partition(name='natural', arg=None))
    >>> parse_partition("dirichlet:0")
    Traceback (most recent call last):
    ...
    fedmst.errors.TaskError: --partition dirichlet:0: give dirichlet:ALPHA > 0
    """
    name, colon, arg = spec.partition(":")
    if name not in ARGS:
        raise TaskError(f"--partition {spec}: unknown partition {name!r}; give one of "
                        + ", ".join(n if a is None else f"{n}:ARG" for n, a in ARGS.items()))
    if ARGS[name] is None:
        if colon:
            raise TaskError(f"--partition {spec}: {name} takes no argument")
        return Partition(name)
    try:
        value = float(arg)
    except ValueError:
        value = float("nan")
    whole = name != "classes" or value.is_integer()
    if not colon or not value > 0 or not whole or not np.isfinite(value):
        raise TaskError(f"--partition {spec}: give {name}:{ARGS[name]}")
    return Partition(name, value)


MAX_DRAWS = 100
"""Dirichlet draws tried before the best one is topped up from the largest shards."""


def split(partition: Partition, labels: np.ndarray, k: int, seed: int,
          groups: np.ndarray | None = None) -> list[np.ndarray]:
    """The training sample indices of each of ``k`` local models (sorted arrays), deterministically
    from ``seed``; ``groups``: each sample's natural id (``natural`` needs them). Refused in one
    line where the samples cannot make ``k`` shards of at least :data:`MIN_SAMPLES`.

    >>> labels = np.repeat(np.arange(4), 25)
    >>> [len(s) for s in split(Partition("iid"), labels, 3, seed=1)]
    [34, 33, 33]
    >>> [sorted(map(int, set(labels[s]))) for s in split(Partition("classes", 2), labels, 2, seed=1)]
    [[0, 1], [2, 3]]
    """
    labels = np.asarray(labels)
    n = len(labels)
    if k < 1:
        raise TaskError(f"need at least one local model, got {k}")
    if partition.name == "natural":
        return _natural(groups, n, k, seed)
    if k * MIN_SAMPLES > n:
        raise TaskError(f"cannot split {n} training samples into {k} shards of at least {MIN_SAMPLES}: "
                        "use fewer local models")
    rng = np.random.default_rng(seed)
    if partition.name == "iid":
        shards = np.array_split(rng.permutation(n), k)
    elif partition.name == "classes":
        shards = _classes(labels, k, int(partition.arg or 1), rng)
    elif partition.name == "quantity":
        shards = _quantity(n, k, float(partition.arg or 1), rng)
    else:
        shards = _dirichlet(labels, k, float(partition.arg or 0.5), rng)
    return [np.sort(np.asarray(s, dtype=np.int64)) for s in shards]


def _classes(labels: np.ndarray, k: int, per_model: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Each model the ``per_model`` classes that follow its place in a random cycle of the classes
    (so every class is held when ``k * per_model`` covers them), each class's samples cut evenly
    among the models holding it."""
    classes = np.unique(labels)
    if per_model > len(classes):
        raise TaskError(f"--partition classes:{per_model}: the dataset has {len(classes)} classes")
    cycle = rng.permutation(classes)
    held = [[cycle[(i * per_model + j) % len(classes)] for j in range(per_model)] for i in range(k)]
    shards: list[list[int]] = [[] for _ in range(k)]
    for c in classes:
        holders = [i for i in range(k) if c in held[i]]
        if not holders:  # fewer models than classes: this class is nobody's
            continue
        members = rng.permutation(np.flatnonzero(labels == c))
        for i, part in zip(holders, np.array_split(members, len(holders))):
            shards[i].extend(part.tolist())
    small = min(range(k), key=lambda i: len(shards[i]))
    if len(shards[small]) < MIN_SAMPLES:
        raise TaskError(f"--partition classes:{per_model}: local model {small} gets {len(shards[small])} samples, "
                        f"fewer than {MIN_SAMPLES}: use fewer local models or more classes each")
    return [np.asarray(s) for s in shards]


def _quantity(n: int, k: int, alpha: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Labels IID, each model's share of the ``n`` samples drawn from Dirichlet(``alpha``), at least
    :data:`MIN_SAMPLES` each (what a draw leaves below it comes from the largest)."""
    sizes = np.floor(rng.dirichlet(np.full(k, alpha)) * n).astype(int)
    sizes[np.argmax(sizes)] += n - sizes.sum()
    for i in range(k):
        while sizes[i] < MIN_SAMPLES:
            largest = int(np.argmax(sizes))
            moved = min(MIN_SAMPLES - sizes[i], sizes[largest] - MIN_SAMPLES)
            sizes[i] += moved
            sizes[largest] -= moved
    return np.split(rng.permutation(n), np.cumsum(sizes)[:-1])


def _natural(groups: np.ndarray | None, n: int, k: int, seed: int) -> list[np.ndarray]:
    """Users (natural ids) shuffled by ``seed`` and dealt to the ``k`` models in turn: a model's
    shard is its users' samples."""
    if groups is None or len(groups) != n:
        raise TaskError("--partition natural: this dataset has no natural ids (users); give a LEAF dataset "
                        "(leaf:femnist:ROOT) or a tensor file with groups_train")
    users = np.unique(groups)
    if k > len(users):
        raise TaskError(f"--partition natural: the dataset has {len(users)} users, fewer than {k} local models")
    order = np.random.default_rng(seed).permutation(users)
    return [np.flatnonzero(np.isin(groups, order[i::k])) for i in range(k)]


def _dirichlet(labels: np.ndarray, k: int, alpha: float, rng: np.random.Generator) -> list[list[int]]:
    """Each class cut among the shards in Dirichlet(alpha) shares; a draw with a shard under
    :data:`MIN_SAMPLES` is drawn again, and after :data:`MAX_DRAWS` the best one is topped up from
    the largest shards, so any feasible ``k`` succeeds. As in the usual recipe (Yurochkin et al.
    2019), a shard already holding its fair share N/k takes no more, which keeps shard sizes from
    collapsing onto a few shards."""
    best: list[list[int]] = []
    for _ in range(MAX_DRAWS):
        shards = _draw(labels, k, alpha, rng)
        if not best or min(map(len, shards)) > min(map(len, best)):
            best = shards
        if min(map(len, best)) >= MIN_SAMPLES:
            return best
    for small in best:
        while len(small) < MIN_SAMPLES:
            large = max(best, key=len)
            small.append(large.pop(int(rng.integers(len(large)))))
    return best


def _draw(labels: np.ndarray, k: int, alpha: float, rng: np.random.Generator) -> list[list[int]]:
    shards: list[list[int]] = [[] for _ in range(k)]
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        rng.shuffle(members)
        p = rng.dirichlet(np.full(k, alpha))
        p *= np.array([len(s) < len(labels) / k for s in shards])
        cuts = (np.cumsum(p / p.sum()) * len(members)).astype(int)[:-1]
        for shard, part in zip(shards, np.split(members, cuts)):
            shard.extend(part.tolist())
    return shards


def counts(shards: list[np.ndarray], labels: np.ndarray) -> list[dict[str, object]]:
    """Each local model's samples and its count of each class (summary.json's ``partition``)."""
    labels = np.asarray(labels)
    out = []
    for s in shards:
        classes, n = np.unique(labels[s], return_counts=True)
        out.append({"samples": len(s), "classes": {str(int(c)): int(m) for c, m in zip(classes, n)}})
    return out
