"""Measurement: what a round measured, set beside what its plans predicted, and the run folder's
tables and summary built from the finished rounds.

A round's phases are measured on their own (wall clock, link counters before and after); when a
phase had to run again after a fault, the bytes of the attempt that was given up are kept apart
(``aborted_bytes``), so measured bytes always sit beside the prediction of the plan that counted.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any, Callable, Iterator, Mapping, Sequence

import networkx as nx

from fedmst.core.contention import ROUND_PHASES, Profile, iteration_times
from fedmst.core.linktrace import LinkChange, graph_at
from fedmst.core.optical.wavelengths import Lightpath
from fedmst.core.optical.circuits import CircuitPlan, circuit_view, fibres, optical_summary
from fedmst.core.plan import TRANSFER_PHASES, Plan, predicted_phase_seconds
from fedmst.core.route import LinkDir
from fedmst.core.schedulers import get_scheduler
from fedmst.core.selection import participants
from fedmst.core.span import PhaseSpan
from fedmst.core.timescale import REAL_TIME, TimeScale, keeps_up_at
from fedmst.core.topology import link_name, node_order
from fedmst.core.workload import link_state
from fedmst.fl.strategies import build_strategy, knobs, strategy_knobs
from fedmst.run.recovery import FaultEvent
from fedmst.run.report import Summary, time_to_accuracy
from fedmst.workers.description import BackendDescription
from fedmst.workers.hosttrainer import Training
from fedmst.run.results import CPU_FIELDS, ROUND_FIELDS, TASK_FIELDS, TIMELINE_FIELDS, LinkRow, write_csv, write_links


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
    faults: list[FaultEvent] = field(default_factory=list)
    host_seconds: dict[str, float] = field(default_factory=dict)
    """What each phase took on the host's clock: ``seconds`` times the time scale, except a slowed
    lockstep training, whose ``seconds`` are the agents' counted CPU time and this its real length."""
    cpu_busy: dict[str, float] = field(default_factory=dict)
    """Fraction of the host's CPU time that was busy during each phase (:func:`cpu_busy`)."""
    cpu_s: dict[str, dict[str, float]] = field(default_factory=dict)
    """Phase -> CPU seconds each kind of process spent in it
    (:meth:`fedmst.net.emulation.Emulation.cpu_seconds`): where the host's time went."""
    background_bytes: dict[LinkDir, int] = field(default_factory=dict)
    """Bytes of background traffic per link direction over the whole round (not in ``link_bytes``)."""
    window: tuple[float, float] = (0.0, 0.0)
    """When the round began and ended, in seconds from the first round's start."""
    predicted_s: dict[str, float] = field(default_factory=dict)
    """The plans' prediction of each transfer phase, once the round ended (:meth:`Prediction.settle`)."""
    reconfig_s: dict[str, float] = field(default_factory=dict)
    """Seconds each transfer phase waited for new optical circuits' set-up (in ``seconds``)."""
    circuits: dict[str, tuple[Lightpath, ...]] = field(default_factory=dict)
    """The optical circuits each phase's plans held (as ``plans``)."""
    links: list[LinkRow] = field(default_factory=list)
    """The round's rows of links.csv, once it ended (:meth:`Prediction.settle`)."""

    time_scale: float = 1.0
    """The time scale the round ran at."""

    @property
    def host_bound(self) -> dict[str, int]:
        """The transfer phases the host's CPUs bound rather than the links, each with the time scale
        that would have kept up (:func:`fedmst.core.timescale.keeps_up_at`), once the round is settled.
        (A phase with nothing to move, as a ring's broadcast, is bound by nothing.)"""
        bound = {p: keeps_up_at(self.time_scale, self.seconds[p] / self.predicted_s[p], self.cpu_busy.get(p, 0.0),
                                cores=os.cpu_count() or 1)
                 for p in TRANSFER_PHASES if self.predicted_s.get(p) and p in self.seconds
                 and any(plan.phase(p) for plan in self.plans.get(p, ()))}
        return {p: scale for p, scale in bound.items() if scale is not None}

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
    """Reads every link direction's byte counter every ``interval_s`` of the network's time while
    a phase runs, so that a link's utilisation over time (and its peak) can be plotted, not only
    its total; ``t_s`` is the network's time too (``scale``)."""

    def __init__(self, read: Callable[[], dict[LinkDir, int]], interval_s: float = 0.1,
                 scale: TimeScale = REAL_TIME) -> None:
        self.read = read
        self.interval_s, self.scale = interval_s, scale
        self.rows: list[dict[str, Any]] = []
        self.listener: Callable[[float, int, str, dict[LinkDir, int], bool], None] | None = None
        """Told of every reading, as ``(t_s, round, phase, counters, final)`` (``live.json``'s
        publisher); ``final`` marks the reading that ends the phase, taken once its block is over, so
        that the listener can show the phase's last counters even where it skips others."""
        self.t0: float | None = None
        """The monotonic time ``t_s`` counts from (default: the first sample's)."""

    @contextmanager
    def sampling(self, round_: int, phase: str) -> Iterator[None]:
        stop = threading.Event()

        def sample(final: bool = False) -> None:
            before = time.monotonic()
            counters = self.read()
            now = (before + time.monotonic()) / 2  # the read takes a few ms: stamp its middle
            self.t0 = now if self.t0 is None else self.t0
            t_s = self.scale.network_s(now - self.t0)
            self.rows += [{"t_s": t_s, "round": round_, "phase": phase, "src": u, "dst": v, "bytes": n}
                          for (u, v), n in sorted(counters.items())]
            if self.listener is not None:
                self.listener(t_s, round_, phase, counters, final)

        def loop() -> None:
            while not stop.wait(self.scale.real_s(self.interval_s)):
                sample()

        sample()
        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            sample(final=True)


