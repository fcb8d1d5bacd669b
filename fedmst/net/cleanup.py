"""Runs as isolated units on one host, and the leftovers of crashed ones.

Every run claims an id (three letters, :class:`RunState`) and puts it in every name it gives
something the host shares: its Mininet hosts and their interfaces (``fmabc3``, ``fmabc3-eth0``),
worker containers (``fedmst-fmabc3``), its scratch folder (``/tmp/fedmst-abc-...``) and its state file
(``/run/fedmst/abc.json``), so two runs at once never touch each other's. What lives inside a
host's own network namespace (addresses, routes, NFQUEUE numbers, iptables rules, TCP ports) is
kept apart by the kernel.

While a run lives, its state file names its coordinator, its scratch folder and the processes it
started (Mininet host shells, fork servers, agents). A run that ends normally, by error or by
Ctrl-C removes everything itself and deletes its file; one that was SIGKILLed leaves the file, and
``clean`` ends exactly the processes it names (after checking each is still one of ours), which
frees their namespaces, removes its scratch folder, then unregisters any TCP congestion control a
dead run registered (:func:`fedmst.net.congestion.leftovers`) and deletes any emulated interface
it left in the root namespace. A live run's things are never touched, and nothing is killed by name.
Worker containers are the Docker backend's to remove (:func:`fedmst.workers.docker.clean_dead`),
by the same rule. Once the Ray cluster of ``scripts/ray-local.sh`` is gone, ``clean`` also puts back
Ray's address file as it was before the script started (:func:`restore_ray_address`).
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import re
import shutil
import socket
import string
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from fedmst.errors import FedmstError
from fedmst.net.congestion import leftovers
from fedmst.net.forkserver import NAME_PREFIX

STATE_DIR = Path(os.environ.get("FEDMST_STATE_DIR", "/run/fedmst"))
HOST_PREFIX = "fm"
"""Every host, and so every emulated interface, is named ``fm`` + run id + index (``fmabc3-eth0``)."""
RUN_ID_LETTERS = 3
"""A run id's length: 17,576 ids, and the longest name (``fmabc9999-eth99``) within Linux's 15
characters for an interface."""
_RUN = f"[a-z]{{{RUN_ID_LETTERS}}}"
OURS = re.compile(rf"mininet:{HOST_PREFIX}{_RUN}\d+|fedmst\.(workers\.agent|net\.delayline|net\.forkserver)"
                  rf"|tcpdump -i {HOST_PREFIX}{_RUN}\d+-eth")
"""Command lines of the processes fedmst starts: Mininet host shells, agents in containers (the
docker clients that run them), a fresh fork server before it names itself, the captures of
``--pcap`` (tcpdump on a run's interface); agents and delay lines forked by a fork server carry
its names."""
POINT_PREFIX = "fedmst-ray-point-"
"""A Ray sweep point's scratch folder: ``fedmst-ray-point-PID-...``, PID the worker running it."""
_POINT = re.compile(rf"^{POINT_PREFIX}(\d+)-")
RAY_LOCAL_DIR = Path(os.environ.get("RAY_LOCAL_DIR", "/run/fedmst-ray"))
RAY_LOCAL_PORT = os.environ.get("RAY_LOCAL_PORT", "6390")
RAY_LOCAL_NET = ipaddress.ip_network(os.environ.get("RAY_LOCAL_NET", "172.30.250.0/24"))
"""scripts/ray-local.sh's folder, its head node's port and, with ``--namespaces``, the network of its
namespaced hosts (the same variables, the same defaults)."""
SAVED_RAY_ADDRESS = "ray_current_cluster.before"
"""In :data:`RAY_LOCAL_DIR`: what Ray's address file held when the script started (absent: nothing)."""


def point_prefix() -> str:
    """The prefix of a scratch folder this process makes for a Ray sweep point: with its PID, so
    ``clean`` can tell the folder of a worker that was killed (a node lost) from a live one's."""
    return f"{POINT_PREFIX}{os.getpid()}-"


_NAMED = re.compile(rf"(?:^|-){HOST_PREFIX}({_RUN})\d+(?:-|$)")
_IFACE = re.compile(rf"^{HOST_PREFIX}(?:({_RUN})\d+-eth\d+|p(\d+))$")
"""An emulated interface (group 1: its run) or a kernel probe's (group 2: the prober's PID)."""


def is_ours(name: str, cmdline: list[str]) -> bool:
    """Whether a process is one fedmst starts, by its name (forked ones) or its command line.

    >>> is_ours("fedmst-agent", ["/usr/bin/python3", "/usr/local/bin/fedmst", "run"])
    True
    >>> is_ours("bash", ["bash", "--norc", "-is", "mininet:fmabc3"])
    True
    >>> is_ours("tcpdump", ["/usr/bin/tcpdump", "-i", "fmabc3-eth0", "-Q", "out", "-w", "0-1.pcap"])
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
    """One live run: its id, claimed by linking its complete state file into place (so no two
    live runs share one, and nobody ever reads a half-written one), its scratch folder (the
    agents' rendezvous and control socket, the delay lines' logs), and the processes it started,
    each with its start time, rewritten whenever it starts one."""

    def __init__(self, run_id: str | None = None) -> None:
        """Claim a free id, or ``run_id`` (a run's id on another of its hosts), which must be free here."""
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        me = psutil.Process()
        self._record: dict = {"coordinator": me.pid, "started": me.create_time(), "pids": []}
        draft = STATE_DIR / f".claim-{me.pid}.tmp"
        try:
            for _ in range(1 if run_id else 1000):
                self.id = run_id or "".join(random.choices(string.ascii_lowercase, k=RUN_ID_LETTERS))
                self.path = STATE_DIR / f"{self.id}.json"
                draft.write_text(json.dumps({"run": self.id, **self._record}))
                try:
                    os.link(draft, self.path)  # fails if the id is taken
                    break
                except FileExistsError:
                    continue
            else:
                raise FedmstError(f"run id {run_id} is taken on this host" if run_id else
                                  f"no free run id in {STATE_DIR}: too many runs' records "
                                  "(`fedmst clean` removes dead ones)")
        finally:
            draft.unlink(missing_ok=True)
        self.scratch = Path(tempfile.mkdtemp(prefix=f"fedmst-{self.id}-"))
        self._record = {"run": self.id, **self._record, "scratch": str(self.scratch)}
        self._write()

    def host_name(self, index: int) -> str:
        return host_name(self.id, index)

    def add(self, pid: int) -> None:
        """Record a process the run started, with its start time, so that ``clean`` never ends
        a later process that was given the same PID."""
        try:
            started = psutil.Process(pid).create_time()
        except psutil.NoSuchProcess:
            return  # gone already: nothing to end
        self._record["pids"].append([pid, started])
        self._write()

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._record))
        tmp.replace(self.path)

    def remove(self) -> None:
        """Delete the run's scratch folder, then its record."""
        shutil.rmtree(self.scratch, ignore_errors=True)
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


