"""Server strategies: how the round's aggregate becomes the next global model.

Every local model sends its *update* (its trained weights minus the global model it started the
round from), weighted by its share of the participants' samples, and the plan adds those up on the
way to G (or round a ring). What arrives is the exact weighted mean update; a :class:`Strategy`
then takes the step: FedAvg adds it, the server optimizers of Reddi et al. ("Adaptive Federated
Optimization", ICLR 2021) and Hsu et al. ("Measuring the Effects of Non-Identical Data
Distribution", 2019) treat it as a pseudo-gradient. Because the step only needs the mean, these
strategies are *decomposable*: any scheduler may add updates in the network.

Sending updates rather than weights makes the sum exact where it matters: a weight no local model
changed has an update of exactly zero whatever order the relays add in, where weights would sum to
it only up to rounding (and an adaptive step divides by the update's size, so rounding noise there
would become a full step).

Each strategy's knobs and defaults are Flower's (``flwr.server.strategy``, framework 1.x), so a
Flower user's numbers mean the same here; ``--strategy-arg NAME=VALUE`` sets them. Strategies are
torch-free at import: they only use the tensors' own methods.

>>> import torch
>>> current, update = torch.tensor([1.0, 2.0]), torch.tensor([0.5, 0.0])
>>> FedAvg().step(1, current, update)
tensor([1.5000, 2.0000])
>>> FedAdam().step(1, current, update)  # the first step is eta_norm * sign(update)
tensor([1.0742, 2.0000])
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Mapping

from fedmst.errors import FedmstError
from fedmst.plugins import Registry

if TYPE_CHECKING:
    import torch


class StrategyError(FedmstError):
    """A strategy named or set up wrongly."""


@dataclass(frozen=True)
class Range:
    """The values a knob may take: from ``low`` to ``high`` (None: no bound), each end included
    or not; ``note`` says more where a value is missing.

    >>> str(Range(0, low_in=False)), str(Range(0, 1, high_in=False)), 1.0 in Range(0, 1, high_in=False)
    ('above 0', 'in [0, 1)', False)
    """

    low: float | None = None
    high: float | None = None
    low_in: bool = True
    high_in: bool = True
    note: str = ""

    def __contains__(self, value: float) -> bool:
        low = self.low is None or (value >= self.low if self.low_in else value > self.low)
        high = self.high is None or (value <= self.high if self.high_in else value < self.high)
        return low and high and value == value  # NaN is in no range

    def __str__(self) -> str:
        if self.high is None:
            return f"{self.low:g} or more" if self.low_in else f"above {self.low:g}"
        if self.low is None:
            return f"{self.high:g} or less" if self.high_in else f"below {self.high:g}"
        return f"in {'[' if self.low_in else '('}{self.low:g}, {self.high:g}{']' if self.high_in else ')'}"


ABOVE_ZERO = Range(0, low_in=False)
FRACTION = Range(0, 1, high_in=False)
"""From 0 to below 1: a momentum or a moment's decay."""


