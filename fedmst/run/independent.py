"""The independent clock (``--clock independent``): the agents get the whole run at once
(:class:`~fedmst.protocol.RunRounds`); each task runs its rounds back to back from its own start
offset, each node moving on as soon as its data is in. On a fabric every task's offset is later
by ``--reconfig-ms``: its first broadcast waits for its circuits' set-up on its own clock. The
links are measured over the whole run and each task's phases from the spans the nodes report,
beside the timeline :func:`fedmst.core.contention.simulate` predicts for the same offsets.
"""

from __future__ import annotations

import time
from dataclasses import replace

import psutil

from fedmst.core.contention import capacities, iteration_times, simulate
from fedmst.core.optical.circuits import planned_view
from fedmst.protocol import RunRounds
from fedmst.run.measure import ClockRun, cpu_busy, write_clock_tables
from fedmst.run.recovery import aggregation_weights
from fedmst.run.results import SAMPLE_FIELDS, write_csv
from fedmst.run.session import Session, overrun
from fedmst.wording import counted


class IndependentRun:
    """Every task's rounds on its own clock, in one command to the agents."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.clock: ClockRun | None = None
        """The run, once it started."""

    def run(self) -> None:
        """Run every task's rounds; the spans the agents report become the tasks' timeline beside
        the predicted one."""
        session, config, live, emu = self.session, self.session.config, self.session.live, self.session.emu
        resolved = session.resolved
        rounds = {p.task.name: p.task.rounds for p in live.plans}
        setup_s = config.reconfig_ms / 1e3 if live.circuits else 0.0  # the circuits, before any task's broadcast
        later = {name: o + setup_s for name, o in resolved.offsets.items()}
        offsets = {p.task.name: p.task.start_s + later.get(p.task.name, setup_s) for p in live.plans}
        alone, carried = list(resolved.profiles), capacities(planned_view(session.graph, live.circuits))
        self.clock = clock = ClockRun(plans=live.plans, rounds=rounds, offsets=offsets, alone=alone,
                                      predicted=simulate(alone, later, rounds, carried))
        if setup_s:
            session.report(f"{session.tag} {len(live.circuits)} lightpath(s) set up in "
                           f"{config.reconfig_ms:g} ms: every task starts that much later")
        shifted = {n: o for n, o in resolved.offsets.items() if o}
        if shifted:
            session.report(f"{session.tag} interleaving ({config.interleave}): "
                           + ", ".join(f"{n} starts {o:.2f} s later" for n, o in shifted.items()))
        before, background = emu.meters.counters_and_background()
        drops, retransmits, cpu = emu.meters.queue_drops(), emu.meters.tcp_retransmits(), psutil.cpu_times()
        begun, scale = time.monotonic(), session.scale
        real_offsets = {name: scale.real_s(o) for name, o in offsets.items()}
        limit = session.timeout_s * 3 * max(rounds.values()) + max(real_offsets.values())
        with session.sampler.sampling(0, "rounds"):
            replies = session.server.run(
                RunRounds(start_at=session.started_at, rounds=rounds, offsets=real_offsets,
                          weights=aggregation_weights(live, session.samples, {}, 1)),
                timeout_s=limit, check=session.check)
        session.times["rounds"] = time.monotonic() - begun
        clock.cpu_busy = cpu_busy(cpu, psutil.cpu_times())
        after, counted = emu.meters.counters_and_background()
        clock.background_bytes = {hop: counted[hop] - background[hop] for hop in after}
        clock.link_bytes = {hop: after[hop] - before[hop] - clock.background_bytes[hop] for hop in after}
        clock.queue_drops = {hop: n - drops[hop] for hop, n in emu.meters.queue_drops().items()}
        clock.retransmits = emu.meters.tcp_retransmits() - retransmits
        clock.spans = {node: tuple(replace(s, start_s=scale.network_s(s.start_s), end_s=scale.network_s(s.end_s))
                                   for s in reply.spans) for node, reply in replies.items()}
        clock.accuracy = {name: list(acc) for reply in replies.values() for name, acc in reply.accuracy.items()}
        write_clock_tables(session.out, clock, session.graph, config.mtu)
        write_csv(session.out / "samples.csv", SAMPLE_FIELDS, session.sampler.rows)
        session.write_optical()  # with the rates the samples measured
        self.report(clock)

    def report(self, clock: ClockRun) -> None:
        """Each task's rounds, mean round and last accuracy, in one line."""
        windows = clock.windows()
        trained: dict[str, list[float]] = {}
        rounds_s: dict[str, list[float]] = {}
        for s in windows:
            if s.phase == "train":
                trained.setdefault(s.task, []).append(s.end_s - s.start_s)
        for (name, _), seconds in sorted(iteration_times(windows).items()):
            rounds_s.setdefault(name, []).append(seconds)
        session = self.session
        for name, seconds in rounds_s.items():
            session.report(f"{session.tag} {name}: {counted(len(seconds), 'round')}, mean round "
                           f"{sum(seconds) / len(seconds):.2f} s, "
                           f"accuracy {clock.accuracy.get(name, [float('nan')])[-1]:.3f}"
                           + overrun(session.live.tasks[name].compute_s, trained.get(name, [])))
