"""What a run does on its built emulation whichever clock it runs on: the agents started and
controlled, each task's transfers routed and handed to them, a link trace applied on time,
background flows started and stopped, and the checks made while the coordinator waits on the
agents (a dead agent or delay line, a failed link change, a stalled transfer).

A runner per clock drives the rounds through a :class:`Session`:
:class:`fedmst.run.lockstep.LockstepRun` phase by phase with a barrier between phases,
:class:`fedmst.run.independent.IndependentRun` every task on its own clock.
"""

from __future__ import annotations

import secrets
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import fedmst
from fedmst.core.linktrace import LinkChange
from fedmst.core.optical.wavelengths import Lightpath
from fedmst.core.optical.circuits import OPTICAL_FIELDS, CircuitPlan, fibres, measured_rates, optical_rows
from fedmst.core.plan import TRANSFER_PHASES, Transfer, plan_summary
from fedmst.core.workload import link_state
from fedmst.core.route import LinkDir, window_bytes
from fedmst.core.timescale import TimeScale
from fedmst.core.traffic import as_json
from fedmst.fl.strategies import strategy_knobs
from fedmst.errors import FedmstError
from fedmst.net.capture import Captures, parse_links
from fedmst.net.circuits import Circuit
from fedmst.net.emulation import Emulation
from fedmst.net.routes import Flow
from fedmst.protocol import ABORT_FILE, AgentSpec, read_arrivals, Setup, TaskSpec, TransferSpec, root_id
from fedmst.run.prepare import ResolvedRun
from fedmst.run.livestate import LivePublisher, base_status
from fedmst.run.measure import CounterSampler
from fedmst.run.recovery import Live
from fedmst.run.report import Report
from fedmst.run.slotmeter import SlotMeter, slot_table, write_slot_files
from fedmst.run.results import write_atomic, write_csv, write_json
from fedmst.run.stall import Stall, StallWatch
from fedmst.wording import counted
from fedmst.workers.backends import Agents, WorkerBackend
from fedmst.workers.control import ControlServer
from fedmst.workers.hosttrainer import HostTrainer, Training


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


def overrun(compute_s: float, trained: list[float]) -> str:
    """A warning when training took well over the compute time asked for: the host's CPUs, not
    ``--compute-s``, set the time then."""
    if not compute_s or not trained or sum(trained) / len(trained) <= 1.1 * compute_s:
        return ""
    return (f"; training took {sum(trained) / len(trained):.2f} s, over its {compute_s:g} s of compute: this "
            "host's CPUs set it (fewer --epochs, or more cores, keep it at --compute-s)")


class LinkTrace:
    """Applies a link trace (``--link-trace``) on time, from a thread of its own, while the rounds
    run: each change is made live (:meth:`~fedmst.net.emulation.Emulation.change_link`), reported,
    and recorded in ``link_changes.json`` with when it was asked for and when it took effect, both
    in the network's time (a slowed run applies it ``scale`` times later and slower)."""

    def __init__(self, emu: Emulation, changes: tuple[LinkChange, ...], started_at: float, record: Path,
                 report: Report, scale: TimeScale) -> None:
        self.emu, self.changes, self.started_at, self.record, self.report = emu, changes, started_at, record, report
        self.scale = scale
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
                real = self.scale.change(change)
                if self._stop.wait(max(0.0, self.started_at + real.at_s - time.monotonic())):
                    return
                self.emu.change_link(*real.link, capacity_mbps=real.capacity_mbps, loss=real.loss,
                                     delay_s=None if real.delay_ms is None else real.delay_ms / 1e3)
                applied_s = self.scale.network_s(time.monotonic() - self.started_at)
                self.applied.append({**change.as_json(), "applied_s": round(applied_s, 4)})
                write_json(self.record, self.applied)
                what = ", ".join(f"{k} {v:g}" for k, v in change.as_json().items() if k not in ("at_s", "a", "b"))
                self.report(f"link {change.link[0]}-{change.link[1]}: {what} at {self.applied[-1]['applied_s']:.2f} s")
        except Exception as exc:  # noqa: BLE001 - handed to the session, which ends the run with it
            self.error = exc