@dataclass(frozen=True)
class Prediction:
    """What the prediction of a round needs besides its plans."""

    graph: nx.Graph
    chunk_bytes: int
    mtu: int
    with_delay: bool
    changes: tuple[LinkChange, ...] = ()
    """A link trace: each phase is predicted on the network as it stood when the phase began."""

    def settle(self, res: RoundResult) -> None:
        """Set the finished round's prediction beside what it measured, once: its phases'
        seconds and its links.csv rows, which the tables and the summary read."""
        res.predicted_s = self.seconds(res)
        res.links = self.link_rows(res)

    def seconds(self, res: RoundResult) -> dict[str, float]:
        """The plans' prediction of each transfer phase of ``res``, from the plans it ran with."""
        starts = dict(zip(ROUND_PHASES, _phase_starts(res)))
        return {p: res.reconfig_s.get(p, 0.0) + predicted_phase_seconds(
                    res.plans[p], circuit_view(graph_at(self.graph, self.changes, starts[p]), res.circuits.get(p, ())),
                    p, chunk_bytes=self.chunk_bytes, with_delay=self.with_delay, mtu=self.mtu)
                for p in TRANSFER_PHASES}

    def link_rows(self, res: RoundResult) -> list[LinkRow]:
        """One row per link direction for one round: predicted weight bytes beside measured bytes.

        Within a phase a link direction either carries planned weights or only the ACKs (and ARP)
        of transfers going the other way, so measured bytes split cleanly into weight bytes
        (phases where weights were planned on it) and the rest.
        """
        predicted = {p: link_state(res.plans[p], phase=p, mtu=self.mtu) for p in TRANSFER_PHASES}
        graph = graph_at(self.graph, self.changes, res.window[0])
        rows = []
        for u, v in sorted(res.link_bytes["broadcast"], key=lambda h: (sorted(map(node_order, h)), node_order(h[0]))):
            hop = (u, v)
            measured = {p: b[hop] for p, b in res.link_bytes.items()}
            planned = sum(predicted[p].get(hop, 0) for p in TRANSFER_PHASES)
            weights = sum(measured[p] for p in TRANSFER_PHASES if predicted[p].get(hop))
            rows.append(LinkRow(
                round=res.round, link=link_name(*hop), src=u, dst=v, capacity_mbps=graph.edges[u, v]["capacity_mbps"],
                predicted_bytes=planned, measured_bytes=sum(measured.values()),
                measured_weight_bytes=weights, measured_other_bytes=sum(measured.values()) - weights,
                error_pct=_error_pct(weights, planned),
                broadcast_bytes=measured["broadcast"], upload_bytes=measured["upload"],
                aborted_bytes=sum(b.get(hop, 0) for b in res.aborted_bytes.values()),
                queue_drops=res.queue_drops[hop], background_bytes=res.background_bytes.get(hop, 0),
            ))
        return rows