def _same_process(pid: int, started: float | None) -> psutil.Process | None:
    """Process ``pid`` if it still runs and is the one that started at ``started`` (not a later
    one given its PID, nor a zombie, which holds nothing); None otherwise."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc if started is None or abs(proc.create_time() - started) < 0.05 else None
    except psutil.NoSuchProcess:
        return None


def is_live(record: dict) -> bool:
    """Whether a record's coordinator still runs (the same process, and not a zombie)."""
    return "coordinator" in record and _same_process(record["coordinator"], record.get("started")) is not None


def live_runs() -> set[str]:
    """The ids of runs whose coordinator is alive (the same process, not a zombie)."""
    return {run for run, record in _records().items() if is_live(record)}


def clean() -> list[str]:
    """Remove what dead runs left behind, never a live run's; one line for each thing removed,
    naming the run it belonged to."""
    done: list[str] = []
    live = set()
    interfaces = _root_interfaces()  # before the records: a run claimed after this has none listed
    for run, record in _records().items():
        if is_live(record):
            live.add(run)
            done.append(f"run {run}: live (process {record['coordinator']}), left alone")
            continue
        for entry in record.get("pids", []):
            pid, started = entry if isinstance(entry, list) else (entry, None)
            if _end_if_ours(pid, started):
                done.append(f"run {run}: ended process {pid}")
        scratch = _scratch_of(run, record)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
            done.append(f"run {run}: removed its scratch folder {scratch}")
        (STATE_DIR / f"{run}.json").unlink(missing_ok=True)
        done.append(f"run {run}: removed its record (coordinator {record.get('coordinator', '?')} is gone)")
    for folder in sorted(Path(tempfile.gettempdir()).glob(f"{POINT_PREFIX}*")):
        owner = _POINT.match(folder.name)
        if owner is not None and folder.is_dir() and not psutil.pid_exists(int(owner.group(1))):
            shutil.rmtree(folder, ignore_errors=True)
            done.append(f"removed {folder}, a Ray sweep point's scratch folder (process {owner.group(1)} is gone)")
    done += leftovers(live)
    done += restore_ray_address(ray_address_file(), RAY_LOCAL_DIR / SAVED_RAY_ADDRESS)
    for iface in interfaces:
        run, prober = _IFACE.match(iface).groups()  # type: ignore[union-attr]
        if run in live or (prober is not None and psutil.pid_exists(int(prober))):
            continue
        if subprocess.run(["ip", "link", "del", iface], capture_output=True).returncode == 0:
            done.append(f"run {run}: deleted interface {iface}" if run else
                        f"deleted interface {iface} (kernel probe of process {prober})")
    return done or ["nothing to clean"]


