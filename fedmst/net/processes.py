"""The processes an emulation starts in its hosts, each recorded so that nothing outlives the run:
:meth:`HostProcesses.close` ends them, and after a SIGKILL ``fedmst clean`` does."""

from __future__ import annotations

import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Callable, Mapping, Protocol, Sequence

import psutil

from fedmst.errors import EmulationError
from fedmst.net.cleanup import RunState
from fedmst.net.forkserver import ForkServer


class Process(Protocol):
    """What the emulation needs of a process it started: a :class:`subprocess.Popen` or a
    :class:`fedmst.net.forkserver.Forked`."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...
    def send_signal(self, signum: int) -> None: ...


class HostProcesses:
    """Two fork servers (one that ran ``preload``, the agents' warm-up; one fresh interpreter for
    delay lines and traffic, which need neither torch nor the warm-up) and every process started."""

    def __init__(self) -> None:
        self.procs: list[Process] = []
        self.names: list[str] = []
        """The name each of ``procs`` was started under (``agent``, ``delay``...; ``tracked``: started elsewhere)."""
        self._forks: ForkServer | None = None
        self._line_forks: ForkServer | None = None
        self._state: RunState | None = None

    def open(self, state: RunState, preload: Callable[[], None] | None) -> None:
        """Start the fork servers, recorded in ``state``: before Mininet opens anything a child
        could inherit."""
        self._state = state
        self._forks, self._line_forks = ForkServer(preload), ForkServer(fresh=True)
        state.add(self._forks.pid)
        state.add(self._line_forks.pid)

    def spawn(self, netns_pid: int | None, target: str, args: Sequence[str], *, env: Mapping[str, str], log: Path,
              name: str, warm: bool = True) -> Process:
        """Fork ``module:function(args)`` into the namespace of ``netns_pid`` (see
        :meth:`fedmst.net.emulation.Emulation.spawn`)."""
        forks = self._forks if warm else self._line_forks
        if forks is None:
            raise EmulationError("spawn: the emulation is not running (use it inside `with`)")
        return self.track(forks.spawn(netns_pid, target, args, env=env, log=log, name=name), name.rstrip("0123456789"))

    def track(self, proc: Process, name: str = "tracked") -> Process:
        """Record ``proc`` (``name``: its kind, for :meth:`cpu_seconds`); returns it."""
        if self._state is None:
            raise EmulationError("track: the emulation is not running (use it inside `with`)")
        self.procs.append(proc)
        self.names.append(name)
        self._state.add(proc.pid)
        return proc

    def cpu_seconds(self) -> dict[str, float]:
        """The CPU time (user and system) the live processes of each kind have used so far."""
        used: dict[str, float] = defaultdict(float)
        for proc, name in zip(self.procs, self.names):
            used[name] += cpu_seconds(proc.pid)
        return dict(used)

    def close(self) -> None:
        """End every process (SIGTERM, then SIGKILL after 5 s), then the fork servers. Safe to call twice."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
        self.names.clear()
        for forks in (self._forks, self._line_forks):
            if forks is not None:
                forks.close()
        self._forks = self._line_forks = None
        self._state = None


def cpu_seconds(pid: int, *, children: bool = False) -> float:
    """User and system CPU seconds of process ``pid`` (with ``children``: also those of its
    children that have ended), 0 once it is gone."""
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return t.user + t.system + (t.children_user + t.children_system if children else 0.0)