def write_tables(out: Path, rounds: list[RoundResult]) -> None:
    """Rewrite rounds.csv, tasks.csv and links.csv with every finished round (atomically)."""
    round_rows, link_rows, task_rows = [], [], []
    for res in rounds:
        secs, bound = res.predicted_s, res.host_bound
        task_rows += [{
            "round": res.round, "task": name, **{f"{p}_s": secs_[name] for p, secs_ in res.task_seconds.items()},
            "round_s": sum(secs_[name] for secs_ in res.task_seconds.values()), "accuracy": res.accuracies[name],
            "local_models": res.local_models[name], "start_s": res.window[0],
            "end_s": res.window[0] + sum(secs_[name] for secs_ in res.task_seconds.values()),
            "predicted_round_s": "",
        } for name in res.task_seconds["broadcast"]]
        rows = res.links
        link_rows += rows
        round_rows.append({
            "round": res.round, **{f"{p}_s": res.seconds[p] for p in ROUND_PHASES},
            "round_s": res.round_s,
            "predicted_broadcast_s": secs["broadcast"], "predicted_upload_s": secs["upload"],
            "bytes_measured": sum(r.measured_bytes for r in rows),
            "bytes_predicted": sum(r.predicted_bytes for r in rows),
            "bytes_aborted": sum(r.aborted_bytes for r in rows),
            "retransmitted_segments": res.retransmits, "queue_drops": sum(res.queue_drops.values()),
            "accuracy": res.accuracy, "local_models": sum(res.local_models.values()),
            "faults": "; ".join(f.fault.event for f in res.faults),
            "late_updates": sum(len(m) for m in res.late.values()),
            "replan_s": sum(f.replan_s for f in res.faults),
            **{f"{p}_cpu_busy": res.cpu_busy.get(p, "") for p in ROUND_PHASES},
            **{f"{p}_host_s": res.host_seconds.get(p, "") for p in ROUND_PHASES},
            "time_scale": res.time_scale, "host_bound": ";".join(bound), "keeps_up_at": max(bound.values(), default=""),
        })
    write_csv(out / "rounds.csv", ROUND_FIELDS, round_rows)
    write_csv(out / "cpu.csv", CPU_FIELDS, ({"round": res.round, "phase": p, "process": kind, "cpu_s": s}
                                            for res in rounds for p, used in res.cpu_s.items()
                                            for kind, s in sorted(used.items())))
    write_csv(out / "tasks.csv", TASK_FIELDS, task_rows)
    write_links(out / "links.csv", link_rows)
    write_timeline(out, [PhaseSpan(name, res.round, p, begin, begin + res.task_seconds[p][name])
                         for res in rounds for p, begin in zip(ROUND_PHASES, _phase_starts(res))
                         for name in res.task_seconds[p]])


