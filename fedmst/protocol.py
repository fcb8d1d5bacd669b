"""The messages between the coordinator and its agents, as typed dataclasses both sides share.

One definition keeps the two ends from drifting apart: a field renamed or dropped on one side is
a :class:`ProtocolError` naming it at the first message, not a ``KeyError`` deep in a round. On the
wire a message is a JSON object ``{"type": ..., "version": ..., <fields>}`` (see :func:`encode`);
nothing is unpickled. :func:`decode` is written once from the dataclasses' type hints, so a new
field needs no parsing code. No torch here: the coordinator and the CLI import this module.

>>> msg = Upload(round=3, progress_dir="/tmp/p", weights={"task0": {0: 0.25, 2: 0.75}})
>>> encode(msg)
{'type': 'Upload', 'version': 17, 'round': 3, 'progress_dir': '/tmp/p', 'weights': {'task0': {'0': 0.25, '2': 0.75}}}
>>> decode(encode(msg)) == msg
True
"""

from __future__ import annotations

import json
import os
import types
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from functools import cache
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

from fedmst.core.route import Along
from fedmst.core.span import PhaseSpan
from fedmst.errors import FedmstError

PROTOCOL_VERSION = 17
"""Raised whenever a message's shape changes, so that an agent from another checkout is refused."""


class ProtocolError(FedmstError):
    """A message that is malformed, of an unknown type or version, or with an unknown or missing
    field: the two ends do not speak the same protocol."""


# the plan as the agents need it -----------------------------------------------------------------
@dataclass(frozen=True)
class TransferSpec(Along):
    """One transfer of a plan as an agent needs it: where it runs and which local models it serves.

    ``models`` are ORIGINAL local-model indices, so weights keep their names across re-plans.
    """

    key: str
    phase: str
    """``"broadcast"`` or ``"upload"``."""
    path: tuple[str, ...]
    models: tuple[int, ...]
    src_addr: str
    dst_addr: str
    segment: tuple[int, int] | None
    """The byte range of the flat weights it carries; None: all of them."""
    step: int
    carries: str
    """``"global"`` (the global model) or ``"sum"`` (the weighted sum of ``models``' updates)."""
    connection: str
    """The key of the connection it travels on (``src_addr`` to ``dst_addr``): transfers along one
    path in different steps share one, as a collective keeps its connection to a neighbour."""
    window_bytes: int
    """Its path's bandwidth-delay product (:func:`fedmst.core.route.window_bytes`): what its
    connection carries before round 1 (at least one chunk, at most its largest transfer), so that
    TCP's slow start is over when the rounds begin."""


@dataclass(frozen=True)
class TaskSpec:
    """One task: its nodes, its seed, the local models taking part now, and its transfers."""

    name: str
    global_node: str
    local_nodes: tuple[str, ...]
    seed: int
    active: tuple[int, ...]
    transfers: tuple[TransferSpec, ...]
    compute_s: float = 0.0
    """Its local training lasts at least this long on the host (a stand-in for compute on real
    accelerators; a slowed run sends the workload's compute time times its scale)."""
    model: str | None = None
    dataset: str | None = None
    """Its own model and dataset (a workload file's); None: the run's (:class:`AgentSpec`'s)."""


def root_id(root: str = "/") -> str:
    """``root``'s file system and inode, ``device:inode``: two processes share a root file system
    when they agree on it (a container's root is its own; a Mininet host's is the host's)."""
    st = os.stat(root)
    return f"{st.st_dev}:{st.st_ino}"


