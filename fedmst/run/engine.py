"""The coordinator: topology -> tasks -> plans -> emulation + agents -> measured rounds -> run folder.

Each round is driven phase by phase (broadcast, train, upload) with a barrier between phases,
so each phase's wall-clock latency and the bytes each link carried during it are measured on
their own and shown beside the Plans' prediction. Several tasks run their phases at the same
time on the same links; each task's phase latency is when its last node finished.
"""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any, Callable, Iterator

import fedmst
from fedmst.workers import docker as containers
from fedmst.fl import data
from fedmst.core import faults
from fedmst.fl import models
from fedmst.workers.control import ControlServer
from fedmst.run.recovery import (
    Live,
    Workers,
    aggregation_weights,
    late_models,
    notice_kills,
    recover,
    replan,
    strikes_for,
    task_specs,
)
from fedmst.net.emulation import Emulation, probe_capabilities, require_tools, resolve_delay_mode
from fedmst.errors import FedmstError
from fedmst.run.results import LINK_FIELDS, ROUND_FIELDS, SAMPLE_FIELDS, TASK_FIELDS, write_csv, write_json
from fedmst.core.schedulers import Plan
from fedmst.core.plan import (
    PHASES,
    plan_summary,
    predicted_phase_seconds,
)
from fedmst.core.tasks import place_task
from fedmst.core.workload import WorkloadPlan, link_state, make_tasks, schedule_workload
from fedmst.core.topology import load_topology, node_order
from fedmst.core.wire import DEFAULT_MTU

Report = Callable[[str], None]


@dataclass(frozen=True)
class RunConfig:
    """Every option of a run, resolved; written to ``config.json``."""

    topology: str = "nsfnet"
    scheduler: str = "mst"
    local_models: int = 4
    tasks: int = 1
    wavelengths: int = 40
    rounds: int = 2
    model: str = models.DEFAULT_MODEL
    seed: int = 1
    out: str = "runs/latest"
    global_node: str | None = None
    local_nodes: tuple[str, ...] | None = None
    epochs: int = 1
    batch_size: int = 32
    lr: float = 0.05
    alpha: float = 0.5
    chunk_bytes: int = 256 * 1024
    mtu: int = DEFAULT_MTU
    delay_mode: str = "auto"
    loss: float = 0.0
    jitter_ms: float = 0.0
    phase_timeout_s: float = 300.0
    save_models: bool = False
    workers: str = "process"
    image: str = containers.DEFAULT_IMAGE
    cpus: tuple[str, ...] = ()
    memory: tuple[str, ...] = ()
    fail_links: tuple[str, ...] = ()
    kill_workers: tuple[str, ...] = ()
    slow_nodes: tuple[str, ...] = ()
    deadline_s: float | None = None
    stall_s: float = 10.0


@dataclass
class RoundResult:
    round: int
    seconds: dict[str, float] = field(default_factory=dict)
    task_seconds: dict[str, dict[str, float]] = field(default_factory=dict)
    accuracies: dict[str, float] = field(default_factory=dict)
    link_bytes: dict[str, dict[tuple[str, str], int]] = field(default_factory=dict)
    queue_drops: dict[tuple[str, str], int] = field(default_factory=dict)
    retransmits: int = 0
    plans: dict[str, tuple[Plan, ...]] = field(default_factory=dict)
    """The plans each phase ran with: a fault in the round changes them between phases."""
    weights: dict[str, dict[str, float]] = field(default_factory=dict)
    """Each task's aggregation weights in the upload that counted, by original local model."""
    late: dict[str, list[int]] = field(default_factory=dict)
    """Each task's local models whose update missed the deadline and was dropped."""
    faults: list[dict[str, Any]] = field(default_factory=list)

    @property
    def local_models(self) -> dict[str, int]:
        """Local models of each task whose update went into the aggregate."""
        return {name: len(w) for name, w in self.weights.items()}

    @property
    def accuracy(self) -> float:
        """Mean test accuracy of the tasks' global models after this round."""
        return mean(self.accuracies.values())


