"""Measurement: what a round measured, set beside what its plans predicted, and the run folder's
tables and summary built from the finished rounds.

A round's phases are measured on their own (wall clock, link counters before and after); when a
phase had to run again after a fault, the bytes of the attempt that was given up are kept apart
(``aborted_bytes``), so measured bytes always sit beside the prediction of the plan that counted.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any, Callable, Iterator

import networkx as nx

from fedmst.core.plan import PHASES, Plan, predicted_phase_seconds
from fedmst.core.topology import node_order
from fedmst.core.workload import link_state
from fedmst.run.report import Summary, time_to_accuracy
from fedmst.run.results import LINK_FIELDS, ROUND_FIELDS, TASK_FIELDS, write_csv

LinkDir = tuple[str, str]
STEPS = ("broadcast", "train", "upload")
CPU_BOUND = 0.95
"""A transfer phase with the host's CPUs at least this busy is reported as bound by the CPU."""


def cpu_busy(before: Any, after: Any) -> float:
    """Busy fraction of all CPUs between two :func:`psutil.cpu_times` readings.

    >>> from collections import namedtuple
    >>> T = namedtuple("T", "user system idle iowait")
    >>> cpu_busy(T(10, 5, 100, 1), T(16, 8, 101, 1))
    0.9
    """
    spent = {k: getattr(after, k) - getattr(before, k) for k in after._fields}
    total = sum(spent.values()) - spent.get("guest", 0.0) - spent.get("guest_nice", 0.0)  # in user, nice too
    idle = spent.get("idle", 0.0) + spent.get("iowait", 0.0)
    return round(1 - idle / total, 3) if total > 0 else 0.0


@dataclass
class RoundResult:
    round: int
    seconds: dict[str, float] = field(default_factory=dict)
    task_seconds: dict[str, dict[str, float]] = field(default_factory=dict)
    accuracies: dict[str, float] = field(default_factory=dict)
    link_bytes: dict[str, dict[LinkDir, int]] = field(default_factory=dict)
    """Bytes per link direction in each phase, in the attempt that counted."""
    aborted_bytes: dict[str, dict[LinkDir, int]] = field(default_factory=dict)
    """Bytes per link direction of each phase's attempts that a fault made the round give up."""
    queue_drops: dict[LinkDir, int] = field(default_factory=dict)
    retransmits: int = 0
    plans: dict[str, tuple[Plan, ...]] = field(default_factory=dict)
    """The plans each phase ran with: a fault in the round changes them between phases."""
    weights: dict[str, dict[int, float]] = field(default_factory=dict)
    """Each task's aggregation weights in the upload that counted, by original local model."""
    late: dict[str, list[int]] = field(default_factory=dict)
    """Each task's local models whose update missed the deadline and was dropped."""
    faults: list[dict[str, Any]] = field(default_factory=list)
    cpu_busy: dict[str, float] = field(default_factory=dict)
    """Fraction of the host's CPU time that was busy during each phase (:func:`cpu_busy`)."""

    @property
    def cpu_bound(self) -> list[str]:
        """The transfer phases during which the host's CPUs were all but saturated: their links
        ran as fast as the host could forward, not as the plan's fluid model says. (A phase with
        nothing to move, as a ring's broadcast, is bound by nothing.)"""
        return [p for p in PHASES if self.cpu_busy.get(p, 0.0) >= CPU_BOUND
                and any(plan.phase(p) for plan in self.plans.get(p, ()))]

    @property
    def local_models(self) -> dict[str, int]:
        """Local models of each task whose update went into the aggregate."""
        return {name: len(w) for name, w in self.weights.items()}

    @property
    def round_s(self) -> float:
        """Wall-clock seconds of the round's phases (evaluation left out)."""
        return sum(self.seconds.values())

    @property
    def accuracy(self) -> float:
        """Mean test accuracy of the tasks' global models after this round."""
        return mean(self.accuracies.values())