@dataclass(frozen=True)
class AgentSpec:
    """Everything an agent is started with (a file, read before it connects)."""

    control_socket: str
    store_dir: str
    model: str
    dataset: str
    epochs: int
    batch_size: int
    lr: float
    optimizer: str
    partition: str
    """``--partition``: how each task's training samples are split (:mod:`fedmst.fl.partitions`)."""
    chunk_bytes: int
    timeout_s: float
    slow: Mapping[str, float]
    """Node -> straggler factor (from ``--slow-node``)."""
    strategy: str
    """The server strategy (:mod:`fedmst.fl.strategies`), by name or ``package.module:Class``."""
    strategy_args: Mapping[str, float]
    """Its knobs, from ``--strategy-arg``."""
    tasks: tuple[TaskSpec, ...]
    time_scale: float = 1.0
    """The run's time scale: a local model's training counts this many times its CPU time (and is
    waited out on an independent clock), as the slowed network would see a dedicated core's."""
    client: str = ""
    """A Flower ``client_fn`` (``package.module:client_fn``, :mod:`fedmst.fl.flower`) that trains
    the local models instead of ``model`` on ``dataset``; '' for fedmst's own."""
    run_config: tuple[str, ...] = ()
    """The Flower client's run config, ``KEY=VALUE`` entries (``--run-config``)."""
    coordinator_root: str = ""
    """The coordinator's root file system (:func:`root_id`): an agent whose root is another runs
    in a container ('' = unknown: the agent looks for Docker's marker file instead)."""
    iteration_bytes_map: int | None = None
    """The id of the run's congestion control's ``iteration_bytes`` map (mltcp's,
    :mod:`fedmst.workers.iteration_bytes`); None where it has none."""
    trainer_socket: str = ""
    """The host trainer's Unix socket (``--device cuda``, ``--host-trainer``;
    :mod:`fedmst.workers.gputrainer`), which trains this agent's local models; '' where they train here."""
    version: int = PROTOCOL_VERSION

    def to_json(self) -> str:
        return json.dumps(encode(self))

    @classmethod
    def from_json(cls, text: str) -> AgentSpec:
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise ProtocolError(f"agent spec is not JSON: {exc}") from None
        spec = decode(obj)
        if not isinstance(spec, AgentSpec):
            raise ProtocolError(f"expected an AgentSpec, got a {type(spec).__name__}")
        return spec


RELAYED_STORE = "socket:"
"""An agent spec's ``store_dir`` (and a :class:`Replan`'s) ``socket:PATH#SPACE``: the transfers
meet in the run's store server reached at Unix socket PATH, their keys under SPACE (a run on
several hosts, :mod:`fedmst.hosts.store`); any other value is a folder for one FileStore each."""


# commands: coordinator -> agent -----------------------------------------------------------------
ABORT_FILE = "abort"
"""The file in a transfer phase's ``progress_dir`` that tells the agents to give the phase up."""
ARRIVALS_SUFFIX = ".arrived"
"""Each agent's file in a transfer phase's ``progress_dir`` (``NODE.arrived``): a line per transfer
whose last chunk arrived there, appended (a file per transfer cost each agent's core about 0.7 ms,
its creators contending for the one folder)."""


def read_arrivals(progress_dir: Path) -> list[str]:
    """The transfers the agents have marked arrived so far in ``progress_dir`` (whole lines only:
    one being appended is read next time).

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / f"3{ARRIVALS_SUFFIX}").write_text("task0-001-upload\\ntask0-002-up")
    >>> read_arrivals(folder)
    ['task0-001-upload']
    """
    keys = []
    for marks in progress_dir.glob(f"*{ARRIVALS_SUFFIX}"):
        keys += marks.read_text().split("\n")[:-1]
    return keys

@dataclass(frozen=True)
class Setup:
    """Build models and data, open the transfers; refused by an agent running other sources."""

    source_digest: str


@dataclass(frozen=True)
class Broadcast:
    round: int
    progress_dir: str
    """Where the agents mark each transfer whose last chunk arrived here (an empty file named
    after its key), and where the coordinator leaves an ``abort`` file (its text says why) when it
    finds a transfer stalled: see :mod:`fedmst.run.stall`."""


@dataclass(frozen=True)
class Train:
    round: int
    deadline_s: float | None = None
    """A local model not trained by then is late: its update is left out of this round."""


@dataclass(frozen=True)
class Upload:
    round: int
    progress_dir: str
    """As in :class:`Broadcast`."""
    weights: Mapping[str, Mapping[int, float]]
    """Task -> original local-model index -> FedAvg weight (decided by the coordinator, which
    alone knows which models are late or gone)."""


@dataclass(frozen=True)
class Evaluate:
    round: int


@dataclass(frozen=True)
class Save:
    dir: str


@dataclass(frozen=True)
class Replan:
    """Close every transfer and open these tasks' instead; models and trained weights stay."""

    tasks: tuple[TaskSpec, ...]
    store_dir: str