def write_timeline(out: Path, measured: Sequence[PhaseSpan], predicted: Sequence[PhaseSpan] = ()) -> None:
    """timeline.csv: every task's phase windows, measured and (on an independent clock) predicted."""
    write_csv(out / "timeline.csv", TIMELINE_FIELDS,
              [{"kind": kind, "task": s.task, "round": s.round, "phase": s.phase, "start_s": s.start_s,
                "end_s": s.end_s} for kind, spans in (("measured", measured), ("predicted", predicted)) for s in spans])


def _error_pct(weight_bytes: int, predicted_bytes: int) -> float:
    """links.csv's ``error_pct``: weight bytes against predicted, 0 where nothing was planned."""
    return 100 * (weight_bytes - predicted_bytes) / predicted_bytes if predicted_bytes else 0.0


def _phase_starts(res: RoundResult) -> list[float]:
    """When each phase of a lockstep round began (they follow one another), from the first round's start."""
    starts, t = [], res.window[0]
    for p in ROUND_PHASES:
        starts.append(t)
        t += res.seconds[p]
    return starts


def _shared(run: Any, rows: list[LinkRow], *, reached: tuple[int, float] | None, status: str,
            workers: BackendDescription, wall_s: float, times: dict[str, float],
            background: list[dict[str, Any]], pcap: dict[str, Any] | None = None,
            held: Sequence[CircuitPlan] = (), slots_outside: float | None = None,
            training: Training | None = None) -> dict[str, Any]:
    """The summary fields that lockstep and independent runs work out alike: what ran, and the
    link bytes of its ``rows`` (links.csv) against the plans; ``held``: every plan's circuits,
    ``slots_outside``: the share of time-sliced bytes sent outside their slots, ``training``: where the
    local models trained (the session's; where none began, as planned)."""
    config, workload = run.config, run.workload
    first = workload.plans[0]
    return dict(
        partition=dict(run.partition),
        training=asdict(training or Training.planned(run.device, run.host_trainer)),
        status=status, scheduler=config.scheduler, scheduler_name=_declared_name(config.scheduler),
        topology=run.graph.graph["name"],
        tasks=len(workload.plans) + len(workload.blocked), tasks_blocked=len(workload.blocked),
        model=config.trains, model_bytes=first.task.model_bytes, global_node=first.task.global_node,
        local_nodes=list(first.task.local_nodes), aggregation_nodes=sorted(first.aggregation_nodes),
        wavelengths=workload.wavelengths, reserved_wavelength_links=workload.reserved_wavelength_links,
        reserved_capacity_mbps=workload.reserved_capacity_mbps,
        link_bytes_measured=sum(r.measured_bytes for r in rows),
        link_bytes_predicted=sum(r.predicted_bytes for r in rows),
        weight_bytes_measured=sum(r.measured_weight_bytes for r in rows),
        ack_bytes_measured=sum(r.measured_other_bytes for r in rows),
        aborted_link_bytes=sum(r.aborted_bytes for r in rows),
        max_link_bytes_error=max((abs(r.error_pct) / 100 for r in rows if r.predicted_bytes), default=0.0),
        workers=workers, wall_s=wall_s, time_breakdown_s=times, target_accuracy=config.target_accuracy,
        rounds_to_accuracy=reached[0] if reached else None, time_to_accuracy_s=reached[1] if reached else None,
        background=background, pcap=pcap, strategy=config.strategy,
        strategy_knobs=knobs(build_strategy(config.strategy, strategy_knobs(config.strategy_args))),
        clients_per_round=participants(config.clients_per_round, first.task.k) if config.clients_per_round else None,
        selection=config.selection if config.clients_per_round else None,
        optical=optical_summary(run.graph, held, workload.blocking_ratio, policy=config.optical,
                                wavelengths=config.ocs_wavelengths, reconfig_ms=config.reconfig_ms,
                                ots=config.ots_wavelengths, frame=config.frame, slots_outside=slots_outside)
        if fibres(run.graph) else None,
    )


def _declared_name(scheduler: str) -> str | None:
    """The ``name`` the scheduler's class declares, its label in tables and figures; None where a
    plugin declares no name."""
    name = getattr(get_scheduler(scheduler), "name", None)
    return name if isinstance(name, str) and name else None


