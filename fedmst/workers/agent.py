"""A node agent: one process per compute host, inside that host's network namespace.

It holds the models placed on its node (G and/or local models of any number of tasks), trains
them on their own data shards, and plays its part in each transfer the plans route through it:
it relays global weights down broadcast transfers and sums updates into upload transfers.
The coordinator drives it phase by phase over the control channel, with the commands of
:mod:`fedmst.protocol`; each gets one reply (:class:`~fedmst.protocol.Failed` when it raised).

Run as ``python -m fedmst.workers.agent --spec SPEC.json --node NODE``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import threading
import time
import traceback
from dataclasses import asdict, replace
from functools import cache, partial
from pathlib import Path
from typing import Any, Callable, Collection, Mapping

import torch

import fedmst
from fedmst.core.route import warm_elements
from fedmst.fl import aggregation
from fedmst.fl import data
from fedmst.fl import models
from fedmst.fl import training
from fedmst.fl.flower import Fitted, load_client_fn
from fedmst.fl.strategies import build_strategy
from fedmst.protocol import (ABORT_FILE, ARRIVALS_SUFFIX, AgentSpec, Broadcast, Checkpoint, Command, Done, Evaluate,
                             Evaluated, Failed, PhaseDone, PhaseSpan, ProtocolError, Replan, Reply, Restore, RoundsDone,
                             RunRounds, RunsIn, Save, Setup, SetupDone, Stop, TaskSpec, Train, Trained, Upload, root_id)
from fedmst.workers import control
from fedmst.workers import dataflow
from fedmst.workers import learners
from fedmst.workers import snapshots
from fedmst.workers import transport
from fedmst.workers.iteration_bytes import Told
from fedmst.workers.roles import TaskRole


class PhaseAborted(RuntimeError):
    """The coordinator gave the phase up (it found a transfer stalled)."""


class Progress:
    """A transfer phase's folder, shared with the coordinator: the agent marks there each transfer
    whose last chunk arrived (a line in its own file, :data:`ARRIVALS_SUFFIX`), and looks there for
    the coordinator's abort file."""

    def __init__(self, folder: Path, node: str) -> None:
        self.folder = folder
        # unbuffered: each mark is one append, whole, whichever transfer thread makes it
        self._marks = open(folder / f"{node}{ARRIVALS_SUFFIX}", "ab", buffering=0)  # noqa: SIM115

    def arrived(self, key: str) -> None:
        self._marks.write(f"{key}\n".encode())

    def close(self) -> None:
        self._marks.close()

    def abort_reason(self) -> str | None:
        """Why the coordinator aborted the phase, or None while it has not."""
        try:
            return (self.folder / ABORT_FILE).read_text().strip() or "aborted"
        except FileNotFoundError:
            return None


