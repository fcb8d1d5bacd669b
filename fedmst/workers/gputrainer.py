"""One trainer per host for ``--device cuda`` (and ``--host-trainer``): it trains the host's local
models, one at a time, for every agent (:mod:`fedmst.fl.devices` says why not a CUDA context per agent).

Agents reach it over a Unix socket in the run's scratch folder (a path, so agents in their network
namespaces, and in containers that mount the folder, reach it too). A request names the model, the
dataset and which shard (so the trainer rebuilds the shard's rows as the agent would,
:func:`fedmst.fl.data.shards`) and carries the round's global model; the reply carries the trained
weights, the loss, and the training's own time (on a GPU synchronised before and after; on the CPU
the trainer's CPU time), without the wait behind other models: the time the agent counts, as it
counts its own thread's CPU time. GPU memory is bounded by one CUDA context, each dataset once, one
model per kind (model and dataset) and the one in training's optimizer state; the trainer records
each node's peak (``trainer.json``, :class:`fedmst.workers.hosttrainer.Training`).
"""

from __future__ import annotations

import argparse
import json
import socket
import socketserver
import struct
import sys
import threading
import time
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import torch

from fedmst.fl import aggregation, data, models, training
from fedmst.workers.hosttrainer import Training

HEADER = struct.Struct("!IQ")
"""A message: its JSON part's length and its weights' bytes, then both."""


@dataclass(frozen=True)
class FitRequest:
    """One local model's training, as its agent asks for it."""

    node: str
    model: str
    dataset: str
    partition: str
    local_models: int
    task_seed: int
    index: int
    seed: int
    epochs: int
    batch_size: int
    lr: float
    optimizer: str
    proximal_mu: float


@dataclass(frozen=True)
class FitReply:
    """What the training gave besides the weights; ``error`` (one line) where it failed."""

    samples: int = 0
    loss: float = 0.0
    busy_s: float = 0.0
    """The training's own time, from the weights' copy onto the device to the last step: the device's,
    synchronised, on a GPU; the trainer's CPU time on the CPU."""
    peak_bytes: int = 0
    """The device memory the trainer held at most during this training (0 on a CPU)."""
    error: str = ""


def send(sock: socket.socket, head: dict[str, object], weights: torch.Tensor | None) -> None:
    body = json.dumps(head).encode()
    raw = memoryview(b"") if weights is None else memoryview(weights.contiguous().numpy()).cast("B")
    sock.sendall(HEADER.pack(len(body), raw.nbytes) + body)
    sock.sendall(raw)  # the weights as they lie in memory: no copy


def receive(sock: socket.socket) -> tuple[dict[str, object], torch.Tensor] | None:
    """The next message, or None where the peer closed the connection between messages."""
    first = _exactly(sock, bytearray(HEADER.size), eof_ok=True)
    if first is None:
        return None
    length, size = HEADER.unpack(first)
    head = json.loads(_exactly(sock, bytearray(length)) or b"{}")
    raw = _exactly(sock, bytearray(size)) if size else None
    return head, torch.frombuffer(raw, dtype=torch.float32) if raw else torch.empty(0)


def _exactly(sock: socket.socket, buffer: bytearray, eof_ok: bool = False) -> bytearray | None:
    """``buffer`` filled from ``sock`` (received into it: no copy); None where the peer closed before
    its first byte and ``eof_ok``."""
    view, got = memoryview(buffer), 0
    while got < len(buffer):
        n = sock.recv_into(view[got:])
        if not n:
            if eof_ok and got == 0:
                return None
            raise ConnectionError(f"the host trainer's peer closed the connection {got} bytes into {len(buffer)}")
        got += n
    return buffer


