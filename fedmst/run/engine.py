"""The engine: one resolved run, for real, round by round, phase by phase.

Each round is driven phase by phase (broadcast, train, upload) with a barrier between phases,
so each phase's wall-clock latency and the bytes each link carried during it are measured on
their own and shown beside the plans' prediction. Several tasks run their phases at the same
time on the same links; each task's phase latency is when its last node finished. Faults are
injected where the run asks for them; :func:`fedmst.run.recovery.assess` says what a phase's
outcome needs, and the engine re-plans and runs the phase again.

On an independent clock (``--clock independent``) the engine instead hands every agent the
whole run at once (:class:`~fedmst.protocol.RunRounds`): each task runs its rounds back to back
from its own start offset, each node moving on as soon as its data is in, and the engine measures
the links over the whole run and each task's phases from the spans the nodes report. Background
flows (``--traffic``) start with the first round and are counted apart from the weights.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import tempfile
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Mapping

import psutil

import fedmst
from fedmst.core.contention import capacities, iteration_times, simulate
from fedmst.core.faults import RemainingTask, replan_workload
from fedmst.core.linktrace import LinkChange
from fedmst.core.traffic import as_json
from fedmst.core.plan import LinkDir, Transfer, plan_summary
from fedmst.core.topology import node_order
from fedmst.core.workload import WorkloadPlan
from fedmst.errors import FedmstError
from fedmst.net.calibrate import cpu_bound_links, link_ceiling_mbps
from fedmst.net.cleanup import RunState
from fedmst.net.emulation import Capabilities, Emulation
from fedmst.protocol import (
    ABORT_FILE,
    AgentSpec,
    Broadcast,
    Evaluate,
    Replan,
    RunRounds,
    Save,
    Setup,
    TaskSpec,
    Train,
    TransferSpec,
    Upload,
)
from fedmst.run.prepare import ResolvedRun
from fedmst.run.measure import (
    STEPS,
    ClockRun,
    CounterSampler,
    Prediction,
    RoundResult,
    cpu_busy,
    summarise,
    summarise_clock,
    write_clock_tables,
    write_tables,
)
from fedmst.run.recovery import (
    NEXT_PHASE,
    Live,
    aggregation_weights,
    assess,
    late_models,
    notice_kills,
    strikes_for,
)
from fedmst.run.report import Summary, breakdown_line
from fedmst.run.results import SAMPLE_FIELDS, write_csv, write_json
from fedmst.run.stall import Stall, StallWatch
from fedmst.workers.backends import Agents, WorkerBackend, backend_for
from fedmst.workers.control import ControlServer

Report = Callable[[str], None]


def run(resolved: ResolvedRun, report: Report = print, command_started: float | None = None) -> Summary:
    """Run ``resolved`` for real into ``config.out`` and return its summary; the run folder is
    written as it goes, and what finished stays there whatever ends the run. ``command_started``
    (monotonic clock) is when the command began, for the time breakdown's ``prepare``."""
    started = time.monotonic()
    times = {} if command_started is None else {"prepare": started - command_started}
    config = resolved.config
    out = Path(config.out)
    claim = _claim_run_dir(out)
    try:
        return _run(resolved, report, started, times)
    finally:
        os.close(claim)


