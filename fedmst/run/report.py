"""What a run reports: the typed :class:`Summary` behind ``summary.json``, the comparison of
several schedulers, and the console table that shows them side by side.

``summary.json`` is read by the CLI, the sweep and the views; reading it through one dataclass
means a renamed or missing key fails in one place, with the file named, instead of as a
``KeyError`` wherever it is used. No torch here: the views import this module.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from fedmst.errors import FedmstError
from fedmst.run.results import write_json
from fedmst.wording import counted
from fedmst.workers.description import BackendDescription

Report = Callable[[str], None]
"""Where a run says what it does, a line at a time (the console, or nowhere in a sweep)."""


@dataclass(frozen=True)
class RunStatus:
    """What became of a run: the part of ``summary.json`` every run writes, however it ended. A
    run stopped before its first round finished writes only this, having measured nothing.

    ``status`` is ``completed``, ``interrupted`` or ``failed: REASON``; an interrupted or failed
    run still reports the ``rounds`` it finished out of ``rounds_planned``.
    """

    status: str
    rounds_planned: int
    scheduler: str
    topology: str
    rounds: int
    wall_s: float

    @classmethod
    def read(cls, path: Path) -> RunStatus:
        """The status part of any ``summary.json`` (a whole summary's too)."""
        return cls._from(_read_object(path), path)

    @classmethod
    def of(cls, run_dir: Path) -> RunStatus | None:
        """How the run in ``run_dir`` ended; None where it wrote no readable summary (never ran)."""
        try:
            return cls.read(run_dir / "summary.json")
        except FedmstError:
            return None

    @classmethod
    def unmeasured(cls, path: Path) -> RunStatus | None:
        """The status in ``path`` if that ``summary.json`` holds nothing else: its run finished no round."""
        return cls._status_only(_read_object(path), path)

    @classmethod
    def _status_only(cls, obj: Mapping[str, Any], path: Path) -> RunStatus | None:
        return cls._from(obj, path) if obj and set(obj) <= {f.name for f in fields(RunStatus)} else None

    @classmethod
    def _from(cls, obj: Mapping[str, Any], path: Path) -> RunStatus:
        try:
            return RunStatus(**{f.name: obj[f.name] for f in fields(RunStatus)})
        except KeyError as exc:
            raise FedmstError(f"{path}: not a fedmst summary (missing {exc.args[0]})") from None

    def ended(self) -> str:
        """How the run ended, in words: ``interrupted after 0 of 5 rounds``, ``failed after 1 of 2 rounds (REASON)``."""
        return how_it_ended(self.status, self.rounds, self.rounds_planned, "round")


@dataclass(frozen=True)
class Summary(RunStatus):
    """``summary.json``: the means over the finished rounds of one run, and what it ran with."""

    local_models: int
    tasks: int
    tasks_blocked: int
    model: str
    model_bytes: int
    global_node: str
    local_nodes: list[str]
    aggregation_nodes: list[str]
    wavelengths: int
    reserved_wavelength_links: int
    reserved_capacity_mbps: float
    link_bytes_measured: int
    link_bytes_predicted: int
    weight_bytes_measured: int
    ack_bytes_measured: int
    tcp_retransmitted_segments: int
    queue_drops: int
    max_link_bytes_error: float
    round_latency_s: float
    task_round_latency_s: float
    broadcast_s: float
    train_s: float
    upload_s: float
    predicted_broadcast_s: float
    predicted_upload_s: float
    faults: list[dict[str, Any]]
    local_models_per_round: list[int]
    late_updates_per_round: list[int]
    final_accuracy: float
    accuracy_per_round: list[float]
    emulated: dict[str, Any]
    workers: BackendDescription
    aborted_link_bytes: int = 0
    """Bytes that phases given up after a fault put on the links (not in ``link_bytes_measured``);
    a default, so summaries written before it existed still read."""
    target_accuracy: float = 0.8
    rounds_to_accuracy: int | None = None
    """The first round after which the global model reached ``target_accuracy`` (None: never)."""
    time_to_accuracy_s: float | None = None
    """Wall-clock seconds of the rounds up to and including that one: the systems metric FL
    papers report (set-up and evaluation left out)."""
    bytes_to_accuracy: int | None = None
    """Link bytes (every link direction, as ``link_bytes_measured``) of the rounds up to and
    including that one: what reaching the target cost the network (None: never reached, or tasks
    on their own clocks, whose rounds share no boundary)."""
    time_breakdown_s: dict[str, float] = field(default_factory=dict)
    """Where the wall-clock went (:data:`TIME_PARTS`): the rounds, and the fixed cost around them."""
    clock: str = "lockstep"
    """``lockstep`` (every task's phases together, round by round) or ``independent``."""
    round_latency_by_task_s: dict[str, float] = field(default_factory=dict)
    """Each task's mean round latency (its iteration time: broadcast start to upload end)."""
    partition: dict[str, Any] = field(default_factory=dict)
    """``--partition`` and, per task, each local model's training samples and their count per class
    (:func:`fedmst.run.prepare.split_data`); empty for a Flower client's own data."""
    training: dict[str, Any] = field(default_factory=dict)
    """Where the local models trained: ``device`` (``--device`` decided), ``trainer`` (``agent``: in each
    agent; ``host``: one trainer for the host, :mod:`fedmst.workers.gputrainer`) and, from a host trainer,
    each node's ``peak_bytes`` of device memory and ``busy_s`` of training."""
    start_offsets_s: dict[str, float] = field(default_factory=dict)
    """Independent clock: when each task started (its ``start_s`` plus the interleaving shift)."""
    predicted_round_latency_s: float | None = None
    """Independent clock: the mean round latency :func:`fedmst.core.contention.simulate` predicts."""
    background: list[dict[str, Any]] = field(default_factory=list)
    """The background flows that ran: as asked, what the sender sent, and what the first link carried."""
    pcap: dict[str, Any] | None = None
    """``--pcap``: the captures' folder, link directions, snap length and the frames the kernel
    dropped before tcpdump read them (None: nothing captured). Capturing costs CPU: a run that
    captured says so here."""
    strategy: str = "fedavg"
    """The server strategy (``--strategy``); summaries written before it existed ran FedAvg."""
    strategy_knobs: dict[str, float] = field(default_factory=dict)
    """Its knobs as the run set them, defaults included."""
    clients_per_round: int | None = None
    """``--clients-per-round``: the local models (of the first task) taking part in a round; None:
    every one of them (or a summary written before it was recorded)."""
    selection: str | None = None
    """How those were chosen (``--selection``); None where every local model took part."""
    scheduler_name: str | None = None
    """The ``name`` the scheduler's class declares (``bfs-tree`` for ``mypkg.trees:BfsTree``): its
    label in tables and figures (:func:`scheduler_labels`), recorded here so that views need not
    import the user's module. None in summaries written before it was recorded."""
    optical: dict[str, Any] | None = None
    """On a topology with all-optical nodes: its circuits (:func:`fedmst.core.optical.circuits.optical_summary`);
    left out of the file elsewhere."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys this version does not know (a newer fedmst wrote the file); kept, not dropped."""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if out["optical"] is None:
            del out["optical"]
        out["workers"] = self.workers.to_json()
        out.update(out.pop("extra"))
        return out

    def write(self, path: Path) -> None:
        write_json(path, self.to_json())

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], source: str = "summary.json") -> Summary:
        known = {f.name for f in fields(cls)} - {"extra"}
        missing = sorted(f.name for f in fields(cls) if f.name in known and f.name not in obj
                         and f.default is MISSING)
        if missing:
            raise FedmstError(f"{source}: not a fedmst summary (missing {', '.join(missing)})")
        values = {k: obj[k] for k in known if k in obj}
        try:
            values["workers"] = BackendDescription.from_json(obj["workers"])
        except (KeyError, TypeError, AttributeError):
            raise FedmstError(f"{source}: 'workers' is not a worker backend's description") from None
        return cls(**values, extra={k: v for k, v in obj.items() if k not in known})

    @classmethod
    def read(cls, path: Path) -> Summary:
        """The summary of a run that finished a round at least; a run that finished none is
        refused saying how it ended (see :func:`unmeasured`)."""
        obj = _read_object(path)
        status = RunStatus._status_only(obj, path)
        if status is not None:
            raise FedmstError(unmeasured(Path(path).parent, status))
        return cls.from_json(obj, str(path))

    @property
    def per_round_bytes(self) -> float:
        return self.link_bytes_measured / self.rounds if self.rounds else 0.0