class CounterSampler:
    """Reads every link direction's byte counter every ``interval_s`` while a phase runs, so that
    a link's utilisation over time (and its peak) can be plotted, not only its total."""

    def __init__(self, read: Callable[[], dict[LinkDir, int]], interval_s: float = 0.1) -> None:
        self.read = read
        self.interval_s = interval_s
        self.rows: list[dict[str, Any]] = []
        self._t0: float | None = None

    @contextmanager
    def sampling(self, round_: int, phase: str) -> Iterator[None]:
        stop = threading.Event()

        def sample() -> None:
            before = time.perf_counter()
            counters = self.read()
            now = (before + time.perf_counter()) / 2  # the read takes a few ms: stamp its middle
            self._t0 = now if self._t0 is None else self._t0
            self.rows += [{"t_s": now - self._t0, "round": round_, "phase": phase, "src": u, "dst": v,
                           "bytes": n} for (u, v), n in sorted(counters.items())]

        def loop() -> None:
            while not stop.wait(self.interval_s):
                sample()

        sample()
        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            sample()


@dataclass(frozen=True)
class Prediction:
    """What the prediction of a round needs besides its plans."""

    graph: nx.Graph
    chunk_bytes: int
    mtu: int
    with_delay: bool

    def seconds(self, res: RoundResult) -> dict[str, float]:
        """The plans' prediction of each transfer phase of ``res``, from the plans it ran with."""
        return {p: predicted_phase_seconds(res.plans[p], self.graph, p, chunk_bytes=self.chunk_bytes,
                                           with_delay=self.with_delay, mtu=self.mtu)
                for p in PHASES}

    def link_rows(self, res: RoundResult) -> list[dict[str, Any]]:
        """One row per link direction for one round: predicted weight bytes beside measured bytes.

        Within a phase a link direction either carries planned weights or only the ACKs (and ARP)
        of transfers going the other way, so measured bytes split cleanly into weight bytes
        (phases where weights were planned on it) and the rest.
        """
        predicted = {p: link_state(res.plans[p], phase=p, mtu=self.mtu) for p in PHASES}
        rows = []
        for u, v in sorted(res.link_bytes["broadcast"], key=lambda h: (sorted(map(node_order, h)), node_order(h[0]))):
            hop = (u, v)
            measured = {p: b[hop] for p, b in res.link_bytes.items()}
            planned = sum(predicted[p].get(hop, 0) for p in PHASES)
            weights = sum(measured[p] for p in PHASES if predicted[p].get(hop))
            rows.append({
                "round": res.round, "link": "-".join(sorted((u, v), key=node_order)), "src": u, "dst": v,
                "capacity_mbps": self.graph.edges[u, v]["capacity_mbps"],
                "predicted_bytes": planned, "measured_bytes": sum(measured.values()),
                "measured_weight_bytes": weights, "measured_other_bytes": sum(measured.values()) - weights,
                "error_pct": 100 * (weights - planned) / planned if planned else 0.0,
                "broadcast_bytes": measured["broadcast"], "upload_bytes": measured["upload"],
                "aborted_bytes": sum(b.get(hop, 0) for b in res.aborted_bytes.values()),
                "queue_drops": res.queue_drops[hop],
            })
        return rows


def write_tables(out: Path, prediction: Prediction, rounds: list[RoundResult]) -> None:
    """Rewrite rounds.csv, tasks.csv and links.csv with every finished round (atomically)."""
    round_rows, link_rows, task_rows = [], [], []
    for res in rounds:
        secs = prediction.seconds(res)
        task_rows += [{
            "round": res.round, "task": name, **{f"{p}_s": secs_[name] for p, secs_ in res.task_seconds.items()},
            "round_s": sum(secs_[name] for secs_ in res.task_seconds.values()), "accuracy": res.accuracies[name],
            "local_models": res.local_models[name],
        } for name in res.task_seconds["broadcast"]]
        rows = prediction.link_rows(res)
        link_rows += rows
        round_rows.append({
            "round": res.round, **{f"{p}_s": res.seconds[p] for p in STEPS},
            "round_s": res.round_s,
            "predicted_broadcast_s": secs["broadcast"], "predicted_upload_s": secs["upload"],
            "bytes_measured": sum(r["measured_bytes"] for r in rows),
            "bytes_predicted": sum(r["predicted_bytes"] for r in rows),
            "bytes_aborted": sum(r["aborted_bytes"] for r in rows),
            "retransmitted_segments": res.retransmits, "queue_drops": sum(res.queue_drops.values()),
            "accuracy": res.accuracy, "local_models": sum(res.local_models.values()),
            "faults": "; ".join(f["event"] for f in res.faults),
            "late_updates": sum(len(m) for m in res.late.values()),
            "replan_s": sum(f["replan_s"] for f in res.faults),
            **{f"{p}_cpu_busy": res.cpu_busy.get(p, "") for p in STEPS},
        })
    write_csv(out / "rounds.csv", ROUND_FIELDS, round_rows)
    write_csv(out / "tasks.csv", TASK_FIELDS, task_rows)
    write_csv(out / "links.csv", LINK_FIELDS, link_rows)


