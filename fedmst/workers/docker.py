"""Docker workers: a compute node's agent runs in its own container on the emulated links.

Each container is started with no network of its own (``--network none``), every capability
dropped and a read-only root file system. The emulation then makes the container's network
namespace a Mininet host (the Containernet approach): the host's shell joins that namespace with
``nsenter``, so the veth ends Mininet moves to the shell land in the container, and every
``ip``/``tc``/``iptables`` command is run there from outside with the host's tools and
privileges. The container itself needs no capability at all; the agent inside it is started with
``docker exec``. This module is the only one that talks to Docker, through its command line.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import psutil

from fedmst.errors import EmulationError, FedmstError
from fedmst.net.cleanup import live_runs, run_of

LABEL = "org.fedmst.worker"
"""Every container fedmst starts carries this label (its value is the coordinator's PID)."""
NAME_PREFIX = "fedmst-"
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)([bkmg]?)$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_MIN_MEMORY = 6 << 20  # Docker's own floor for --memory


@dataclass(frozen=True)
class WorkerLimits:
    """One container's resource limits; ``None`` means Docker's default (no limit)."""

    cpus: float | None = None
    memory: str | None = None


@dataclass(frozen=True)
class DockerWorkers:
    """Which nodes run their agent in a container, from which image, with which limits, and
    the host folders (the run's) bind-mounted at the same path in every container."""

    image: str
    limits: Mapping[str, WorkerLimits]
    mounts: tuple[str, ...] = ()


def _parse_limits(entries: Sequence[str], kind: str, nodes: Iterable[str]) -> tuple[object | None, dict[str, object]]:
    """Split ``--cpus``/``--memory`` values into a default and per-node overrides.

    Each entry is ``VALUE`` (every container) or ``NODE=VALUE`` (one node), so heterogeneous
    nodes can be emulated. Values are checked here, before anything starts.

    >>> _parse_limits(["2", "3=0.5"], "cpus", ["1", "2", "3"])
    (2.0, {'3': 0.5})
    >>> _parse_limits(["1g", "7=512m"], "memory", ["7"])
    ('1g', {'7': '512m'})
    """
    known = set(nodes)
    default: object | None = None
    per_node: dict[str, object] = {}
    for entry in entries:
        node, sep, raw = entry.rpartition("=")
        value = _check_limit(kind, raw.strip(), entry)
        if not sep:
            default = value
        elif node.strip() not in known:
            raise FedmstError(f"--{kind} {entry}: node {node.strip()!r} is not in the topology")
        else:
            per_node[node.strip()] = value
    return default, per_node


def _check_limit(kind: str, raw: str, entry: str) -> object:
    if kind == "cpus":
        try:
            cpus = float(raw)
        except ValueError:
            cpus = -1.0
        if not cpus > 0:
            raise FedmstError(f"--cpus {entry}: give a positive number of CPUs, e.g. 0.5")
        return cpus
    match = _MEMORY.match(raw)
    if not match or float(match[1]) * _UNITS[match[2].lower()] < _MIN_MEMORY:
        raise FedmstError(f"--memory {entry}: give a size of at least 6m, e.g. 512m or 2g")
    return raw.lower()


def memory_bytes(raw: str) -> int:
    """A checked ``--memory`` size in bytes.

    >>> memory_bytes("512m"), memory_bytes("1.5g")
    (536870912, 1610612736)
    """
    match = _MEMORY.match(raw)
    assert match, raw  # checked by _check_limit
    return int(float(match[1]) * _UNITS[match[2].lower()])


def worker_limits(nodes: Iterable[str], cpus: Sequence[str], memory: Sequence[str],
                  all_nodes: Iterable[str]) -> dict[str, WorkerLimits]:
    """The limits of each worker node's container.

    >>> worker_limits(["1", "2"], ["1.5", "2=0.25"], ["1g"], ["1", "2", "3"])["2"]
    WorkerLimits(cpus=0.25, memory='1g')
    """
    all_nodes = list(all_nodes)
    cpu_default, cpu_node = _parse_limits(cpus, "cpus", all_nodes)
    mem_default, mem_node = _parse_limits(memory, "memory", all_nodes)
    return {n: WorkerLimits(cpus=cpu_node.get(n, cpu_default), memory=mem_node.get(n, mem_default))  # type: ignore[arg-type]
            for n in nodes}