TIME_PARTS = {
    "prepare": "from the command's start: imports, checks, planning (the first run of a command only)",
    "network": "building the emulated network: hosts, shaped links, delay lines",
    "agents": "starting the agents, building models and data, opening and warming every transfer",
    "rounds": "the rounds themselves, evaluation included",
    "teardown": "everything after the last round: stopping agents and network, writing results",
}


def breakdown_line(times: Mapping[str, float]) -> str:
    """The time breakdown in one line, with the fixed cost (everything but the rounds).

    >>> breakdown_line({"prepare": 2.0, "network": 1.5, "agents": 1.0, "rounds": 6.0, "teardown": 0.5})
    'prepare 2.0 s, network 1.5 s, agents 1.0 s, rounds 6.0 s, teardown 0.5 s; fixed cost 5.0 s'
    """
    parts = ", ".join(f"{name} {times[name]:.1f} s" for name in TIME_PARTS if name in times)
    fixed = sum(s for name, s in times.items() if name != "rounds")
    return f"{parts}; fixed cost {fixed:.1f} s"


def time_to_accuracy(round_seconds: Sequence[float], accuracies: Sequence[float],
                     target: float) -> tuple[int, float] | None:
    """The first round whose global model reaches ``target``, and the seconds of the rounds up to
    and including it; None when no round does.

    >>> time_to_accuracy([2.0, 3.0, 1.0], [0.5, 0.85, 0.9], 0.8)
    (2, 5.0)
    >>> time_to_accuracy([2.0], [0.5], 0.8) is None
    True
    """
    elapsed = 0.0
    for i, (seconds, acc) in enumerate(zip(round_seconds, accuracies), start=1):
        elapsed += seconds
        if acc >= target:
            return i, elapsed
    return None