def summarise(run: Any, prediction: Prediction, rounds: list[RoundResult], *, emulated: dict[str, Any],
              workers: dict[str, Any], wall_s: float, status: str, times: dict[str, float]) -> Summary:
    """summary.json of ``run`` (a :class:`~fedmst.run.config.ResolvedRun`): means over the
    finished rounds; ``status`` says whether all of them ran (``completed``), or the run was
    ``interrupted`` or ``failed: REASON`` after ``rounds``."""
    config, workload = run.config, run.workload
    secs = [prediction.seconds(r) for r in rounds]
    rows = [row for r in rounds for row in prediction.link_rows(r)]
    first = workload.plans[0]
    reached = time_to_accuracy([r.round_s for r in rounds], [r.accuracy for r in rounds],
                               config.target_accuracy)
    return Summary(
        status=status,
        rounds_planned=config.rounds,
        scheduler=config.scheduler,
        topology=run.graph.graph["name"],
        local_models=config.local_models,
        tasks=len(workload.plans) + len(workload.blocked),
        tasks_blocked=len(workload.blocked),
        rounds=len(rounds),
        model=config.model,
        model_bytes=first.task.model_bytes,
        global_node=first.task.global_node,
        local_nodes=list(first.task.local_nodes),
        aggregation_nodes=sorted(first.aggregation_nodes),
        wavelengths=workload.wavelengths,
        reserved_wavelength_links=workload.reserved_wavelength_links,
        reserved_capacity_mbps=workload.reserved_capacity_mbps,
        link_bytes_measured=sum(r["measured_bytes"] for r in rows),
        link_bytes_predicted=sum(r["predicted_bytes"] for r in rows),
        weight_bytes_measured=sum(r["measured_weight_bytes"] for r in rows),
        ack_bytes_measured=sum(r["measured_other_bytes"] for r in rows),
        aborted_link_bytes=sum(r["aborted_bytes"] for r in rows),
        tcp_retransmitted_segments=sum(r.retransmits for r in rounds),
        queue_drops=sum(sum(r.queue_drops.values()) for r in rounds),
        max_link_bytes_error=max((abs(r["error_pct"]) / 100 for r in rows if r["predicted_bytes"]), default=0.0),
        round_latency_s=mean(r.round_s for r in rounds),
        task_round_latency_s=mean(sum(r.task_seconds[p][name] for p in r.task_seconds)
                                   for r in rounds for name in r.task_seconds["train"]),
        broadcast_s=mean(r.seconds["broadcast"] for r in rounds),
        train_s=mean(r.seconds["train"] for r in rounds),
        upload_s=mean(r.seconds["upload"] for r in rounds),
        predicted_broadcast_s=mean(s["broadcast"] for s in secs),
        predicted_upload_s=mean(s["upload"] for s in secs),
        faults=[{"round": f["round"], "event": f["event"], "replan_s": f["replan_s"]}
                for r in rounds for f in r.faults],
        local_models_per_round=[sum(r.local_models.values()) for r in rounds],
        late_updates_per_round=[sum(len(m) for m in r.late.values()) for r in rounds],
        final_accuracy=rounds[-1].accuracy,
        accuracy_per_round=[r.accuracy for r in rounds],
        emulated={**emulated, "phases_cpu_bound": [f"round {r.round} {p}" for r in rounds for p in r.cpu_bound]},
        workers=workers,
        wall_s=wall_s,
        time_breakdown_s=times,
        target_accuracy=config.target_accuracy,
        rounds_to_accuracy=reached[0] if reached else None,
        time_to_accuracy_s=reached[1] if reached else None,
    )