def ray_address_file() -> Path:
    """Where ``ray start`` writes its cluster's address, which a plain ``ray.init()`` on this host
    then joins (in Ray's temp folder: $RAY_TMPDIR, else $TMPDIR, else /tmp)."""
    return Path(os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp") / "ray" / "ray_current_cluster"


def is_ray_local(address: str, port: str = RAY_LOCAL_PORT) -> bool:
    """Whether ``address`` (host:port) is ``port`` on this host, as ray-local.sh's nodes write it
    (Ray writes the host's own address for their 127.0.0.1), or on its namespaced hosts' network.

    >>> is_ray_local("127.0.0.1:6390", "6390"), is_ray_local("127.0.0.1:6379", "6390")
    (True, False)
    >>> is_ray_local("203.0.113.9:6390", "6390"), is_ray_local(f"{RAY_LOCAL_NET[1]}:6390", "6390")
    (False, True)
    """
    host, _, named = address.strip().rpartition(":")
    host = host.strip("[]")
    ours = {"localhost"} | {a.address.split("%")[0] for found in psutil.net_if_addrs().values() for a in found}
    try:
        namespaced = ipaddress.ip_address(host) in RAY_LOCAL_NET
    except ValueError:
        namespaced = False
    return named == port and (host in ours or namespaced)


def restore_ray_address(address_file: Path, saved: Path, port: str = RAY_LOCAL_PORT) -> list[str]:
    """Once Ray's address file names ray-local.sh's cluster and nothing listens there, put back what
    it held before the script started (kept in ``saved``), or remove it where it held nothing or a
    cluster of ours too: a plain ``ray.init()`` on this host would wait on that dead address and fail."""
    try:
        address = address_file.read_text().strip()
    except OSError:
        return []
    if not is_ray_local(address, port) or _listens(address):
        return []
    before = saved.read_text() if saved.is_file() else None
    saved.unlink(missing_ok=True)
    if before is None or is_ray_local(before, port):
        address_file.unlink()
        return [f"removed {address_file}: it named {address}, a stopped cluster of scripts/ray-local.sh"]
    address_file.write_text(before)
    return [f"put back {address_file} as before scripts/ray-local.sh started: {before.strip()}"]


def _listens(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


def _scratch_of(run: str, record: dict) -> Path | None:
    """The scratch folder a dead run's record names, if it is still there and is one of fedmst's
    for that run (a record is only trusted to name a folder fedmst would have made)."""
    named = record.get("scratch")
    if not isinstance(named, str):
        return None
    path = Path(named)
    ours = path.parent == Path(tempfile.gettempdir()) and path.name.startswith(f"fedmst-{run}-")
    return path if ours and path.is_dir() else None


def _end_if_ours(pid: int, started: float | None, timeout_s: float = 5.0) -> bool:
    """SIGKILL the process if it is still the one the record names and one of fedmst's, and wait
    until it is gone or a zombie: a dead run's processes are orphans, which only init reaps, at
    its own pace, and a zombie holds nothing (waiting for the reaping took seconds a process)."""
    proc = _same_process(pid, started)
    try:
        if proc is None or not is_ours(proc.name(), proc.cmdline()):
            return False
        proc.kill()
    except psutil.NoSuchProcess:
        return False
    deadline = time.monotonic() + timeout_s
    try:
        while proc.status() != psutil.STATUS_ZOMBIE:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
    except psutil.NoSuchProcess:
        pass
    return True


def _root_interfaces() -> list[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]
    return [n for n in names if _IFACE.match(n)]