@dataclass
class Strategy:
    """The server side of a round (subclass it, as a dataclass whose fields are its knobs).

    ``step`` gets the global model the round started from and the participants' weighted mean
    update, and returns the next global model. It may keep state across rounds (each task has its
    own instance on every node that ends an upload holding the aggregate: G, or every member of a
    ring, whose replicas stay equal because they take the same steps on the same sums).
    ``decomposable``: the step needs only the weighted sum of the updates, so relays may add them.
    ``proximal_mu``: the weight of FedProx's proximal term in every local model's loss (0: none).
    ``limits``: the knobs' valid values (:class:`Range`, by knob name).
    """

    decomposable: ClassVar[bool] = True
    proximal_mu: ClassVar[float] = 0.0
    limits: ClassVar[Mapping[str, Range]] = {}
    """Each knob's valid values, declared once: ``build_strategy`` refuses a value outside them,
    given or default, in one line, before anything runs."""

    def step(self, round_: int, current: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def aggregate(self, round_: int, current: torch.Tensor, updates: Mapping[int, torch.Tensor],
                  weights: Mapping[int, float]) -> torch.Tensor:
        """The next global model from every participant's update, unweighted, by local model
        (what a strategy that is not decomposable gets), and their sample ``weights`` (summing
        to 1)."""
        raise NotImplementedError

    def check(self, participants: int) -> None:
        """Refuse, with a :class:`StrategyError`, rounds of ``participants`` it cannot aggregate."""


@dataclass
class FedAvg(Strategy):
    """McMahan et al., 2017: the mean of the participants' models (the current model plus their mean update)."""

    def step(self, round_: int, current: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
        return current + update


@dataclass
class FedProx(FedAvg):
    """Li et al., 2020: FedAvg's step; each local model adds ``proximal_mu / 2 * ||w - w_global||^2``
    to its loss, which keeps it near the global model on skewed data (Flower's ``FedProx``, whose
    ``proximal_mu`` has no default either: give ``--strategy-arg proximal_mu=...``)."""

    proximal_mu: float = 0.0  # type: ignore[misc]  # a knob here, a constant 0 elsewhere
    limits: ClassVar[Mapping[str, Range]] = {
        "proximal_mu": Range(0, low_in=False, note="a proximal term; Flower's examples use 0.01 to 1")}


@dataclass
class FedAvgM(Strategy):
    """Hsu et al., 2019: server SGD with momentum on the pseudo-gradient ``-update`` (Flower's
    ``FedAvgM``: ``server_learning_rate`` 1.0, ``server_momentum`` 0.0, which is FedAvg itself)."""

    server_learning_rate: float = 1.0
    server_momentum: float = 0.0
    limits: ClassVar[Mapping[str, Range]] = {"server_learning_rate": ABOVE_ZERO, "server_momentum": FRACTION}
    _momentum: torch.Tensor | None = field(default=None, init=False, repr=False)

    def step(self, round_: int, current: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
        gradient = -update
        if self.server_momentum > 0:
            self._momentum = gradient if self._momentum is None else self.server_momentum * self._momentum + gradient
            gradient = self._momentum
        return current - self.server_learning_rate * gradient


@dataclass
class _FedOpt(Strategy):
    """Reddi et al.'s adaptive server optimizers: first and second moments of the update."""

    eta: float
    beta_1: float
    beta_2: float
    tau: float
    limits: ClassVar[Mapping[str, Range]] = {"eta": ABOVE_ZERO, "beta_1": FRACTION, "beta_2": FRACTION,
                                             "tau": ABOVE_ZERO}  # tau 0: 0/0 where no update moved a weight
    _m: torch.Tensor | None = field(default=None, init=False, repr=False)
    _v: torch.Tensor | None = field(default=None, init=False, repr=False)

    def step(self, round_: int, current: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
        m = update.new_zeros(update.shape) if self._m is None else self._m
        v = update.new_zeros(update.shape) if self._v is None else self._v
        self._m = self.beta_1 * m + (1 - self.beta_1) * update
        self._v = self._second_moment(v, update)
        return current + self._rate(round_) * self._m / (self._v.sqrt() + self.tau)

    def _second_moment(self, v: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _rate(self, round_: int) -> float:
        return self.eta


@dataclass
class FedAdam(_FedOpt):
    """Adam on the server (Flower's ``FedAdam``: eta 0.1, beta_1 0.9, beta_2 0.99, tau 1e-9, and
    its bias-corrected rate ``eta * sqrt(1 - beta_2^(t+1)) / (1 - beta_1^(t+1))`` in round t)."""

    eta: float = 1e-1
    beta_1: float = 0.9
    beta_2: float = 0.99
    tau: float = 1e-9

    def _second_moment(self, v: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
        return self.beta_2 * v + (1 - self.beta_2) * update * update

    def _rate(self, round_: int) -> float:
        return self.eta * math.sqrt(1 - self.beta_2 ** (round_ + 1)) / (1 - self.beta_1 ** (round_ + 1))


@dataclass
class FedYogi(_FedOpt):
    """Yogi on the server (Flower's ``FedYogi``: eta 0.01, beta_1 0.9, beta_2 0.99, tau 1e-3): the
    second moment moves by the sign of its gap to the squared update, not towards it."""

    eta: float = 1e-2
    beta_1: float = 0.9
    beta_2: float = 0.99
    tau: float = 1e-3

    def _second_moment(self, v: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
        squared = update * update
        return v - (1 - self.beta_2) * squared * (v - squared).sign()


@dataclass
class FedAdagrad(_FedOpt):
    """Adagrad on the server (Flower's ``FedAdagrad``: eta 0.1, tau 1e-9, no momentum): the
    second moment sums every squared update."""

    eta: float = 1e-1
    beta_1: float = 0.0
    beta_2: float = 0.0
    tau: float = 1e-9

    def _second_moment(self, v: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
        return v + update * update


@dataclass
class _Robust(Strategy):
    """Aggregations that need every update whole at G: relays forward them, never add."""

    decomposable: ClassVar[bool] = False

    def step(self, round_: int, current: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
        raise TypeError(f"{type(self).__name__} is not decomposable: it aggregates every update (aggregate)")


def _stacked(updates: Mapping[int, torch.Tensor]) -> torch.Tensor:
    """The updates as one ``[participants, weights]`` tensor, in local-model order."""
    import torch

    return torch.stack([updates[i] for i in sorted(updates)])


@dataclass
class FedMedian(_Robust):
    """Yin et al., 2018: the coordinate-wise median of the participants' models (Flower's
    ``FedMedian``: ``numpy.median``, the mean of the two middle values for an even count)."""

    def aggregate(self, round_: int, current: torch.Tensor, updates: Mapping[int, torch.Tensor],
                  weights: Mapping[int, float]) -> torch.Tensor:
        ordered = _stacked(updates).sort(dim=0).values
        n = ordered.shape[0]
        middle = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
        return current + middle


@dataclass
class FedTrimmedAvg(_Robust):
    """Yin et al., 2018: per coordinate, the mean after cutting ``int(beta * n)`` of the n
    participants' values from each end (Flower's ``FedTrimmedAvg``: ``beta`` 0.2)."""

    beta: float = 0.2
    limits: ClassVar[Mapping[str, Range]] = {"beta": Range(0, 0.5, high_in=False, note="the fraction trimmed from "
                                                                                       "each end")}

    def aggregate(self, round_: int, current: torch.Tensor, updates: Mapping[int, torch.Tensor],
                  weights: Mapping[int, float]) -> torch.Tensor:
        ordered = _stacked(updates).sort(dim=0).values
        cut = int(self.beta * ordered.shape[0])
        return current + ordered[cut:ordered.shape[0] - cut].mean(dim=0)


@dataclass
class Krum(_Robust):
    """Blanchard et al., 2017: the participant whose ``n - f - 2`` nearest others are nearest
    (squared distances), ``f`` = ``num_malicious_clients``; with ``num_clients_to_keep`` above 0,
    Multi-Krum: the sample-weighted mean of that many best (Flower's ``Krum``: 0 and 0)."""

    num_malicious_clients: int = 0
    num_clients_to_keep: int = 0
    limits: ClassVar[Mapping[str, Range]] = {"num_malicious_clients": Range(0), "num_clients_to_keep": Range(0)}

    def check(self, participants: int) -> None:
        f = self.num_malicious_clients  # neither knob below 0: the limits refuse that
        if participants <= 2 * f + 2:
            raise StrategyError(f"krum with num_malicious_clients={f} needs more than {2 * f + 2} participants a "
                                f"round (Blanchard et al.: n > 2f + 2); this run has {participants}")
        if self.num_clients_to_keep > participants:
            raise StrategyError(f"krum: num_clients_to_keep={self.num_clients_to_keep} must be from 0 to the "
                                f"{participants} participants a round")

    def aggregate(self, round_: int, current: torch.Tensor, updates: Mapping[int, torch.Tensor],
                  weights: Mapping[int, float]) -> torch.Tensor:
        import torch

        models = sorted(updates)
        stacked = _stacked(updates).double()
        distances = torch.cdist(stacked, stacked) ** 2
        closest = max(1, len(models) - self.num_malicious_clients - 2)
        scores = [distances[i].sort().values[1:closest + 1].sum().item() for i in range(len(models))]
        ranked = sorted(range(len(models)), key=lambda i: scores[i])
        keep = self.num_clients_to_keep
        if keep == 0:
            return current + updates[models[ranked[0]]]
        best = [models[i] for i in ranked[:keep]]
        total = sum(weights[m] for m in best)
        return current + sum(weights[m] / total * updates[m] for m in best)


STRATEGIES: Registry[type[Strategy]] = Registry(
    "strategy", "fedmst.strategies", StrategyError,
    {"fedavg": FedAvg, "fedprox": FedProx, "fedavgm": FedAvgM, "fedadam": FedAdam, "fedyogi": FedYogi,
     "fedadagrad": FedAdagrad, "fedmedian": FedMedian, "fedtrimmedavg": FedTrimmedAvg, "krum": Krum},
    accepts=lambda obj: isinstance(obj, type) and issubclass(obj, Strategy) and dataclasses.is_dataclass(obj),
    requirement="a dataclass subclassing fedmst.api.Strategy", form="package.module:Class")
"""Built-in strategies by name; a user's own by ``package.module:Class`` or entry point."""


def _knob_fields(cls: type[Strategy]) -> dict[str, dataclasses.Field]:
    """A strategy's knobs: its dataclass fields a user may set (state kept across rounds is not)."""
    return {f.name: f for f in dataclasses.fields(cls) if f.init}


def knobs(strategy: Strategy | type[Strategy]) -> dict[str, float]:
    """A strategy's knobs with their values: a class's defaults, or an instance's settings.

    >>> knobs(FedAdam)
    {'eta': 0.1, 'beta_1': 0.9, 'beta_2': 0.99, 'tau': 1e-09}
    >>> knobs(build_strategy("krum", {"num_malicious_clients": 1.0}))
    {'num_malicious_clients': 1, 'num_clients_to_keep': 0}
    """
    cls = strategy if isinstance(strategy, type) else type(strategy)
    return {name: getattr(strategy, name) for name in _knob_fields(cls)}


def strategy_knobs(given: tuple[str, ...]) -> dict[str, float]:
    """``--strategy-arg`` values (``KNOB=NUMBER``, checked by the run's options) as knobs.

    >>> strategy_knobs(("eta=0.01", "tau=1e-3"))
    {'eta': 0.01, 'tau': 0.001}
    """
    return {name.strip(): float(value) for name, _, value in (a.partition("=") for a in given)}


def build_strategy(name: str, args: Mapping[str, float]) -> Strategy:
    """The strategy ``name`` with its knobs set from ``args``; one-line errors for an unknown
    strategy, a knob it does not have or a value it refuses.

    >>> build_strategy("fedavgm", {"server_momentum": 0.9})
    FedAvgM(server_learning_rate=1.0, server_momentum=0.9)
    >>> build_strategy("fedadam", {"lr": 0.1})
    Traceback (most recent call last):
    fedmst.fl.strategies.StrategyError: --strategy-arg lr: fedadam has no such knob (it has eta, beta_1, beta_2, tau)
    """
    cls = STRATEGIES.lookup(name)
    known = _knob_fields(cls)
    given: dict[str, float | int] = {}
    for key, value in args.items():
        if key not in known:
            raise StrategyError(f"--strategy-arg {key}: {name} has no such knob "
                                f"(it has {', '.join(known) or 'none'})")
        if known[key].type in ("int", int):
            if not float(value).is_integer():
                raise StrategyError(f"--strategy-arg {key}={value:g}: {name} takes a whole number")
            value = int(value)
        given[key] = value
    _check_limits(name, cls, given)
    try:
        return cls(**given)
    except StrategyError:
        raise
    except Exception as exc:  # noqa: BLE001 - a user's class refusing its arguments
        raise StrategyError(f"--strategy {name}: {type(exc).__name__}: {exc}") from None


def _check_limits(name: str, cls: type[Strategy], given: Mapping[str, float]) -> None:
    """Refuse a knob's value (given, or its default where none is) outside the strategy's ``limits``.

    >>> _check_limits("fedadam", FedAdam, {"eta": -1.0})
    Traceback (most recent call last):
    fedmst.fl.strategies.StrategyError: --strategy-arg eta=-1: fedadam's eta must be above 0
    """
    known = _knob_fields(cls)
    for key, within in getattr(cls, "limits", {}).items():
        if key not in known:
            continue
        value = given.get(key, known[key].default)
        if isinstance(value, (int, float)) and value in within:
            continue
        if key in given:
            raise StrategyError(f"--strategy-arg {key}={value:g}: {name}'s {key} must be {within}"
                                + (f" ({within.note})" if within.note else ""))
        raise StrategyError(f"{name} needs {key} {within}: give --strategy-arg {key}=VALUE"
                            + (f" ({within.note})" if within.note else ""))


__all__ = ["STRATEGIES", "FedAdagrad", "FedAdam", "FedAvg", "FedAvgM", "FedMedian", "FedProx", "FedTrimmedAvg",
           "FedYogi", "Krum", "Range", "Strategy",
           "StrategyError", "build_strategy", "knobs", "strategy_knobs"]
