"""The running workload: what the agents run now, the agents themselves, and how a run goes on
when links fail or workers die.

:class:`Live` holds each task's current plan and which of its original local models take part.
:func:`replan` schedules the tasks again around what is broken, installs the new routes and has
the agents reconnect; :func:`recover` decides after each phase whether that is needed and whether
the phase must run again. :class:`Strike` injects a fault at a moment within a phase.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from fedmst.fl import aggregation
from fedmst.core import faults
from fedmst.workers.control import ControlServer
from fedmst.net.emulation import Emulation
from fedmst.errors import EmulationError, FedmstError, WorkerDied
from fedmst.core.schedulers import Plan
from fedmst.core.plan import plan_summary
from fedmst.core.tasks import Task
from fedmst.core.topology import node_order
from fedmst.core.workload import schedule_workload

if TYPE_CHECKING:  # types only: the coordinator imports this module
    from fedmst.run.engine import Report, RoundResult, RunConfig


@dataclass
class Live:
    """What the agents run now: each task's plan, which of its original local models take part,
    and what is broken. Re-planning replaces the plans and bumps ``epoch``."""

    tasks: dict[str, Task]
    plans: tuple[Plan, ...]
    models: dict[str, tuple[int, ...]]
    """Task -> original index of each local model of its current (reduced) task."""
    down: set[tuple[str, str]] = field(default_factory=set)
    dead: set[str] = field(default_factory=set)
    epoch: int = 0


def task_specs(config: RunConfig, live: Live, emu: Emulation) -> list[dict[str, Any]]:
    """Each task as the agents need it, with its transfers' routes installed in the emulation.

    Task i seeds its data shards and initial weights with ``seed + i``. A transfer names the
    original indices of the local models it serves, so weights keep their names across re-plans.
    """
    tag = "" if live.epoch == 0 else f"e{live.epoch}-"
    keys = {p.task.name: {f"{p.task.name}-{tag}{i:03d}-{t.phase}": t for i, t in enumerate(p.transfers)}
            for p in live.plans}
    flows = emu.install_flows({k: t.path for per_task in keys.values() for k, t in per_task.items()})
    specs = []
    for p in live.plans:
        task, original = live.tasks[p.task.name], live.models[p.task.name]
        specs.append({
            "name": task.name, "global_node": task.global_node, "local_nodes": list(task.local_nodes),
            "seed": config.seed + int(task.name.removeprefix("task")), "active": list(original),
            "transfers": [
                {"key": k, "phase": t.phase, "path": list(t.path), "models": sorted(original[j] for j in t.models),
                 "src_addr": flows[k].src_addr, "dst_addr": flows[k].dst_addr}
                for k, t in keys[task.name].items()
            ],
        })
    return specs


class Workers:
    """The agents the coordinator started, one per node, and the faults that hit them."""

    def __init__(self, nodes: list[str], spec_file: Path, emu: Emulation, token: str, logs: Path) -> None:
        logs.mkdir(exist_ok=True)
        self.emu, self.logs = emu, logs
        self.died: dict[str, float] = {}
        """Node -> when its death was noticed (monotonic clock)."""
        env = {"FEDMST_TOKEN": token, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        self.procs = {}
        for node in nodes:
            with (logs / f"node-{node}.log").open("w") as log:
                args = ["-m", "fedmst.workers.agent", "--spec", str(spec_file), "--node", node]
                self.procs[node] = emu.start_worker(node, args, env=env, log_file=log)

    def check(self) -> None:
        """Raise :class:`WorkerDied`, naming the node, for an agent that has died (once each)."""
        for node, proc in self.procs.items():
            if node not in self.died and proc.poll() is not None:
                self.died[node] = time.monotonic()
                lines = [line for line in (self.logs / f"node-{node}.log").read_text().splitlines() if line.strip()]
                hint = " (out of memory? see --memory)" if proc.returncode == 137 and self.emu.docker else ""
                raise WorkerDied(node, f"agent on node {node} exited with code {proc.returncode}{hint}: "
                                       f"{(lines or ['(no output)'])[-1]}")

    def kill(self, node: str) -> None:
        """Kill ``node``'s agent as a crash would."""
        self.emu.kill_worker(node, self.procs[node])