class CounterSampler:
    """Reads every link direction's byte counter every ``interval_s`` while a phase runs, so that
    a link's utilisation over time (and its peak) can be plotted, not only its total."""

    def __init__(self, read: Callable[[], dict[tuple[str, str], int]], interval_s: float = 0.1) -> None:
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


def prepare(config: RunConfig) -> tuple[Any, WorkloadPlan]:
    """The pure half: load and validate everything, place the tasks and schedule them (no I/O on
    the network), so bad input fails before any namespace or file exists."""
    require_tools()  # root, and the tools that probing the kernel needs
    require_tools(resolve_delay_mode(config.delay_mode, probe_capabilities()))
    graph = load_topology(config.topology)
    model = models.build_model(config.model, num_classes=10, input_shape=(1, 8, 8))
    size = models.model_bytes(model)
    if config.tasks == 1:
        tasks = [place_task(graph, name="task0", local_models=config.local_models, model_bytes=size,
                            seed=config.seed, global_node=config.global_node, local_nodes=config.local_nodes)]
    elif config.global_node is not None or config.local_nodes is not None:
        raise FedmstError("--global-node/--local-nodes place one task: leave them out with --tasks N")
    else:
        tasks = make_tasks(graph, config.tasks, config.local_models, size, config.seed)
    _, ytr, _, _ = data.train_test_split_seeded(*data.load_digits_dataset(), seed=config.seed)
    data.dirichlet_shards(ytr, config.local_models, config.alpha, seed=config.seed)  # too many models?
    workload = schedule_workload(graph, tasks, config.scheduler, wavelengths=config.wavelengths, mtu=config.mtu)
    if not workload.plans:
        raise FedmstError(f"every task was blocked, e.g. {workload.blocked[0][0]}: {workload.blocked[0][1]}")
    _faults(config, graph)
    _slow_nodes(config, graph, workload)
    if config.deadline_s is not None and not config.deadline_s > 0:
        raise FedmstError(f"--deadline {config.deadline_s}: give a positive number of seconds")
    _worker_limits(config, graph, workload)
    if config.workers == "docker":
        containers.require_docker(config.image)
    return graph, workload


def _faults(config: RunConfig, graph: Any) -> tuple[list[faults.LinkFailure], list[faults.WorkerKill]]:
    """The faults to inject, checked against the topology and the number of rounds."""
    links = [faults.parse_link_failure(f, graph, config.rounds) for f in config.fail_links]
    kills = [faults.parse_worker_kill(k, graph, config.rounds) for k in config.kill_workers]
    return links, kills


def _slow_nodes(config: RunConfig, graph: Any, workload: WorkloadPlan) -> dict[str, float]:
    """Each straggler's slow-down factor; a slowed node must run a worker."""
    slow = dict(faults.parse_slow_node(spec, graph) for spec in config.slow_nodes)
    workers = _worker_nodes(config, graph, workload)
    for node in slow:
        if node not in workers:
            raise FedmstError(f"--slow-node {node}: node {node} runs no worker in this run (it only forwards)")
    return slow


def _worker_limits(config: RunConfig, graph: Any, workload: WorkloadPlan) -> dict[str, containers.WorkerLimits]:
    """Each worker node's container limits (checked even for process workers, which ignore them)."""
    if config.workers not in containers.WORKER_BACKENDS:
        raise FedmstError(f"unknown worker backend {config.workers!r}; "
                          f"choose one of: {', '.join(containers.WORKER_BACKENDS)}")
    if config.workers == "process" and (config.cpus or config.memory):
        raise FedmstError("--cpus/--memory limit containers: add --workers docker")
    return containers.worker_limits(_worker_nodes(config, graph, workload), config.cpus, config.memory, graph.nodes)


def _worker_nodes(config: RunConfig, graph: Any, workload: WorkloadPlan) -> list[str]:
    """Nodes that run an agent: every node holding a model or relaying for one, and with faults
    to inject every node, since a re-planned tree may aggregate anywhere."""
    if config.fail_links or config.kill_workers:
        return sorted(graph.nodes, key=node_order)
    return sorted(set().union(*(p.nodes for p in workload.plans)), key=node_order)


