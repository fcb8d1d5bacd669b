"""Client selection: which local models take part in a round (``--clients-per-round``).

FedAvg samples a fraction of the clients every round (McMahan et al., 2017); the seed poster's
first open challenge asks to select the useful ones and to weigh the cost of re-scheduling for
each new set against what it saves. A :class:`Selection` picks the round's participants among the
candidates (the local models that can still take part); the run re-plans whenever the set changes
and measures what that costs. Pure: no I/O, no torch.

>>> task = Task("t", "G", ("a", "b", "c", "d"), 1_000)
>>> select("random", SelectionContext(task, candidates=(0, 1, 2, 3), count=2, round=1, seed=7))
(0, 1)
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, field, replace
from typing import Callable, Collection, Mapping

from fedmst.core.plan import Plan, predicted_link_bytes
from fedmst.core.tasks import Task
from fedmst.errors import FedmstError
from fedmst.plugins import Registry
from fedmst.wording import counted


class SelectionError(FedmstError):
    """A selection named or sized wrongly, or one that returned no valid set."""


@dataclass(frozen=True)
class SelectionContext:
    """What a selection decides from: the task (every local model), the candidates among them
    (original indices), how many to pick, the round and the run's seed, a way to plan a set of
    local models under this round's link state (a :class:`Plan`, for network-aware choices), and
    each local model's loss as it last reported it (from its last training; absent: never trained)."""

    task: Task
    candidates: tuple[int, ...]
    count: int
    round: int
    seed: int
    pool: int = 0
    """How many candidates a pool-based selection draws before it picks ``count`` (power-of-choice's
    d; 0: :func:`pool_size`'s default)."""
    plan: Callable[[tuple[int, ...]], Plan] | None = None
    losses: Mapping[int, float] = field(default_factory=dict)


class Selection:
    """Picks a round's participants (subclass it; ``select`` returns original local-model indices)."""

    def select(self, context: SelectionContext) -> Collection[int]:
        raise NotImplementedError


POOL_FACTOR = 1.5
"""The default pool: 1.5 times the participants (at most every candidate), between Cho et al.'s
d = m (no choice) and d = K (always the same extremes)."""


def pool_size(context: SelectionContext) -> int:
    """The pool a pool-based selection draws: ``context.pool`` or the default, at least ``count``
    and at most every candidate.

    >>> every = SelectionContext(Task("t", "G", ("a",) * 16, 8), tuple(range(16)), count=8, round=1, seed=1)
    >>> pool_size(every), pool_size(replace(every, pool=20)), pool_size(replace(every, pool=3))
    (12, 16, 8)
    """
    wanted = context.pool or math.ceil(POOL_FACTOR * context.count)
    return min(len(context.candidates), max(context.count, wanted))


def _sample(context: SelectionContext, size: int, purpose: str) -> list[int]:
    """``size`` of the candidates, drawn without replacement from a generator seeded by the run's
    seed, the task, the round and ``purpose``: the same in every run, under every scheduler."""
    key = f"fedmst-selection/{purpose}/{context.seed}/{context.task.name}/{context.round}".encode()
    rng = random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))
    return sorted(rng.sample(context.candidates, size))


class Random(Selection):
    """FedAvg's uniform sample without replacement (McMahan et al., 2017), seeded."""

    def select(self, context: SelectionContext) -> Collection[int]:
        return _sample(context, context.count, "random")


class Loss(Selection):
    """Power-of-choice (Cho et al., "Towards Understanding Biased Client Selection in Federated
    Learning", AISTATS 2022), as its communication-free variant rpow-d: from a seeded pool of
    :func:`pool_size` candidates, the ``count`` with the highest local loss each last
    reported, a local model that has not trained yet counting highest (ties by index). The losses
    come back with the training replies on the control channel; no transfer crosses a link for them."""

    def select(self, context: SelectionContext) -> Collection[int]:
        pool = _sample(context, pool_size(context), "loss")
        return sorted(sorted(pool, key=lambda i: (-context.losses.get(i, math.inf), i))[:context.count])


