"""A node agent: one process per compute host, inside that host's network namespace.

It holds the models placed on its node (G and/or local models of any number of tasks), trains
them on their own data shards, and plays its part in each transfer the plans route through it:
it relays global weights down broadcast transfers and sums updates into upload transfers.
The coordinator drives it phase by phase over the control channel.

Run as ``python -m fedmst.workers.agent --spec SPEC.json --node NODE``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

import fedmst
from fedmst.fl import aggregation
from fedmst.workers import control
from fedmst.fl import data
from fedmst.fl import models
from fedmst.fl import training
from fedmst.workers import transport


@dataclass
class Xfer:
    """A transfer this node takes part in, as written in the agent spec."""

    key: str
    phase: str
    src: str
    dst: str
    models: frozenset[int]
    src_addr: str
    dst_addr: str
    pair: transport.Pair | None = None


@dataclass
class TaskRole:
    """Everything one task needs on this node."""

    name: str
    global_node: str
    local_nodes: list[str]
    seed: int
    transfers: list[Xfer]
    active: frozenset[int] = frozenset()
    global_model: torch.nn.Module | None = None
    test: tuple[torch.Tensor, torch.Tensor] | None = None
    local: dict[int, tuple[torch.nn.Module, torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    trained: dict[int, torch.Tensor] = field(default_factory=dict)

    def incoming(self, node: str, phase: str) -> list[Xfer]:
        return [t for t in self.transfers if t.phase == phase and t.dst == node]

    def outgoing(self, node: str, phase: str) -> list[Xfer]:
        return [t for t in self.transfers if t.phase == phase and t.src == node]


class Agent:
    def __init__(self, spec: dict[str, Any], node: str) -> None:
        self.spec = spec
        self.node = node
        self.chunk_elems = max(1, int(spec["chunk_bytes"]) // 4)
        self.numel = 0
        self.roles = [r for r in map(self._role, spec["tasks"]) if r is not None]

    def _role(self, task: dict[str, Any]) -> TaskRole | None:
        mine = [
            Xfer(key=t["key"], phase=t["phase"], src=t["path"][0], dst=t["path"][-1],
                 models=frozenset(t["models"]), src_addr=t["src_addr"], dst_addr=t["dst_addr"])
            for t in task["transfers"]
            if self.node in (t["path"][0], t["path"][-1])
        ]
        here = self.node == task["global_node"] or self.node in task["local_nodes"]
        if not mine and not here:
            return None
        return TaskRole(task["name"], task["global_node"], list(task["local_nodes"]), int(task["seed"]), mine,
                        frozenset(task.get("active", range(len(task["local_nodes"])))))

    # phases ------------------------------------------------------------------------------------
    def setup(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Build models and data, then open every transfer's process group in one global order
        (sorted keys), so that no two agents can wait on each other in a cycle."""
        spec = self.spec
        if msg.get("source_digest") not in (None, fedmst.source_digest()):
            raise RuntimeError("this worker runs other fedmst code than the coordinator: rebuild the worker image "
                               "from this checkout (docker build -t fedmst-worker .)")
        xtr, ytr, xte, yte = data.train_test_split_seeded(*data.load_digits_dataset(), seed=spec["data_seed"])
        for role in self.roles:
            shards = data.dirichlet_shards(ytr, len(role.local_nodes), spec["alpha"], seed=role.seed)
            if self.node == role.global_node:
                torch.manual_seed(role.seed)
                role.global_model = self._build()
                role.test = (xte, yte)
            for i, node in enumerate(role.local_nodes):
                if node == self.node:
                    idx = torch.as_tensor(shards[i])
                    role.local[i] = (self._build(), xtr[idx], ytr[idx])
        scratch = self._build()
        self.numel = aggregation.flatten(scratch).numel()
        # warm torch up (allocator, kernels) on a throw-away model so round 1's training time is
        # as representative as the later rounds'
        training.train_local(scratch, xtr[:64], ytr[:64], epochs=1, batch_size=spec["batch_size"],
                             lr=spec["lr"], seed=0)
        self._connect(Path(spec["store_dir"]))
        return {"samples": {r.name: {str(i): len(v[2]) for i, v in r.local.items()} for r in self.roles},
                "runs_in": runs_in()}

    def _connect(self, store: Path) -> None:
        """Open every transfer's process group in one global order (sorted keys), so that no two
        agents can wait on each other in a cycle."""
        xfers = sorted((t for r in self.roles for t in r.transfers), key=lambda t: t.key)
        for t in xfers:
            rank = transport.SENDER if t.src == self.node else transport.RECEIVER
            addr = t.src_addr if rank == transport.SENDER else t.dst_addr
            t.pair = transport.open_pair(store / t.key, rank=rank, address=addr, timeout_s=self.spec["timeout_s"],
                                         numel=self.numel, stall_s=self.spec.get("stall_s"))

    def replan(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Take up a new plan (after a link failure or a dead worker): close every transfer, then
        open the new plan's. Models, data shards and trained weights stay; only the local models
        listed as ``active`` train and send from now on."""
        for role in self.roles:
            for t in role.transfers:
                if t.pair is not None:
                    transport.close_pair(t.pair)
                    t.pair = None
        kept = {r.name: r for r in self.roles}
        roles = []
        for task in msg["tasks"]:
            new = self._role(task)
            if new is None:
                continue
            old = kept.get(new.name)
            if old is not None:
                old.transfers, old.active = new.transfers, new.active
                new = old
            roles.append(new)
        self.roles = roles
        self._connect(Path(msg["store_dir"]))
        return {}

    def _build(self) -> torch.nn.Module:
        return models.build_model(self.spec["model"], num_classes=10, input_shape=(1, 8, 8))

    def broadcast(self, msg: dict[str, Any]) -> dict[str, Any]:
        return {"task_seconds": self._each_role(self._broadcast_role)}

    def _broadcast_role(self, role: TaskRole) -> None:
        streams: list[Callable[[], None]] = []
        if self.node == role.global_node:
            assert role.global_model is not None
            flat = aggregation.flatten(role.global_model)
            feeds = [(flat, None, role.outgoing(self.node, "broadcast"), set(role.local))]
        else:
            feeds = []
            for t_in in role.incoming(self.node, "broadcast"):
                buf = torch.empty(self.numel)
                outs = [t for t in role.outgoing(self.node, "broadcast") if t.models <= t_in.models]
                feeds.append((buf, t_in, outs, {i for i in role.local if i in t_in.models}))
        for buf, t_in, outs, locals_ in feeds:
            def stream(buf=buf, t_in=t_in, outs=outs, locals_=locals_) -> None:
                transport.relay(buf, source=t_in.pair if t_in else None,
                                sinks=[t.pair for t in outs], chunk_elems=self.chunk_elems)
                for i in locals_:
                    aggregation.load_flat(role.local[i][0], buf)
            streams.append(stream)
        _run_all(streams)

    def train(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Train every active local model on this node, one after another.

        A node slowed by ``slow`` (a factor, from ``--slow-node``) waits ``slow - 1`` times each
        model's real training time after it, as a CPU that much slower would take. With a
        ``deadline_s``, a model not done by then is late: its update is dropped (the node still
        relays and aggregates the others) and the node replies at the deadline.
        """
        spec, losses, done, late = self.spec, {}, {}, {}
        slow = float(spec.get("slow", {}).get(self.node, 1.0))
        deadline = msg.get("deadline_s")
        start = time.perf_counter()
        for role in self.roles:
            for i, (model, x, y) in sorted(role.local.items()):
                if i not in role.active:
                    continue
                role.trained.pop(i, None)
                began = time.perf_counter()
                losses[f"{role.name}/{i}"] = training.train_local(
                    model, x, y, epochs=spec["epochs"], batch_size=spec["batch_size"], lr=spec["lr"],
                    seed=role.seed * 1000 + msg["round"] * 100 + i,
                )
                finish = time.perf_counter() + (time.perf_counter() - began) * (slow - 1)
                if deadline is not None and finish - start > deadline:
                    time.sleep(max(0.0, start + deadline - time.perf_counter()))
                    late.setdefault(role.name, []).append(i)
                    continue
                time.sleep(max(0.0, finish - time.perf_counter()))
                role.trained[i] = aggregation.flatten(model)
            done[role.name] = time.perf_counter() - start
        return {"losses": losses, "task_seconds": done, "late": late}

    def upload(self, msg: dict[str, Any]) -> dict[str, Any]:
        weights: dict[str, dict[str, float]] = msg["weights"]
        return {"task_seconds": self._each_role(lambda role: self._upload_role(role, weights[role.name]))}

    def _upload_role(self, role: TaskRole, weights: dict[str, float]) -> None:
        def own(models_: set[int]) -> torch.Tensor:
            acc = torch.zeros(self.numel)
            for i in sorted(models_ & role.trained.keys()):
                acc.add_(role.trained[i], alpha=float(weights[str(i)]))
            return acc

        incoming = role.incoming(self.node, "upload")
        if self.node == role.global_node:
            assert role.global_model is not None
            acc = own(set(role.trained))
            transport.aggregate(acc, sources=[t.pair for t in incoming], sink=None, chunk_elems=self.chunk_elems)
            aggregation.load_flat(role.global_model, acc)
            return
        streams = []
        for t_out in role.outgoing(self.node, "upload"):
            sources = [t.pair for t in incoming if t.models <= t_out.models]
            def stream(t_out=t_out, sources=sources) -> None:
                transport.aggregate(own(set(t_out.models)), sources=sources, sink=t_out.pair,
                                    chunk_elems=self.chunk_elems)
            streams.append(stream)
        _run_all(streams)

    def evaluate(self, msg: dict[str, Any]) -> dict[str, Any]:
        acc = {}
        for role in self.roles:
            if role.global_model is not None and role.test is not None:
                acc[role.name] = training.accuracy(role.global_model, *role.test)
        return {"accuracy": acc}

    def save(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Write this node's trained local models and new global models (for exactness checks)."""
        out = Path(msg["dir"])
        for role in self.roles:
            for i, flat in role.trained.items():
                torch.save(flat, out / f"{role.name}-local{i}.pt")
            if role.global_model is not None:
                torch.save(aggregation.flatten(role.global_model), out / f"{role.name}-global.pt")
        return {}

    # helpers -----------------------------------------------------------------------------------
    def _each_role(self, fn: Callable[[TaskRole], None]) -> dict[str, float]:
        """Run ``fn`` for every task concurrently; return when each task's part was done, in
        seconds since the phase started here (a task's phase ends when its last node is done)."""
        start, done = time.perf_counter(), {}

        def timed(role: TaskRole) -> None:
            fn(role)
            done[role.name] = time.perf_counter() - start

        _run_all([lambda r=r: timed(r) for r in self.roles])
        return done


def runs_in(root: Path = Path("/")) -> dict[str, Any]:
    """Where this agent runs, seen from inside: in a container or not, and the CPU and memory
    limits its cgroup really enforces (``None`` = unlimited), cgroup v2 or v1."""
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
    return {"container": (root / ".dockerenv").exists(), "cpus": cpus, "memory_bytes": memory_bytes}


def _run_all(fns: list[Callable[[], None]]) -> None:
    """Run independent streams concurrently (they block on the network), re-raising failures."""
    if len(fns) == 1:
        fns[0]()
        return
    with ThreadPoolExecutor(max_workers=max(1, len(fns))) as pool:
        for fut in [pool.submit(f) for f in fns]:
            fut.result()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fedmst.workers.agent")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--node", required=True)
    args = parser.parse_args(argv)
    import json

    spec = json.loads(Path(args.spec).read_text())
    torch.set_num_threads(1)
    chan = control.connect(spec["control_socket"], node=args.node, token=os.environ["FEDMST_TOKEN"])
    agent = Agent(spec, args.node)
    handlers = {name: getattr(agent, name)
                for name in ("setup", "broadcast", "train", "upload", "evaluate", "save", "replan")}
    while True:
        msg = chan.recv()
        if msg is None or msg.get("cmd") == "stop":
            return 0
        start = time.perf_counter()
        try:
            reply = handlers[msg["cmd"]](msg)
            reply.update(ok=True, seconds=time.perf_counter() - start)
        except Exception as exc:  # noqa: BLE001 - reported to the coordinator, which stops the run
            traceback.print_exc()
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
        chan.send(reply)


if __name__ == "__main__":
    sys.exit(main())