def run(config: RunConfig, report: Report = print) -> dict[str, Any]:
    """Run ``config`` for real and return its summary; the run folder is written as it goes."""
    graph, workload = prepare(config)
    out = Path(config.out)
    _make_run_dir(out)
    write_json(out / "config.json", asdict(config))
    tag = f"[{config.scheduler}]"
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
               f"(W={workload.wavelengths}); {workload.reserved_wavelength_links} wavelength-links reserved")
        for name, reason in workload.blocked:
            report(f"{tag} blocked {name}: {reason}")
    scratch = Path(tempfile.mkdtemp(prefix="fedmst-"))
    docker = None
    if config.workers == "docker":
        docker = containers.DockerWorkers(image=config.image, limits=_worker_limits(config, graph, workload),
                                          mounts=(str(scratch), str(out.resolve())))
    started = time.monotonic()
    rounds: list[RoundResult] = []
    emu = Emulation(graph, delay_mode=config.delay_mode, loss=config.loss,
                    jitter_s=config.jitter_ms / 1e3, mtu=config.mtu, docker=docker)
    status = "interrupted"
    try:
        with emu:
            report(f"{tag} links: htb bandwidth; {emu.emulated()['note']}")
            _run_rounds(config, graph, workload, emu, out, scratch, report, rounds)
        status = "completed"
    except FedmstError as exc:
        status = f"failed: {' '.join(str(exc).splitlines())}"
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if emu.delay_stats:
            write_json(out / "delay_lines.json", emu.delay_stats)
        if rounds or status == "completed":  # rounds already finished keep their summary
            summary = _summary(config, graph, workload, rounds, emu, time.monotonic() - started, status)
            write_json(out / "summary.json", summary)
    return summary


