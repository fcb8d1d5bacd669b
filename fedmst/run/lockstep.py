"""The lockstep clock: every task's rounds together, phase by phase (broadcast, train, upload)
with a barrier between phases, so each phase's wall-clock latency and the bytes each link carried
during it are measured on their own and shown beside the plans' prediction. Several tasks run
their phases at the same time on the same links; each task's phase latency is when its last node
finished. Faults are injected where the run asks for them; :func:`fedmst.run.recovery.assess`
says what a phase's outcome needs, and the run re-plans and runs the phase again.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace

import psutil

from fedmst.core.contention import ROUND_PHASES
from fedmst.core.optical.wavelengths import Lightpath
from fedmst.core.faults import NOT_SELECTED, RemainingTask, remaining_tasks, replan_workload, surviving_graph
from fedmst.core.plan import plan_summary
from fedmst.core.route import LinkDir
from fedmst.core.schedulers import schedule
from fedmst.core.selection import SelectionContext, participants, reduced, select
from fedmst.core.workload import WorkloadPlan
from fedmst.protocol import Broadcast, Evaluate, Replan, Save, Train, Upload
from fedmst.run.measure import Prediction, RoundResult, cpu_busy, write_tables
from fedmst.run.recovery import (
    NEXT_PHASE,
    Fault,
    FaultEvent,
    aggregation_weights,
    assess,
    late_models,
    notice_kills,
    strikes_for,
    write_faults,
)
from fedmst.run.report import size_label
from fedmst.run.results import SAMPLE_FIELDS, write_csv, write_json
from fedmst.run.session import Session, overrun
from fedmst.run.stall import StallWatch


class LockstepRun:
    """The round and phase loop of one run on a :class:`~fedmst.run.session.Session`."""

    def __init__(self, session: Session, prediction: Prediction) -> None:
        self.session, self.prediction = session, prediction
        self.config, self.live, self.emu = session.config, session.live, session.emu
        self.fault_log: list[FaultEvent] = []
        self.load: dict[LinkDir, float] = {}
        """``--link-state measured``: background bytes per round each link direction carried last."""
        self.selected: dict[str, tuple[int, ...]] | None = None
        """``--clients-per-round``: this round's participants by task (original indices)."""
        self.losses: dict[str, dict[int, float]] = {}
        """Each task's local models' losses as they last reported them (``--selection loss``)."""
        self.set_up: set[Lightpath] = set()
        """The optical circuits set up and held now."""
        self._attempts = 0

    def run(self, results: list[RoundResult]) -> None:
        """Every round in lockstep, appending each to ``results`` once written."""
        session, config = self.session, self.config
        for r in range(1, config.rounds + 1):
            begun = time.monotonic()
            results.append(self.round(r))
            session.times["rounds"] += time.monotonic() - begun
            write_tables(session.out, results)
            write_csv(session.out / "samples.csv", SAMPLE_FIELDS, session.sampler.rows)
            session.write_optical()  # with the rates the samples measured
            res = results[-1]
            background = sum(res.background_bytes.values())
            compute = max(p.task.compute_s for p in self.live.plans)
            session.report(
                f"{session.tag} round {r}/{config.rounds}: broadcast {res.seconds['broadcast']:.2f} s, "
                f"train {res.seconds['train']:.2f} s, upload {res.seconds['upload']:.2f} s, "
                f"{size_label(sum(sum(b.values()) for b in res.link_bytes.values()))} of weights on links"
                + (f" ({size_label(background)} background)" if background else "")
                + f", accuracy {res.accuracy:.3f}"
                + "".join(f"; the {p} took {res.seconds[p] / res.predicted_s[p]:.2f}x its prediction with the "
                          f"host's CPUs {res.cpu_busy[p]:.0%} busy: bound by the host, not the links "
                          f"(--time-scale {scale} would keep up)" for p, scale in res.host_bound.items())
                + overrun(compute, [res.seconds["train"]])
            )

    def round(self, r: int) -> RoundResult:
        res = RoundResult(round=r, time_scale=self.session.scale.factor)
        session, emu = self.session, self.emu
        if r > 1 and self.config.link_state == "measured":
            self.follow_load(res)
        self.change_links(res)
        if self.config.clients_per_round:
            self.select(res)
        drops, retransmits = emu.meters.queue_drops(), emu.meters.tcp_retransmits()
        background, begun = emu.meters.counters_and_background()[1], time.monotonic()
        for phase in ROUND_PHASES:
            self.phase(res, phase)
        res.window = (session.scale.network_s(begun - session.started_at),
                      session.scale.network_s(time.monotonic() - session.started_at))
        counted = emu.meters.counters_and_background()[1]
        res.background_bytes = {hop: n - background[hop] for hop, n in counted.items()}
        if self.config.link_state == "measured":
            self.load = {hop: float(n) for hop, n in res.background_bytes.items() if n}
        res.queue_drops = {hop: n - drops[hop] for hop, n in emu.meters.queue_drops().items()}
        res.retransmits = emu.meters.tcp_retransmits() - retransmits
        self.prediction.settle(res)
        evaluated = session.server.run(Evaluate(round=r), timeout_s=session.timeout_s, check=session.check)
        res.accuracies = {name: acc for e in evaluated.values() for name, acc in e.accuracy.items()}
        if self.config.save_models:
            saved = session.out / "models" / f"round{r}"
            saved.mkdir(parents=True, exist_ok=True)
            session.server.run(Save(dir=str(saved)), timeout_s=session.timeout_s, check=session.check)
            for name, w in res.weights.items():
                write_json(saved / f"{name}-weights.json", {str(i): x for i, x in w.items()})
        return res

    def change_links(self, res: RoundResult) -> None:
        """Take down the links that fail at this round's start, bring back those that return, and
        re-plan around them."""
        changes = []
        for f in self.session.resolved.link_failures:
            u, v = f.link
            if f.round == res.round and f.after_s is None:
                lost = self.emu.set_link(u, v, up=False)
                self.live.down.add(f.link)
                changes.append(Fault(f"link {u}-{v} down", in_flight_lost_bytes=lost))
            if f.until == res.round:
                self.emu.set_link(u, v, up=True)
                self.live.down.discard(f.link)
                changes.append(Fault(f"link {u}-{v} up again", in_flight_lost_bytes=0))
        if changes:
            self.replan(res, "broadcast", Fault(", ".join(c.event for c in changes),
                                                sum(c.in_flight_lost_bytes for c in changes)))

    def command(self, res: RoundResult, phase: str) -> Broadcast | Train | Upload:
        """The phase's command; a transfer phase gets a fresh progress folder and stall watch."""
        session, r = self.session, res.round
        session.phase_watch.begin()
        if phase == "train":
            deadline = self.config.deadline_s
            return Train(round=r, deadline_s=None if deadline is None else session.scale.real_s(deadline))
        self._attempts += 1
        progress = session.scratch / "progress" / f"{self._attempts:04d}-round{r}-{phase}"
        progress.mkdir(parents=True)
        watch = StallWatch(session.specs, phase, stall_s=self.config.stall_s, start=session.clock())
        watch.observe(watch.start, self.emu.meters.counters())
        session.phase_watch.begin(watch, progress)
        if phase == "broadcast":
            return Broadcast(round=r, progress_dir=str(progress))
        res.weights = aggregation_weights(self.live, session.samples, res.late, r)
        return Upload(round=r, progress_dir=str(progress), weights=res.weights)

    def phase(self, res: RoundResult, phase: str) -> None:
        """Run one phase, with the faults that strike under it; after a fault, re-plan and, if
        transfers failed, run it once more on the new plan (the given-up attempt's bytes apart)."""
        session, emu, r = self.session, self.emu, res.round
        server, timeout_s = session.server, session.timeout_s
        strikes = strikes_for(r, phase, session.resolved.link_failures, session.resolved.kills,
                              lambda u, v: emu.set_link(u, v, up=False), session.agents, session.scale, session.clock)
        before, background = emu.meters.counters_and_background()
        cpu, used = psutil.cpu_times(), emu.cpu_seconds()
        start = time.perf_counter()
        with session.sampler.sampling(r, phase):
            res.plans[phase], res.circuits[phase] = self.live.plans, self.live.circuits
            self.reconfigure(res, phase)
            cmd = self.command(res, phase)
            for strike in strikes:
                strike.start()
            replies = server.run(cmd, timeout_s=timeout_s, check=session.check, survive=True, tolerate_errors=True)
            for strike in strikes:
                strike.finish(phase)
                if strike.link is not None:
                    self.live.down.add(strike.link)
            notice_kills([st.node for st in strikes if st.node is not None], session.agents, server,
                         timeout_s=timeout_s)
            died = {node: session.scale.network_s(t) for node, t in session.agents.died.items()}
            outcome = assess(phase, replies, strikes, self.live, server.lost, died, session.phase_watch.stall)
            if outcome.fault is not None:
                fault = outcome.fault
                after, counted = emu.meters.counters_and_background()
                if outcome.redo and fault.aborted is not None:
                    res.aborted_bytes[phase] = {hop: after[hop] - before[hop] for hop in after}
                    fault = replace(fault, aborted=replace(
                        fault.aborted, link_bytes=sum(res.aborted_bytes[phase].values())))
                    before, background = after, counted
                setup = self.replan(res, phase if outcome.redo else NEXT_PHASE[phase], fault)
                before = {hop: n + setup[hop] for hop, n in before.items()}  # set-up bytes are no phase's
                if outcome.redo:
                    res.plans[phase], res.circuits[phase] = self.live.plans, self.live.circuits
                    self.reconfigure(res, phase)
                    replies = server.run(self.command(res, phase), timeout_s=timeout_s, check=session.check)
        session.phase_watch.begin()
        res.host_seconds[phase] = time.perf_counter() - start
        res.seconds[phase] = session.scale.network_s(res.host_seconds[phase])
        res.cpu_busy[phase] = cpu_busy(cpu, psutil.cpu_times())
        res.cpu_s[phase] = {kind: s - used.get(kind, 0.0) for kind, s in emu.cpu_seconds().items()}
        if phase == "train":
            res.late = late_models(replies)
            self.report_late(r, res.late)
            for reply in replies.values():
                for key, loss in getattr(reply, "losses", {}).items():
                    name, _, i = key.rpartition("/")
                    self.losses.setdefault(name, {})[int(i)] = loss
                for key, examples in getattr(reply, "examples", {}).items():  # this round's weights
                    name, _, i = key.rpartition("/")
                    session.samples.setdefault(name, {})[int(i)] = examples
        res.task_seconds[phase] = {  # every task waited for the circuits' set-up, in lockstep
            p.task.name: res.reconfig_s.get(phase, 0.0) + session.scale.network_s(
                max(rep.task_seconds.get(p.task.name, 0.0) for rep in replies.values()))
            for p in self.live.plans
        }
        if phase == "train" and session.scale.slowed:  # the agents counted their training, not sat through it
            res.seconds[phase] = max(res.task_seconds[phase].values(), default=0.0)
        after, counted = emu.meters.counters_and_background()
        res.link_bytes[phase] = {hop: after[hop] - before[hop] - (counted[hop] - background[hop]) for hop in after}

    def reconfigure(self, res: RoundResult, phase: str) -> None:
        """Before a transfer phase, wait out ``--reconfig-ms`` (on the host's clock) if the live plans
        hold optical circuits not set up yet (the first plan's, or a re-plan's new ones), inside the
        phase's measured time; ``res.reconfig_s`` records it and the prediction adds it. A changed
        set of circuits holds from this round on (optical.csv)."""
        held = set(self.live.circuits)
        if phase == "train" or held == self.set_up:
            return
        new, self.set_up = held - self.set_up, held
        self.session.hold(res.round, self.live.circuits)
        if not new:
            return
        pause_s = self.config.reconfig_ms / 1e3
        time.sleep(self.session.scale.real_s(pause_s))
        res.reconfig_s[phase] = res.reconfig_s.get(phase, 0.0) + pause_s
        self.session.report(f"{self.session.tag} round {res.round}: {len(new)} new lightpath(s) set up in "
                            f"{self.config.reconfig_ms:g} ms before the {phase}")

    def report_late(self, r: int, late: dict[str, list[int]]) -> None:
        for name, models_ in sorted(late.items()):
            where = ", ".join(f"{i} on node {self.live.tasks[name].local_nodes[i]}" for i in models_)
            self.session.report(f"{self.session.tag} round {r}: {name}'s local model(s) {where} missed the "
                                f"{self.config.deadline_s:g} s deadline; their updates are dropped")

    def follow_load(self, res: RoundResult) -> None:
        """``--link-state measured``: with the background bytes the last round measured on each
        link direction as its load, re-plan before this round if the schedulers would now plan any
        task otherwise (MST then avoids a loaded link among trees of the same size)."""
        workload, _ = self.schedule()
        if [p.transfers for p in workload.plans] != [p.transfers for p in self.live.plans]:
            loaded = sorted(self.load, key=lambda hop: -self.load[hop])[:3]
            self.replan(res, "broadcast", Fault(
                "re-planned on the measured link load (busiest: "
                + ", ".join(f"{u}->{v} {size_label(self.load[(u, v)])}" for u, v in loaded) + ")",
                in_flight_lost_bytes=0))

    def select(self, res: RoundResult) -> None:
        """``--clients-per-round``: pick this round's participants among the local models that can
        still take part, and re-plan when they are not last round's (the cost of that re-plan is
        the price of selection, measured like a fault's)."""
        live, config, graph = self.live, self.config, self.session.graph
        tasks = [live.tasks[p.task.name] for p in live.plans]
        can = surviving_graph(graph, live.down, live.dead)
        self.selected = {}
        for rt in remaining_tasks(graph, tasks, down_links=live.down, dead_nodes=live.dead):
            task = live.tasks[rt.task.name]
            self.selected[task.name] = select(config.selection, SelectionContext(
                task, rt.models, participants(config.clients_per_round, task.k), res.round, config.seed,
                pool=config.selection_pool or 0, losses=self.losses.get(task.name, {}),
                plan=lambda models, task=task: schedule(can, reduced(task, models), config.scheduler,
                                                        self.load or None)))
        if self.selected != {name: tuple(m) for name, m in live.models.items()}:
            shown = "; ".join(f"{name} {', '.join(map(str, m))}" for name, m in self.selected.items())
            self.replan(res, "broadcast", Fault(f"participants ({config.selection}): {shown}", in_flight_lost_bytes=0))

    def schedule(self) -> tuple[WorkloadPlan, list[RemainingTask]]:
        """The live tasks scheduled again on what survives, with the measured load (if any)."""
        live, config = self.live, self.config
        return replan_workload(
            self.session.graph, [live.tasks[p.task.name] for p in live.plans], config.scheduler,
            down_links=live.down, dead_nodes=live.dead, workers=self.session.server.agents,
            wavelengths=config.ocs_wavelengths, mtu=config.mtu, load=self.load, selected=self.selected,
            optical=config.optical, ots=config.ots_wavelengths, frame=config.frame)

    def replan(self, res: RoundResult, before_phase: str, fault: Fault) -> dict[LinkDir, int]:
        """Schedule the tasks again around what is broken, install the new routes, have the
        agents connect (and warm) the new transfers, and record the event with what each step
        took. Returns the bytes each link direction carried meanwhile: set-up, like the first
        connections', which the caller keeps out of the phase it measures."""
        session, live = self.session, self.live
        t0 = time.perf_counter()
        workload, remaining = self.schedule()
        t1 = time.perf_counter()
        live.plans, live.epoch = workload.plans, live.epoch + 1
        live.circuits = session.circuits_of(workload.lightpaths)
        live.models = {rt.task.name: rt.models for rt in remaining}
        specs = session.task_specs()
        t2 = time.perf_counter()
        store = session.emu.meeting.rendezvous(session.scratch, f"store{live.epoch}")
        counters = self.emu.meters.counters()
        session.server.run(Replan(tasks=specs, store_dir=store), timeout_s=session.timeout_s,
                           check=session.check)
        setup = {hop: n - counters[hop] for hop, n in self.emu.meters.counters().items()}
        t3 = time.perf_counter()
        event = FaultEvent(
            fault, round=res.round, before_phase=before_phase,
            scheduling_s=t1 - t0, routes_s=t2 - t1, reconnect_s=t3 - t2, replan_s=t3 - t0,
            setup_link_bytes=sum(setup.values()),
            dropped={rt.task.name: {str(i): why for i, why in rt.dropped.items()} for rt in remaining if rt.dropped},
            tasks=tuple({**plan_summary(p), "local_models": list(live.models[p.task.name]),
                         "flows": [asdict(t) for t in s.transfers]} for p, s in zip(live.plans, specs)),
        )
        res.faults.append(event)
        self.fault_log.append(event)
        write_faults(session.out / "faults.json", self.fault_log)
        dropped = "; ".join(f"{name} drops local model {i} ({why})" for name, d in event.dropped.items()
                            for i, why in d.items() if why != NOT_SELECTED)
        session.report(f"{session.tag} round {res.round}: {fault.event}; re-planned in {event.replan_s:.2f} s"
                       + (f"; {dropped}" if dropped else ""))
        return setup
