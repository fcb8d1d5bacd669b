"""Leftovers of crashed runs: recorded while a run lives, removed by ``fedmst clean``.

While an emulation runs, it keeps a state file naming the processes it started (Mininet host
shells, agents). A run that ends normally, by error or by Ctrl-C removes everything itself and
deletes its file; one that was SIGKILLed leaves the file, and ``clean`` ends exactly the
processes it names (after checking each is still one of ours), which frees their namespaces,
then deletes any emulated interface left in the root namespace. Nothing is killed by name.
Worker containers are the Docker backend's to remove (:func:`fedmst.workers.docker.clean_dead`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import psutil

from fedmst.net.forkserver import NAME_PREFIX

STATE_DIR = Path(os.environ.get("FEDMST_STATE_DIR", "/run/fedmst"))
OURS = re.compile(r"mininet:fm\d+|fedmst\.(workers\.agent|net\.delayline|net\.forkserver)")
"""Command lines of the processes fedmst starts: Mininet host shells, agents in containers (the
docker clients that run them), a fresh fork server before it names itself; agents and delay lines
forked by a fork server carry its names."""
_IFACE = re.compile(r"^fm(\d+-eth\d+|probe\d+)$")


def is_ours(name: str, cmdline: list[str]) -> bool:
    """Whether a process is one fedmst starts, by its name (forked ones) or its command line.

    >>> is_ours("fedmst-agent", ["/usr/bin/python3", "/usr/local/bin/fedmst", "run"])
    True
    >>> is_ours("python3", ["python3", "-m", "http.server"])
    False
    """
    return name.startswith(NAME_PREFIX) or bool(OURS.search(" ".join(cmdline)))


class RunState:
    """The state file of one live emulation, rewritten whenever it starts a process."""

    def __init__(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        self.path = STATE_DIR / f"{os.getpid()}.json"
        self.pids: list[int] = []

    def add(self, pid: int) -> None:
        self.pids.append(pid)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"coordinator": os.getpid(), "pids": self.pids}))
        tmp.replace(self.path)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def clean() -> list[str]:
    """Remove what dead runs left behind; report each thing removed, one line each."""
    done: list[str] = []
    for state in sorted(STATE_DIR.glob("*.json")) if STATE_DIR.exists() else []:
        try:
            info = json.loads(state.read_text())
        except (OSError, ValueError):
            state.unlink(missing_ok=True)
            continue
        if info["coordinator"] != os.getpid() and psutil.pid_exists(info["coordinator"]):
            done.append(f"skipped run of live process {info['coordinator']}")
            continue
        for pid in info["pids"]:
            if _end_if_ours(pid):
                done.append(f"ended process {pid}")
        state.unlink(missing_ok=True)
        done.append(f"removed the record of dead run {info['coordinator']}")
    for iface in _root_interfaces():
        if subprocess.run(["ip", "link", "del", iface], capture_output=True).returncode == 0:
            done.append(f"deleted interface {iface}")
    return done or ["nothing to clean"]


def _end_if_ours(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
        if not is_ours(proc.name(), proc.cmdline()):
            return False
        proc.kill()
        proc.wait(timeout=5)
        return True
    except (psutil.NoSuchProcess, psutil.TimeoutExpired):
        return False


def _root_interfaces() -> list[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]
    return [n for n in names if _IFACE.match(n)]