def container_name(host: str) -> str:
    return f"{NAME_PREFIX}{host}"


def _docker(*args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise EmulationError(f"docker {args[0]} did not answer in {timeout_s:.0f} s") from None


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "(no output)")


def require_docker(image: str) -> None:
    """Fail early, in one line, when Docker or the worker image is missing."""
    if shutil.which("docker") is None:
        raise EmulationError("--workers docker: docker not found on PATH: install Debian's docker.io package")
    info = _docker("info", "--format", "{{.ServerVersion}}", timeout_s=30)
    if info.returncode != 0:
        raise EmulationError(f"--workers docker: the Docker daemon is not reachable: {_first_line(info.stderr)}")
    if _docker("image", "inspect", image, timeout_s=30).returncode != 0:
        raise EmulationError(f"--workers docker: image {image!r} not found: build it with "
                             f"`docker build -t {image} .` (or bash scripts/setup-docker.sh)")


def start(host: str, image: str, limits: WorkerLimits, mounts: Sequence[str], owner: int) -> int:
    """Start ``host``'s container and return the PID whose network namespace is the container's."""
    name = container_name(host)
    argv = ["run", "--detach", "--name", name, "--label", f"{LABEL}={owner}", "--hostname", host,
            "--network", "none", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--read-only", "--tmpfs", "/tmp"]
    for path in mounts:
        argv += ["--mount", f"type=bind,source={path},target={path}"]
    if limits.cpus is not None:
        argv += ["--cpus", str(limits.cpus)]
    if limits.memory is not None:
        argv += ["--memory", limits.memory]
    started = _docker(*argv, image, "sleep", "infinity")
    if started.returncode != 0:
        reason = _first_line(started.stderr)
        if "already in use" in reason:
            reason = f"a container named {name} already exists (left by a killed run? run `fedmst clean`)"
        raise EmulationError(f"starting the container of node {host} failed: {reason}")
    pid = _docker("inspect", "--format", "{{.State.Pid}}", name, timeout_s=30)
    if pid.returncode != 0 or not pid.stdout.strip().isdigit() or int(pid.stdout) == 0:
        raise EmulationError(f"container {name} is not running: {_first_line(pid.stderr or pid.stdout)}")
    return int(pid.stdout)


def exec_argv(host: str, argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """The command that runs ``argv`` inside ``host``'s container with the variables ``env``
    names; their values travel in the docker client's environment, not on its command line."""
    return ["docker", "exec", *(a for key in sorted(env) for a in ("--env", key)), container_name(host), *argv]


def kill(host: str) -> None:
    """SIGKILL every process in ``host``'s container (a crash); its network namespace lives on,
    held by the node's shell, so the node still forwards."""
    _docker("kill", "--signal", "KILL", container_name(host), timeout_s=30)


def remove(hosts: Iterable[str]) -> None:
    """Force-remove the containers of ``hosts`` (and everything running in them)."""
    remove_names([container_name(h) for h in hosts])


def labelled() -> list[tuple[str, int]]:
    """Every container labelled as fedmst's, with the PID of the coordinator that started it.

    Without a docker command or a reachable daemon there is none of ours.
    """
    if shutil.which("docker") is None:
        return []
    listed = _docker("ps", "--all", "--filter", f"label={LABEL}", "--format",
                     f'{{{{.Names}}}} {{{{.Label "{LABEL}"}}}}', timeout_s=30)
    rows = [line.split() for line in listed.stdout.splitlines()] if listed.returncode == 0 else []
    return [(row[0], int(row[1]) if row[1:] and row[1].isdigit() else 0) for row in rows if row]


def clean_dead() -> list[str]:
    """Remove the containers of runs whose coordinator is gone (SIGKILLed: it could not remove
    them itself), and report each one removed, one line each. A run is live while its record
    names a coordinator that still runs (:func:`fedmst.net.cleanup.live_runs`: the same PID and
    start time), so a later process given a dead coordinator's PID keeps nothing alive."""
    live = live_runs()
    dead = [name for name, owner in labelled()
            if owner == os.getpid() or not psutil.pid_exists(owner) or run_of(name) not in live | {"?"}]
    remove_names(dead)
    return [f"run {run_of(name)}: removed container {name}" for name in dead]


def remove_names(names: Sequence[str]) -> None:
    if names:
        _docker("rm", "--force", "--volumes", *names)
