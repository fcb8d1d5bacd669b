"""The engine: one resolved run, for real, from its network's set-up to its teardown.

:func:`run` claims the run folder, builds the emulated network and the agents' hosts, runs the
rounds on the run's clock (:mod:`fedmst.run.lockstep`: every task phase by phase with a barrier
between phases; :mod:`fedmst.run.independent`: every task on its own clock), both through a
:class:`~fedmst.run.session.Session` (agents, routes, link trace, background flows, stall watch),
tears everything down, and writes the summary of the rounds that finished whatever ended the run.
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

import networkx as nx

from fedmst.core.timescale import without_delay_lines
from fedmst.core.topology import link_name, node_order
from fedmst.errors import FedmstError
from fedmst.net.calibrate import cpu_bound_links, link_ceiling_mbps
from fedmst.net.cleanup import RunState
from fedmst.net.emulation import Capabilities, Emulation
from fedmst.run import folders, livestate
from fedmst.run.prepare import ResolvedRun, unused_optical_options
from fedmst.run.independent import IndependentRun
from fedmst.run.lockstep import LockstepRun
from fedmst.run.measure import Prediction, RoundResult, host_bound_line, rounds_planned, summarise, summarise_clock
from fedmst.run.report import Report, RunStatus, Summary, breakdown_line, failed
from fedmst.run.results import write_json, write_transport
from fedmst.run.session import Session
from fedmst.run.spread import Spread
from fedmst.workers.backends import WorkerBackend, backend_for
from fedmst.wording import counted


def run(resolved: ResolvedRun, report: Report = print, command_started: float | None = None,
        overwrite: bool = False) -> Summary:
    """Run ``resolved`` for real into ``config.out`` and return its summary; the run folder is
    written as it goes, and what finished stays there whatever ends the run. ``command_started``
    (monotonic clock) is when the command began, for the time breakdown's ``prepare``;
    ``overwrite``: replace a folder of earlier results there (see :mod:`fedmst.run.folders`)."""
    started = time.monotonic()
    times = {} if command_started is None else {"prepare": started - command_started}
    claim = folders.claim(folders.OutputFolder(Path(resolved.config.out), overwrite), "run")
    try:
        return _run(resolved, report, started, times)
    finally:
        os.close(claim)


def _run(resolved: ResolvedRun, report: Report, started: float, times: dict[str, float]) -> Summary:
    summary = _Run(resolved, report, started, times).go()
    report(f"[{resolved.config.scheduler}] time: {breakdown_line(times)}")
    return summary


def _report_workload(resolved: ResolvedRun, report: Report) -> None:
    """Say what runs: the one task's plan, or how many tasks were scheduled and which were blocked."""
    config, workload = resolved.config, resolved.workload
    tag = f"[{config.scheduler}]"
    if len(workload.plans) == 1 and not workload.blocked:
        plan = workload.plans[0]
        task = plan.task
        report(
            f"{tag} task: G on node {task.global_node}, local models on {', '.join(task.local_nodes)}; "
            f"{len(plan.phase('broadcast'))} broadcast and {len(plan.phase('upload'))} upload transfers; "
            f"aggregation at {', '.join(sorted(plan.aggregation_nodes))}"
        )
        return
    report(f"{tag} {counted(len(workload.plans), 'task')} scheduled, {len(workload.blocked)} blocked "
           f"(W={workload.wavelengths}); {workload.reserved_wavelength_links} wavelength-links reserved"
           + (f"; admitted in {config.order} order: {', '.join(p.task.name for p in workload.plans)}"
              if config.order != "fifo" else ""))
    for name, reason in workload.blocked:
        report(f"{tag} blocked {name}: {reason}")