def _run(resolved: ResolvedRun, report: Report, started: float, times: dict[str, float]) -> Summary:
    config = resolved.config
    out = Path(config.out)
    write_json(out / "config.json", asdict(config))
    tag = f"[{config.scheduler}]"
    workload = resolved.workload
    if len(workload.plans) == 1 and not workload.blocked:
        plan = workload.plans[0]
        task = plan.task
        report(
            f"{tag} task: G on node {task.global_node}, local models on {', '.join(task.local_nodes)}; "
            f"{len(plan.phase('broadcast'))} broadcast and {len(plan.phase('upload'))} upload transfers; "
            f"aggregation at {', '.join(sorted(plan.aggregation_nodes))}"
        )
    else:
        report(f"{tag} {len(workload.plans)} tasks scheduled, {len(workload.blocked)} blocked "
               f"(W={workload.wavelengths}); {workload.reserved_wavelength_links} wavelength-links reserved"
               + (f"; admitted in {config.order} order: {', '.join(p.task.name for p in workload.plans)}"
                  if config.order != "fifo" else ""))
        for name, reason in workload.blocked:
            report(f"{tag} blocked {name}: {reason}")
    backend = backend_for(config.workers, config.image, resolved.limits)
    graph = resolved.graph
    prediction = Prediction(graph, config.chunk_bytes, config.mtu, with_delay=resolved.delay_mode != "off",
                            changes=resolved.link_changes)
    rounds: list[RoundResult] = []
    emu: Emulation | None = None
    capabilities = Capabilities(netem=resolved.netem_available)
    ceiling: dict[str, object] = {}
    status = "interrupted"
    engine: Engine | None = None
    state = RunState()
    scratch: Path | None = None
    try:
        scratch = Path(tempfile.mkdtemp(prefix=f"fedmst-{state.id}-"))
        ceiling = _link_ceiling(resolved, capabilities, lambda m: report(f"{tag} {m}"))
        hosts = {node: state.host_name(i) for i, node in enumerate(sorted(graph.nodes, key=node_order))}
        netns = backend.up(hosts, mounts=(str(scratch), str(out.resolve())))
        emu = Emulation(graph, delay_mode=resolved.delay_mode, loss=config.loss, jitter_s=config.jitter_ms / 1e3,
                        mtu=config.mtu, queue=config.queue, netns=netns, capabilities=capabilities,
                        preload=backend.preload(model=config.model, dataset=config.dataset,
                                                optimizer=config.optimizer, batch_size=config.batch_size,
                                                lr=config.lr),
                        changing=[c.link for c in resolved.link_changes
                                  if c.delay_ms is not None or c.loss is not None], run=state)
        with emu:
            times["network"] = time.monotonic() - started
            report(f"{tag} run {state.id}'s links: htb bandwidth; {emu.emulated()['note']}")
            engine = Engine(resolved, emu, backend, out, scratch, report, prediction)
            try:
                engine.run(rounds)
            finally:
                times.update(engine.times)
        status = "completed"
    except FedmstError as exc:
        status = f"failed: {' '.join(str(exc).splitlines())}"
        raise
    except Exception as exc:  # a bug, not bad input: record it, keep the traceback, say it in one line
        status = f"failed: {type(exc).__name__}: {' '.join(str(exc).split())}"
        (out / "error.log").write_text(traceback.format_exc())
        raise FedmstError(f"{type(exc).__name__}: {' '.join(str(exc).split())} "
                          f"(an internal error; the traceback is in {out / 'error.log'})") from exc
    finally:
        try:
            backend.down()
        finally:  # the run's record and scratch go even when its containers would not
            state.remove()
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
        if emu is not None and emu.delay_stats:
            write_json(out / "delay_lines.json", emu.delay_stats)
        clock = engine.clock if engine is not None else None
        if rounds or (clock is not None and clock.rounds_done):  # rounds already finished keep their summary
            wall_s = time.monotonic() - started
            times["teardown"] = wall_s - sum(s for name, s in times.items() if name != "prepare")
            emulated = {**emu.emulated(), **ceiling} if emu else {}
            common = dict(emulated=emulated, workers=backend.describe(), wall_s=wall_s, status=status,
                          times={k: round(v, 3) for k, v in times.items()},
                          background=engine.background if engine else [])
            summary = (summarise_clock(resolved, clock, **common) if clock is not None
                       else summarise(resolved, prediction, rounds, **common))
            summary.write(out / "summary.json")
    report(f"{tag} time: {breakdown_line(times)}")
    return summary


def _link_ceiling(resolved: ResolvedRun, capabilities: Capabilities, report: Report) -> dict[str, object]:
    """What one emulated link of this host carries, and the links configured above it (warned
    about here): the keys they add to summary.json's ``emulated``."""
    try:
        ceiling = link_ceiling_mbps(resolved.delay_mode, resolved.config.mtu, capabilities, report=report)
    except FedmstError as exc:  # advice, not the run: say so and go on
        report(f"warning: {exc}; link capacities are not checked against what this host carries")
        return {"link_ceiling_mbps": None, "bandwidth_cpu_bound": None}
    above = cpu_bound_links(resolved.graph, ceiling)
    if above:
        shown = ", ".join(above[:5]) + (", ..." if len(above) > 5 else "")
        report(f"warning: {len(above)} link(s) ({shown}) have a capacity above the {ceiling:.0f} Mbit/s one "
               "emulated link of this host carries: their bandwidth is bound by the CPU, not emulated, and "
               "their predictions cannot hold")
    return {"link_ceiling_mbps": ceiling, "bandwidth_cpu_bound": above}