@dataclass(frozen=True)
class RunRounds:
    """Run every task's rounds on its own clock: task T starts ``offsets[T]`` seconds after the
    monotonic time ``start_at`` (one clock for every namespace of the host) and runs ``rounds[T]``
    rounds back to back, each node going from phase to phase as soon as its part is done."""

    start_at: float
    rounds: Mapping[str, int]
    offsets: Mapping[str, float]
    weights: Mapping[str, Mapping[int, float]]
    """As in :class:`Upload`, the same every round."""
    first_round: int = 1
    """The number of the first of these rounds (a cluster runs a job round by round, and a job a
    preemption stopped resumes at its next): local training seeds and strategies count from it."""
    evaluate: bool = True
    """Once these rounds are over, G evaluates (off the clock) every global model it has kept
    since its last evaluation; False: it keeps them for a later RunRounds."""
    progress_dir: str = ""
    """Where each task's G writes, as its rounds begin, a file named after the task: the round and
    when it began (monotonic), so the coordinator knows how far a task has got without stopping
    it; '' for none."""


@dataclass(frozen=True)
class Checkpoint:
    """Write each task's checkpoint into ``dir``, at its G: the global model (``TASK-global.pt``)
    and the strategy with whatever state it keeps (``TASK-strategy.pt``). The round reached is
    the coordinator's to keep."""

    dir: str


@dataclass(frozen=True)
class Restore:
    """Take up each task's checkpoint from ``dir`` (a :class:`Checkpoint`'s) before its next
    round: G its global model, every node of the task its strategy."""

    dir: str


@dataclass(frozen=True)
class Stop:
    pass


# replies: agent -> coordinator; ``seconds`` is the time the agent spent on the command ---------
@dataclass(frozen=True)
class RunsIn:
    """Where an agent runs: in a container or not, its cgroup's limits (None = unlimited), and
    its TCP as its namespace's kernel reports it: its open connections by congestion control, and
    whether an idle connection slow-starts again (None: not read)."""

    container: bool
    cpus: float | None
    memory_bytes: int | None
    congestion_control: Mapping[str, int] = field(default_factory=dict)
    slow_start_after_idle: bool | None = None


@dataclass(frozen=True)
class Failed:
    """The command raised on the agent: ``error`` is ``"TypeName: message"``, one line."""

    error: str
    seconds: float = 0.0


@dataclass(frozen=True)
class SetupDone:
    samples: Mapping[str, Mapping[int, int]]
    """Task -> local-model index -> training samples (the FedAvg weights follow from them)."""
    runs_in: RunsIn
    seconds: float = 0.0


@dataclass(frozen=True)
class PhaseDone:
    """Broadcast or upload done; ``task_seconds``: when each task's part was done here."""

    task_seconds: Mapping[str, float]
    seconds: float = 0.0


@dataclass(frozen=True)
class Trained:
    task_seconds: Mapping[str, float]
    losses: Mapping[str, float]
    """``"task/index"`` -> training loss."""
    late: Mapping[str, tuple[int, ...]]
    """Task -> local models that missed the deadline."""
    examples: Mapping[str, int] = field(default_factory=dict)
    """``"task/index"`` -> the examples its update was trained on (its aggregation weight)."""
    seconds: float = 0.0


@dataclass(frozen=True)
class Evaluated:
    accuracy: Mapping[str, float]
    seconds: float = 0.0


@dataclass(frozen=True)
class RoundsDone:
    """:class:`RunRounds` done: this node's spans, and (at G's node) each task's accuracy after each round."""

    spans: tuple[PhaseSpan, ...]
    accuracy: Mapping[str, tuple[float, ...]]
    seconds: float = 0.0


@dataclass(frozen=True)
class Done:
    """Save, replan, checkpoint or restore done."""

    seconds: float = 0.0


@dataclass(frozen=True)
class Files:
    """What the agents of another host wrote into the run's folders (their progress marks, phase
    spans, logs, saved models), for the coordinator's copies: path there -> base64 bytes written
    from ``offsets[path]`` on. A relay sends it (:mod:`fedmst.hosts.relay`), ahead of the reply
    that may depend on it; no agent does."""

    data: Mapping[str, str]
    offsets: Mapping[str, int]


Command = Union[Setup, Broadcast, Train, Upload, Evaluate, Save, Replan, RunRounds, Checkpoint, Restore, Stop]
Reply = Union[Failed, SetupDone, PhaseDone, Trained, Evaluated, RoundsDone, Done]

_MESSAGES: dict[str, type] = {cls.__name__: cls for cls in (*get_args(Command), *get_args(Reply), AgentSpec, Files)}


# wire form ---------------------------------------------------------------------------------------
def encode(msg: Command | Reply | AgentSpec | Files) -> dict[str, Any]:
    """``msg`` as a JSON-ready object: tuples become lists, integer mapping keys strings.

    >>> encode(Trained(task_seconds={"t": 1.5}, losses={}, late={"t": (2,)}, examples={"t/0": 9}))["late"]
    {'t': [2]}
    """
    if _MESSAGES.get(type(msg).__name__) is not type(msg):
        raise ProtocolError(f"not a protocol message: {type(msg).__name__}")
    return {"type": type(msg).__name__, "version": PROTOCOL_VERSION, **_to_json(msg)}