class _Run:
    """One run from its network's set-up to its teardown, and what it got to: the summary is
    written from that whatever ended the run."""

    def __init__(self, resolved: ResolvedRun, report: Report, started: float, times: dict[str, float]) -> None:
        config = resolved.config
        self.resolved, self.report, self.started, self.times = resolved, report, started, times
        self.tag, self.out = f"[{config.scheduler}]", Path(config.out)
        self.backend = backend_for(config.workers, config.image, resolved.limits)
        self.status = "interrupted"
        self.emu: Emulation | None = None
        self.ceiling: dict[str, object] = {}
        self.session: Session | None = None
        self.independent: IndependentRun | None = None
        self.rounds: list[RoundResult] = []

    def go(self) -> Summary:
        """Build the network, run the rounds, tear down; failures end in one line (a bug's
        traceback kept in error.log)."""
        out, state = self.out, RunState()
        try:  # from its first file on, the folder says how the run ended (summary.json), whatever ends it
            write_json(out / "config.json", asdict(self.resolved.config))
            livestate.begin(out, self.resolved)
            _report_workload(self.resolved, self.report)
            self.emulate(state, state.scratch)
            self.status = "completed"
        except FedmstError as exc:
            self.status = failed(exc)
            raise
        except Exception as exc:  # a bug, not bad input: record it, keep the traceback, say it in one line
            if not out.is_dir():
                raise FedmstError(_gone(out)) from None
            self.status = f"failed: {type(exc).__name__}: {' '.join(str(exc).split())}"
            (out / "error.log").write_text(traceback.format_exc())
            raise FedmstError(f"{type(exc).__name__}: {' '.join(str(exc).split())} "
                              f"(an internal error; the traceback is in {out / 'error.log'})") from exc
        finally:
            try:
                self.backend.down()
            finally:  # the run's record and scratch go even when its containers would not
                state.remove()
            gone = not out.is_dir()
            if self.session is None and not gone:  # else the session's publisher said it
                livestate.end(out, self.resolved, self.status.partition(":")[0])
            if self.emu is not None and self.emu.delay_stats and not gone:
                write_json(out / "delay_lines.json", self.emu.delay_stats)
            if self.emu is not None and not gone:
                write_transport(out, self.emu.tcp, self.resolved.graph)
            summary = None if gone else self.summarise()
        if gone:
            raise FedmstError(_gone(out))
        if summary is None:
            raise FedmstError("the run finished no round")
        return summary

    def emulate(self, state: RunState, scratch: Path) -> None:
        """Build the emulated network and run the rounds on the run's clock."""
        resolved, config = self.resolved, self.resolved.config
        self.emu, self.ceiling = emulation(resolved, self.backend, state, self.out,
                                           lambda m: self.report(f"{self.tag} {m}"))
        emu, scale = self.emu, resolved.scale
        with emu:
            self.times["network"] = time.monotonic() - self.started
            self.report(f"{self.tag} run {state.id}'s links: htb bandwidth; {emu.emulated()['note']}; "
                        f"TCP congestion control {config.congestion_control}")
            if unused := unused_optical_options(config, resolved.graph):
                self.report(f"{self.tag} {unused}")
            auto = f" (auto: {resolved.scale_reason})" if resolved.scale_reason else ""
            if scale.slowed:
                self.report(f"{self.tag} {scale.describe(resolved.graph)}{auto}")
            elif auto:
                self.report(f"{self.tag} time scale 1{auto}")
            self.session = session = Session(resolved, emu, self.backend, self.out, scratch, self.report)
            try:
                if config.clock == "independent":
                    self.independent = IndependentRun(session)
                    session.run(self.independent.run)
                else:
                    lockstep = LockstepRun(session, Prediction(
                        resolved.graph, config.chunk_bytes, config.mtu, with_delay=resolved.delay_mode != "off",
                        changes=resolved.link_changes))
                    session.run(lambda: lockstep.run(self.rounds))
            finally:
                self.times.update(session.times)

    def summarise(self) -> Summary | None:
        """Write summary.json: the means of the rounds that finished, or, if none did, only how
        the run ended (so the folder still says what became of it)."""
        clock = self.independent.clock if self.independent is not None else None
        times, emu = self.times, self.emu
        wall_s = time.monotonic() - self.started
        if not self.rounds and not (clock is not None and clock.rounds_done):
            write_json(self.out / "summary.json", asdict(RunStatus(
                status=self.status, rounds_planned=rounds_planned(self.resolved),
                scheduler=self.resolved.config.scheduler, topology=self.resolved.graph.graph["name"], rounds=0,
                wall_s=wall_s)))
            return None
        times["teardown"] = wall_s - sum(s for name, s in times.items() if name != "prepare")
        common: dict[str, Any] = dict(
            emulated={**emu.emulated(), **self.ceiling, **self.network_terms()} if emu else {},
            workers=self.backend.describe(),
            wall_s=wall_s, status=self.status, times={k: round(v, 3) for k, v in times.items()},
            background=self.session.background if self.session else [],
            pcap=self.session.pcap if self.session else None, held=self.session.held if self.session else [],
            slots_outside=self.session.slots_outside if self.session else None,
            training=self.session.training if self.session else None)
        summary = (summarise_clock(self.resolved, clock, **common) if clock is not None
                   else summarise(self.resolved, self.rounds, **common))
        summary.write(self.out / "summary.json")
        warning = host_bound_line(summary.emulated.get("host_bound_phases", []))
        if warning:
            self.report(f"{self.tag} {warning}")
        return summary


    def network_terms(self) -> dict[str, object]:
        """summary.json's ``emulated`` in the network's terms: the time scale, and the jitter
        asked for (the emulation was handed it slowed)."""
        return {"time_scale": self.resolved.time_scale, "jitter_s": self.resolved.config.jitter_ms / 1e3}