class PhaseWatch:
    """The stall watch of the transfer phase running now, if any: fed a reading of the links and
    the arrivals while the coordinator waits, it leaves the abort file that makes every agent
    give the phase up once it finds a transfer stalled. ``clock`` is the watch's (the network's
    seconds, so that a stall timeout means the same at any time scale)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.watch: StallWatch | None = None
        self.progress: Path | None = None
        """The phase's progress folder, where the agents mark arrivals."""
        self.stall: Stall | None = None
        self._looked = 0.0

    def begin(self, watch: StallWatch | None = None, progress: Path | None = None) -> None:
        self.watch, self.progress, self.stall = watch, progress, None

    def look(self, counters: Callable[[], dict[LinkDir, int]], spread: Callable[[Path], None]) -> None:
        """Read the links and the arrivals; on a stall, leave the abort file (``spread`` hands it to
        agents that do not see this host's folders)."""
        watch, progress = self.watch, self.progress
        if watch is None or progress is None or self.stall is not None:
            return
        looked = time.monotonic()
        if looked - self._looked < 0.25:  # check() runs at every reply too: 4 readings a second at most
            return
        self._looked = looked
        now = self.clock()
        watch.observe(now, counters())
        watch.arrive(read_arrivals(progress), now)
        self.stall = watch.stalled(now)
        if self.stall is not None:
            # whole or not at all: an agent that read it half written gave "aborted", not the reason
            write_atomic(progress / ABORT_FILE, str(self.stall))
            spread(progress / ABORT_FILE)