def rounds_planned(run: Any) -> int:
    """The rounds ``run`` (a :class:`~fedmst.run.prepare.ResolvedRun`) set out to run: ``--rounds``
    in lockstep; on independent clocks the most any task has (a workload gives each its own)."""
    config = run.config
    if config.clock == "lockstep":
        return config.rounds
    return max((p.task.rounds for p in run.workload.plans), default=config.rounds)


def summarise(run: Any, rounds: list[RoundResult], *, emulated: dict[str, Any],
              workers: BackendDescription, wall_s: float, status: str, times: dict[str, float],
              background: list[dict[str, Any]], pcap: dict[str, Any] | None = None,
              held: Sequence[CircuitPlan] = (), slots_outside: float | None = None,
              training: Training | None = None) -> Summary:
    """summary.json of ``run`` (a :class:`~fedmst.run.config.ResolvedRun`): means over the
    finished rounds; ``status`` says whether all of them ran (``completed``), or the run was
    ``interrupted`` or ``failed: REASON`` after ``rounds``."""
    config = run.config
    secs = [r.predicted_s for r in rounds]
    rows = [row for r in rounds for row in r.links]
    reached = time_to_accuracy([r.round_s for r in rounds], [r.accuracy for r in rounds],
                               config.target_accuracy)
    by_task: dict[str, list[float]] = {}
    for r in rounds:
        for name in r.task_seconds["train"]:
            by_task.setdefault(name, []).append(sum(r.task_seconds[p][name] for p in r.task_seconds))
    return Summary(
        **_shared(run, rows, reached=reached, status=status, workers=workers, wall_s=wall_s, times=times,
                  background=background, pcap=pcap, held=held, slots_outside=slots_outside, training=training),
        rounds_planned=rounds_planned(run),
        local_models=config.local_models,
        rounds=len(rounds),
        tcp_retransmitted_segments=sum(r.retransmits for r in rounds),
        queue_drops=sum(sum(r.queue_drops.values()) for r in rounds),
        round_latency_s=mean(r.round_s for r in rounds),
        task_round_latency_s=mean(s for seconds in by_task.values() for s in seconds),
        round_latency_by_task_s={name: mean(s) for name, s in by_task.items()},
        broadcast_s=mean(r.seconds["broadcast"] for r in rounds),
        train_s=mean(r.seconds["train"] for r in rounds),
        upload_s=mean(r.seconds["upload"] for r in rounds),
        predicted_broadcast_s=mean(s["broadcast"] for s in secs),
        predicted_upload_s=mean(s["upload"] for s in secs),
        faults=[{"round": f.round, "event": f.fault.event, "replan_s": f.replan_s}
                for r in rounds for f in r.faults],
        local_models_per_round=[sum(r.local_models.values()) for r in rounds],
        late_updates_per_round=[sum(len(m) for m in r.late.values()) for r in rounds],
        bytes_to_accuracy=sum(row.measured_bytes for r in rounds[:reached[0]] for row in r.links) if reached else None,
        final_accuracy=rounds[-1].accuracy,
        accuracy_per_round=[r.accuracy for r in rounds],
        emulated={**emulated, "host_bound_phases": host_bound_phases(rounds)},
    )


def host_bound_phases(rounds: Sequence[RoundResult]) -> list[dict[str, Any]]:
    """summary.json's ``emulated.host_bound_phases``: every transfer phase the host bound, with
    how far it was from its prediction, how busy the CPUs were and the scale that would have kept up."""
    return [{"round": r.round, "phase": p, "measured_over_predicted": round(r.seconds[p] / r.predicted_s[p], 3),
             "cpu_busy": r.cpu_busy[p], "time_scale": r.time_scale, "keeps_up_at": scale}
            for r in rounds for p, scale in r.host_bound.items()]