def emulation(resolved: ResolvedRun, backend: WorkerBackend, state: RunState, out: Path,
              report: Report) -> tuple[Emulation, dict[str, object]]:
    """The emulated network of ``resolved`` (to be entered with ``with``), its worker hosts up
    (``backend``), and the ``emulated`` keys its link ceiling adds to summary.json (warnings said
    through ``report``); with ``--ray``, spread over the cluster's hosts as ``resolved.spread`` placed
    it (:func:`spanned`)."""
    config = resolved.config
    if resolved.spread is not None:
        return spanned(resolved, resolved.spread, backend, state, out, report), {}
    capabilities = Capabilities(netem=resolved.netem_available)
    ceiling = _link_ceiling(resolved, capabilities, report)
    hosts = {node: state.host_name(i) for i, node in enumerate(sorted(resolved.graph.nodes, key=node_order))}
    netns = backend.up(hosts, mounts=(str(state.scratch), str(out.resolve())))
    scale = resolved.scale
    graph, unlined = _unlined(resolved, report)
    emu = Emulation(
        scale.graph(graph), delay_mode=resolved.delay_mode, loss=config.loss,
        jitter_s=scale.real_s(config.jitter_ms / 1e3), mtu=config.mtu, queue=config.queue,
        rto_min_s=scale.rto_min_s(), transport=resolved.transport, netns=netns,
        capabilities=capabilities,
        preload=backend.preload(model=config.model, dataset=config.dataset, optimizer=config.optimizer,
                                batch_size=config.batch_size, lr=config.lr, client=config.client,
                                host_trainer=resolved.host_trainer),
        changing=[c.link for c in resolved.link_changes if c.delay_ms is not None or c.loss is not None],
        run=state)
    return emu, {**ceiling, **unlined}


def spanned(resolved: ResolvedRun, spread: Spread, backend: WorkerBackend, state: RunState, out: Path,
            report: Report) -> Any:
    """``resolved``'s network on the hosts of ``spread`` as it placed the nodes (said beside a random
    balanced placement's), each host's share built by its host agent
    (:class:`fedmst.hosts.spanned.SpannedEmulation`)."""
    from fedmst.hosts.spanned import SpannedEmulation

    config, scale = resolved.config, resolved.scale
    hosts = spread.on.hosts
    report(f"placed on {counted(len(hosts), 'host')}: {spread.placed.describe(spread.per)} (a random balanced "
           f"placement: {spread.baseline.cut_bytes / 1e6:.3g} MB {spread.per}); the hosts' network carried "
           + ", ".join(f"{m:.0f} Mbit/s {a}->{b}" for (a, b), m in spread.on.network_mbps.items()))
    graph, _ = _unlined(resolved, report)
    return SpannedEmulation(
        scale.graph(graph), hosts=hosts, placement=spread.placed.hosts, run=state, folders=(state.scratch, out),
        predicted=spread.record(),
        options=dict(delay_mode=resolved.delay_mode, loss=config.loss, jitter_s=scale.real_s(config.jitter_ms / 1e3),
                     mtu=config.mtu, queue=config.queue, rto_min_s=scale.rto_min_s(), transport=resolved.transport,
                     preload=backend.preload(model=config.model, dataset=config.dataset, optimizer=config.optimizer,
                                             batch_size=config.batch_size, lr=config.lr, client=config.client,
                                             host_trainer=resolved.host_trainer)))


def _unlined(resolved: ResolvedRun, report: Report) -> tuple[nx.Graph, dict[str, object]]:
    """The graph the emulation builds: with delay lines applying the delays, the links too short
    for one (:func:`fedmst.core.timescale.without_delay_lines`; one a link trace changes keeps its
    line) get no delay of their own, and the run says so (the key it adds to summary.json's ``emulated``)."""
    changing = {frozenset(c.link) for c in resolved.link_changes}
    short = [(u, v) for u, v in without_delay_lines(resolved.graph) if frozenset((u, v)) not in changing]
    if resolved.delay_mode != "userspace" or not short:
        return resolved.graph, {}
    graph = resolved.graph.copy()
    for u, v in short:
        graph.edges[u, v]["delay_s"] = 0.0
    longest = max(float(resolved.graph.edges[e]["delay_s"]) for e in short)
    report(f"{counted(len(short), 'link')} of at most {longest * 1e6:.3g} µs run without a delay line, shorter than "
           "its timing error: the kernel's own forwarding stands for their delay")
    return graph, {"links_without_delay_line": [link_name(*e) for e in short]}


def _gone(out: Path) -> str:
    return (f"output folder {out} was removed while the run wrote into it; the run stopped and left nothing "
            "behind (give it a folder that stays)")


def _link_ceiling(resolved: ResolvedRun, capabilities: Capabilities, report: Report) -> dict[str, object]:
    """What one emulated link of this host carries, and the links configured above it (warned
    about here): the keys they add to summary.json's ``emulated``."""
    try:
        ceiling = link_ceiling_mbps(resolved.delay_mode, resolved.config.mtu, capabilities, report=report)
    except FedmstError as exc:  # advice, not the run: say so and go on
        report(f"warning: {exc}; link capacities are not checked against what this host carries")
        return {"link_ceiling_mbps": None, "bandwidth_cpu_bound": None}
    scale = resolved.scale
    above = cpu_bound_links(scale.graph(resolved.graph), ceiling)
    if above:
        shown = ", ".join(above[:5]) + (", ..." if len(above) > 5 else "")
        report(f"warning: {len(above)} link(s) ({shown}) have a capacity above the {ceiling:.0f} Mbit/s one "
               "emulated link of this host carries" + (f" even {scale.factor:g} times slower" if scale.slowed else "")
               + ": their bandwidth is bound by the CPU, not emulated, and their predictions cannot hold "
               "(a larger --time-scale slows them below it)")
    return {"link_ceiling_mbps": ceiling, "bandwidth_cpu_bound": above}