def _read_object(path: Path) -> dict[str, Any]:
    try:
        obj = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise FedmstError(f"{path}: cannot read the summary: {' '.join(str(exc).split())}") from exc
    if not isinstance(obj, dict):
        raise FedmstError(f"{path}: expected a JSON object")
    return obj


def how_it_ended(status: str, done: int, planned: int, noun: str) -> str:
    """A run's (or sweep's) ``status`` in words, with how much of it was done:
    ``failed after 1 of 2 rounds (REASON)``.

    >>> how_it_ended("interrupted", 3, 8, "point")
    'interrupted after 3 of 8 points'
    """
    how, _, reason = status.partition(": ")
    return f"{how} after {done} of {counted(planned, noun)}" + (f" ({reason})" if reason else "")


def failed(exc: BaseException) -> str:
    """The status of a run (or compare, or sweep) that ``exc`` ended, on one line."""
    return f"failed: {' '.join(str(exc).splitlines())}"


def unmeasured(run_dir: Path, status: RunStatus) -> str:
    """Why a run folder has nothing to show: its run ended before its first round finished."""
    return (f"{run_dir}: the {status.scheduler} run was {status.ended()} (summary.json), so it measured "
            "nothing to show")


def comparison(summaries: Mapping[str, Summary], schedulers: Sequence[str] | None = None) -> dict[str, Any]:
    """``comparison.json``: every scheduler's summary and its ratios to the first (the baseline),
    and each one's time and link bytes to the target accuracy. ``schedulers``: every scheduler
    the compare ran, baseline first, where some have no summary (a compare that stopped early):
    ratios then only if the baseline has one.

    ``bytes_ratio`` and ``latency_ratio`` at the top level are MST over SPFF, kept for readers of
    the two-scheduler format, when both ran.

    >>> s = lambda n, b, t: Summary.from_json({**{f.name: 0 for f in fields(Summary)},
    ...     "scheduler": n, "link_bytes_measured": b, "round_latency_s": t, "workers": {"backend": "process"}})
    >>> c = comparison({"spff": s("spff", 100, 2.0), "mst": s("mst", 50, 1.0)})
    >>> c["baseline"], c["ratios"]["mst"], c["bytes_ratio"]
    ('spff', {'bytes_ratio': 0.5, 'latency_ratio': 0.5, 'time_to_accuracy_ratio': None}, 0.5)
    >>> comparison({"mst": s("mst", 50, 1.0)}, ["spff", "mst"])["ratios"]
    {}
    """
    names = list(schedulers or summaries)
    base = summaries.get(names[0])
    out: dict[str, Any] = {
        "schedulers": names, "baseline": names[0],
        "summaries": {n: s.to_json() for n, s in summaries.items()},
        "ratios": {n: ratios(s, base) for n, s in summaries.items() if n != names[0]} if base else {},
        "target_accuracy": next(iter(summaries.values())).target_accuracy if summaries else None,
        "time_to_accuracy_s": {n: s.time_to_accuracy_s for n, s in summaries.items()},
        "bytes_to_accuracy": {n: s.bytes_to_accuracy for n, s in summaries.items()},
    }
    if "spff" in summaries and "mst" in summaries:
        out.update(ratios(summaries["mst"], summaries["spff"]))
    return out


