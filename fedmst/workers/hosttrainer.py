"""The host trainer's process, from the coordinator's side (:mod:`fedmst.workers.gputrainer` is the
trainer itself); without torch, as the coordinator's modules are until a run sizes its models."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from pathlib import Path

from fedmst.errors import EmulationError


class HostTrainer:
    """A run's trainer process, from the coordinator's side: started (and ready) before the agents,
    stopped after them; what it measured is :attr:`record`. It ends by itself when the coordinator
    does (its stdin closes)."""

    def __init__(self, device: str, scratch: Path, log: Path, timeout_s: float = 120.0) -> None:
        self.device, self.socket, self.stats = device, scratch / "trainer.sock", scratch / "trainer.json"
        self.record: dict[str, object] = {}
        with open(log, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fedmst.workers.gputrainer", "--socket", str(self.socket), "--device", device,
                 "--stats", str(self.stats)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        assert self.proc.stdout is not None
        ready = select.select([self.proc.stdout], [], [], timeout_s)[0] and self.proc.stdout.readline().strip()
        if ready != "ready":
            self.close()
            said = [line for line in log.read_text().splitlines() if line.strip()]
            raise EmulationError(f"the host trainer on {device} did not start in {timeout_s:g} s"
                                 + (f": {said[-1]}" if said else "") + f" (see {log})")

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
            self.record = json.loads(self.stats.read_text())