def _make_run_dir(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise FedmstError(f"output folder {out}: cannot write there ({exc.strerror})") from None


def _run_rounds(config: RunConfig, graph: Any, workload: WorkloadPlan, emu: Emulation, out: Path,
                scratch: Path, report: Report, results: list[RoundResult]) -> None:
    """Run every round, appending each to ``results`` as soon as it is finished and written."""
    tag = f"[{config.scheduler}]"
    live = Live(tasks={p.task.name: p.task for p in workload.plans}, plans=workload.plans,
                models={p.task.name: tuple(range(p.task.k)) for p in workload.plans})
    link_failures, kills = _faults(config, graph)
    (scratch / "store").mkdir()
    specs = task_specs(config, live, emu)
    spec = {
        "control_socket": str(scratch / "control.sock"), "store_dir": str(scratch / "store"),
        "model": config.model, "epochs": config.epochs, "batch_size": config.batch_size, "lr": config.lr,
        "alpha": config.alpha, "data_seed": config.seed, "chunk_bytes": config.chunk_bytes,
        "timeout_s": config.phase_timeout_s, "stall_s": config.stall_s, "tasks": specs,
        "slow": _slow_nodes(config, graph, workload),
    }
    write_json(out / "plan.json", {
        "scheduler": config.scheduler, "wavelengths": workload.wavelengths,
        "reserved_wavelength_links": workload.reserved_wavelength_links,
        "reserved_capacity_mbps": workload.reserved_capacity_mbps,
        "blocked": [{"task": name, "reason": reason} for name, reason in workload.blocked],
        "tasks": [{**plan_summary(p), "flows": t["transfers"]} for p, t in zip(live.plans, specs)],
    })
    spec_file = scratch / "agents.json"
    spec_file.write_text(json.dumps(spec))
    token = secrets.token_hex(16)
    server = ControlServer(Path(spec["control_socket"]), token=token)
    fault_log: list[dict[str, Any]] = []
    try:
        nodes = _worker_nodes(config, graph, workload)
        workers = Workers(nodes, spec_file, emu, token, out / "agents")

        def check() -> None:
            workers.check()
            emu.check()

        t = config.phase_timeout_s
        server.accept(nodes, timeout_s=t, check=check)
        setup = server.run({"cmd": "setup", "source_digest": fedmst.source_digest()}, timeout_s=t, check=check)
        samples = {name: {int(i): n for r in setup.values() for i, n in r["samples"].get(name, {}).items()}
                   for name in live.tasks}
        where = "containers" if config.workers == "docker" else "processes"
        report(f"{tag} {len(nodes)} agents ({where}) ready in {max(r['seconds'] for r in setup.values()):.1f} s")
        write_json(out / "workers.json", {node: r["runs_in"] for node, r in sorted(setup.items())})
        sampler = CounterSampler(emu.counters)

        def replanned(res: RoundResult, phase: str, event: dict[str, Any]) -> None:
            event.update(round=res.round, before_phase=phase)
            event.update(replan(config, graph, live, emu, server, scratch, check, set(server.agents)))
            res.faults.append(event)
            fault_log.append(event)
            write_json(out / "faults.json", fault_log)
            dropped = "; ".join(f"{name} drops local model {i} ({why})" for name, d in event["dropped"].items()
                                for i, why in d.items())
            report(f"{tag} round {res.round}: {event['event']}; re-planned in {event['replan_s']:.2f} s"
                   + (f"; {dropped}" if dropped else ""))

        for r in range(1, config.rounds + 1):
            res = RoundResult(round=r)
            changes = []
            for f in link_failures:
                u, v = f.link
                if f.round == r and f.after_s is None:
                    lost = emu.set_link(u, v, up=False)
                    live.down.add(f.link)
                    changes.append({"event": f"link {u}-{v} down", "in_flight_lost_bytes": lost})
                if f.until == r:
                    emu.set_link(u, v, up=True)
                    live.down.discard(f.link)
                    changes.append({"event": f"link {u}-{v} up again", "in_flight_lost_bytes": 0})
            if changes:
                replanned(res, "broadcast", {"event": ", ".join(c["event"] for c in changes),
                                             "in_flight_lost_bytes": sum(c["in_flight_lost_bytes"] for c in changes)})
            drops, retransmits = emu.queue_drops(), emu.tcp_retransmits()
            before = emu.counters()
            for phase in ("broadcast", "train", "upload"):
                res.plans[phase] = live.plans
                msg: dict[str, Any] = {"cmd": phase, "round": r}
                if phase == "train" and config.deadline_s is not None:
                    msg["deadline_s"] = config.deadline_s
                if phase == "upload":
                    res.weights = msg["weights"] = aggregation_weights(live, samples, res.late, r)
                strikes = strikes_for(r, phase, link_failures, kills, emu, workers)
                start = time.perf_counter()
                with sampler.sampling(r, phase):
                    for strike in strikes:
                        strike.start()
                    replies = server.run(msg, timeout_s=t, check=check, survive=True, tolerate_errors=True)
                    for strike in strikes:
                        strike.finish(phase)
                        if strike.link is not None:
                            live.down.add(strike.link)
                    notice_kills([st.node for st in strikes if st.node is not None], workers, server, timeout_s=t)
                    replies = recover(phase, msg, replies, strikes, res, live, emu, server, workers, before, replanned,
                                      lambda res=res, r=r: aggregation_weights(live, samples, res.late, r), check, t)
                res.seconds[phase] = time.perf_counter() - start
                if phase == "train":
                    res.late = late_models(replies, live, report, tag, r, config.deadline_s)
                res.task_seconds[phase] = {
                    p.task.name: max(rep["task_seconds"].get(p.task.name, 0.0) for rep in replies.values())
                    for p in live.plans
                }
                after = emu.counters()
                res.link_bytes[phase] = {hop: after[hop] - before[hop] for hop in after}
                before = after
            res.queue_drops = {hop: n - drops[hop] for hop, n in emu.queue_drops().items()}
            res.retransmits = emu.tcp_retransmits() - retransmits
            evaluated = server.run({"cmd": "evaluate", "round": r}, timeout_s=t, check=check)
            res.accuracies = {name: acc for e in evaluated.values() for name, acc in e["accuracy"].items()}
            if config.save_models:
                saved = out / "models" / f"round{r}"
                saved.mkdir(parents=True, exist_ok=True)
                server.run({"cmd": "save", "dir": str(saved)}, timeout_s=t, check=check)
                for name, w in res.weights.items():
                    write_json(saved / f"{name}-weights.json", w)
            results.append(res)
            _write_tables(out, graph, config, results, emu.delay_applied)
            write_csv(out / "samples.csv", SAMPLE_FIELDS, sampler.rows)
            report(
                f"{tag} round {r}/{config.rounds}: broadcast {res.seconds['broadcast']:.2f} s, "
                f"train {res.seconds['train']:.2f} s, upload {res.seconds['upload']:.2f} s, "
                f"{sum(sum(b.values()) for b in res.link_bytes.values()) / 1e6:.1f} MB on links, "
                f"accuracy {res.accuracy:.3f}"
            )
    finally:
        server.close()


def _predicted_seconds(res: RoundResult, graph: Any, config: RunConfig, delay: bool) -> dict[str, float]:
    """The Plans' prediction of each phase of round ``res``, from the plans that phase ran with."""
    return {p: predicted_phase_seconds(res.plans[p], graph, p, chunk_bytes=config.chunk_bytes, with_delay=delay,
                                       mtu=config.mtu)
            for p in PHASES}


def _link_rows(graph: Any, res: RoundResult, mtu: int) -> list[dict[str, Any]]:
    """One row per link direction for one round: predicted weight bytes beside measured bytes.

    Within a phase a link direction either carries planned weights or only the ACKs (and ARP)
    of transfers going the other way, so measured bytes split cleanly into weight bytes (phases
    where weights were planned on it) and the rest.
    """
    predicted = {p: link_state(res.plans[p], phase=p, mtu=mtu) for p in PHASES}
    rows = []
    for u, v in sorted(res.link_bytes["broadcast"], key=lambda h: (sorted(map(node_order, h)), node_order(h[0]))):
        hop = (u, v)
        measured = {p: b[hop] for p, b in res.link_bytes.items()}
        planned = sum(predicted[p].get(hop, 0) for p in PHASES)
        weights = sum(measured[p] for p in PHASES if predicted[p].get(hop))
        rows.append({
            "round": res.round, "link": "-".join(sorted((u, v), key=node_order)), "src": u, "dst": v,
            "capacity_mbps": graph.edges[u, v]["capacity_mbps"],
            "predicted_bytes": planned, "measured_bytes": sum(measured.values()),
            "measured_weight_bytes": weights, "measured_other_bytes": sum(measured.values()) - weights,
            "error_pct": 100 * (weights - planned) / planned if planned else 0.0,
            "broadcast_bytes": measured["broadcast"], "upload_bytes": measured["upload"],
            "queue_drops": res.queue_drops[hop],
        })
    return rows


def _write_tables(out: Path, graph: Any, config: RunConfig, rounds: list[RoundResult], delay: bool) -> None:
    """Rewrite rounds.csv, tasks.csv and links.csv with every finished round (atomically)."""
    round_rows, link_rows, task_rows = [], [], []
    for res in rounds:
        secs = _predicted_seconds(res, graph, config, delay)
        task_rows += [{
            "round": res.round, "task": name, **{f"{p}_s": secs_[name] for p, secs_ in res.task_seconds.items()},
            "round_s": sum(secs_[name] for secs_ in res.task_seconds.values()), "accuracy": res.accuracies[name],
            "local_models": res.local_models[name],
        } for name in res.task_seconds["broadcast"]]
        rows = _link_rows(graph, res, config.mtu)
        link_rows += rows
        round_rows.append({
            "round": res.round, **{f"{p}_s": res.seconds[p] for p in ("broadcast", "train", "upload")},
            "round_s": sum(res.seconds.values()),
            "predicted_broadcast_s": secs["broadcast"], "predicted_upload_s": secs["upload"],
            "bytes_measured": sum(r["measured_bytes"] for r in rows),
            "bytes_predicted": sum(r["predicted_bytes"] for r in rows),
            "retransmitted_segments": res.retransmits, "queue_drops": sum(res.queue_drops.values()),
            "accuracy": res.accuracy, "local_models": sum(res.local_models.values()),
            "faults": "; ".join(f["event"] for f in res.faults),
            "late_updates": sum(len(m) for m in res.late.values()),
            "replan_s": sum(f["replan_s"] for f in res.faults),
        })
    write_csv(out / "rounds.csv", ROUND_FIELDS, round_rows)
    write_csv(out / "tasks.csv", TASK_FIELDS, task_rows)
    write_csv(out / "links.csv", LINK_FIELDS, link_rows)


def _workers_summary(docker: containers.DockerWorkers | None) -> dict[str, Any]:
    """Where the agents ran: processes in the hosts, or containers with their image and limits."""
    if docker is None:
        return {"backend": "process"}
    return {"backend": "docker", "image": docker.image,
            "limits": {n: asdict(lim) for n, lim in docker.limits.items()}}


def _summary(config: RunConfig, graph: Any, workload: WorkloadPlan, rounds: list[RoundResult],
             emu: Emulation, wall_s: float, status: str) -> dict[str, Any]:
    """summary.json: means over the finished rounds; ``status`` says whether all of them ran
    (``completed``), or the run was ``interrupted`` or ``failed: REASON`` after ``rounds``."""
    plans = workload.plans
    secs = [_predicted_seconds(r, graph, config, emu.delay_applied) for r in rounds]
    rows = [row for r in rounds for row in _link_rows(graph, r, config.mtu)]
    first = plans[0]
    return {
        "status": status,
        "rounds_planned": config.rounds,
        "scheduler": config.scheduler,
        "topology": graph.graph["name"],
        "local_models": config.local_models,
        "tasks": len(plans) + len(workload.blocked),
        "tasks_blocked": len(workload.blocked),
        "rounds": len(rounds),
        "model": config.model,
        "model_bytes": first.task.model_bytes,
        "global_node": first.task.global_node,
        "local_nodes": list(first.task.local_nodes),
        "aggregation_nodes": sorted(first.aggregation_nodes),
        "wavelengths": workload.wavelengths,
        "reserved_wavelength_links": workload.reserved_wavelength_links,
        "reserved_capacity_mbps": workload.reserved_capacity_mbps,
        "link_bytes_measured": sum(r["measured_bytes"] for r in rows),
        "link_bytes_predicted": sum(r["predicted_bytes"] for r in rows),
        "weight_bytes_measured": sum(r["measured_weight_bytes"] for r in rows),
        "ack_bytes_measured": sum(r["measured_other_bytes"] for r in rows),
        "tcp_retransmitted_segments": sum(r.retransmits for r in rounds),
        "queue_drops": sum(sum(r.queue_drops.values()) for r in rounds),
        "max_link_bytes_error": max((abs(r["error_pct"]) / 100 for r in rows if r["predicted_bytes"]), default=0.0),
        "round_latency_s": mean(sum(r.seconds.values()) for r in rounds),
        "task_round_latency_s": mean(
            sum(r.task_seconds[p][name] for p in r.task_seconds) for r in rounds for name in r.task_seconds["train"]
        ),
        **{f"{p}_s": mean(r.seconds[p] for r in rounds) for p in ("broadcast", "train", "upload")},
        "predicted_broadcast_s": mean(s["broadcast"] for s in secs),
        "predicted_upload_s": mean(s["upload"] for s in secs),
        "faults": [{"round": f["round"], "event": f["event"], "replan_s": f["replan_s"]}
                   for r in rounds for f in r.faults],
        "local_models_per_round": [sum(r.local_models.values()) for r in rounds],
        "late_updates_per_round": [sum(len(m) for m in r.late.values()) for r in rounds],
        "final_accuracy": rounds[-1].accuracy,
        "accuracy_per_round": [r.accuracy for r in rounds],
        "emulated": emu.emulated(),
        "workers": _workers_summary(emu.docker),
        "wall_s": wall_s,
    }
