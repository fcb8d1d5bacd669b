"""The processes an emulation starts in its hosts, each recorded so that nothing outlives the run:
:meth:`HostProcesses.close` ends them, and after a SIGKILL ``fedmst clean`` does."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Callable, Mapping, Protocol, Sequence

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

    def spawn(self, netns_pid: int, target: str, args: Sequence[str], *, env: Mapping[str, str], log: Path,
              name: str, warm: bool = True) -> Process:
        """Fork ``module:function(args)`` into the namespace of ``netns_pid`` (see
        :meth:`fedmst.net.emulation.Emulation.spawn`)."""
        forks = self._forks if warm else self._line_forks
        if forks is None:
            raise EmulationError("spawn: the emulation is not running (use it inside `with`)")
        return self.track(forks.spawn(netns_pid, target, args, env=env, log=log, name=name))

    def track(self, proc: Process) -> Process:
        """Record ``proc``; returns it."""
        if self._state is None:
            raise EmulationError("track: the emulation is not running (use it inside `with`)")
        self.procs.append(proc)
        self._state.add(proc.pid)
        return proc

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
        for forks in (self._forks, self._line_forks):
            if forks is not None:
                forks.close()
        self._forks = self._line_forks = None
        self._state = None