def _iterations_bound(run: Any, mean_s: float, predicted: Mapping[Any, float], busy: float) -> list[dict[str, Any]]:
    """An independent clock's ``host_bound_phases``: its mean iteration, where the host bound it
    (the phases overlap across tasks, so only the iteration has a prediction to hold them to)."""
    if not predicted or not mean_s:
        return []
    ratio = mean_s / mean(predicted.values())
    scale = keeps_up_at(run.time_scale, ratio, busy, cores=os.cpu_count() or 1)
    return [] if scale is None else [{"round": 0, "phase": "iteration", "measured_over_predicted": round(ratio, 3),
                                      "cpu_busy": busy, "time_scale": run.time_scale, "keeps_up_at": scale}]


def host_bound_line(bound: Sequence[Mapping[str, Any]]) -> str | None:
    """The warning a run ends with when the host bound any of its phases (summary.json's
    ``emulated.host_bound_phases``; None: it bound none)."""
    if not bound:
        return None
    shown = ", ".join(("round %d " % b["round"] if b["round"] else "")
                      + f"{b['phase']} {b['measured_over_predicted']:.2f}x" for b in bound[:4])
    return (f"warning: {len(bound)} phase(s) were bound by the host's CPUs, not the links ({shown}"
            f"{', ...' if len(bound) > 4 else ''} of their prediction): those figures are this host's, not the "
            f"network's; --time-scale {max(b['keeps_up_at'] for b in bound)} would keep up "
            "(summary.json: emulated.host_bound_phases)")


@dataclass
class ClockRun:
    """A run on independent clocks (``--clock independent``): the tasks' rounds overlap, so what
    each link carried is measured over the whole run, and time per task and round from the spans
    each node reported."""

    plans: tuple[Plan, ...]
    rounds: dict[str, int]
    offsets: dict[str, float]
    spans: dict[str, tuple[PhaseSpan, ...]] = field(default_factory=dict)
    """Each node's spans as it reported them."""
    accuracy: dict[str, list[float]] = field(default_factory=dict)
    link_bytes: dict[LinkDir, int] = field(default_factory=dict)
    background_bytes: dict[LinkDir, int] = field(default_factory=dict)
    queue_drops: dict[LinkDir, int] = field(default_factory=dict)
    retransmits: int = 0
    cpu_busy: float = 0.0
    alone: Sequence[Profile] = ()
    """Each task's round as predicted alone (:func:`fedmst.core.contention.profile_of`)."""
    predicted: list[PhaseSpan] = field(default_factory=list)
    """The timeline :func:`fedmst.core.contention.simulate` predicts for the same offsets."""

    def windows(self) -> list[PhaseSpan]:
        """Each task's phases, round by round: the broadcast from G's start to the last node
        holding the model, the training from the first to the last local model's, and the upload
        from then to G holding the new global model (a round ends where the next begins)."""
        g = {p.task.name: p.task.global_node for p in self.plans}
        by: dict[tuple[str, int, str], list[tuple[str, float, float]]] = {}
        for node, spans in self.spans.items():
            for s in spans:
                by.setdefault((s.task, s.round, s.phase), []).append((node, s.start_s, s.end_s))
        out = []
        for task in sorted(self.rounds):
            for r in sorted({r for t, r, _ in by if t == task}):  # from 1, or where a resumed job went on
                bcast, up = by.get((task, r, "broadcast")), by.get((task, r, "upload"))
                if not bcast or not up:
                    break  # the run ended before this round did
                begin = next(s for n, s, _ in bcast if n == g[task])
                sent = max(e for _, _, e in bcast)
                train = by.get((task, r, "train"), [(g[task], sent, sent)])
                trained = max(e for _, _, e in train)
                out += [PhaseSpan(task, r, "broadcast", begin, sent),
                        PhaseSpan(task, r, "train", min(s for _, s, _ in train), trained),
                        PhaseSpan(task, r, "upload", trained, next(e for n, _, e in up if n == g[task]))]
        return out

    @property
    def rounds_done(self) -> int:
        return max((s.round for s in self.windows()), default=0)


