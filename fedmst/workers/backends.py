"""Where agents run: a small :class:`WorkerBackend` interface, its two built-in implementations
and the registry of backends (``--workers NAME`` or ``--workers package.module:Class``).

A backend is one class that answers every question about where agents run, so nothing outside
this module compares a backend's name. It checks that it can run here, sets up what the nodes'
agents live in before the network is built (nothing for processes; for Docker a container per
worker node, whose network namespace the node's Mininet host then joins), says what the
emulation's fork server should warm up, starts an agent, kills one as a crash would, tears down,
and describes itself for ``summary.json``.
:class:`Agents` is the set of agents one run started.
The emulation only learns "this node's namespace is that PID's".
"""

from __future__ import annotations

import inspect
import os
import subprocess
import time
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from fedmst.errors import FedmstError, WorkerDied
from fedmst.plugins import Registry
from fedmst.workers import docker
from fedmst.workers import DEFAULT_IMAGE
from fedmst.workers.description import BackendDescription
from fedmst.workers.docker import WorkerLimits, worker_limits

if TYPE_CHECKING:
    from fedmst.net.emulation import Emulation, Process

AGENT = "fedmst.workers.agent"


class WorkerBackend(ABC):
    """How the agents of one run are started, killed and described."""

    name: str
    where = "processes"
    """Where the agents run, in the console's words (``4 agents (processes) ready``)."""
    takes_limits = False
    """Whether ``--cpus``/``--memory`` mean anything to this backend."""

    @classmethod
    def for_run(cls, image: str, limits: Mapping[str, WorkerLimits]) -> WorkerBackend:
        """This backend for one run, given ``--image`` and the per-node limits; a backend that
        uses neither is built with no arguments."""
        return cls()

    @abstractmethod
    def check(self) -> None:
        """Raise a one-line error if this backend cannot run here (before anything is created)."""

    def up(self, hosts: Mapping[str, str], mounts: Sequence[str]) -> dict[str, int]:
        """Prepare the worker nodes before the network exists; return node -> PID whose network
        namespace that node's host must join (none for plain processes)."""
        return {}

    def preload(self, **training: Any) -> Callable[[], None] | None:
        """What the emulation's fork server runs once before forking anything (None: nothing),
        given the run's local training (:func:`fedmst.workers.agent.warm_up`'s arguments)."""
        return None

    @abstractmethod
    def start(self, emu: Emulation, node: str, args: Sequence[str], *, env: Mapping[str, str], log: Path) -> Process:
        """Start ``node``'s agent with the command-line ``args`` of :mod:`fedmst.workers.agent`,
        with ``env`` added to its environment and its output written to ``log``."""

    @abstractmethod
    def kill(self, node: str, proc: Process) -> None:
        """Kill ``node``'s agent outright (SIGKILL), as a crash would; the node keeps forwarding."""

    def down(self) -> None:  # noqa: B027 - nothing to remove unless the backend made something in up()
        """Remove what :meth:`up` made; safe to call twice."""

    def exit_hint(self, returncode: int) -> str:
        """What an agent's exit code suggests, appended to its death's one line ('' for nothing)."""
        return ""

    def describe(self) -> BackendDescription:
        """The ``workers`` object of summary.json: the backend's name alone unless it says more."""
        return BackendDescription(self.name)


class ProcessBackend(WorkerBackend):
    """Each agent is a process in its node's Mininet host, forked from the emulation's fork
    server once that has warmed torch up: milliseconds per agent instead of seconds."""

    name = "process"

    def check(self) -> None:
        pass

    def preload(self, **training: Any) -> Callable[[], None] | None:
        from fedmst.workers.agent import warm_up

        return partial(warm_up, **training)

    def start(self, emu: Emulation, node: str, args: Sequence[str], *, env: Mapping[str, str], log: Path) -> Process:
        return emu.spawn(node, f"{AGENT}:main", args, env=env, log=log, name="agent")

    def kill(self, node: str, proc: Process) -> None:
        proc.kill()


