"""Flower clients as local trainers: a ``client_fn`` run as Flower runs it, its weights moved by fedmst.

``--client package.module:client_fn`` names the function a Flower ``ClientApp`` is built from.
fedmst calls it as Flower does for every message (``client = client_fn(context)``, a
``NumPyClient`` turned into a ``Client``), with a ``Context`` per partition that lives for the
whole run: ``node_config`` carries ``partition-id`` and ``num-partitions`` as Flower's simulation
gives them, ``run_config`` the run's ``--run-config`` entries, ``state`` what the client keeps.
``fit`` gets the round's global model and ``{"server-round": r}`` (as Flower's FedAvg sends);
its returned weights travel the plan's links, weighted by the example count it returned.

The client's arrays travel as one float32 vector (fedmst's wire format) and are handed back in
their own shapes and dtypes. The run's initial global model is partition 0's ``get_parameters``
(Flower's server asks one client for it), built under the task's seed on every node, so every
node starts from the same weights even where a plan broadcasts nothing.

Flower evaluates on the clients; so does fedmst: G evaluates each round's global model with every
partition's client (Flower's ``fraction_evaluate=1``) and reports the ``accuracy`` metric averaged
over their examples. That evaluation happens at G, off the links and off the clock, as fedmst's own
test-set accuracy does, with a ``Context`` per partition of G's own: what a client keeps in
``context.state`` during ``fit`` (on its training node) is not there when it evaluates.

``flwr`` is imported only when a client is named (``pip install 'fedmst[flower]'``).
"""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass
from functools import cache
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from fedmst.errors import SET_UP_ALL, ClientError
from fedmst.plugins import import_object, one_line

ConfigValue = bool | float | int | str
SEEDING = threading.Lock()
"""Held while a model is built under a seed: the RNGs it seeds are the process's."""


@cache
def load_client_fn(spec: str) -> Callable[..., Any]:
    """The ``client_fn`` that ``package.module:client_fn`` names; a clear error without ``flwr``."""
    try:
        import flwr  # noqa: F401 - only to say so when it is missing
    except ImportError:
        raise ClientError(f"--client {spec}: Flower (flwr) is not installed here; pip install 'fedmst[flower]' "
                          f"({SET_UP_ALL} does)") from None
    fn = import_object(spec, "Flower client_fn", ClientError)
    if not callable(fn):
        raise ClientError(f"--client {spec}: {spec.partition(':')[2]} is not a function (a Flower client_fn)")
    return fn


@dataclass(frozen=True)
class Layout:
    """The shapes and dtypes of a client's arrays: how its list of arrays becomes fedmst's float32
    wire vector and back.

    >>> layout = Layout.of([np.zeros((2, 3), np.float32), np.array([7], np.int64)])
    >>> layout.numel
    7
    >>> flat = layout.flatten([np.ones((2, 3), np.float32), np.array([7], np.int64)], "fit")
    >>> [a.dtype.name for a in layout.arrays(flat)], layout.arrays(flat)[1].tolist()
    (['float32', 'int64'], [7])
    """

    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]

    @classmethod
    def of(cls, arrays: Sequence[np.ndarray]) -> Layout:
        return cls(tuple(tuple(np.shape(a)) for a in arrays), tuple(np.asarray(a).dtype.str for a in arrays))

    @property
    def numel(self) -> int:
        return sum(math.prod(s) for s in self.shapes)

    def flatten(self, arrays: Sequence[np.ndarray], what: str) -> torch.Tensor:
        """``arrays`` as one float32 vector; refused unless they have this layout's shapes."""
        shapes = tuple(tuple(np.shape(a)) for a in arrays)
        if shapes != self.shapes:
            raise ClientError(f"{what} returned {len(shapes)} arrays of shapes {_shown(shapes)}; the model's "
                              f"{len(self.shapes)} arrays have shapes {_shown(self.shapes)}")
        if not arrays:
            return torch.empty(0, dtype=torch.float32)
        return torch.cat([torch.from_numpy(np.asarray(a, dtype=np.float32).reshape(-1)) for a in arrays])

    def arrays(self, flat: torch.Tensor) -> list[np.ndarray]:
        """The client's arrays from a wire vector, each in its own shape and dtype (copies)."""
        out, offset = [], 0
        values = flat.detach().numpy()
        for shape, dtype in zip(self.shapes, self.dtypes):
            n = math.prod(shape)
            out.append(values[offset:offset + n].reshape(shape).astype(np.dtype(dtype)))
            offset += n
        return out


