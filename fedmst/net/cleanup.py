"""Runs as isolated units on one host, and the leftovers of crashed ones.

Every run claims an id (three letters, :class:`RunState`) and puts it in every name it gives
something the host shares: its Mininet hosts and their interfaces (``fmabc3``, ``fmabc3-eth0``),
worker containers (``fedmst-fmabc3``), scratch folders and its state file (``/run/fedmst/abc.json``),
so two runs at once never touch each other's. What lives inside a host's own network namespace
(addresses, routes, NFQUEUE numbers, iptables rules, TCP ports) is kept apart by the kernel.

While a run lives, its state file names its coordinator and the processes it started (Mininet
host shells, fork servers, agents). A run that ends normally, by error or by Ctrl-C removes
everything itself and deletes its file; one that was SIGKILLed leaves the file, and ``clean``
ends exactly the processes it names (after checking each is still one of ours), which frees their
namespaces, then deletes any emulated interface a dead run left in the root namespace. A live
run's things are never touched, and nothing is killed by name. Worker containers are the Docker
backend's to remove (:func:`fedmst.workers.docker.clean_dead`), by the same rule.
"""

from __future__ import annotations

import json
import os
import random
import re
import string
import subprocess
from pathlib import Path

import psutil

from fedmst.errors import FedmstError
from fedmst.net.forkserver import NAME_PREFIX

STATE_DIR = Path(os.environ.get("FEDMST_STATE_DIR", "/run/fedmst"))
HOST_PREFIX = "fm"
"""Every host, and so every emulated interface, is named ``fm`` + run id + index (``fmabc3-eth0``)."""
RUN_ID_LETTERS = 3
"""A run id's length: 17,576 ids, and the longest name (``fmabc9999-eth99``) within Linux's 15
characters for an interface."""
OURS = re.compile(r"mininet:fm[a-z]{3}\d+|fedmst\.(workers\.agent|net\.delayline|net\.forkserver)")
"""Command lines of the processes fedmst starts: Mininet host shells, agents in containers (the
docker clients that run them), a fresh fork server before it names itself; agents and delay lines
forked by a fork server carry its names."""
_NAMED = re.compile(r"(?:^|-)fm([a-z]{3})\d+(?:-|$)")
_IFACE = re.compile(r"^fm(?:([a-z]{3})\d+-eth\d+|p(\d+))$")
"""An emulated interface (group 1: its run) or a kernel probe's (group 2: the prober's PID)."""


def is_ours(name: str, cmdline: list[str]) -> bool:
    """Whether a process is one fedmst starts, by its name (forked ones) or its command line.

    >>> is_ours("fedmst-agent", ["/usr/bin/python3", "/usr/local/bin/fedmst", "run"])
    True
    >>> is_ours("bash", ["bash", "--norc", "-is", "mininet:fmabc3"])
    True
    >>> is_ours("python3", ["python3", "-m", "http.server"])
    False
    """
    return name.startswith(NAME_PREFIX) or bool(OURS.search(" ".join(cmdline)))


def host_name(run_id: str, index: int) -> str:
    """The Mininet host (and worker container suffix) of node ``index`` of run ``run_id``.

    >>> host_name("abc", 3)
    'fmabc3'
    """
    return f"{HOST_PREFIX}{run_id}{index}"


def run_of(name: str) -> str:
    """The run a host, interface or container name belongs to ('?' for none of fedmst's).

    >>> run_of("fedmst-fmabc3"), run_of("fmabc3-eth0"), run_of("eth0")
    ('abc', 'abc', '?')
    """
    found = _NAMED.search(name)
    return found.group(1) if found else "?"


def probe_name() -> str:
    """A throw-away interface to probe the kernel with, unique to this process."""
    return f"{HOST_PREFIX}p{os.getpid()}"


class RunState:
    """One live run: its id, claimed by creating its state file (so no two live runs share one),
    and the processes it started, rewritten whenever it starts one."""

    def __init__(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        for _ in range(1000):
            self.id = "".join(random.choices(string.ascii_lowercase, k=RUN_ID_LETTERS))
            self.path = STATE_DIR / f"{self.id}.json"
            try:
                os.close(os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                break
            except FileExistsError:
                continue
        else:
            raise FedmstError(f"no free run id in {STATE_DIR}: too many runs' records "
                              "(`fedmst clean` removes dead ones)")
        me = psutil.Process()
        self._record = {"run": self.id, "coordinator": me.pid, "started": me.create_time(), "pids": []}
        self._write()

    def host_name(self, index: int) -> str:
        return host_name(self.id, index)

    def add(self, pid: int) -> None:
        self._record["pids"].append(pid)  # type: ignore[attr-defined]
        self._write()

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._record))
        tmp.replace(self.path)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def _records() -> dict[str, dict]:
    """Every run's record by run id (an unreadable one as an empty record: a run killed while
    claiming its id)."""
    records: dict[str, dict] = {}
    for path in sorted(STATE_DIR.glob("*.json")) if STATE_DIR.exists() else []:
        try:
            records[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError):
            records[path.stem] = {}
    return records


def is_live(record: dict) -> bool:
    """Whether a record's coordinator still runs (the same process: not a later one given its PID)."""
    try:
        proc = psutil.Process(record["coordinator"])
        return abs(proc.create_time() - record.get("started", proc.create_time())) < 1.0
    except (KeyError, psutil.NoSuchProcess):
        return False


def live_runs() -> set[str]:
    """The ids of runs whose coordinator is alive."""
    return {run for run, record in _records().items() if is_live(record)}


def clean() -> list[str]:
    """Remove what dead runs left behind, never a live run's; one line for each thing removed,
    naming the run it belonged to."""
    done: list[str] = []
    live = set()
    for run, record in _records().items():
        if is_live(record):
            live.add(run)
            done.append(f"run {run}: live (process {record['coordinator']}), left alone")
            continue
        for pid in record.get("pids", []):
            if _end_if_ours(pid):
                done.append(f"run {run}: ended process {pid}")
        (STATE_DIR / f"{run}.json").unlink(missing_ok=True)
        done.append(f"run {run}: removed its record (coordinator {record.get('coordinator', '?')} is gone)")
    for iface in _root_interfaces():
        run, prober = _IFACE.match(iface).groups()  # type: ignore[union-attr]
        if run in live or (prober is not None and psutil.pid_exists(int(prober))):
            continue
        if subprocess.run(["ip", "link", "del", iface], capture_output=True).returncode == 0:
            done.append(f"run {run}: deleted interface {iface}" if run else
                        f"deleted interface {iface} (kernel probe of process {prober})")
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
