"""A cluster folder's records: ``jobs.csv`` (a row per job), ``slots.csv`` (a row per slot
interval held), ``tasks.csv`` (every job's rounds, as an independent clock writes them) and
``summary.json`` (:class:`ClusterSummary`). Rows are appended as jobs end, a whole line at a time,
so a command stopped half-way leaves every job that had finished on record. No torch here: the
views read these.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from statistics import mean, median
from typing import IO, Any, Callable, Iterable, Mapping, Sequence

from fedmst.core.cluster.loop import Stopped
from fedmst.core.cluster.slots import SlotInterval
from fedmst.errors import FedmstError
from fedmst.run.results import write_json

NODE_SEPARATOR = ";"
"""Between the nodes of jobs.csv's ``nodes`` (a topology's node names may hold spaces)."""
JOBS, SLOTS, TASKS, ROUNDS, SUMMARY = "jobs.csv", "slots.csv", "tasks.csv", "rounds.csv", "summary.json"
STOPPED = "preemptions.csv"


@dataclass(frozen=True)
class JobRow:
    """One row of jobs.csv: one job's life in the cluster (the network's seconds from the trace's
    start; empty where it never ran)."""

    job: str
    submit_s: float
    start_s: float | None
    end_s: float
    queue_s: float | None
    jct_s: float
    """Job completion time: end minus submission (a rejected job's: how long it was in the cluster)."""
    local_models: int
    rounds: int
    """Rounds it finished."""
    nodes: str
    """Where it ran: G's node first, then each local model's, separated by :data:`NODE_SEPARATOR`."""
    status: str
    """finished, rejected, failed or interrupted."""
    reason: str
    preemptions: int
    """Times a preemption stopped it (preemptions.csv has each)."""
    mean_round_s: float | None
    link_bytes: int
    """Bytes its transfers put on the links, as its plan predicts them, every hop of every round it
    finished (links are shared, so the links' own counters in links.csv measure all jobs together)."""
    final_accuracy: float | None
    comm_s: float
    """Seconds of its rounds spent moving weights (broadcast and upload)."""
    setup_s: float
    """Seconds from its start to its first round: its agents started, its connections opened and warmed."""
    placement: str
    """Why it was placed where it was, where its placement says (a delay placement's level and timers)."""
    train_s: float
    """How long each of its rounds trains: its ``compute_s``, or what this host measured where that is
    longer (both modes train for it; give ``compute_s`` to fix it)."""
    rounds_asked: int = 0
    """Rounds its trace (or ``--rounds``) asked for, whether it ran them or not (0 in folders written
    before this column)."""


JOB_FIELDS = tuple(f.name for f in fields(JobRow))
REQUIRED_JOB_FIELDS = {f.name for f in fields(JobRow) if f.default is MISSING and f.default_factory is MISSING}
"""The columns a jobs.csv must have: those added later, with a default, may be missing from older folders."""
SLOT_FIELDS = tuple(f.name for f in fields(SlotInterval))
STOPPED_FIELDS = tuple(f.name for f in fields(Stopped))


class Appender:
    """A CSV file written a row at a time, each row flushed whole: what was written stays."""

    def __init__(self, path: Path, columns: Sequence[str]) -> None:
        self._file: IO[str] = path.open("w", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=list(columns))
        self._writer.writeheader()
        self._file.flush()

    def add(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for row in rows:
            # times to the nanosecond whatever their size: a trace's submissions may be 1e7 s in
            self._writer.writerow({k: "" if v is None else repr(round(v, 9)) if isinstance(v, float) else v
                                   for k, v in row.items()})
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_jobs_csv(folder: Path) -> list[JobRow]:
    """jobs.csv of a cluster folder; a folder without one, or a file of another format, is refused in one line."""
    path = folder / JOBS
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        raise FedmstError(f"{folder} is not a cluster folder (no {JOBS})") from None
    lacking = REQUIRED_JOB_FIELDS - set(rows[0]) if rows else set()
    if lacking:
        raise FedmstError(f"{path} lacks the columns {', '.join(sorted(lacking))}")

    def number(text: str, kind: type = float) -> Any:
        return None if text == "" else kind(float(text)) if kind is int else kind(text)

    try:
        return [JobRow(job=r["job"], submit_s=float(r["submit_s"]), start_s=number(r["start_s"]),
                       end_s=float(r["end_s"]), queue_s=number(r["queue_s"]), jct_s=float(r["jct_s"]),
                       local_models=int(r["local_models"]), rounds=int(r["rounds"]), nodes=r["nodes"],
                       status=r["status"], reason=r["reason"], preemptions=int(r["preemptions"]),
                       mean_round_s=number(r["mean_round_s"]), link_bytes=int(float(r["link_bytes"])),
                       final_accuracy=number(r["final_accuracy"]), comm_s=float(r["comm_s"]),
                       setup_s=float(r["setup_s"]), placement=r["placement"], train_s=float(r["train_s"]),
                       rounds_asked=int(r.get("rounds_asked") or 0))
                for r in rows]
    except (TypeError, ValueError) as exc:
        raise FedmstError(f"{path}: malformed row ({exc})") from None


def read_slots_csv(folder: Path) -> list[SlotInterval]:
    """slots.csv of a cluster folder."""
    path = folder / SLOTS
    try:
        with path.open(newline="") as f:
            return [SlotInterval(r["node"], int(r["slot"]), r["job"], float(r["from_s"]), float(r["to_s"]))
                    for r in csv.DictReader(f)]
    except OSError:
        raise FedmstError(f"{folder} is not a cluster folder (no {SLOTS})") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise FedmstError(f"{path}: malformed row ({exc})") from None


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, interpolated between the nearest ranks.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50), percentile([1.0, 2.0, 3.0, 4.0], 99), percentile([5.0], 99)
    (2.5, 3.97, 5.0)
    """
    ordered = sorted(values)
    at = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(at), math.ceil(at)
    return round(ordered[lo] + (ordered[hi] - ordered[lo]) * (at - lo), 12)


@dataclass(frozen=True)
class ClusterSummary:
    """A cluster's summary.json: how it ended, what ran it, and its figures over the jobs (the
    network's seconds; None where no job finished)."""

    status: str
    """completed, interrupted or failed: REASON."""
    command: str
    mode: str
    scheduler: str
    order: str
    placement: str
    topology: str
    slots: int
    jobs: int
    jobs_finished: int
    jobs_rejected: int
    jobs_failed: int
    makespan_s: float | None
    """Last end minus first submission, over the jobs that finished."""
    mean_jct_s: float | None
    median_jct_s: float | None
    p99_jct_s: float | None
    mean_queue_s: float | None
    slot_utilisation: float | None
    """Slot-seconds held over slot-seconds offered during the makespan."""
    comm_share: float | None
    """Of the finished jobs' running time (start to end), the share spent moving weights."""
    mean_round_s: float | None
    """Mean over the finished jobs of their mean round."""
    link_bytes: int
    """What the finished jobs' plans put on the links over the rounds they ran (jobs.csv's sum)."""
    time_scale: float
    wall_s: float
    skipped: int = 0
    """Rows of a public trace left out (:data:`fedmst.core.cluster.traces.SKIPPED_WHY`: no GPU, or no run
    time: never ran, or still running when the trace was taken)."""
    preempt: str = "none"
    preemptions: int = 0
    """Times a preemption stopped a job (preemptions.csv's rows)."""
    jobs_interrupted: int = 0
    """Jobs the command's interruption caught: running (with the rounds they finished), waiting or to come."""
    transport: dict[str, Any] = field(default_factory=dict)
    """What carried the weights, as a run's summary.json ``emulated`` says it: the TCP congestion
    control asked and loaded, its knobs, the ECN marking threshold and the packets marked (empty on
    the fluid model of ``--mode simulate``, which runs no TCP)."""
    hosts: dict[str, Any] = field(default_factory=dict)
    """With ``--ray``, where the emulation ran, as a run's summary.json ``emulated`` says it: each
    host's nodes and clock offset, the links across hosts, the placement's prediction, the tunnels'
    bytes and overhead (:meth:`fedmst.hosts.spanned.SpannedEmulation.spread`); empty on one host."""
    optical: dict[str, Any] = field(default_factory=dict)
    """On a fabric (:meth:`fedmst.core.optical.held.Wavelengths.summary`): the optical policy and its
    terms, the most wavelengths held at once on each fibre, the jobs blocked on wavelengths."""

    def write(self, folder: Path) -> None:
        write_json(folder / SUMMARY, asdict(self))

    @classmethod
    def read(cls, folder: Path) -> ClusterSummary:
        try:
            obj = json.loads((folder / SUMMARY).read_text())
            return cls(**{f.name: obj[f.name] for f in fields(cls) if f.name in obj})
        except (OSError, ValueError, TypeError) as exc:
            raise FedmstError(f"{folder / SUMMARY}: not a cluster summary ({' '.join(str(exc).split())})") from None


def figures(rows: Sequence[JobRow], slots: Sequence[SlotInterval], total_slots: int) -> dict[str, Any]:
    """The summary's figures over ``rows`` (jobs.csv) and ``slots`` (slots.csv).

    >>> row = lambda j, sub, start, end: JobRow(j, sub, start, end, start - sub, end - sub, 1, 1, "a b", "finished",
    ...     "", 0, end - start, 0, None, 0.25 * (end - start), 0.0, "", 1.0)
    >>> rows = [row("a", 0.0, 0.0, 4.0), row("b", 1.0, 4.0, 6.0)]
    >>> held = [SlotInterval("a", 0, "a", 0.0, 4.0), SlotInterval("b", 0, "b", 4.0, 6.0)]
    >>> f = figures(rows, held, total_slots=2)
    >>> f["makespan_s"], f["mean_jct_s"], f["mean_queue_s"], f["slot_utilisation"], f["comm_share"], f["mean_round_s"]
    (6.0, 4.5, 1.5, 0.5, 0.25, 3.0)
    """
    done = [r for r in rows if r.status == "finished"]
    if not done:
        return {**dict.fromkeys(("makespan_s", "mean_jct_s", "median_jct_s", "p99_jct_s", "mean_queue_s",
                                 "slot_utilisation", "comm_share", "mean_round_s")), "link_bytes": 0}
    first, last = min(r.submit_s for r in done), max(r.end_s for r in done)
    jct = [r.jct_s for r in done]
    makespan = last - first
    held = sum(max(0.0, min(s.to_s, last) - max(s.from_s, first)) for s in slots)  # within the makespan
    ran = sum(r.end_s - r.start_s for r in done if r.start_s is not None)
    return {"makespan_s": makespan, "mean_jct_s": mean(jct), "median_jct_s": median(jct),
            "p99_jct_s": percentile(jct, 99), "mean_queue_s": mean(r.queue_s or 0.0 for r in done),
            "slot_utilisation": held / (total_slots * makespan) if makespan > 0 else None,
            "comm_share": sum(r.comm_s for r in done) / ran if ran > 0 else None,
            "mean_round_s": mean(r.mean_round_s for r in done if r.mean_round_s is not None)
            if any(r.mean_round_s is not None for r in done) else None,
            "link_bytes": sum(r.link_bytes for r in done)}


def transport_label(transport: Mapping[str, Any]) -> str:
    """A summary's transport in a few words: the congestion control with its knobs and ECN threshold.

    >>> transport_label({"congestion_control": "dctcp", "congestion_control_knobs": {"g": 0.0625},
    ...                  "ecn_k": 20000, "ecn_marked": 12})
    'dctcp (g=0.0625; ECN K 20000 B)'
    >>> transport_label({}), transport_label({"congestion_control": "cubic", "congestion_control_knobs": {}})
    ('-', 'cubic')
    """
    if not transport:
        return "-"
    knobs = [f"{k}={v:g}" for k, v in transport.get("congestion_control_knobs", {}).items()]
    k = transport.get("ecn_k")
    if k is not None:
        knobs.append(f"ECN K {k} B" if isinstance(k, int) else f"ECN K {k}")
    return transport["congestion_control"] + (f" ({'; '.join(knobs)})" if knobs else "")


def cluster_table(summaries: Mapping[str, ClusterSummary]) -> Any:
    """The console's table of one cluster's figures, or of several policies' on one trace, a
    column each (the network's seconds)."""
    from rich.table import Table

    def seconds(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    def share(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.1f} %"

    first = next(iter(summaries.values()))
    table = Table(title=f"fedmst cluster on {first.topology} ({first.mode})")
    table.add_column("over the trace")
    for name in summaries:
        table.add_column(name if len(summaries) > 1 else "value", justify="right")
    rows: dict[str, Callable[[ClusterSummary], str]] = {
        "jobs finished": lambda s: f"{s.jobs_finished} of {s.jobs}",
        "jobs rejected": lambda s: str(s.jobs_rejected), "jobs failed": lambda s: str(s.jobs_failed),
        "makespan (s)": lambda s: seconds(s.makespan_s), "mean JCT (s)": lambda s: seconds(s.mean_jct_s),
        "median JCT (s)": lambda s: seconds(s.median_jct_s), "p99 JCT (s)": lambda s: seconds(s.p99_jct_s),
        "mean queueing (s)": lambda s: seconds(s.mean_queue_s), "preemptions": lambda s: str(s.preemptions),
        "mean round (s)": lambda s: seconds(s.mean_round_s),
        "link MB (planned)": lambda s: f"{s.link_bytes / 1e6:.1f}",
        "slot utilisation": lambda s: share(s.slot_utilisation),
        "communication share": lambda s: share(s.comm_share)}
    if any(s.transport for s in summaries.values()):
        rows["TCP congestion control"] = lambda s: transport_label(s.transport)
    if any(s.transport.get("ecn_marked") is not None for s in summaries.values()):
        rows["ECN-marked packets"] = lambda s: str(s.transport.get("ecn_marked", "-"))
    for label, cell in rows.items():
        table.add_row(label, *(cell(s) for s in summaries.values()))
    policies = "" if len(summaries) > 1 else (f", order {first.order}, placement {first.placement}, "
                                               f"preemption {first.preempt}")
    table.caption = f"{first.slots} slots; scheduler {first.scheduler}{policies}; {first.status}"
    return table


__all__ = ["JOBS", "JOB_FIELDS", "NODE_SEPARATOR", "ROUNDS", "SLOTS", "SLOT_FIELDS", "STOPPED", "STOPPED_FIELDS",
           "SUMMARY", "TASKS", "Appender", "ClusterSummary", "JobRow", "cluster_table", "figures", "percentile",
           "read_jobs_csv", "read_slots_csv", "transport_label"]