def _shown(shapes: Sequence[tuple[int, ...]], most: int = 4) -> str:
    text = ", ".join(str(list(s)) for s in shapes[:most])
    return f"[{text}{', ...' if len(shapes) > most else ''}]"


@dataclass(frozen=True)
class Fitted:
    """What one ``fit`` gave: the trained weights (wire vector), the examples they were trained
    on (the aggregation weight), and the training loss where the client reported one."""

    weights: torch.Tensor
    examples: int
    loss: float | None
    busy_s: float | None = None
    """The training's own time where another process trained it (the host trainer, on its device);
    None: it trained in the agent's thread, whose CPU time counts."""


class FlowerNode:
    """One partition's Flower node: its Context, kept for the run, and ``client_fn`` called afresh
    for every message, as a Flower ``ClientApp`` does."""

    def __init__(self, spec: str, partition: int, partitions: int, run_config: Mapping[str, ConfigValue]) -> None:
        self.client_fn = load_client_fn(spec)
        from flwr.common import Context, RecordDict

        self.spec, self.partition = spec, partition
        self.what = f"Flower client {spec} (partition {partition})"
        self.context = Context(run_id=0, node_id=partition, state=RecordDict(), run_config=dict(run_config),
                               node_config={"partition-id": partition, "num-partitions": partitions})

    def _client(self) -> Any:
        from flwr.client import Client, NumPyClient

        try:
            client = self.client_fn(self.context)
        except ClientError:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's client_fn failing is the spec's fault
            raise ClientError(f"{self.what}: client_fn raised {one_line(exc)}") from exc
        if isinstance(client, NumPyClient):
            client = client.to_client()
        if not isinstance(client, Client):
            raise ClientError(f"{self.what}: client_fn returned {type(client).__name__}, not a Flower "
                              "NumPyClient or Client")
        return client

    def _call(self, method: str, ins: Any) -> Any:
        from flwr.common import Code, EvaluateRes, FitRes, GetParametersRes

        client = self._client()
        try:
            res = getattr(client, method)(ins)
        except Exception as exc:  # noqa: BLE001 - the user's client failing is the client's fault
            raise ClientError(f"{self.what}: {method} raised {one_line(exc)}") from exc
        expected = {"get_parameters": GetParametersRes, "fit": FitRes, "evaluate": EvaluateRes}[method]
        if not isinstance(res, expected):
            raise ClientError(f"{self.what}: {method} returned {type(res).__name__}, not a Flower {expected.__name__}")
        if res.status.code == Code.GET_PARAMETERS_NOT_IMPLEMENTED:
            raise ClientError(f"{self.what}: implement get_parameters: the run's initial global model and its "
                              "size are partition 0's, as Flower's server asks a client when its strategy has no "
                              "initial_parameters")
        if res.status.code != Code.OK:
            raise ClientError(f"{self.what}: {method} returned {res.status.code.name}: {res.status.message}")
        return res

    def parameters(self, seed: int) -> list[np.ndarray]:
        """The client's initial weights, its model built with Python's, NumPy's and torch's RNGs
        seeded by ``seed`` (one at a time: they are the process's) and put back as they were after."""
        from flwr.common import GetParametersIns

        with SEEDING:
            saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
            try:
                random.seed(seed)
                np.random.seed(seed % 2**32)
                torch.manual_seed(seed)
                return self._arrays(self._call("get_parameters", GetParametersIns(config={})), "get_parameters")
            finally:
                random.setstate(saved[0])
                np.random.set_state(saved[1])
                torch.set_rng_state(saved[2])

    def _arrays(self, res: Any, method: str) -> list[np.ndarray]:
        """The numeric arrays a result carries; a clear error for anything else."""
        from flwr.common import parameters_to_ndarrays

        try:
            arrays = parameters_to_ndarrays(res.parameters)
        except Exception as exc:  # noqa: BLE001 - whatever the client put there is the client's fault
            raise ClientError(f"{self.what}: {method} returned parameters that are no arrays "
                              f"({one_line(exc)})") from exc
        odd = [a.dtype.name for a in arrays if not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_)]
        if odd:
            raise ClientError(f"{self.what}: {method} returned arrays of {', '.join(sorted(set(odd)))}, not numbers")
        return arrays

    def fit(self, layout: Layout, weights: torch.Tensor, round_: int, proximal_mu: float = 0.0) -> Fitted:
        """Train from ``weights`` (the round's global model) as Flower's FedAvg asks a client to
        (FedProx's also sends its ``proximal_mu``)."""
        from flwr.common import FitIns, ndarrays_to_parameters

        config: dict[str, ConfigValue] = {"server-round": round_}
        if proximal_mu > 0:
            config["proximal_mu"] = proximal_mu
        res = self._call("fit", FitIns(ndarrays_to_parameters(layout.arrays(weights)), config))
        trained = layout.flatten(self._arrays(res, "fit"), f"{self.what}: fit")
        examples = _count(res.num_examples)
        if examples is None or examples <= 0:
            raise ClientError(f"{self.what}: fit returned {res.num_examples!r} examples; its update needs a "
                              "positive count to be weighted by")
        loss = next((self._metric(res.metrics, k, "fit") for k in ("train_loss", "loss") if k in res.metrics), None)
        return Fitted(trained, examples, loss)

    def evaluate(self, layout: Layout, weights: torch.Tensor, round_: int) -> tuple[float, int]:
        """The client's ``accuracy`` metric on ``weights`` and the examples it was measured on."""
        from flwr.common import EvaluateIns, ndarrays_to_parameters

        res = self._call("evaluate", EvaluateIns(ndarrays_to_parameters(layout.arrays(weights)),
                                                 {"server-round": round_}))
        if "accuracy" not in res.metrics:
            raise ClientError(f"{self.what}: evaluate returned no 'accuracy' metric (it returned "
                              f"{sorted(res.metrics) or 'none'}); fedmst reports the global model's accuracy")
        examples = _count(res.num_examples)
        if examples is None or examples < 0:
            raise ClientError(f"{self.what}: evaluate returned {res.num_examples!r} examples, not a count")
        return self._metric(res.metrics, "accuracy", "evaluate"), examples

    def _metric(self, metrics: Mapping[str, Any], key: str, method: str) -> float:
        value = metrics[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ClientError(f"{self.what}: {method} returned {key} = {value!r}, not a number")
        return float(value)


def _count(value: Any) -> int | None:
    """``value`` as an example count, or None when it is none (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        return None
    return int(value)


def initial_layout(spec: str, partitions: int, run_config: Mapping[str, ConfigValue],
                   seed: int) -> tuple[Layout, torch.Tensor]:
    """The model's layout and the run's initial global weights: partition 0's ``get_parameters``."""
    arrays = FlowerNode(spec, 0, partitions, run_config).parameters(seed)
    layout = Layout.of(arrays)
    if layout.numel == 0:
        raise ClientError(f"Flower client {spec}: get_parameters returned no weights")
    return layout, layout.flatten(arrays, f"Flower client {spec}: get_parameters")


def federated_accuracy(nodes: Sequence[FlowerNode], layout: Layout, weights: torch.Tensor, round_: int) -> float:
    """``weights``' accuracy over every partition's evaluation, weighted by its examples (the
    ``weighted_average`` of Flower's examples)."""
    scores = [node.evaluate(layout, weights, round_) for node in nodes]
    total = sum(n for _, n in scores)
    if total <= 0:
        raise ClientError(f"Flower client {nodes[0].spec}: evaluate returned no examples on any partition")
    return sum(acc * n for acc, n in scores) / total


def parse_run_config(entries: Sequence[str]) -> dict[str, ConfigValue]:
    """``KEY=VALUE`` entries as Flower's ``--run-config`` reads them: each value a TOML value (a
    number, ``true``, a quoted string), an unquoted word taken as a string.

    >>> parse_run_config(["local-epochs=2", "lr=0.1", "fast=true", 'name="a b"', "mode=sgd"])
    {'local-epochs': 2, 'lr': 0.1, 'fast': True, 'name': 'a b', 'mode': 'sgd'}
    """
    import tomllib

    out: dict[str, ConfigValue] = {}
    for entry in entries:
        key, sep, text = entry.partition("=")
        if not sep or not key.strip():
            raise ClientError(f"--run-config {entry!r}: give KEY=VALUE")
        try:
            value = tomllib.loads(f"v = {text.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = text.strip()
        if not isinstance(value, (bool, int, float, str)):
            raise ClientError(f"--run-config {entry!r}: a value is a number, true/false or a string")
        out[key.strip()] = value
    return out