def ratios(summary: Summary, baseline: Summary) -> dict[str, float | None]:
    """Link bytes, round latency and time to accuracy of ``summary`` over ``baseline`` (None where
    the baseline's is 0, or either never reached the target accuracy)."""
    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    return {"bytes_ratio": ratio(summary.link_bytes_measured, baseline.link_bytes_measured),
            "latency_ratio": ratio(summary.round_latency_s, baseline.round_latency_s),
            "time_to_accuracy_ratio": ratio(summary.time_to_accuracy_s, baseline.time_to_accuracy_s)}


MAX_RATIO_COLUMNS = 2


def summary_table(summaries: Mapping[str, Summary], ratios_to_first: bool = False) -> Any:
    """A rich Table: one column per scheduler, measured beside predicted, and with
    ``ratios_to_first`` one ratio column per other scheduler against the first (the baseline),
    for up to three schedulers: more would not fit a terminal (comparison.json has every ratio)."""
    from rich.table import Table

    names = list(summaries)
    label = scheduler_labels({n: s.scheduler_name for n, s in summaries.items()})
    labels = [label[n] for n in names]
    first = summaries[names[0]]
    table = Table(title=f"fedmst on {first.topology}")
    table.add_column("per round (mean)")
    for label in labels:
        table.add_column(label, justify="right")
    others = names[1:] if ratios_to_first and len(names) <= MAX_RATIO_COLUMNS + 1 else []
    for label in labels[1:len(others) + 1]:
        table.add_column(f"{label}/{labels[0]}", justify="right")

    def row(label: str, get: Callable[[Summary], float | None], fmt: str, ratio: bool = True) -> None:
        values = [get(summaries[n]) for n in names]
        cells = ["-" if v is None else fmt.format(v) for v in values]
        cells += [f"{v / values[0]:.2f}" if ratio and values[0] and v is not None else ""
                  for v in values[1:len(others) + 1]]
        table.add_row(label, *cells)

    def per_round(value: Callable[[Summary], float]) -> Callable[[Summary], float]:
        return lambda s: value(s) / s.rounds if s.rounds else 0.0

    row("broadcast (s)", lambda s: s.broadcast_s, "{:.2f}")
    row("  predicted (s)", lambda s: s.predicted_broadcast_s, "{:.2f}")
    row("train (s)", lambda s: s.train_s, "{:.2f}")
    row("upload (s)", lambda s: s.upload_s, "{:.2f}")
    row("  predicted (s)", lambda s: s.predicted_upload_s, "{:.2f}")
    row("round latency (s)", lambda s: s.round_latency_s, "{:.2f}")
    def bytes_row(label: str, get: Callable[[Summary], float], ratio: bool = True) -> None:
        """A row of byte counts in the unit its largest value picks (KB for a small model)."""
        unit, scale = size_unit(max(get(summaries[n]) for n in names))
        row(f"{label} ({unit})", lambda s: get(s) / scale, "{:.0f}" if unit == "B" else "{:.2f}", ratio)

    bytes_row("link bytes measured", per_round(lambda s: s.link_bytes_measured))
    bytes_row("  weights", per_round(lambda s: s.weight_bytes_measured))
    bytes_row("  weights predicted", per_round(lambda s: s.link_bytes_predicted))
    bytes_row("  ACKs and other", per_round(lambda s: s.ack_bytes_measured))
    if any(s.aborted_link_bytes for s in summaries.values()):
        bytes_row("  in phases given up", per_round(lambda s: s.aborted_link_bytes), ratio=False)
    row("TCP retransmissions (segments)", per_round(lambda s: s.tcp_retransmitted_segments), "{:.0f}", ratio=False)
    row("queue drops (packets)", per_round(lambda s: s.queue_drops), "{:.0f}", ratio=False)
    row("max per-link weight error (%)", lambda s: 100 * s.max_link_bytes_error, "{:.2f}", ratio=False)
    row("final accuracy", lambda s: s.final_accuracy, "{:.3f}", ratio=False)
    row(f"time to accuracy {first.target_accuracy:g} (s)", lambda s: s.time_to_accuracy_s, "{:.2f}")
    row(f"link MB to accuracy {first.target_accuracy:g}",
        lambda s: None if s.bytes_to_accuracy is None else s.bytes_to_accuracy / 1e6, "{:.1f}")
    table.caption = (f"{counted(first.local_models, 'local model')}{_taking_part(first)}, model {first.model} "
                     f"({size_label(first.model_bytes)}), {counted(first.rounds, 'round')}; "
                     f"delay: {first.emulated['delay_mechanism']}; workers: {first.workers.label}"
                     + (f"; strategy {_strategy(first)}" if first.strategy != "fedavg" else "")
                     + (f"; time scale {first.emulated['time_scale']:g}, times the network's"
                        if first.emulated.get("time_scale", 1) != 1 else "")
                     + (f"; ratios to {labels[0]} in comparison.json" if ratios_to_first and not others else ""))
    return table


