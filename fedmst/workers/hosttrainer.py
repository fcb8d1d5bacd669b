"""The host trainer's process, from the coordinator's side (:mod:`fedmst.workers.gputrainer` is the
trainer itself), and the record of where a run's local models trained; without torch, as the
coordinator's modules are until a run sizes its models."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from fedmst.errors import EmulationError


@dataclass(frozen=True)
class Training:
    """Where a run's local models trained (summary.json's ``training``); the trainer's measurements
    where one trained them (it writes this record, :func:`fedmst.workers.gputrainer.serve`)."""

    device: str
    """``cpu`` or ``cuda:N``: ``--device`` decided on this host."""
    trainer: str
    """``agent`` (each agent trains its own models) or ``host`` (one trainer for the host's agents)."""
    peak_bytes: dict[str, int] = field(default_factory=dict)
    """Per node: the device memory the trainer held at most while it trained the node's models (0 on a CPU)."""
    busy_s: dict[str, float] = field(default_factory=dict)
    """Per node: the trainer's time training the node's models, on this host's clock (the run counts
    ``time_scale`` times it): the device's, synchronised, on a GPU; its CPU time on the CPU."""
    host_peak_bytes: int = 0
    """The most device memory one training held (the largest of ``peak_bytes``)."""
    host_reserved_bytes: int | None = None
    """On a GPU: what torch's allocator held at the end, its cache included (CUDA's context not)."""

    @classmethod
    def planned(cls, device: str, host_trainer: bool) -> Training:
        """The record before anything trained (and where no trainer measured)."""
        return cls(device, "host" if host_trainer else "agent")


class HostTrainer:
    """A run's trainer process, from the coordinator's side: started, and listening, before the
    agents start; stopped when the rounds end. What it measured is :attr:`record`. It ends by itself
    when the coordinator does (its stdin closes)."""

    def __init__(self, device: str, scratch: Path, log: Path, timeout_s: float = 120.0) -> None:
        self.device, self.log = device, log
        self.socket, self.stats = scratch / "trainer.sock", scratch / "trainer.json"
        self.record = Training.planned(device, host_trainer=True)
        with open(log, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fedmst.workers.gputrainer", "--socket", str(self.socket), "--device", device,
                 "--stats", str(self.stats)], stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while not self.socket.exists():  # it binds its socket once the device answered
            if self.proc.poll() is not None or time.monotonic() > deadline:
                how = (f"did not start in {timeout_s:g} s" if self.proc.poll() is None else
                       f"exited with status {self.proc.returncode} as it started")
                self.close()
                said = [line for line in log.read_text().splitlines() if line.strip()]
                raise EmulationError(f"the host trainer on {device} {how}" + (f": {said[-1]}" if said else "")
                                     + f" (see {log})")
            time.sleep(0.05)

    def check(self) -> None:
        """Raise if the trainer died: no local model could train any more."""
        if self.proc.poll() is not None:
            raise EmulationError(f"the host trainer on {self.device} exited with status {self.proc.returncode} "
                                 f"(see {self.log})")

    def close(self) -> None:
        """Stop the trainer (by its PID, if it does not end when told) and keep what it measured."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.stats.is_file():
            self.record = Training(**json.loads(self.stats.read_text()))
