"""The ``fedmst`` command for the tests, each call in a fresh process forked from one that has
already imported it.

Every call of the installed console script spends about 2 s of a 2-core host importing torch,
networkx and fedmst before it reads its first option, and the real-network tests call it some
two hundred times. Run as a script, this module imports what the command imports, torch
included (nothing runs: no tensor is made, no thread started), then serves one JSON request a
line on stdin: it forks, and the child is the command from the moment its imports are done:
it moves to the request's folder, writes stdout and stderr to files, sets ``sys.argv`` and calls
the console script's function (:func:`fedmst.cli.entry`), which exits as the script does. The
server answers each request with the child's PID, then with its exit code once it is reaped.

A call that sets its own environment, or needs the console script's own process (signals, the
command line other processes see), runs the installed script instead.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Sequence


def _child(request: dict[str, object]) -> None:
    """Become the command: never returns (SystemExit carries its code up to the interpreter's exit)."""
    os.chdir(str(request["cwd"]))
    if request["columns"]:
        os.environ["COLUMNS"] = str(request["columns"])  # read by rich when it prints, not at import
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    sys.argv = ["fedmst", *request["args"]]  # type: ignore[misc]
    from fedmst.cli import entry

    entry()
    sys.exit(0)


def _serve() -> None:
    """Answer requests until stdin closes."""
    import fedmst.cli  # noqa: F401 - what every command imports
    import fedmst.fl.data  # noqa: F401 - torch, as a run's model sizing imports it
    import fedmst.fl.models  # noqa: F401
    import fedmst.run.engine  # noqa: F401
    import fedmst.run.prepare  # noqa: F401

    replies = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        replies.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        print(json.dumps({"pid": pid}), file=replies, flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), file=replies, flush=True)


class ForkedCli:
    """One server process and its calls, one at a time."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True, env={k: v for k, v in os.environ.items() if k != "COLUMNS"})
        self._lock = threading.Lock()
        self._captured = Path(tempfile.mkdtemp(prefix="forked-cli-"))

    def run(self, args: Sequence[str], *, cwd: Path | None = None, timeout: float = 600,
            columns: int | None = None) -> subprocess.CompletedProcess[str]:
        """``fedmst ARGS`` in ``cwd`` (default: this process's) on a terminal ``columns`` wide; a
        call past ``timeout`` seconds is killed and raises :class:`subprocess.TimeoutExpired`."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        out, err = self._captured / "stdout", self._captured / "stderr"
        request = {"args": list(args), "cwd": str(cwd or Path.cwd()), "stdout": str(out), "stderr": str(err),
                   "columns": columns}
        killed = threading.Event()

        def kill(pid: int) -> None:
            killed.set()
            os.kill(pid, signal.SIGKILL)

        with self._lock:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            pid = json.loads(self._proc.stdout.readline())["pid"]
            timer = threading.Timer(timeout, kill, (pid,))
            timer.start()
            try:
                code = json.loads(self._proc.stdout.readline())["code"]
            finally:
                timer.cancel()
            stdout, stderr = out.read_text(), err.read_text()
        if killed.is_set():
            raise subprocess.TimeoutExpired(["fedmst", *args], timeout, stdout, stderr)
        return subprocess.CompletedProcess(["fedmst", *args], code, stdout, stderr)

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait(timeout=30)
        shutil.rmtree(self._captured)


if __name__ == "__main__":
    _serve()