def _claim_run_dir(out: Path) -> int:
    """Make the run folder and lock it for this run (two runs writing one folder would mix their
    results); return the open folder whose lock the run holds until it closes it."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
        folder = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise FedmstError(f"output folder {out}: cannot write there ({exc.strerror})") from None
    try:
        fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(folder)
        raise FedmstError(f"output folder {out} is in use by another run: give this one its own --out") from None
    return folder


def connect(transfers: Mapping[str, Transfer], prefix: str) -> dict[str, str]:
    """The connection each keyed transfer travels on: one per path, shared by its transfers of
    different steps (a ring's neighbours keep one connection through every step), a new one for
    each transfer of the same path and step (SPFF's parallel transfers to one node stay apart).

    >>> t = lambda step: Transfer("upload", ("a", "b"), frozenset({0}), step=step)
    >>> connect({"x": t(0), "y": t(1), "z": t(1)}, "c")
    {'x': 'c000', 'y': 'c000', 'z': 'c001'}
    """
    lanes: dict[tuple[str, ...], list[tuple[str, set[tuple[str, int]]]]] = {}
    out, count = {}, 0
    for key, t in transfers.items():
        when = (t.phase, t.step)
        lane = next((lane for lane in lanes.setdefault(t.path, []) if when not in lane[1]), None)
        if lane is None:
            lane = (f"{prefix}{count:03d}", set())
            lanes[t.path].append(lane)
            count += 1
        lane[1].add(when)
        out[key] = lane[0]
    return out


class LinkTrace:
    """Applies a link trace (``--link-trace``) on time, from a thread of its own, while the rounds
    run: each change is made live (:meth:`~fedmst.net.emulation.Emulation.change_link`), reported,
    and recorded in ``link_changes.json`` with when it was asked for and when it took effect."""

    def __init__(self, emu: Emulation, changes: tuple[LinkChange, ...], started_at: float, record: Path,
                 report: Report) -> None:
        self.emu, self.changes, self.started_at, self.record, self.report = emu, changes, started_at, record, report
        self.applied: list[dict[str, Any]] = []
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._apply, name="link-trace", daemon=True)

    def __enter__(self) -> LinkTrace:
        if self.changes:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def check(self) -> None:
        if self.error is not None:
            raise FedmstError(f"link trace: {self.error}")

    def _apply(self) -> None:
        try:
            for change in self.changes:
                if self._stop.wait(max(0.0, self.started_at + change.at_s - time.monotonic())):
                    return
                self.emu.change_link(*change.link, capacity_mbps=change.capacity_mbps, loss=change.loss,
                                     delay_s=None if change.delay_ms is None else change.delay_ms / 1e3)
                self.applied.append({**change.as_json(), "applied_s": round(time.monotonic() - self.started_at, 4)})
                write_json(self.record, self.applied)
                what = ", ".join(f"{k} {v:g}" for k, v in change.as_json().items() if k not in ("at_s", "a", "b"))
                self.report(f"link {change.link[0]}-{change.link[1]}: {what} at {self.applied[-1]['applied_s']:.2f} s")
        except Exception as exc:  # noqa: BLE001 - handed to the engine, which ends the run with it
            self.error = exc


class Engine:
    """The round and phase loop of one run on a built emulation."""

    def __init__(self, resolved: ResolvedRun, emu: Emulation, backend: WorkerBackend, out: Path, scratch: Path,
                 report: Report, prediction: Prediction) -> None:
        self.run_, self.config, self.graph = resolved, resolved.config, resolved.graph
        self.emu, self.backend, self.out, self.scratch = emu, backend, out, scratch
        self.report, self.prediction = report, prediction
        self.tag = f"[{self.config.scheduler}]"
        self.timeout_s = self.config.phase_timeout_s
        plans = resolved.workload.plans
        self.live = Live(tasks={p.task.name: p.task for p in plans}, plans=plans,
                         models={p.task.name: tuple(range(p.task.k)) for p in plans})
        self.fault_log: list[dict[str, Any]] = []
        self.samples: dict[str, dict[int, int]] = {}
        self.sampler = CounterSampler(emu.counters)
        self.specs: tuple[TaskSpec, ...] = ()
        self.watch: StallWatch | None = None
        self.progress: Path | None = None
        self.stall: Stall | None = None
        self.index = {name: i for i, name in enumerate(resolved.listed or [p.task.name for p in plans])}
        self.clock: ClockRun | None = None
        """The run on independent clocks (``--clock independent``), once it started."""
        self.background: list[dict[str, Any]] = []
        """The background flows as asked, with what each sender sent (summary.json's ``background``)."""
        self.started_at = 0.0
        self.load: dict[LinkDir, float] = {}
        """``--link-state measured``: background bytes per round each link direction carried last."""
        self.trace: LinkTrace | None = None
        self._attempts = 0
        self._looked = 0.0
        self.times: dict[str, float] = {}
        """Seconds spent starting the agents (``agents``) and in the rounds (``rounds``)."""

    # set-up ------------------------------------------------------------------------------------
    def task_specs(self) -> tuple[TaskSpec, ...]:
        """Each task as the agents need it, with its transfers' routes installed in the emulation.

        Task i (in the workload's order) seeds its data shards and initial weights with ``seed + i``.
        A transfer names the original indices of the local models it serves, so weights keep their
        names across re-plans.
        """
        live = self.live
        tag = "" if live.epoch == 0 else f"e{live.epoch}-"
        keys = {p.task.name: {f"{p.task.name}-{tag}{i:03d}-{t.phase}": t for i, t in enumerate(p.transfers)}
                for p in live.plans}
        connections = {p.task.name: connect(keys[p.task.name], f"{p.task.name}-{tag}c") for p in live.plans}
        flows = self.emu.install_flows({c: keys[name][k].path for name, per_task in connections.items()
                                        for k, c in per_task.items()})
        specs = []
        for p in live.plans:
            task, original = live.tasks[p.task.name], live.models[p.task.name]
            joins = connections[task.name]
            specs.append(TaskSpec(
                name=task.name, global_node=task.global_node, local_nodes=task.local_nodes,
                seed=self.config.seed + self.index[task.name], active=original, compute_s=float(task.compute_s or 0.0),
                model=task.model, dataset=task.dataset,
                transfers=tuple(
                    TransferSpec(key=k, phase=t.phase, path=t.path, models=tuple(sorted(original[j] for j in t.models)),
                                 src_addr=flows[joins[k]].src_addr, dst_addr=flows[joins[k]].dst_addr,
                                 segment=t.segment, step=t.step, carries=t.carries, connection=joins[k])
                    for k, t in keys[task.name].items()),
            ))
        self.specs = tuple(specs)
        return self.specs

    def run(self, results: list[RoundResult]) -> None:
        """Start the agents and run every round, appending each to ``results`` once written."""
        config = self.config
        (self.scratch / "store").mkdir()
        specs = self.task_specs()
        spec = AgentSpec(
            control_socket=str(self.scratch / "control.sock"), store_dir=str(self.scratch / "store"),
            model=config.model, dataset=config.dataset, epochs=config.epochs, batch_size=config.batch_size,
            lr=config.lr, optimizer=config.optimizer, alpha=config.alpha, chunk_bytes=config.chunk_bytes,
            timeout_s=self.timeout_s,
            slow=dict(self.run_.slow), tasks=specs,
        )
        workload = self.run_.workload
        write_json(self.out / "plan.json", {
            "scheduler": config.scheduler, "order": config.order,
            "admitted": [p.task.name for p in workload.plans], "wavelengths": workload.wavelengths,
            "reserved_wavelength_links": workload.reserved_wavelength_links,
            "reserved_capacity_mbps": workload.reserved_capacity_mbps,
            "blocked": [{"task": name, "reason": reason} for name, reason in workload.blocked],
            "tasks": [{**plan_summary(p), "flows": [asdict(t) for t in s.transfers]}
                      for p, s in zip(self.live.plans, specs)],
        })
        spec_file = self.scratch / "agents.json"
        spec_file.write_text(spec.to_json())
        self.server = ControlServer(Path(spec.control_socket), token=secrets.token_hex(16))
        begun = time.monotonic()
        try:
            nodes = self.run_.worker_nodes
            self.agents = Agents(self.backend, self.emu, nodes, spec_file, self.server.token, self.out / "agents")
            self.server.accept(nodes, timeout_s=self.timeout_s, check=self.check)
            setup = self.server.run(Setup(source_digest=fedmst.source_digest()), timeout_s=self.timeout_s,
                                    check=self.check)
            self.samples = {name: {i: n for r in setup.values() for i, n in r.samples.get(name, {}).items()}
                            for name in self.live.tasks}
            where = "containers" if self.backend.name == "docker" else "processes"
            self.report(f"{self.tag} {len(nodes)} agents ({where}) ready in "
                        f"{max(r.seconds for r in setup.values()):.1f} s")
            write_json(self.out / "workers.json", {node: asdict(r.runs_in) for node, r in sorted(setup.items())})
            self.times["agents"] = time.monotonic() - begun
            self.times["rounds"] = 0.0
            self.started_at = time.monotonic() + (0.3 if self.run_.background else 0.0)
            self.sampler.t0 = self.started_at
            if self.run_.background:
                self.emu.start_background(self.run_.background, self.started_at, self.out / "background")
                self.report(f"{self.tag} background: {', '.join(f.label for f in self.run_.background)}")
                time.sleep(max(0.0, self.started_at - time.monotonic()))
            trace = LinkTrace(self.emu, self.run_.link_changes, self.started_at, self.out / "link_changes.json",
                              lambda line: self.report(f"{self.tag} {line}"))
            self.trace = trace
            try:
                with trace:
                    if config.clock == "independent":
                        self.run_clock()
                    else:
                        self.run_rounds(results)
            finally:
                if self.run_.background:
                    sent = self.emu.stop_background()
                    self.background = [{**asked, "sent_bytes": done["sent_bytes"], "sent_seconds": done["seconds"],
                                        "sent_mbps": done["sent_bytes"] * 8 / done["seconds"] / 1e6
                                        if done["sent_bytes"] and done["seconds"] else None}
                                       for asked, done in zip(as_json(list(self.run_.background)), sent.values())]
                    write_json(self.out / "background.json", self.background)
        finally:
            self.server.close()

    def run_rounds(self, results: list[RoundResult]) -> None:
        """Every round in lockstep, appending each to ``results`` once written."""
        config = self.config
        for r in range(1, config.rounds + 1):
            begun = time.monotonic()
            results.append(self.round(r))
            self.times["rounds"] += time.monotonic() - begun
            write_tables(self.out, self.prediction, results)
            write_csv(self.out / "samples.csv", SAMPLE_FIELDS, self.sampler.rows)
            res = results[-1]
            background = sum(res.background_bytes.values())
            compute = max(float(p.task.compute_s or 0.0) for p in self.live.plans)
            self.report(
                f"{self.tag} round {r}/{config.rounds}: broadcast {res.seconds['broadcast']:.2f} s, "
                f"train {res.seconds['train']:.2f} s, upload {res.seconds['upload']:.2f} s, "
                f"{sum(sum(b.values()) for b in res.link_bytes.values()) / 1e6:.1f} MB of weights on links"
                + (f" ({background / 1e6:.1f} MB background)" if background else "")
                + f", accuracy {res.accuracy:.3f}"
                + "".join(f"; the {p} was bound by the CPU ({res.cpu_busy[p]:.0%} busy), not by the links"
                          for p in res.cpu_bound)
                + self._overrun(compute, [res.seconds["train"]])
            )

    @staticmethod
    def _overrun(compute_s: float | None, trained: list[float]) -> str:
        """A warning when training took well over the compute time asked for: the host's CPUs, not
        ``--compute-s``, set the time then."""
        if not compute_s or not trained or sum(trained) / len(trained) <= 1.1 * compute_s:
            return ""
        return (f"; training took {sum(trained) / len(trained):.2f} s, over its {compute_s:g} s of compute: this "
                "host's CPUs set it (fewer --epochs, or more cores, keep it at --compute-s)")

    def run_clock(self) -> None:
        """Every task's rounds on its own clock, in one command to the agents (see the module's
        docstring); the spans they report become the tasks' timeline beside the predicted one."""
        config, live = self.config, self.live
        rounds = {p.task.name: int(p.task.rounds or config.rounds) for p in live.plans}
        offsets = {p.task.name: p.task.start_s + self.run_.offsets.get(p.task.name, 0.0) for p in live.plans}
        predicted = simulate(list(self.run_.profiles), self.run_.offsets, rounds, capacities(self.graph))
        self.clock = clock = ClockRun(plans=live.plans, rounds=rounds, offsets=offsets, predicted=predicted)
        shifted = {n: o for n, o in self.run_.offsets.items() if o}
        if shifted:
            self.report(f"{self.tag} interleaving ({config.interleave}): "
                        + ", ".join(f"{n} starts {o:.2f} s later" for n, o in shifted.items()))
        before, background = self.emu.counters_and_background()
        drops, retransmits, cpu = self.emu.queue_drops(), self.emu.tcp_retransmits(), psutil.cpu_times()
        begun = time.monotonic()
        limit = self.timeout_s * 3 * max(rounds.values()) + max(offsets.values())
        with self.sampler.sampling(0, "rounds"):
            replies = self.server.run(
                RunRounds(start_at=self.started_at, rounds=rounds, offsets=offsets,
                          weights=aggregation_weights(live, self.samples, {}, 1)),
                timeout_s=limit, check=self.check)
        self.times["rounds"] = time.monotonic() - begun
        clock.cpu_busy = cpu_busy(cpu, psutil.cpu_times())
        after, counted = self.emu.counters_and_background()
        clock.background_bytes = {hop: counted[hop] - background[hop] for hop in after}
        clock.link_bytes = {hop: after[hop] - before[hop] - clock.background_bytes[hop] for hop in after}
        clock.queue_drops = {hop: n - drops[hop] for hop, n in self.emu.queue_drops().items()}
        clock.retransmits = self.emu.tcp_retransmits() - retransmits
        clock.spans = [(node, s.task, s.round, s.phase, s.start_s, s.end_s)
                       for node, reply in replies.items() for s in reply.spans]
        clock.accuracy = {name: list(acc) for reply in replies.values() for name, acc in reply.accuracy.items()}
        write_clock_tables(self.out, clock, self.graph, config.mtu)
        write_csv(self.out / "samples.csv", SAMPLE_FIELDS, self.sampler.rows)
        windows = clock.windows()
        trained: dict[str, list[float]] = {}
        rounds_s: dict[str, list[float]] = {}
        for s in windows:
            if s.phase == "train":
                trained.setdefault(s.task, []).append(s.end_s - s.start_s)
        for (name, _), seconds in sorted(iteration_times(windows).items()):
            rounds_s.setdefault(name, []).append(seconds)
        for name, seconds in rounds_s.items():
            self.report(f"{self.tag} {name}: {len(seconds)} rounds, mean round {sum(seconds) / len(seconds):.2f} s, "
                        f"accuracy {clock.accuracy.get(name, [float('nan')])[-1]:.3f}"
                        + self._overrun(live.tasks[name].compute_s, trained.get(name, [])))

    def check(self) -> None:
        """Raise if an agent or a delay line died, or a link change failed, and abort a transfer
        phase that stalled (called while waiting on the agents)."""
        self.agents.check()
        self.emu.check()
        if self.trace is not None:
            self.trace.check()
        self.look_for_stalls()

    def look_for_stalls(self) -> None:
        """Feed the stall watch a reading of the links and the arrivals; once it finds a transfer
        stalled, leave the abort file that makes every agent give the phase up."""
        watch, progress = self.watch, self.progress
        if watch is None or progress is None or self.stall is not None:
            return
        now = time.monotonic()
        if now - self._looked < 0.25:  # check() runs at every reply too: read the links 4 times a second at most
            return
        self._looked = now
        watch.observe(now, self.emu.counters())
        watch.arrive((p.name for p in progress.iterdir() if p.name != ABORT_FILE), now)
        self.stall = watch.stalled(now)
        if self.stall is not None:
            (progress / ABORT_FILE).write_text(str(self.stall))

    # rounds ------------------------------------------------------------------------------------
    def round(self, r: int) -> RoundResult:
        res = RoundResult(round=r)
        if r > 1 and self.config.link_state == "measured":
            self.follow_load(res)
        changes = []
        for f in self.run_.link_failures:
            u, v = f.link
            if f.round == r and f.after_s is None:
                lost = self.emu.set_link(u, v, up=False)
                self.live.down.add(f.link)
                changes.append({"event": f"link {u}-{v} down", "in_flight_lost_bytes": lost})
            if f.until == r:
                self.emu.set_link(u, v, up=True)
                self.live.down.discard(f.link)
                changes.append({"event": f"link {u}-{v} up again", "in_flight_lost_bytes": 0})
        if changes:
            self.replan(res, "broadcast", {"event": ", ".join(c["event"] for c in changes),
                                           "in_flight_lost_bytes": sum(c["in_flight_lost_bytes"] for c in changes)})
        drops, retransmits = self.emu.queue_drops(), self.emu.tcp_retransmits()
        background, begun = self.emu.counters_and_background()[1], time.monotonic()
        for phase in STEPS:
            self.phase(res, phase)
        res.window = (begun - self.started_at, time.monotonic() - self.started_at)
        counted = self.emu.counters_and_background()[1]
        res.background_bytes = {hop: n - background[hop] for hop, n in counted.items()}
        if self.config.link_state == "measured":
            self.load = {hop: float(n) for hop, n in res.background_bytes.items() if n}
        res.queue_drops = {hop: n - drops[hop] for hop, n in self.emu.queue_drops().items()}
        res.retransmits = self.emu.tcp_retransmits() - retransmits
        evaluated = self.server.run(Evaluate(round=r), timeout_s=self.timeout_s, check=self.check)
        res.accuracies = {name: acc for e in evaluated.values() for name, acc in e.accuracy.items()}
        if self.config.save_models:
            saved = self.out / "models" / f"round{r}"
            saved.mkdir(parents=True, exist_ok=True)
            self.server.run(Save(dir=str(saved)), timeout_s=self.timeout_s, check=self.check)
            for name, w in res.weights.items():
                write_json(saved / f"{name}-weights.json", {str(i): x for i, x in w.items()})
        return res

    def command(self, res: RoundResult, phase: str) -> Broadcast | Train | Upload:
        """The phase's command; a transfer phase gets a fresh progress folder and stall watch."""
        r = res.round
        self.watch, self.progress, self.stall = None, None, None
        if phase == "train":
            return Train(round=r, deadline_s=self.config.deadline_s)
        self._attempts += 1
        self.progress = self.scratch / "progress" / f"{self._attempts:04d}-round{r}-{phase}"
        self.progress.mkdir(parents=True)
        self.watch = StallWatch(self.specs, phase, stall_s=self.config.stall_s, start=time.monotonic())
        self.watch.observe(self.watch.start, self.emu.counters())
        if phase == "broadcast":
            return Broadcast(round=r, progress_dir=str(self.progress))
        res.weights = aggregation_weights(self.live, self.samples, res.late, r)
        return Upload(round=r, progress_dir=str(self.progress), weights=res.weights)

    def phase(self, res: RoundResult, phase: str) -> None:
        """Run one phase, with the faults that strike under it; after a fault, re-plan and, if
        transfers failed, run it once more on the new plan (the given-up attempt's bytes apart)."""
        r = res.round
        strikes = strikes_for(r, phase, self.run_.link_failures, self.run_.kills,
                              lambda u, v: self.emu.set_link(u, v, up=False), self.agents)
        before, background = self.emu.counters_and_background()
        cpu = psutil.cpu_times()
        start = time.perf_counter()
        with self.sampler.sampling(r, phase):
            res.plans[phase] = self.live.plans
            cmd = self.command(res, phase)
            for strike in strikes:
                strike.start()
            replies = self.server.run(cmd, timeout_s=self.timeout_s, check=self.check, survive=True,
                                      tolerate_errors=True)
            for strike in strikes:
                strike.finish(phase)
                if strike.link is not None:
                    self.live.down.add(strike.link)
            notice_kills([st.node for st in strikes if st.node is not None], self.agents, self.server,
                         timeout_s=self.timeout_s)
            outcome = assess(phase, replies, strikes, self.live, self.server.lost, self.agents.died, self.stall)
            if outcome.event is not None:
                after, counted = self.emu.counters_and_background()
                if outcome.redo:
                    res.aborted_bytes[phase] = {hop: after[hop] - before[hop] for hop in after}
                    outcome.event["aborted"]["link_bytes"] = sum(res.aborted_bytes[phase].values())
                    before, background = after, counted
                setup = self.replan(res, phase if outcome.redo else NEXT_PHASE[phase], outcome.event)
                before = {hop: n + setup[hop] for hop, n in before.items()}  # set-up bytes are no phase's
                if outcome.redo:
                    res.plans[phase] = self.live.plans
                    replies = self.server.run(self.command(res, phase), timeout_s=self.timeout_s, check=self.check)
        self.watch = self.progress = None
        res.seconds[phase] = time.perf_counter() - start
        res.cpu_busy[phase] = cpu_busy(cpu, psutil.cpu_times())
        if phase == "train":
            res.late = late_models(replies)
            self.report_late(r, res.late)
        res.task_seconds[phase] = {
            p.task.name: max(rep.task_seconds.get(p.task.name, 0.0) for rep in replies.values())
            for p in self.live.plans
        }
        after, counted = self.emu.counters_and_background()
        res.link_bytes[phase] = {hop: after[hop] - before[hop] - (counted[hop] - background[hop]) for hop in after}

    def report_late(self, r: int, late: dict[str, list[int]]) -> None:
        for name, models_ in sorted(late.items()):
            where = ", ".join(f"{i} on node {self.live.tasks[name].local_nodes[i]}" for i in models_)
            self.report(f"{self.tag} round {r}: {name}'s local model(s) {where} missed the "
                        f"{self.config.deadline_s:g} s deadline; their updates are dropped")

    def follow_load(self, res: RoundResult) -> None:
        """``--link-state measured``: with the background bytes the last round measured on each
        link direction as its load, re-plan before this round if the schedulers would now plan any
        task otherwise (MST then avoids a loaded link among trees of the same size)."""
        workload, _ = self.schedule()
        if [p.transfers for p in workload.plans] != [p.transfers for p in self.live.plans]:
            loaded = sorted(self.load, key=lambda hop: -self.load[hop])[:3]
            self.replan(res, "broadcast", {
                "event": "re-planned on the measured link load (busiest: "
                         + ", ".join(f"{u}->{v} {self.load[(u, v)] / 1e6:.1f} MB" for u, v in loaded) + ")",
                "in_flight_lost_bytes": 0})

    def schedule(self) -> tuple[WorkloadPlan, list[RemainingTask]]:
        """The live tasks scheduled again on what survives, with the measured load (if any)."""
        live, config = self.live, self.config
        return replan_workload(
            self.graph, [live.tasks[p.task.name] for p in live.plans], config.scheduler, down_links=live.down,
            dead_nodes=live.dead, workers=self.server.agents, wavelengths=config.wavelengths, mtu=config.mtu,
            load=self.load)

    def replan(self, res: RoundResult, before_phase: str, event: dict[str, Any]) -> dict[LinkDir, int]:
        """Schedule the tasks again around what is broken, install the new routes, have the
        agents connect (and warm) the new transfers, and record the event with what each step
        took. Returns the bytes each link direction carried meanwhile: set-up, like the first
        connections', which the caller keeps out of the phase it measures."""
        live = self.live
        t0 = time.perf_counter()
        workload, remaining = self.schedule()
        t1 = time.perf_counter()
        live.plans, live.epoch = workload.plans, live.epoch + 1
        live.models = {rt.task.name: rt.models for rt in remaining}
        specs = self.task_specs()
        t2 = time.perf_counter()
        store = self.scratch / f"store{live.epoch}"
        store.mkdir()
        counters = self.emu.counters()
        self.server.run(Replan(tasks=specs, store_dir=str(store)), timeout_s=self.timeout_s, check=self.check)
        setup = {hop: n - counters[hop] for hop, n in self.emu.counters().items()}
        t3 = time.perf_counter()
        event.update(
            round=res.round, before_phase=before_phase,
            scheduling_s=t1 - t0, routes_s=t2 - t1, reconnect_s=t3 - t2, replan_s=t3 - t0,
            setup_link_bytes=sum(setup.values()),
            dropped={rt.task.name: {str(i): why for i, why in rt.dropped.items()} for rt in remaining if rt.dropped},
            tasks=[{**plan_summary(p), "local_models": list(live.models[p.task.name]),
                    "flows": [asdict(t) for t in s.transfers]} for p, s in zip(live.plans, specs)],
        )
        res.faults.append(event)
        self.fault_log.append(event)
        write_json(self.out / "faults.json", self.fault_log)
        dropped = "; ".join(f"{name} drops local model {i} ({why})" for name, d in event["dropped"].items()
                            for i, why in d.items())
        self.report(f"{self.tag} round {res.round}: {event['event']}; re-planned in {event['replan_s']:.2f} s"
                    + (f"; {dropped}" if dropped else ""))
        return setup