def clock_link_rows(run: ClockRun, graph: nx.Graph, mtu: int) -> list[LinkRow]:
    """links.csv on an independent clock: one row per link direction for the whole run (round 0)."""
    done = {s.task: s.round for s in run.windows() if s.phase == "upload"}
    return whole_run_link_rows([(plan, done.get(plan.task.name, 0)) for plan in run.plans], run.link_bytes,
                               run.queue_drops, run.background_bytes, graph, mtu)


def whole_run_link_rows(done: Sequence[tuple[Plan, int]], link_bytes: Mapping[LinkDir, int],
                        queue_drops: Mapping[LinkDir, int], background_bytes: Mapping[LinkDir, int], graph: nx.Graph,
                        mtu: int, set_up: Mapping[LinkDir, int] | None = None) -> list[LinkRow]:
    """links.csv of tasks whose rounds overlap (independent clocks, a cluster's jobs): one row per
    link direction for the whole run (round 0), predicted from each plan times the rounds it
    finished (``done``), plus the ``set_up`` bytes where the counters ran through the tasks'
    set-ups (a cluster's). A direction that carries planned weights of any task counts all its bytes
    as weights (the ACKs of other tasks' transfers going the other way included), since phases overlap."""
    predicted: dict[LinkDir, int] = dict(set_up or {})
    for plan, rounds in done:
        for hop, b in link_state((plan,), mtu=mtu).items():
            predicted[hop] = predicted.get(hop, 0) + b * rounds
    rows = []
    for u, v in sorted(link_bytes, key=lambda h: (sorted(map(node_order, h)), node_order(h[0]))):
        hop = (u, v)
        measured, planned = link_bytes[hop], predicted.get(hop, 0)
        weights = measured if planned else 0
        rows.append(LinkRow(
            round=0, link=link_name(*hop), src=u, dst=v, capacity_mbps=graph.edges[u, v]["capacity_mbps"],
            predicted_bytes=planned, measured_bytes=measured, measured_weight_bytes=weights,
            measured_other_bytes=measured - weights, error_pct=_error_pct(weights, planned),
            broadcast_bytes=None, upload_bytes=None, aborted_bytes=0,
            queue_drops=queue_drops.get(hop, 0), background_bytes=background_bytes.get(hop, 0),
        ))
    return rows