def decode(obj: Any) -> Command | Reply | AgentSpec | Files:
    """The message ``obj`` (from :func:`encode`, through JSON) stands for, checked against its
    dataclass: known type, this protocol version, every required field and no other.

    >>> decode({"type": "Train", "version": 17, "round": 2})
    Train(round=2, deadline_s=None)
    >>> decode({"type": "Train", "version": 17, "round": 2, "deadline": 5})
    Traceback (most recent call last):
    fedmst.protocol.ProtocolError: Train: unknown field deadline
    >>> decode({"type": "Train", "version": 0, "round": 2})
    Traceback (most recent call last):
    fedmst.protocol.ProtocolError: Train: protocol version 0, this side speaks 17
    >>> decode({"type": "SetupDone", "version": 17, "samples": {"task0": {"0": 5}}})
    Traceback (most recent call last):
    fedmst.protocol.ProtocolError: SetupDone: missing field runs_in
    >>> decode({"type": "Evaluated", "version": 17, "accuracy": {"task0": "high"}})
    Traceback (most recent call last):
    fedmst.protocol.ProtocolError: Evaluated.accuracy.task0: expected float, got a string
    """
    if not isinstance(obj, dict):
        raise ProtocolError(f"expected a JSON object, got {_kind(obj)}")
    obj = dict(obj)
    name = obj.pop("type", None)
    cls = _MESSAGES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ProtocolError(f"unknown message type {name!r}")
    version = obj.get("version") if "version" in _hints(cls) else obj.pop("version", None)
    if type(version) is not int or version != PROTOCOL_VERSION:
        said = "no protocol version" if version is None else f"protocol version {version!r}"
        raise ProtocolError(f"{name}: {said}, this side speaks {PROTOCOL_VERSION}")
    return _dataclass_from_json(cls, obj, name)


def _to_json(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_json(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (tuple, list)):
        return [_to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {_key_to_json(k): _to_json(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float)):
        return value
    raise ProtocolError(f"no JSON form for a {type(value).__name__}")


def _key_to_json(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key)
    raise ProtocolError(f"mapping key {key!r}: only strings and integers travel as keys")


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _dataclass_from_json(cls: type, obj: Any, where: str) -> Any:
    if not isinstance(obj, dict):
        raise ProtocolError(f"{where}: expected an object, got {_kind(obj)}")
    hints, known = _hints(cls), fields(cls)
    unknown = sorted(obj.keys() - {f.name for f in known})
    if unknown:
        raise ProtocolError(f"{where}: unknown field{'s' * (len(unknown) > 1)} {', '.join(unknown)}")
    missing = [f.name for f in known if f.name not in obj and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise ProtocolError(f"{where}: missing field{'s' * (len(missing) > 1)} {', '.join(missing)}")
    return cls(**{name: _from_json(hints[name], value, f"{where}.{name}") for name, value in obj.items()})


def _from_json(tp: Any, value: Any, where: str) -> Any:
    """``value`` as type ``tp``: the few forms a protocol field may take."""
    origin, args = get_origin(tp), get_args(tp)
    if is_dataclass(tp):
        return _dataclass_from_json(tp, value, where)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]  # only ``X | None`` is used
        return _from_json(inner, value, where)
    if origin is tuple:
        if not isinstance(value, list):
            raise ProtocolError(f"{where}: expected a list, got {_kind(value)}")
        return tuple(_from_json(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is Mapping:
        if not isinstance(value, dict):
            raise ProtocolError(f"{where}: expected an object, got {_kind(value)}")
        return {_key_from_json(args[0], k, where): _from_json(args[1], v, f"{where}.{k}") for k, v in value.items()}
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp in (str, bool) and isinstance(value, tp):
        return value
    if tp in (str, bool, int, float):
        raise ProtocolError(f"{where}: expected {tp.__name__}, got {_kind(value)}")
    raise TypeError(f"{where}: the protocol has no JSON form for {tp!r}")  # a field declared wrong


def _key_from_json(tp: Any, key: str, where: str) -> Any:
    if tp is str:
        return key
    try:
        return int(key)
    except ValueError:
        raise ProtocolError(f"{where}: key {key!r} is not an integer") from None


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), f"{type(value).__name__} {value!r}")