class Trainer:
    """Trains on ``device``, one model at a time, keeping each dataset there once."""

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)
        self.lock = threading.Lock()
        self.peaks: dict[str, int] = {}
        self.busy: dict[str, float] = {}
        self.models: dict[tuple[str, str], torch.nn.Module] = {}

    @cache  # noqa: B019 - one trainer per process, which lives as long as it
    def _tensors(self, dataset: str) -> tuple[torch.Tensor, torch.Tensor]:
        loaded = data.load_dataset(dataset)
        return loaded.x_train.to(self.device), loaded.y_train.to(self.device)

    @cache  # noqa: B019
    def _rows(self, dataset: str, k: int, partition: str, seed: int) -> tuple[torch.Tensor, ...]:
        return tuple(torch.as_tensor(r) for r in data.shards(data.load_dataset(dataset), k, partition, seed=seed))

    def _model(self, model: str, dataset: str, optimizer: str, batch_size: int) -> torch.nn.Module:
        """The one model that trains every local model of its kind, rehearsed once when first built
        as an agent's is (:func:`fedmst.fl.training.rehearse`: the device's kernels, allocator and
        lazy loading ready before round 1's first model is timed); each fit writes its weights over it."""
        if (model, dataset) not in self.models:
            loaded = data.load_dataset(dataset)
            built = models.build_model(model, num_classes=loaded.num_classes, input_shape=loaded.input_shape)
            x, y = self._tensors(dataset)
            training.rehearse(built.to(self.device), x, y, batch_size=batch_size, optimizer=optimizer)
            self.models[(model, dataset)] = built
        return self.models[(model, dataset)]

    def fit(self, ask: FitRequest, start: torch.Tensor) -> tuple[FitReply, torch.Tensor]:
        with self.lock:
            x, y = self._tensors(ask.dataset)
            rows = self._rows(ask.dataset, ask.local_models, ask.partition, ask.task_seed)[ask.index]
            model = self._model(ask.model, ask.dataset, ask.optimizer, ask.batch_size)
            cuda = self.device.type == "cuda"
            clock = time.perf_counter if cuda else time.thread_time  # a CPU's time as an agent counts it
            if cuda:
                torch.cuda.reset_peak_memory_stats(self.device)
                torch.cuda.synchronize(self.device)
            began = clock()
            aggregation.load_flat(model, start.to(self.device))
            loss = training.train_local(model, x, y, rows=rows, epochs=ask.epochs, batch_size=ask.batch_size,
                                        lr=ask.lr, seed=ask.seed, optimizer=ask.optimizer,
                                        proximal_mu=ask.proximal_mu)
            if cuda:
                torch.cuda.synchronize(self.device)
            busy = clock() - began
            peak = torch.cuda.max_memory_allocated(self.device) if cuda else 0
            self.peaks[ask.node] = max(self.peaks.get(ask.node, 0), peak)
            self.busy[ask.node] = self.busy.get(ask.node, 0.0) + busy
            trained = aggregation.flatten(model).cpu()
            for p in model.parameters():  # the gradients are the next fit's to make: free them meanwhile
                p.grad = None
            return FitReply(samples=len(rows), loss=loss, busy_s=busy, peak_bytes=peak), trained


class TrainerClient:
    """An agent's connection to its host's trainer (one per agent process, used by one thread at a time)."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.lock = threading.Lock()

    def fit(self, ask: FitRequest, start: torch.Tensor) -> tuple[FitReply, torch.Tensor]:
        with self.lock:
            send(self.sock, asdict(ask), start.to(torch.float32))
            got = receive(self.sock)
        if got is None:
            raise ConnectionError("the host trainer closed its connection (it died: see agents/trainer.log)")
        head, weights = got
        reply = FitReply(**head)  # type: ignore[arg-type]
        if reply.error:
            raise RuntimeError(f"the host trainer failed: {reply.error}")
        return reply, weights


def serve(path: Path, device: str, stats: Path) -> None:
    """Answer agents on ``path`` until stdin closes (the coordinator going), then write ``stats``."""
    trainer = Trainer(device)
    torch.zeros(1, device=trainer.device)  # a device this host lacks fails here, before any agent asks

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            while (got := receive(self.request)) is not None:
                head, weights = got
                try:
                    reply, trained = trainer.fit(FitRequest(**head), weights)  # type: ignore[arg-type]
                except Exception as exc:  # noqa: BLE001 - the agent reports it, in one line
                    reply, trained = FitReply(error=f"{type(exc).__name__}: {' '.join(str(exc).split())}"), None
                send(self.request, asdict(reply), trained)

    server = socketserver.ThreadingUnixStreamServer(str(path), Handler)  # bound: HostTrainer sees it ready
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()
    server.shutdown()
    reserved = torch.cuda.memory_reserved(trainer.device) if trainer.device.type == "cuda" else None
    record = Training(device, "host", trainer.peaks, trainer.busy, max(trainer.peaks.values(), default=0), reserved)
    stats.write_text(json.dumps(asdict(record), indent=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fedmst.workers.gputrainer")
    parser.add_argument("--socket", required=True, type=Path)
    parser.add_argument("--device", required=True)
    parser.add_argument("--stats", required=True, type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # as every agent: the CPU's share of training is the same, and so are its results
    serve(args.socket, args.device, args.stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