class DockerBackend(WorkerBackend):
    """Each worker node's agent runs in its own container (see :mod:`fedmst.workers.docker`)."""

    name = "docker"
    where = "containers"
    takes_limits = True

    def __init__(self, image: str, limits: Mapping[str, WorkerLimits] | None = None) -> None:
        self.image, self.limits = image, dict(limits or {})
        self._hosts: dict[str, str] = {}

    @classmethod
    def for_run(cls, image: str, limits: Mapping[str, WorkerLimits]) -> WorkerBackend:
        return cls(image, limits)

    def check(self) -> None:
        docker.require_docker(self.image)

    def up(self, hosts: Mapping[str, str], mounts: Sequence[str]) -> dict[str, int]:
        """Start the worker containers, a few at a time, each named after its node's host."""
        self._hosts = {node: hosts[node] for node in self.limits}

        def start(node: str) -> int:
            return docker.start(self._hosts[node], self.image, self.limits[node], mounts, os.getpid())

        try:
            with ThreadPoolExecutor(max_workers=4) as pool:
                futures = {node: pool.submit(start, node) for node in self._hosts}
            return {node: future.result() for node, future in futures.items()}
        except BaseException:
            self.down()
            raise

    def start(self, emu: Emulation, node: str, args: Sequence[str], *, env: Mapping[str, str], log: Path) -> Process:
        command = docker.exec_argv(self._hosts[node], ["python", "-m", AGENT, *args], env)
        with log.open("w") as out:
            return emu.track(subprocess.Popen(command, env={**os.environ, **env}, stdout=out,
                                              stderr=subprocess.STDOUT))

    def kill(self, node: str, proc: Process) -> None:
        docker.kill(self._hosts[node])

    def down(self) -> None:
        if self._hosts:
            docker.remove(self._hosts.values())
            self._hosts = {}

    def exit_hint(self, returncode: int) -> str:
        return " (out of memory? see --memory)" if returncode == 137 else ""

    def describe(self) -> BackendDescription:
        return BackendDescription(self.name, self.image, {n: asdict(lim) for n, lim in self.limits.items()})


BACKENDS: Registry[type[WorkerBackend]] = Registry(
    "worker backend", "fedmst.backends", FedmstError, {"process": ProcessBackend, "docker": DockerBackend},
    accepts=lambda cls: isinstance(cls, type) and issubclass(cls, WorkerBackend) and not inspect.isabstract(cls),
    requirement="a concrete subclass of fedmst.api.WorkerBackend")
"""Every worker backend by name: the built-ins, :func:`register_backend` and the ``fedmst.backends``
entry points; ``--workers package.module:Class`` is looked up here too."""


def register_backend(name: str, cls: type[WorkerBackend]) -> None:
    """Make ``cls`` available to ``--workers`` as ``name``; a name already taken is refused."""
    BACKENDS.register(name, cls)


def check_backend(spec: str, *, limited: bool) -> None:
    """Refuse, in one line, a ``--workers`` value no backend answers to, or container limits
    (``limited``: ``--cpus``/``--memory`` given) for a backend that has none."""
    if not BACKENDS.lookup(spec).takes_limits and limited:
        raise FedmstError("--cpus/--memory limit containers: add --workers docker")


def backend_for(spec: str, image: str = DEFAULT_IMAGE,
                limits: Mapping[str, WorkerLimits] | None = None) -> WorkerBackend:
    """The backend ``spec`` names (a registered name or ``package.module:Class``), for one run."""
    return BACKENDS.lookup(spec).for_run(image, dict(limits or {}))


class Agents:
    """The agents one run started, one per worker node, and which of them died."""

    def __init__(self, backend: WorkerBackend, emu: Emulation, nodes: Sequence[str], spec_file: Path,
                 token: str, logs: Path) -> None:
        logs.mkdir(exist_ok=True)
        self.backend, self.logs = backend, logs
        self.died: dict[str, float] = {}
        """Node -> when its death was noticed (monotonic clock)."""
        env = {"FEDMST_TOKEN": token, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        self.procs: dict[str, Process] = {}
        for node in nodes:
            self.procs[node] = backend.start(emu, node, ["--spec", str(spec_file), "--node", node], env=env,
                                             log=logs / f"node-{node}.log")

    def check(self) -> None:
        """Raise :class:`WorkerDied`, naming the node, for an agent that has died (once each)."""
        for node, proc in self.procs.items():
            if node not in self.died and proc.poll() is not None:
                self.died[node] = time.monotonic()
                lines = [line for line in (self.logs / f"node-{node}.log").read_text().splitlines() if line.strip()]
                hint = self.backend.exit_hint(proc.returncode)
                raise WorkerDied(node, f"agent on node {node} exited with code {proc.returncode}{hint}: "
                                       f"{(lines or ['(no output)'])[-1]}")

    def kill(self, node: str) -> None:
        """Kill ``node``'s agent as a crash would."""
        self.backend.kill(node, self.procs[node])


__all__ = ["AGENT", "BACKENDS", "DEFAULT_IMAGE", "Agents", "DockerBackend", "ProcessBackend", "WorkerBackend",
           "WorkerLimits", "backend_for", "check_backend", "register_backend", "worker_limits"]