def round_means(task_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """rounds.csv of tasks on their own clocks: each round's means over the tasks that ran it
    (their phases and accuracy) and their local models, from tasks.csv's rows."""
    out = []
    for r in sorted({row["round"] for row in task_rows}):
        rows = [row for row in task_rows if row["round"] == r]
        accs = [row["accuracy"] for row in rows if row["accuracy"] != ""]
        out.append({key: "" for key in ROUND_FIELDS} | {
            "round": r, **{f"{p}_s": mean(row[f"{p}_s"] for row in rows) for p in ROUND_PHASES},
            "round_s": mean(row["round_s"] for row in rows), "accuracy": mean(accs) if accs else "",
            "local_models": sum(row["local_models"] for row in rows),
        })
    return out


def task_rows(windows: Sequence[PhaseSpan], accuracy: Mapping[str, Sequence[float]], local_models: Mapping[str, int],
              predicted: Mapping[tuple[str, int], float] | None = None) -> list[dict[str, Any]]:
    """tasks.csv of tasks on their own clocks: a row per task and round finished, from its phase
    ``windows``, G's ``accuracy`` after each round and the ``predicted`` iteration times (if any)."""
    measured = iteration_times(windows)
    phase = {(s.task, s.round, s.phase): s for s in windows}
    return [{
        "round": r, "task": task,
        **{f"{p}_s": phase[(task, r, p)].end_s - phase[(task, r, p)].start_s for p in ROUND_PHASES},
        "round_s": seconds, "accuracy": accuracy[task][r - 1] if len(accuracy.get(task, ())) >= r else "",
        "local_models": local_models[task], "start_s": phase[(task, r, "broadcast")].start_s,
        "end_s": phase[(task, r, "upload")].end_s, "predicted_round_s": (predicted or {}).get((task, r), ""),
    } for (task, r), seconds in sorted(measured.items())]


def write_clock_tables(out: Path, run: ClockRun, graph: nx.Graph, mtu: int) -> None:
    """tasks.csv, rounds.csv (means over the tasks of each round), links.csv and timeline.csv."""
    windows = run.windows()
    rows = task_rows(windows, run.accuracy, {p.task.name: p.task.k for p in run.plans}, iteration_times(run.predicted))
    write_csv(out / "tasks.csv", TASK_FIELDS, rows)
    write_csv(out / "rounds.csv", ROUND_FIELDS, round_means(rows))
    write_links(out / "links.csv", clock_link_rows(run, graph, mtu))
    write_timeline(out, windows, run.predicted)


def summarise_clock(run: Any, clock: ClockRun, *, emulated: dict[str, Any],
                    workers: BackendDescription, wall_s: float, status: str, times: dict[str, float],
                    background: list[dict[str, Any]], pcap: dict[str, Any] | None = None,
                    held: Sequence[CircuitPlan] = (), slots_outside: float | None = None,
                    training: Training | None = None) -> Summary:
    """summary.json of a run on independent clocks: means over every task's finished rounds."""
    config, workload = run.config, run.workload
    windows = clock.windows()
    iterations = iteration_times(windows)
    per_round = [mean(a[r] for a in clock.accuracy.values() if len(a) > r)
                 for r in range(max((len(a) for a in clock.accuracy.values()), default=0))]
    by_task = {t: mean(s for (name, _), s in iterations.items() if name == t)
               for t in sorted({t for t, _ in iterations})}
    phases = {p: [s.end_s - s.start_s for s in windows if s.phase == p] for p in ROUND_PHASES}
    mean_s = mean(iterations.values()) if iterations else 0.0
    round_means = [mean(s for (_, r_), s in iterations.items() if r_ == r + 1) for r in range(len(per_round))]
    predicted_iterations = iteration_times(clock.predicted)
    return Summary(
        **_shared(run, clock_link_rows(clock, run.graph, config.mtu),
                  reached=time_to_accuracy(round_means, per_round, config.target_accuracy), status=status,
                  workers=workers, wall_s=wall_s, times=times, background=background, pcap=pcap,
                  held=held, slots_outside=slots_outside, training=training),
        rounds_planned=rounds_planned(run), local_models=workload.plans[0].task.k,
        rounds=clock.rounds_done, tcp_retransmitted_segments=clock.retransmits,
        queue_drops=sum(clock.queue_drops.values()),
        round_latency_s=mean_s, task_round_latency_s=mean_s,
        broadcast_s=mean(phases["broadcast"] or [0.0]), train_s=mean(phases["train"] or [0.0]),
        upload_s=mean(phases["upload"] or [0.0]),
        predicted_broadcast_s=mean(a.broadcast.seconds for a in clock.alone),
        predicted_upload_s=mean(a.upload.seconds for a in clock.alone),
        faults=[], local_models_per_round=[sum(p.task.k for p in workload.plans)] * len(per_round),
        late_updates_per_round=[0] * len(per_round), final_accuracy=per_round[-1] if per_round else 0.0,
        accuracy_per_round=per_round, emulated={
            **emulated, "rounds_cpu_busy": clock.cpu_busy,
            "host_bound_phases": _iterations_bound(run, mean_s, predicted_iterations, clock.cpu_busy)},
        clock="independent", round_latency_by_task_s=by_task, start_offsets_s=clock.offsets,
        predicted_round_latency_s=mean(predicted_iterations.values()) if predicted_iterations else None,
    )