def aggregation_weights(live: Live, samples: dict[str, dict[int, int]], late: dict[str, list[int]],
                        round_: int) -> dict[str, dict[str, float]]:
    """Each task's aggregation weights over the local models whose update counts this round
    (in the plan and not late); they sum to 1."""
    weights = {}
    for name, planned in live.models.items():
        models_ = [i for i in planned if i not in late.get(name, ())]
        if not models_:
            raise FedmstError(f"round {round_}: every local model of {name} missed the deadline; raise --deadline")
        counts = [samples[name][i] for i in models_]
        weights[name] = {str(i): w for i, w in zip(models_, aggregation.sample_weights(counts))}
    return weights


def replan(config: RunConfig, graph: Any, live: Live, emu: Emulation, server: ControlServer, scratch: Path,
           check: Callable[[], None], agents: set[str]) -> dict[str, Any]:
    """Schedule the tasks again around what is broken, install the new routes and have the
    agents connect the new transfers; return what it took and which local models left."""
    t0 = time.perf_counter()
    remaining = faults.remaining_tasks(graph, [live.tasks[p.task.name] for p in live.plans],
                                       down_links=live.down, dead_nodes=live.dead)
    workload = schedule_workload(faults.surviving_graph(graph, live.down, live.dead), [r.task for r in remaining],
                                 config.scheduler, wavelengths=config.wavelengths, mtu=config.mtu)
    if workload.blocked:
        raise FedmstError(f"re-planning: {workload.blocked[0][0]} is blocked: {workload.blocked[0][1]}")
    missing = set().union(*(p.nodes for p in workload.plans)) - agents
    if missing:
        raise FedmstError(f"the re-planned trees need a worker on node(s) {', '.join(sorted(missing))}, which run "
                          "none: inject faults with --fail-link/--kill-worker to run a worker on every node")
    t1 = time.perf_counter()
    live.plans, live.epoch = workload.plans, live.epoch + 1
    live.models = {r.task.name: r.models for r in remaining}
    specs = task_specs(config, live, emu)
    t2 = time.perf_counter()
    store = scratch / f"store{live.epoch}"
    store.mkdir()
    server.run({"cmd": "replan", "tasks": specs, "store_dir": str(store)}, timeout_s=config.phase_timeout_s,
               check=check)
    t3 = time.perf_counter()
    return {
        "scheduling_s": t1 - t0, "routes_s": t2 - t1, "reconnect_s": t3 - t2, "replan_s": t3 - t0,
        "dropped": {r.task.name: {str(i): why for i, why in r.dropped.items()} for r in remaining if r.dropped},
        "tasks": [{**plan_summary(p), "local_models": list(live.models[p.task.name]), "flows": t["transfers"]}
                  for p, t in zip(live.plans, specs)],
    }


class Strike:
    """A fault that strikes ``after_s`` seconds into a phase, under its transfers, or at the
    phase's end if the phase is done sooner. ``action`` injects it and returns the bytes it
    destroyed in flight."""

    def __init__(self, event: str, after_s: float, action: Callable[[], int], *, node: str | None = None,
                 link: tuple[str, str] | None = None) -> None:
        self.event, self.action = event, action
        self.node, self.link = node, link
        """The worker it kills, or the link it takes down."""
        self.description = ""
        self.at_s: float | None = None
        self.when = 0.0
        """When it struck (monotonic clock)."""
        self.lost_bytes = 0
        self._lock = threading.Lock()
        self._timer = threading.Timer(after_s, self.strike)
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._timer.start()

    def strike(self) -> None:
        with self._lock:
            if self.at_s is None:
                self.when = time.monotonic()
                self.lost_bytes = self.action()
                self.at_s = time.perf_counter() - self._t0

    def finish(self, phase: str) -> None:
        """Strike now if the phase ended first, and describe what happened when."""
        self._timer.cancel()
        if self._timer.is_alive():
            self._timer.join()
        self.strike()
        self.description = f"{self.event} {self.at_s:.2f} s into the {'training' if phase == 'train' else phase}"


NEXT_PHASE = {"broadcast": "train", "train": "upload", "upload": "broadcast"}