class Network(Selection):
    """Joint selection and scheduling: from a seeded pool of :func:`pool_size` candidates, the
    ``count`` the scheduler serves with the fewest link bytes this round, chosen
    greedily (the candidate whose addition to the set so far adds the fewest planned bytes, ties
    by index). The pool changes every round, so the participants do too (though a model far from
    the others may never be cheapest); greedy, so not always the cheapest set of the pool."""

    def select(self, context: SelectionContext) -> Collection[int]:
        if context.plan is None:
            raise SelectionError("the network selection needs the scheduler's plans")
        chosen: list[int] = []
        pool = _sample(context, pool_size(context), "network")
        for _ in range(context.count):
            left = [c for c in pool if c not in chosen]
            cost = {c: sum(predicted_link_bytes(context.plan(tuple(sorted([*chosen, c])))).values()) for c in left}
            chosen.append(min(left, key=lambda c: (cost[c], c)))
        return sorted(chosen)


SELECTIONS: Registry[type[Selection]] = Registry(
    "selection", "fedmst.selections", SelectionError, {"random": Random, "loss": Loss, "network": Network},
    accepts=lambda obj: isinstance(obj, type) and issubclass(obj, Selection),
    requirement="a subclass of fedmst.api.Selection", form="package.module:Class")
"""Built-in selections by name; a user's own by ``package.module:Class`` or entry point."""


def participants(given: str, local_models: int) -> int:
    """How many of ``local_models`` take part in a round for ``--clients-per-round`` ``given``: a
    count, or a fraction of them (at least one).

    >>> participants("4", 8), participants("0.25", 8), participants("0.1", 8)
    (4, 2, 1)
    >>> participants("9", 8)
    Traceback (most recent call last):
    fedmst.core.selection.SelectionError: --clients-per-round 9: the task has only 8 local models
    """
    count = max(1, round(float(given) * local_models)) if "." in given else int(given)
    if count > local_models:
        raise SelectionError(f"--clients-per-round {given}: the task has only "
                             f"{counted(local_models, 'local model')}")
    return count


def check_pool(pool: int | None, count: int, given: str) -> None:
    """Refuse a ``--selection-pool`` smaller than the ``count`` participants it must hold (what
    ``--clients-per-round`` ``given`` asks for): a pool is drawn before M are picked from it.

    >>> check_pool(None, 4, "4"), check_pool(12, 8, "0.5")
    (None, None)
    >>> check_pool(3, 4, "4")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    fedmst.core.selection.SelectionError: --selection-pool 3: the pool is drawn ... so give 4 or more
    """
    if pool is not None and pool < count:
        raise SelectionError(f"--selection-pool {pool}: the pool is drawn before the round's {count} participants "
                             f"are picked from it (--clients-per-round {given}), so give {count} or more")


def select(name: str, context: SelectionContext) -> tuple[int, ...]:
    """The participants ``name`` picks, checked: ``count`` distinct candidates (all of them when
    there are no more than ``count``)."""
    if len(context.candidates) <= context.count:
        return tuple(context.candidates)
    try:
        picked = tuple(sorted(SELECTIONS.lookup(name)().select(context)))
    except FedmstError:
        raise
    except Exception as exc:  # noqa: BLE001 - a user's selection failing is its fault, in one line
        raise SelectionError(f"--selection {name}: {type(exc).__name__}: {exc}") from exc
    if len(set(picked)) != context.count or not set(picked) <= set(context.candidates):
        raise SelectionError(f"--selection {name} picked {list(picked)} for {context.task.name} in round "
                             f"{context.round}: give {context.count} distinct of {list(context.candidates)}")
    return picked


def reduced(task: Task, models: tuple[int, ...]) -> Task:
    """``task`` with only the local models ``models`` (original indices), as a scheduler plans it."""
    return replace(task, local_nodes=tuple(task.local_nodes[i] for i in models))


__all__ = ["POOL_FACTOR", "SELECTIONS", "Loss", "Network", "Random", "Selection", "SelectionContext", "SelectionError",
           "check_pool", "participants", "pool_size", "reduced", "select"]