def _taking_part(summary: Summary) -> str:
    """How many local models took part in a round and who chose them, for the caption (nothing
    where every one did)."""
    if summary.clients_per_round is None:
        return ""
    return f" ({summary.clients_per_round} a round, chosen by {summary.selection or 'random'})"


def _strategy(summary: Summary) -> str:
    """The strategy with every knob it ran with (``fedadam: eta=0.01, beta_1=0.9, ...``)."""
    knobs = ", ".join(f"{name}={value:g}" if isinstance(value, (int, float)) else f"{name}={value}"
                      for name, value in summary.strategy_knobs.items())
    return f"{summary.strategy}: {knobs}" if knobs else summary.strategy


SIZE_UNITS = (("GB", 1e9), ("MB", 1e6), ("KB", 1e3))
"""Units a size is shown in on the console and in figures (files keep bytes)."""


def size_unit(n_bytes: float) -> tuple[str, float]:
    """The unit to show ``n_bytes`` in, and its size in bytes: the largest that keeps it at 1 or
    more (bytes below 1 KB), so that a 4.5 KB model is not shown as 0.00 MB.

    >>> size_unit(4_505), size_unit(173_710_000), size_unit(12)
    (('KB', 1000.0), ('MB', 1000000.0), ('B', 1.0))
    """
    return next(((unit, scale) for unit, scale in SIZE_UNITS if abs(n_bytes) >= scale), ("B", 1.0))


def size_label(n_bytes: float) -> str:
    """A size for people, in the unit its value picks (:func:`size_unit`): three significant
    figures, whole bytes, and whole kilobytes from 10 KB on.

    >>> size_label(512), size_label(4_505), size_label(19_240), size_label(4_505_640), size_label(45_160_000)
    ('512 B', '4.5 KB', '19 KB', '4.51 MB', '45.2 MB')
    """
    unit, scale = size_unit(n_bytes)
    value = n_bytes / scale
    return f"{value:.0f} {unit}" if unit == "B" or (unit == "KB" and value >= 10) else f"{value:.3g} {unit}"


def regime_table(points: Sequence[Mapping[str, Any]]) -> Any:
    """A rich Table of a regime map: per (model, local models), the schedulers with the lowest
    round latency and the fewest link bytes, measured beside the Plans' prediction."""
    from rich.table import Table

    def names(which: Sequence[str]) -> str:
        return "=".join(scheduler_label(s) for s in which)

    table = Table(title="Where each schedule wins (communication time and link bytes per round; ties within 1%)")
    for column in ("model", "k", "time: measured", "predicted", "bytes: measured", "predicted"):
        table.add_column(column, overflow="fold")
    for p in points:
        table.add_row(f"{p['model']} {size_label(p['model_bytes'])}", str(p["local_models"]),
                      names(p["latency_measured"]), names(p["latency_predicted"]),
                      names(p["bytes_measured"]), names(p["bytes_predicted"]))
    return table


def scheduler_label(name: str, declared: str | None = None) -> str:
    """A scheduler in column headers and titles, in capitals as ``SPFF`` and ``MST``: the name its
    class declares where the run recorded it (``BFS-TREE`` for ``mypkg.trees:BfsTree`` named
    ``bfs-tree``), else the name it was given, less any module (``MYSCHED`` for ``mypkg.mod:MySched``)."""
    return (declared or name.rpartition(":")[2]).upper()


def scheduler_labels(declared: Mapping[str, str | None]) -> dict[str, str]:
    """Each scheduler's label (:func:`scheduler_label`), from the name each declares (None: not
    recorded). Where two would read alike (a subclass of MST's class that keeps its ``mst``), those
    keep the labels of the names they were given, so no two columns share a header.

    >>> scheduler_labels({"spff": "spff", "mst": "mst", "a.trees:BfsTree": "bfs-tree", "a.m:MyMst": "mst"})
    {'spff': 'SPFF', 'mst': 'MST', 'a.trees:BfsTree': 'BFS-TREE', 'a.m:MyMst': 'MYMST'}
    """
    labels = {name: scheduler_label(name, d) for name, d in declared.items()}
    shown = Counter(labels.values())
    return {name: scheduler_label(name) if shown[label] > 1 else label for name, label in labels.items()}