def recover(phase: str, msg: dict[str, Any], replies: dict[str, Any], strikes: list[Strike], res: RoundResult,
            live: Live, emu: Emulation, server: ControlServer, workers: Workers, before: dict[tuple[str, str], int],
            on_replan: Callable[[RoundResult, str, dict[str, Any]], None],
            weights: Callable[[], dict[str, dict[str, float]]], check: Callable[[], None],
            timeout_s: float) -> dict[str, Any]:
    """After a phase in which links failed or workers died: re-plan around them and, if
    transfers failed (they stall until the stall timeout, or break when a peer dies), run the
    phase again on the new plan, once. A failure with neither cause ends the run."""
    dead = set(server.lost) - live.dead
    kill_times = {st.node: st.when for st in strikes if st.node is not None}
    failed = {node: re.sub(r"\[/[^\]]*\] ", "", rep.get("error", ""))  # gloo's source paths: noise
              for node, rep in replies.items() if not rep.get("ok", False)}
    if not dead and not strikes:
        if failed:
            node, why = next(iter(failed.items()))
            raise EmulationError(f"agent on node {node} failed in {phase}: {why}")
        return replies
    live.dead |= dead
    event: dict[str, Any] = {
        "event": ", ".join([*(st.description for st in strikes),
                            *(f"worker on node {n} died" for n in sorted(dead - kill_times.keys(), key=node_order))]),
        "in_flight_lost_bytes": sum(st.lost_bytes for st in strikes),
        "cause": {n: server.lost[n] for n in sorted(dead, key=node_order)},
        "detected_s": {n: workers.died[n] - kill_times[n] for n in dead if n in kill_times},
    }
    if failed:
        now = emu.counters()
        event["aborted"] = {"phase": phase, "failed_nodes": failed, "link_bytes": sum(now[h] - before[h] for h in now)}
    on_replan(res, phase if "aborted" in event else NEXT_PHASE[phase], event)
    if "aborted" not in event:
        return replies
    res.plans[phase] = live.plans
    if phase == "upload":
        res.weights = msg["weights"] = weights()
    return server.run(msg, timeout_s=timeout_s, check=check)


def late_models(replies: dict[str, Any], live: Live, report: Report, tag: str, round_: int,
                deadline_s: float | None) -> dict[str, list[int]]:
    """The local models each task's agents reported late in the train phase; reported once."""
    late: dict[str, list[int]] = {}
    for reply in replies.values():
        for name, models_ in reply.get("late", {}).items():
            late.setdefault(name, []).extend(models_)
    for name, models_ in sorted(late.items()):
        where = ", ".join(f"{i} on node {live.tasks[name].local_nodes[i]}" for i in sorted(models_))
        report(f"{tag} round {round_}: {name}'s local model(s) {where} missed the {deadline_s:g} s deadline; "
               "their updates are dropped")
    return {name: sorted(m) for name, m in late.items()}


def strikes_for(round_: int, phase: str, link_failures: list[faults.LinkFailure], kills: list[faults.WorkerKill],
                emu: Emulation, workers: Workers) -> list[Strike]:
    """The faults that strike during this phase: links failing under the broadcast, workers
    killed under the broadcast (``@R+S``) or while they train (``@R``)."""
    strikes = [Strike(f"link {f.link[0]}-{f.link[1]} down", f.after_s, lambda f=f: emu.set_link(*f.link, up=False),
                      link=f.link)
               for f in link_failures if f.round == round_ and f.after_s is not None and phase == "broadcast"]

    def kill(node: str) -> int:
        workers.kill(node)
        return 0

    for k in kills:
        if k.round == round_ and phase == ("broadcast" if k.after_s is not None else "train"):
            strikes.append(Strike(f"worker on node {k.node} killed", k.after_s or 0.0, lambda n=k.node: kill(n),
                                  node=k.node))
    return strikes


def notice_kills(killed: list[str], workers: Workers, server: ControlServer, timeout_s: float) -> None:
    """Make sure every killed worker's death is noticed even if it replied just before dying."""
    for node in killed:
        if node in server.agents:
            workers.procs[node].wait(timeout=timeout_s)
            try:
                workers.check()
            except WorkerDied as exc:
                server.drop(exc.node, str(exc))