class Agent:
    def __init__(self, spec: AgentSpec, node: str) -> None:
        self.spec = spec
        self.node = node
        self.chunk_elems = max(1, spec.chunk_bytes // 4)
        self._numel: dict[tuple[str, str], int] = {}
        self.roles = [r for r in map(self._role, spec.tasks) if r is not None]
        self.told = Told(spec.iteration_bytes_map)  # each connection's bytes a round, for the congestion control

    def _role(self, task: TaskSpec) -> TaskRole | None:
        """This node's part in ``task``; None when it neither holds a model nor ends a transfer."""
        mine = tuple(t for t in task.transfers if self.node in (t.src, t.dst))
        here = self.node == task.global_node or self.node in task.local_nodes
        if not mine and not here:
            return None
        return TaskRole(task, mine, build_strategy(self.spec.strategy, self.spec.strategy_args))

    def handle(self, cmd: Command) -> Reply:
        """Run one command; its reply carries the seconds it took, or the error it raised."""
        handlers: dict[type, Callable[..., Reply]] = {
            Setup: self.setup, Broadcast: self.broadcast, Train: self.train, Upload: self.upload,
            Evaluate: self.evaluate, Save: self.save, Replan: self.replan, RunRounds: self.run_rounds,
            Checkpoint: self.checkpoint, Restore: self.restore,
        }
        start = time.perf_counter()
        try:
            handler = handlers.get(type(cmd))
            if handler is None:
                raise TypeError(f"{type(cmd).__name__} is not a command an agent runs")
            reply = handler(cmd)
        except Exception as exc:  # noqa: BLE001 - reported to the coordinator, which decides
            traceback.print_exc()
            reply = Failed(f"{type(exc).__name__}: {exc}".splitlines()[0])
        return dataclasses.replace(reply, seconds=time.perf_counter() - start)

    # phases ------------------------------------------------------------------------------------
    def setup(self, cmd: Setup) -> SetupDone:
        """Build models and data (refused when this agent runs other sources than the
        coordinator), then open every transfer."""
        spec = self.spec
        if cmd.source_digest != fedmst.source_digest():
            raise RuntimeError("this worker runs other fedmst code than the coordinator: rebuild the worker image "
                               "from this checkout (docker build -t fedmst-worker .)")
        for role in self.roles:
            task = role.spec
            if self.node != task.global_node and self.node not in task.local_nodes:
                continue  # a relay: it holds no model
            holding = learners.hold(spec, task, self.node)
            role.local, role.judge, role.base = holding.local, holding.judge, holding.initial
            if self.node == task.global_node:
                role.global_weights = holding.initial.clone()
            if role.local:
                model, dataset = learners.kind(spec, task)
                warm_up(model=model, dataset=dataset, optimizer=spec.optimizer, batch_size=spec.batch_size,
                        lr=spec.lr, client=spec.client, host_trainer=bool(spec.trainer_socket))
        self._connect(spec.store_dir)
        return SetupDone(samples={r.name: {i: n for i, learner in r.local.items() if (n := learner.samples)}
                                  for r in self.roles},
                         runs_in=replace(runs_in(coordinator_root=spec.coordinator_root),
                                         congestion_control=transport.congestion_controls(),
                                         slow_start_after_idle=transport.slow_start_after_idle()))

    def _connect(self, store: str) -> None:
        """Open every connection's process group and warm it, all at once (one thread each): opening one blocks until
        its peer opens it too, so opening them in turn would cost a rendezvous and a TCP handshake per connection, one
        after the other across the network.

        Warming moves zeros over each connection: its path's bandwidth-delay product, at least one chunk and at most
        its largest transfer. The handshake, gloo's first use and TCP's slow start are paid before round 1: a
        connection that has carried one window's worth sends at the path's rate from then on (with one chunk only,
        round 1 of a 10 Gbit/s line took 18-21% longer than round 2). Warming every connection with a whole model at
        once took longer and overflowed the queues connections share (the losses set TCP's ssthresh on them); an A/B
        of the two measured the same phase times (docs/architecture.md, "Transport"). The coordinator counts no set-up
        bytes in any round."""
        def open_(name: str, role: TaskRole) -> None:
            shared = [t for t in role.transfers if t.connection == name]
            t = shared[0]
            rank = transport.SENDER if t.src == self.node else transport.RECEIVER
            addr = t.src_addr if rank == transport.SENDER else t.dst_addr
            numel = self.numel(role.spec)
            pair = transport.open_pair(store, name, rank=rank, address=addr, timeout_s=self.spec.timeout_s,
                                       numel=numel)
            largest = max(hi - lo for lo, hi in (dataflow.span(t, numel) for t in shared))
            transport.warm(pair, warm_elements(largest, self.chunk_elems, t.window_bytes), self.chunk_elems)
            role.pairs[name] = pair
            self.told.add(role.name, addr, dataflow.bytes_sent(self.node, shared, numel))

        dataflow.run_all([partial(open_, name, role) for role in self.roles
                          for name in dict.fromkeys(t.connection for t in role.transfers)])
        transport.idle_loops()

    def replan(self, cmd: Replan) -> Done:
        """Take up a new plan (after a link failure or a dead worker): close every transfer, then
        open the new plan's. Models, data shards and trained weights stay; only the local models
        listed as ``active`` train and send from now on."""
        transport.close_all(role.pairs for role in self.roles)
        self.told.forget()
        kept = {r.name: r for r in self.roles}
        roles = []
        for task in cmd.tasks:
            new = self._role(task)
            if new is None:
                continue
            old = kept.get(new.name)
            if old is not None:
                old.spec, old.transfers = new.spec, new.transfers
                new = old
            roles.append(new)
        self.roles = roles
        self._connect(cmd.store_dir)
        return Done()

    def numel(self, task: TaskSpec) -> int:
        """Weights in ``task``'s model (its flat vector's length), worked out once per kind of model."""
        kind = ("flower", self.spec.client) if self.spec.client else learners.kind(self.spec, task)
        if kind not in self._numel:
            self._numel[kind] = (learners.flower_start(self.spec, task)[0].numel if self.spec.client
                                 else aggregation.flatten(learners.build_model(self.spec, task)).numel())
        return self._numel[kind]

    def broadcast(self, cmd: Broadcast) -> PhaseDone:
        return PhaseDone(task_seconds=self._transfer_phase(
            cmd.progress_dir, lambda role, progress: self._phase_role(role, "broadcast", progress.arrived)))

    def _transfer_phase(self, progress_dir: str, fn: Callable[[TaskRole, Progress], None],
                        poll_s: float = 0.1) -> dict[str, float]:
        """Run a transfer phase's part of every task in a thread of its own, marking progress,
        while this thread looks for the coordinator's abort.

        On an abort the phase fails at once with the coordinator's reason. Its connections are
        shut, which wakes every wait except one on a message already partly through (gloo signals
        no error to those): that thread is left to end at its own timeout, holding only the
        connections the re-plan replaces.
        """
        progress = Progress(Path(progress_dir), self.node)
        outcome: dict[str, Any] = {}

        def phase() -> None:
            try:
                outcome["seconds"] = _each_role(self.roles, lambda role: fn(role, progress))
            except Exception as exc:  # noqa: BLE001 - handed to the agent's thread below
                outcome["error"] = exc

        worker = threading.Thread(target=phase, name="phase", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(poll_s)
            reason = progress.abort_reason()
            if reason is not None and worker.is_alive():
                transport.abort_connections()
                worker.join(1.0)
                raise PhaseAborted(reason)
        progress.close()  # every transfer thread is done (an aborted phase's may not be: left open)
        if "error" in outcome:
            reason = progress.abort_reason()
            if reason is not None:
                raise PhaseAborted(reason) from None
            raise outcome["error"]
        return outcome["seconds"]

    def _phase_role(self, role: TaskRole, phase: str, arrived: Callable[[str], None],
                    weights: Mapping[int, float] | None = None, round_: int = 0) -> None:
        """Play this node's part of ``role``'s plan in ``phase`` (:func:`dataflow.run_phase`), then
        keep the global model it ends with: G's model after the upload, and the base every local
        model here starts the next round from.

        An upload carries updates (trained weights minus :attr:`TaskRole.base`), weighted; where it
        ends holding their sum (G, or every member of a ring) the task's strategy steps from the
        base to round ``round_``'s global model."""
        numel = self.numel(role.spec)
        if phase == "broadcast":
            self.told.begin_round(role.name)
        whole = not role.strategy.decomposable  # each update reaches G on its own, unweighted
        own = partial(_weighted_updates, role, {i: 1.0 for i in weights or {}} if whole else weights or {}, numel)
        at_g = self.node == role.spec.global_node
        starts = at_g and phase == "broadcast" and role.global_weights is not None
        model = role.global_weights.clone() if starts else None  # type: ignore[union-attr]
        active = frozenset(role.spec.active)
        held = dataflow.run_phase(phase, dataflow.PhaseInputs(
            node=self.node, global_node=role.spec.global_node, transfers=role.transfers, pairs=role.pairs,
            numel=numel, chunk_elems=self.chunk_elems, model=model, own=own,
            hosted=frozenset(role.local) & active, everyone=active, each=whole), arrived)
        if held is None:
            if at_g and phase == "upload":
                raise RuntimeError(f"{role.name}: G's node ended the upload without the global model")
            return
        if isinstance(held, dict):
            assert role.base is not None and weights is not None
            held = role.strategy.aggregate(round_, role.base, {i: u for i, u in held.items() if i in weights}, weights)
        elif phase == "upload":
            assert role.base is not None
            held = role.strategy.step(round_, role.base, held)
        role.base = held.clone()  # every local model here starts the next round from it
        if at_g and phase == "upload":
            role.global_weights = held

    def train(self, cmd: Train) -> Trained:
        """Train every active local model on this node, one after another; a task's training here lasts at least its
        ``compute_s`` (the node replies once every task's has).

        A slowed run (``time_scale`` above 1) does not sit through its training: in lockstep no transfer runs beside
        it, so the node reports how long its training lasts on the run's clock (each model N times its CPU time, see
        :meth:`_train_role`) instead of waiting it out."""
        losses: dict[str, float] = {}
        examples: dict[str, int] = {}
        done: dict[str, float] = {}
        late: dict[str, list[int]] = {}
        start, elapsed = time.perf_counter(), 0.0
        wait = self.spec.time_scale == 1.0
        for role in self.roles:
            fitted, role_late, elapsed = self._train_role(role, cmd.round, start, elapsed, cmd.deadline_s, wait=wait)
            for i, fit in fitted.items():
                examples[f"{role.name}/{i}"] = fit.examples
                if fit.loss is not None:
                    losses[f"{role.name}/{i}"] = fit.loss
            if role_late:
                late[role.name] = role_late
            done[role.name] = max(elapsed, role.spec.compute_s if fitted else 0.0)
        if wait:
            time.sleep(max(0.0, start + max(done.values(), default=0.0) - time.perf_counter()))
        return Trained(task_seconds=done, losses=losses, late={name: tuple(v) for name, v in late.items()},
                       examples=examples)

    def _train_role(self, role: TaskRole, round_: int, start: float, elapsed: float, deadline: float | None, *,
                    wait: bool = True) -> tuple[dict[int, Fitted], list[int], float]:
        """Train ``role``'s active local models here, one after another, from ``elapsed`` seconds after ``start``;
        return what each training gave (late ones too), the models that were late, and when this training ended
        (seconds after ``start``).

        A model's training lasts its real time or, in a slowed run, ``time_scale`` times the CPU time it took,
        whichever is longer: the slowed network sees compute as a dedicated core would do it, however many models
        share this host's cores. A node slowed by ``slow`` (a factor, from ``--slow-node``) takes ``slow`` times that,
        as a CPU that much slower would. With a ``deadline`` (seconds after ``start``), a model not done by then (or
        whose task's ``compute_s`` is longer) is late: its update is dropped (the node still relays and aggregates the
        others) and training here ends at the deadline. With ``wait`` the node sleeps until each model's training is
        over; without, it only counts."""
        spec = self.spec
        slow = float(spec.slow.get(self.node, 1.0))
        fitted: dict[int, Fitted] = {}
        late: list[int] = []
        active = set(role.spec.active)
        for i in set(role.trained) - active:  # sat this round out (not selected, or dropped): nothing to send
            del role.trained[i]
        for i, learner in sorted(role.local.items()):
            if i not in active:
                continue
            assert role.base is not None, "a node holding local models starts from the task's global model"
            role.trained.pop(i, None)
            began, cpu = time.perf_counter(), time.thread_time()
            fitted[i] = learner.fit(role.base, round_, training.local_seed(role.spec.seed, round_, i),
                                    role.strategy.proximal_mu)
            busy = fitted[i].busy_s if fitted[i].busy_s is not None else time.thread_time() - cpu
            took = max(time.perf_counter() - began, spec.time_scale * busy)
            finish = (began - start if wait else elapsed) + took * slow
            if deadline is not None and max(finish, role.spec.compute_s) > deadline:
                late.append(i)
                elapsed = deadline
            else:
                role.trained[i] = fitted[i].weights
                elapsed = finish
            if wait:
                time.sleep(max(0.0, start + elapsed - time.perf_counter()))
        return fitted, late, elapsed

    def run_rounds(self, cmd: RunRounds) -> RoundsDone:
        """Every task's rounds on its own clock (one thread per task): from its start offset, each round's broadcast
        part, training (at least the task's ``compute_s``) and upload part, then at once the next round's; what waits
        for what is only the data (a node forwards or trains what has arrived). Rounds are numbered from
        ``first_round``. G keeps each round's global model and evaluates those it kept once the rounds are over, off
        the clock (or later, where ``evaluate`` is False)."""
        spans: list[PhaseSpan] = []
        accuracy: dict[str, tuple[float, ...]] = {}
        lock = threading.Lock()

        def mark(role: TaskRole, r: int, phase: str, began: float) -> None:
            span = PhaseSpan(role.name, r, phase, began - cmd.start_at, time.monotonic() - cmd.start_at)
            with lock:
                spans.append(span)
            _spanned(cmd.progress_dir, self.node, span)  # what a run stopped before its end can still tell

        def clock(role: TaskRole) -> None:
            name = role.name
            time.sleep(max(0.0, cmd.start_at + cmd.offsets.get(name, 0.0) - time.monotonic()))
            for r in range(cmd.first_round, cmd.first_round + cmd.rounds.get(name, 0)):
                began = time.monotonic()
                if cmd.progress_dir and self.node == role.spec.global_node:
                    _began_round(Path(cmd.progress_dir) / name, r, began)
                self._phase_role(role, "broadcast", _nowhere)
                mark(role, r, "broadcast", began)
                if role.local:
                    began = time.monotonic()
                    self._train_role(role, r, time.perf_counter(), 0.0, None)
                    time.sleep(max(0.0, began + role.spec.compute_s - time.monotonic()))
                    mark(role, r, "train", began)
                began = time.monotonic()
                self._phase_role(role, "upload", _nowhere, cmd.weights[name], r)
                mark(role, r, "upload", began)
                if role.global_weights is not None and self.node == role.spec.global_node:
                    role.kept.append((r, role.global_weights.clone()))
            if cmd.evaluate and role.kept and role.judge is not None:
                accuracy[name] = tuple(role.judge(flat, r) for r, flat in role.kept)
                role.kept.clear()

        dataflow.run_all([partial(clock, role) for role in self.roles])
        return RoundsDone(spans=tuple(spans), accuracy=accuracy)

    def upload(self, cmd: Upload) -> PhaseDone:
        return PhaseDone(task_seconds=self._transfer_phase(
            cmd.progress_dir,
            lambda role, progress: self._phase_role(role, "upload", progress.arrived, cmd.weights[role.name],
                                                    cmd.round)))

    def evaluate(self, cmd: Evaluate) -> Evaluated:
        acc = {}
        for role in self.roles:
            if role.global_weights is not None and role.judge is not None:
                acc[role.name] = role.judge(role.global_weights, cmd.round)
        return Evaluated(accuracy=acc)


    # what it keeps on disk (fedmst.workers.snapshots) ----------------------------------------
    def checkpoint(self, cmd: Checkpoint) -> Done:
        snapshots.checkpoint(self.roles, self.node, Path(cmd.dir))
        return Done()

    def restore(self, cmd: Restore) -> Done:
        snapshots.restore(self.roles, self.node, Path(cmd.dir))
        return Done()

    def save(self, cmd: Save) -> Done:
        snapshots.save(self.roles, Path(cmd.dir))
        return Done()


def _each_role(roles: list[TaskRole], fn: Callable[[TaskRole], None]) -> dict[str, float]:
    """Run ``fn`` for every task concurrently; return when each task's part was done, in
    seconds since the phase started here (a task's phase ends when its last node is done)."""
    start, done = time.perf_counter(), {}

    def timed(role: TaskRole) -> None:
        fn(role)
        done[role.name] = time.perf_counter() - start

    dataflow.run_all([lambda r=r: timed(r) for r in roles])
    return done


def _weighted_updates(role: TaskRole, weights: Mapping[int, float], numel: int,
                      models_: Collection[int] | None) -> torch.Tensor:
    """The sum of this node's trained ``models_`` (None: all) as updates, each its trained weights
    minus the round's base, weighted: what this node adds to an upload."""
    acc = torch.zeros(numel)
    counted = role.trained.keys() & weights.keys()  # the coordinator's weights say whose update counts
    summed = sorted(counted if models_ is None else set(models_) & counted)
    # a relay that a re-plan made mid-round (a dead worker's tree routed through it) joined after
    # the broadcast: it has no base, and no update of its own to add
    assert role.base is not None or not summed, "only a node that took part in the broadcast sums updates"
    for i in summed:
        acc.add_(role.trained[i] - role.base, alpha=float(weights[i]))
    return acc


def _began_round(path: Path, round_: int, at: float) -> None:
    """Say in ``path`` that round ``round_`` began at ``at`` (monotonic), replacing what it said:
    a reader sees the old line or the new one, never half of one."""
    partial = path.with_name(path.name + ".new")
    partial.write_text(f"{round_} {at}\n")
    partial.replace(path)


def _spanned(progress_dir: str | None, node: str, span: PhaseSpan) -> None:
    """Add ``node``'s ``span`` to its task's spans file in ``progress_dir`` (none: nothing asked
    for), a JSON line appended in one write, so that the lines of several agents never mix
    (:meth:`fedmst.run.cluster_emulate.EmulatedRunner.interrupted` reads them)."""
    if not progress_dir:
        return
    line = json.dumps({"node": node, **asdict(span)}) + "\n"
    with (Path(progress_dir) / f"{span.task}.spans").open("a") as f:
        f.write(line)


def _nowhere(key: str) -> None:
    """Arrivals are not marked on an independent clock (no stall watch runs there)."""


def runs_in(root: Path = Path("/"), coordinator_root: str = "") -> RunsIn:
    """Where this agent runs, seen from inside: in a container or not (its root file system is not
    the coordinator's, ``coordinator_root``; where that is unknown, Docker's marker file says), and
    the CPU and memory limits its cgroup really enforces (``None`` = unlimited), cgroup v2 or v1.
    A marker file alone misleads where fedmst itself runs in a container."""
    cg = root / "sys/fs/cgroup"

    def read(*names: str) -> str | None:
        for name in names:
            try:
                return (cg / name).read_text().strip()
            except OSError:
                continue
        return None

    cpus = None
    quota = read("cpu.max")
    if quota is not None:
        limit, _, period = quota.partition(" ")
        cpus = None if limit == "max" else int(limit) / int(period)
    else:
        limit, period = read("cpu/cpu.cfs_quota_us", "cpu,cpuacct/cpu.cfs_quota_us"), \
            read("cpu/cpu.cfs_period_us", "cpu,cpuacct/cpu.cfs_period_us")
        if limit is not None and period is not None and int(limit) > 0:
            cpus = int(limit) / int(period)
    memory = read("memory.max", "memory/memory.limit_in_bytes")
    memory_bytes = int(memory) if memory is not None and memory.isdigit() and int(memory) < 1 << 62 else None
    container = root_id(str(root)) != coordinator_root if coordinator_root else (root / ".dockerenv").exists()
    return RunsIn(container=container, cpus=cpus, memory_bytes=memory_bytes)


@cache
def warm_up(*, model: str, dataset: str, optimizer: str, batch_size: int, lr: float, client: str = "",
            host_trainer: bool = False) -> None:
    """Train a throw-away model briefly, so that torch's lazy imports, allocator and kernels are
    ready: round 1's training time is then as representative as the later rounds'. Once per process:
    a fork server runs it once for every agent it forks (:meth:`fedmst.workers.backends.ProcessBackend.preload`),
    and their own call at set-up finds it done.

    For a Flower ``client``: import it (flwr and whatever it imports) and take one ``torch.optim``
    step, whose first use imports ``torch._dynamo`` (2 s of CPU that every agent's first ``fit``
    would otherwise pay in round 1). With a ``host_trainer`` the agents train nothing themselves: only
    the dataset is loaded and a model built (they size shards and hold G's model)."""
    torch.set_num_threads(1)
    if client:
        load_client_fn(client)
        weight = torch.zeros(1, requires_grad=True)
        weight.grad = torch.ones(1)
        torch.optim.SGD([weight], lr=lr).step()
        return
    d = data.load_dataset(dataset)
    scratch = models.build_model(model, num_classes=d.num_classes, input_shape=d.input_shape)
    if not host_trainer:
        training.rehearse(scratch, d.x_train, d.y_train, batch_size=batch_size, lr=lr, optimizer=optimizer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fedmst.workers.agent")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--node", required=True)
    args = parser.parse_args(argv)
    spec = AgentSpec.from_json(Path(args.spec).read_text())
    torch.set_num_threads(1)
    transport.enable_loop_wakes()
    chan = control.connect(spec.control_socket, node=args.node, token=os.environ["FEDMST_TOKEN"])
    agent = Agent(spec, args.node)
    while True:
        try:
            cmd = chan.recv()
        except ProtocolError as exc:  # a line we cannot read: say so, and wait for the next
            chan.send(Failed(f"ProtocolError: {exc}".splitlines()[0]))
            continue
        if cmd is None or isinstance(cmd, Stop):
            return 0
        chan.send(agent.handle(cmd))


if __name__ == "__main__":
    sys.exit(main())