class Session:
    """One run's agents on a built emulation, and what every clock needs around its rounds."""

    def __init__(self, resolved: ResolvedRun, emu: Emulation, backend: WorkerBackend, out: Path, scratch: Path,
                 report: Report) -> None:
        self.resolved, self.config, self.graph = resolved, resolved.config, resolved.graph
        self.emu, self.backend, self.out, self.scratch, self.report = emu, backend, out, scratch, report
        self.tag = f"[{self.config.scheduler}]"
        self.scale = resolved.scale
        self.timeout_s = self.scale.real_s(self.config.phase_timeout_s)
        """The phase timeout on the host's clock (the agents' too)."""
        plans = resolved.workload.plans
        self.live = Live(tasks={p.task.name: p.task for p in plans}, plans=plans,
                         models={p.task.name: tuple(range(p.task.k)) for p in plans},
                         circuits=self.circuits_of(resolved.workload.lightpaths))
        self.held: list[CircuitPlan] = [(1, self.live.circuits)] if self.live.circuits else []
        self.slot_sources: dict[str, Lightpath] = {}
        """The time-sliced lightpath each transfer address sends on (timeslots.csv reads captures by it)."""
        self.meter: SlotMeter | None = None
        """The time-sliced lightpaths' captures while the rounds run (a re-plan adds its own)."""
        self.slots_outside: float | None = None
        """The share of the time-sliced lightpaths' bytes sent outside their slots (summary.json)."""
        """Every plan's circuits and the round from which they hold (optical.csv, summary.json)."""
        self.index = {name: i for i, name in enumerate(resolved.listed or [p.task.name for p in plans])}
        """Task -> its place in the workload, which seeds its data and initial weights."""
        self.samples: dict[str, dict[int, int]] = {}
        """Task -> local model -> its training samples (the aggregation weights)."""
        self.sampler = CounterSampler(emu.meters.counters, scale=self.scale)
        self.publisher = LivePublisher(
            out, base_status(out, resolved),
            capacity_bps={hop: d["capacity_mbps"] * 1e6 for u, v, d in self.graph.edges(data=True)
                          for hop in ((u, v), (v, u))},
            planned=self._planned)
        self.sampler.listener = self.publisher.observe
        self.specs: tuple[TaskSpec, ...] = ()
        self.phase_watch = PhaseWatch(self.clock)
        self.started_at = 0.0
        """When the first round began (monotonic clock)."""
        self.background: list[dict[str, Any]] = []
        """The background flows as asked, with what each sender sent (summary.json's ``background``)."""
        self.pcap: dict[str, Any] | None = None
        """``--pcap``: what was captured (summary.json's ``pcap``), once the captures are closed."""
        self.trace: LinkTrace | None = None
        self.training = Training.planned(resolved.device, resolved.host_trainer)
        """Where the local models trained, and what the host trainer measured (summary.json's ``training``)."""
        self.host_trainer: HostTrainer | None = None
        self.times: dict[str, float] = {}
        """Seconds spent starting the agents (``agents``) and in the rounds (``rounds``)."""
        self.server: ControlServer
        self.agents: Agents

    def _planned(self, round_: int, phase: str) -> dict[LinkDir, int]:
        """The bytes the live plans put on each link direction in ``phase`` (``rounds``: every
        round of tasks on their own clocks)."""
        mtu = self.config.mtu
        if phase in TRANSFER_PHASES:
            return link_state(self.live.plans, phase=phase, mtu=mtu)  # type: ignore[arg-type]
        if phase == "rounds":  # each task's plan as many times as it has rounds
            total: dict[LinkDir, int] = {}
            for plan in self.live.plans:
                for hop, b in link_state([plan], mtu=mtu).items():
                    total[hop] = total.get(hop, 0) + b * plan.task.rounds
            return total
        return {}

    def circuits_of(self, lightpaths: tuple[Lightpath, ...]) -> tuple[Lightpath, ...]:
        """The lightpaths that are circuits the data plane enforces: all of them on a fabric, none
        where no node is all-optical (there the wavelengths are accounting only)."""
        return lightpaths if fibres(self.graph) else ()

    def hold(self, round_: int, circuits: tuple[Lightpath, ...]) -> None:
        """Record that ``circuits`` are held from round ``round_`` on (a re-plan's), in optical.csv."""
        if circuits != (self.held[-1][1] if self.held else ()):
            self.held.append((round_, circuits))
            self.write_optical()
            if self.meter is not None:  # the captures follow the re-plan's time-sliced lightpaths
                self.meter.add(circuits)

    def write_optical(self) -> None:
        """optical.csv, on a topology with all-optical nodes: every plan's circuits so far, with the
        rates measured so far (the link counters' samples)."""
        if fibres(self.graph):
            held = list(dict.fromkeys(lp for _, circuits in self.held for lp in circuits))
            write_csv(self.out / "optical.csv", OPTICAL_FIELDS, optical_rows(
                self.held, self.resolved.workload.blocked, self.config.reconfig_ms,
                measured_rates(held, self.sampler.rows)))

    def install_circuits(self, flows: Mapping[str, Flow], tasks: Mapping[str, str]) -> None:
        """Give each live circuit its wavelength's rate (on the host's clock) for the ``flows`` of
        its task (``tasks``: each flow's) on its transfer path, either way."""
        circuits = []
        for lp in self.live.circuits:
            serves = lp.owner[1]
            addresses = tuple(a for key, f in flows.items()
                              if tasks[key] == lp.task and f.path in (serves, serves[::-1])
                              for a in (f.src_addr, f.dst_addr))
            circuits.append(Circuit(lp.path, tuple(self.scale.real_mbps(m) for m in lp.slot_mbps), addresses,
                                    lp.slots))
            if lp.slots:
                self.slot_sources.update(dict.fromkeys(addresses, lp))
        if circuits or self.held:  # an installation also removes the circuits held before
            frame = self.config.frame
            self.emu.install_circuits(circuits, replace(frame, slot_us=self.scale.real_s(frame.slot_us),
                                                        guard_us=self.scale.real_s(frame.guard_us)),
                                      owner=str(self.out))

    def release_circuits(self) -> None:
        """Give back this session's circuits while the emulation goes on (a cluster's job that ended)."""
        if self.held:
            self.emu.install_circuits((), owner=str(self.out))

    def clock(self) -> float:
        """Now on a monotonic clock in the network's seconds: what fault times and stalls are measured on."""
        return self.scale.network_s(time.monotonic())

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
        self.install_circuits(flows, {c: name for name, per_task in connections.items() for c in per_task.values()})
        specs = []
        for p in live.plans:
            task, original = live.tasks[p.task.name], live.models[p.task.name]
            joins = connections[task.name]
            specs.append(TaskSpec(
                name=task.name, global_node=task.global_node, local_nodes=task.local_nodes,
                seed=self.config.seed + self.index[task.name], active=original,
                compute_s=self.scale.real_s(task.compute_s),
                model=task.model, dataset=task.dataset,
                transfers=tuple(
                    TransferSpec(key=k, phase=t.phase, path=t.path, models=tuple(sorted(original[j] for j in t.models)),
                                 src_addr=flows[joins[k]].src_addr, dst_addr=flows[joins[k]].dst_addr,
                                 segment=t.segment, step=t.step, carries=t.carries, connection=joins[k],
                                 window_bytes=window_bytes(self.graph, t.path))
                    for k, t in keys[task.name].items()),
            ))
        self.specs = tuple(specs)
        return self.specs

    def run(self, rounds: Callable[[], None]) -> None:
        """Start the agents, then run ``rounds`` with the background flows and the link trace going
        (and the captures, which are listening before the run's clock starts)."""
        spec_file = self._write_specs()
        token, meeting = secrets.token_hex(16), self.emu.meeting
        self.server = ControlServer(self.scratch / "control.sock", token=token, **meeting.control_terms())  # type: ignore[arg-type]
        outcome = "failed"
        try:
            meeting.relay(self.server.path, self.server.port, token)
            with self._trainer():
                self._start_agents(spec_file)
                with self._captures(), self._slot_meter():
                    self._rounds(rounds)
            outcome = "finished"
        except KeyboardInterrupt:
            outcome = "interrupted"
            raise
        finally:
            self.publisher.finish(outcome)
            try:
                meeting.unrelay(self.server.path)
            finally:
                self.server.close()

    @contextmanager
    def _trainer(self) -> Iterator[None]:
        """``--device cuda`` or ``--host-trainer``: the host trainer, up before the agents ask it, and
        what it measured kept for summary.json (:mod:`fedmst.workers.gputrainer`)."""
        if not self.resolved.host_trainer:
            yield
            return
        (self.out / "agents").mkdir(exist_ok=True)
        self.host_trainer = trainer = HostTrainer(self.resolved.device, self.scratch,
                                                  self.out / "agents" / "trainer.log")
        self.report(f"{self.tag} local models train on {self.resolved.device}, one at a time, in one trainer "
                    f"(pid {trainer.proc.pid})")
        try:
            yield
        finally:
            trainer.close()
            self.training = trainer.record

    def _rounds(self, rounds: Callable[[], None]) -> None:
        """``rounds`` from ``started_at``, which the background flows and the link trace count from."""
        resolved = self.resolved
        self.started_at = time.monotonic() + (0.3 if resolved.background else 0.0)
        self.sampler.t0 = self.started_at
        if resolved.background:
            self.emu.start_background([self.scale.flow(f) for f in resolved.background], self.started_at,
                                      self.out / "background")
            self.report(f"{self.tag} background: {', '.join(f.label for f in resolved.background)}")
            time.sleep(max(0.0, self.started_at - time.monotonic()))
        self.trace = LinkTrace(self.emu, resolved.link_changes, self.started_at, self.out / "link_changes.json",
                               lambda line: self.report(f"{self.tag} {line}"), self.scale)
        try:
            with self.trace:
                rounds()
        finally:
            if resolved.background:
                self._stop_background()

    @contextmanager
    def _captures(self) -> Iterator[None]:
        """``--pcap``: the links' captures, running while the rounds do; ``pcap/index.json`` says
        what each file holds (written even when the rounds fail: what was captured stays)."""
        config = self.config
        if config.pcap is None:
            yield
            return
        hops = parse_links(config.pcap, self.resolved.graph)
        captures = Captures(self.emu, hops, self.out / "pcap", snaplen=config.pcap_snaplen,
                            log_dir=self.scratch / "pcap", run_id=self.emu.run_id, time_scale=self.scale.factor)
        try:
            with captures:
                self.report(f"{self.tag} capturing {counted(len(hops), 'link direction')} into {self.out / 'pcap'}/ "
                            f"(first {config.pcap_snaplen or 'all'} bytes of each frame)")
                yield
        finally:
            if captures.folder.is_dir():  # not made when the captures could not start, or the run's folder went
                write_json(captures.folder / "index.json", captures.index())
            dropped = sum(f.dropped_by_kernel for f in captures.files)
            self.pcap = {"folder": "pcap", "link_directions": len(captures.files), "snaplen": config.pcap_snaplen,
                         "kernel_drops": dropped}
            if dropped:
                self.report(f"{self.tag} warning: the kernel dropped {counted(dropped, 'frame')} before tcpdump "
                            "read them: the captures miss them (pcap/index.json)")

    @contextmanager
    def _slot_meter(self) -> Iterator[None]:
        """Time-sliced lightpaths: the directions they cross captured while the rounds run (a
        re-plan's too, from :meth:`hold`), then timeslots.csv, slot_occupancy.csv and
        timeslot_table.json (:mod:`fedmst.run.slotmeter`)."""
        if not any(lp.slots for lp in self.live.circuits):
            yield
            return
        emulated = self.emu.graph  # the host's seconds; a link without a delay line has none
        meter = SlotMeter(self.emu, self.config.frame, self.scratch, run_id=self.emu.run_id, scale=self.scale,
                          delay_s=lambda u, v: self.scale.network_s(float(emulated.edges[u, v]["delay_s"])))
        with meter:
            meter.add(self.live.circuits)
            self.meter = meter
            try:
                yield
            finally:
                self.meter = None
        epoch = self.emu.gates.epoch
        if epoch is None:
            return
        rows, over = meter.rows(epoch, self.slot_sources)
        frame0 = self.scale.network_s(epoch - (time.time() - time.monotonic() + self.started_at))
        self.slots_outside = write_slot_files(self.out, rows, slot_table(meter.hops, self.config.frame, frame0), over)

    def _write_specs(self) -> Path:
        """plan.json, and the agents' spec file (returned) with every task's routes installed."""
        config, workload = self.config, self.resolved.workload
        specs = self.task_specs()
        spec = AgentSpec(
            control_socket=str(self.scratch / "control.sock"),
            store_dir=self.emu.meeting.rendezvous(self.scratch, "store"),
            model=config.model, dataset=config.dataset, epochs=config.epochs, batch_size=config.batch_size,
            lr=config.lr, optimizer=config.optimizer, partition=config.partition, chunk_bytes=config.chunk_bytes,
            timeout_s=self.timeout_s, slow=dict(self.resolved.slow), strategy=config.strategy,
            strategy_args=strategy_knobs(config.strategy_args), tasks=specs, time_scale=self.scale.factor,
            client=config.client, run_config=config.run_config, coordinator_root=root_id(),
            iteration_bytes_map=self.emu.tcp.iteration_bytes_map,
            trainer_socket=str(self.scratch / "trainer.sock") if self.resolved.host_trainer else "",
        )
        write_json(self.out / "plan.json", {
            "scheduler": config.scheduler, "order": config.order,
            "admitted": [p.task.name for p in workload.plans], "wavelengths": workload.wavelengths,
            "reserved_wavelength_links": workload.reserved_wavelength_links,
            "reserved_capacity_mbps": workload.reserved_capacity_mbps,
            "blocked": [{"task": name, "reason": reason} for name, reason in workload.blocked],
            "tasks": [{**plan_summary(p), "flows": [asdict(t) for t in s.transfers]}
                      for p, s in zip(self.live.plans, specs)],
        })
        self.write_optical()
        spec_file = self.scratch / "agents.json"
        spec_file.write_text(spec.to_json())
        return spec_file

    def _start_agents(self, spec_file: Path) -> None:
        """Start an agent on every worker node and set them up (data, model, first connections)."""
        begun = time.monotonic()
        nodes = self.resolved.worker_nodes
        self.agents = Agents(self.backend, self.emu, nodes, spec_file, self.server.token, self.out / "agents")
        self.server.accept(nodes, timeout_s=self.timeout_s, check=self.check)
        setup = self.server.run(Setup(source_digest=fedmst.source_digest()), timeout_s=self.timeout_s,
                                check=self.check)
        self.samples = {name: {i: n for r in setup.values() for i, n in r.samples.get(name, {}).items()}
                        for name in self.live.tasks}
        self.report(f"{self.tag} {counted(len(nodes), 'agent')} ({self.backend.where}) ready in "
                    f"{max(r.seconds for r in setup.values()):.1f} s")
        write_json(self.out / "workers.json", {node: asdict(r.runs_in) for node, r in sorted(setup.items())})
        self.times["agents"] = time.monotonic() - begun
        self.times["rounds"] = 0.0

    def _stop_background(self) -> None:
        """Stop the background flows and record what each sent (background.json), in the network's time."""
        sent = self.emu.stop_background()
        self.background = []
        for asked, done in zip(as_json(list(self.resolved.background)), sent.values()):
            seconds = self.scale.network_s(done["seconds"])
            self.background.append({**asked, "sent_bytes": done["sent_bytes"], "sent_seconds": seconds,
                                    "sent_mbps": done["sent_bytes"] * 8 / seconds / 1e6
                                    if done["sent_bytes"] and seconds else None})
        write_json(self.out / "background.json", self.background)

    def check(self) -> None:
        """Raise if an agent, the host trainer or a delay line died, or a link change failed, and abort a transfer
        phase that stalled (called while waiting on the agents)."""
        self.agents.check()
        if self.host_trainer is not None:
            self.host_trainer.check()
        self.emu.check()
        if self.trace is not None:
            self.trace.check()
        self.phase_watch.look(self.emu.meters.counters, self.emu.meeting.spread)
