"""Processes inside the emulated hosts in milliseconds: forked from one warm process.

Every agent used to be a fresh interpreter that imported torch and warmed it up (about 3 s of CPU
each: nine agents on two cores took 25 s), and every delay line a fresh interpreter too. Instead,
:class:`ForkServer` forks a server from the coordinator (which has already imported torch and
loaded the data) before any network or thread exists; the server runs ``preload`` once (the
agents' warm-up), freezes its heap out of the garbage collector's way (``gc.freeze``), and then
forks each process asked for. The child enters its host's network and mount namespaces with
``setns(2)``, as ``mnexec -a`` does, writes to its log file and calls ``module:function(args)``.
Children share the server's memory copy-on-write.

The coordinator talks to the server over a socket pair in JSON lines (never pickles): ``spawn``
is answered with the child's PID, and the server reports each child's exit code as it reaps it,
so :class:`Forked` can stand where a :class:`subprocess.Popen` stood. Nothing outlives its
starter: the server dies with the coordinator and each child with the server (``PR_SET_PDEATHSIG``),
and each carries a name ``fedmst clean`` recognises (``fedmst-...``; their command line is the coordinator's).
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

SERVER_NAME = "fedmst-forksrv"
"""The server's process name (``/proc/PID/comm``); every child's name starts with ``fedmst-`` too."""
NAME_PREFIX = "fedmst-"
_CLONE_NEWNS, _CLONE_NEWNET = 0x00020000, 0x40000000
_PR_SET_NAME, _PR_SET_PDEATHSIG = 15, 1


class ForkServerError(RuntimeError):
    """The fork server could not start a process (it said why), or is gone."""


class ForkServer:
    """A warm process that forks children into network namespaces; ``close()`` ends it and them.

    Create it before the process starts threads or opens anything the children must not hold.
    """

    def __init__(self, preload: Callable[[], None] | None = None, *, fresh: bool = False) -> None:
        """``fresh``: the server is a new interpreter instead of a fork of this process, for
        children that need nothing of it (delay lines): forking a 30 MB process for each is
        much cheaper than forking one that has imported torch."""
        if fresh and preload is not None:
            raise ValueError("a fresh fork server cannot run this process's preload")
        ours, theirs = socket.socketpair()
        sys.stdout.flush()
        sys.stderr.flush()
        coordinator = os.getpid()
        # Ctrl-C or SIGTERM during fork() would raise inside the interpreter's at-fork hooks,
        # which swallow the exception, and the command would go on as if never stopped: hold
        # them over the fork, so that they arrive right after it, in this code
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        pid = os.fork()
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        if pid == 0:  # the server: never returns
            ours.close()
            if fresh:
                _exit_after(lambda: _exec_fresh(theirs, coordinator))
            _exit_after(lambda: _serve(theirs, preload, coordinator))
        theirs.close()
        self.pid = pid
        self._sock = ours
        self._buf = b""
        self._exits: dict[int, int] = {}
        self._io = threading.RLock()
        """One thread at a time talks to the server (a link trace signals delay lines from its own)."""
        self.closed = False

    def spawn(self, netns_pid: int | None, target: str, args: Sequence[str], *, env: Mapping[str, str],
              log: Path, name: str) -> Forked:
        """Fork ``module:function`` called with ``args`` (its return value is the exit code), in
        the namespaces of process ``netns_pid`` (None: the server's own), with ``env`` added to
        its environment, stdout and stderr appended to ``log``, and the process name ``fedmst-NAME``."""
        comm = NAME_PREFIX + name
        if len(comm) > 15:
            raise ValueError(f"process name {comm!r} is longer than the kernel's 15 characters")
        with self._io:
            self._send({"spawn": target, "args": list(args), "env": dict(env), "log": str(log),
                        "netns_pid": netns_pid, "name": comm})
            while True:
                msg = self._recv(timeout_s=30.0)
                if msg is None:
                    raise ForkServerError(f"the fork server did not answer while starting {target}")
                if "error" in msg:
                    raise ForkServerError(msg["error"])
                if "pid" in msg:
                    return Forked(self, int(msg["pid"]))

    def signal(self, pid: int, signum: int) -> None:
        """Send ``signum`` to child ``pid`` unless it has already been reaped (no PID reuse)."""
        with self._io:
            if pid not in self.exits():
                self._send({"signal": signum, "pid": pid})

    def exits(self) -> dict[int, int]:
        """Every child reaped so far: PID -> exit code (negative: killed by that signal)."""
        with self._io:
            while self._recv(timeout_s=0.0) is not None:
                pass
            return self._exits

    def next_message(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the server's next message (exit notices are recorded)."""
        with self._io:
            self._recv(timeout_s)

    def close(self, timeout_s: float = 5.0) -> None:
        """End the server; it terminates, then kills, the children still running. Safe twice."""
        if self.closed:
            return
        self.closed = True
        self._sock.close()
        deadline = time.monotonic() + timeout_s
        while os.waitpid(self.pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                break
            time.sleep(0.01)

    def _send(self, msg: dict[str, Any]) -> None:
        if self.closed:
            raise ForkServerError("the fork server is closed")
        try:
            self._sock.sendall(json.dumps(msg).encode() + b"\n")
        except OSError as exc:
            raise ForkServerError(f"the fork server is gone ({exc.strerror})") from None

    def _recv(self, timeout_s: float) -> dict[str, Any] | None:
        """The next message (exit notices are recorded on the way), or None if none came in time."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            if self.closed:
                return None
            ready, _, _ = select.select([self._sock], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            data = self._sock.recv(1 << 16)
            if not data:
                raise ForkServerError("the fork server died")
            self._buf += data
        line, self._buf = self._buf.split(b"\n", 1)
        msg = json.loads(line)
        if "exit" in msg:
            self._exits[int(msg["exit"])] = int(msg["code"])
        return msg


class Forked:
    """A child of the fork server, with the parts of :class:`subprocess.Popen` fedmst uses."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server, self.pid = server, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self.returncode = self.server.exits().get(self.pid)
            except ForkServerError:  # the server died, and its children with it
                self.returncode = -signal.SIGKILL
            if self.returncode is None and self.server.closed:  # ended by the server on its way out
                self.returncode = -signal.SIGTERM
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            try:
                self.server.next_message(timeout_s=left)  # an exit notice, or any message
            except ForkServerError:
                pass  # poll() says what became of the child
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            self.server.signal(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


# the server's side ------------------------------------------------------------------------------
def _exit_after(fn: Callable[[], int | None]) -> None:
    """Run ``fn`` in a forked process and leave with its exit code, whatever happens: a fork must
    never return into its parent's code."""
    code = 1
    try:
        code = fn() or 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported in the log, then the process ends
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int | bytes) -> None:
    _libc().prctl(option, value, 0, 0, 0)


def _setns(path: str, nstype: int) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        if _libc().setns(fd, nstype) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


def _die_with_parent(name: bytes, parent: int) -> None:
    """Be killed when ``parent`` (the process that forked us, its PID read before the fork) dies,
    and exit now if it already has: read after the fork, the parent could already be the
    orphans' reaper, and a child forked just as its server died would outlive its run."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    _prctl(_PR_SET_NAME, name)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _exec_fresh(sock: socket.socket, parent: int) -> None:
    """Become a new interpreter serving ``sock``, with exactly this process's sys.path: isolated
    (``-I``), so neither the working directory nor PYTHON* variables can put other code first in
    a process that runs as root."""
    os.set_inheritable(sock.fileno(), True)
    path = json.dumps([p for p in sys.path if p])
    code = ("import json, socket, sys; sys.path[:] = json.loads(sys.argv[2]); "
            f"from {__name__} import serve_fresh; serve_fresh(int(sys.argv[1]), int(sys.argv[3]))")
    os.execv(sys.executable, [sys.executable, "-I", "-c", code, str(sock.fileno()), path, str(parent)])


def serve_fresh(fd: int, parent: int) -> None:
    """The fresh server's life (``ForkServer(fresh=True)``): serve the socket ``fd`` for the
    coordinator ``parent``, then exit."""
    _exit_after(lambda: _serve(socket.socket(fileno=fd), None, parent))


def _serve(sock: socket.socket, preload: Callable[[], None] | None, parent: int) -> int:
    os.setsid()  # out of the terminal's process group: Ctrl-C reaches the coordinator, which ends us
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _close_inherited(keep=sock.fileno())
    # a child's exit wakes the loop below at once, so its exit code reaches the coordinator at once
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _die_with_parent(SERVER_NAME.encode(), parent)
    if preload is not None:
        try:
            preload()
        except Exception as exc:  # noqa: BLE001 - a warm-up only: each child does the real work and reports
            # its own failure (e.g. a model factory this host cannot import) to the coordinator
            os.write(2, f"fedmst fork server: warm-up failed, children start cold: {type(exc).__name__}: {exc}\n"
                     .encode())
    gc.freeze()  # the children's collector never walks (and so never copies) the inherited heap
    children: set[int] = set()
    buf = b""
    try:
        while True:
            ready, _, _ = select.select([sock, wake_r], [], [], 1.0)
            if wake_r in ready:
                os.read(wake_r, 4096)
            for pid, code in _reap(children):
                sock.sendall(json.dumps({"exit": pid, "code": code}).encode() + b"\n")
            if sock not in ready:
                continue
            data = sock.recv(1 << 16)
            if not data:  # the coordinator closed us (or died)
                return 0
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                reply = _handle(json.loads(line), sock, children, wake=(wake_r, wake_w))
                if reply is not None:
                    sock.sendall(json.dumps(reply).encode() + b"\n")
    finally:
        _end_children(children)


def _close_inherited(keep: int) -> None:
    """Close what the coordinator had open (another server's socket above all: while we held it,
    that server would never see the coordinator close it); stdout reads from nowhere now, so a
    caller waiting for the coordinator's output to end is not kept waiting by us."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    for fd in [int(name) for name in os.listdir("/proc/self/fd")]:
        if fd > 2 and fd != keep:
            try:
                os.close(fd)
            except OSError:  # the directory's own descriptor, already gone
                pass


def _handle(msg: dict[str, Any], sock: socket.socket, children: set[int],
            wake: tuple[int, int]) -> dict[str, Any] | None:
    if "signal" in msg:
        if msg["pid"] in children:
            _kill(msg["pid"], msg["signal"])
        return None
    module, _, function = msg["spawn"].partition(":")
    try:
        target = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as exc:
        return {"error": f"cannot start {msg['spawn']}: {exc}"}
    log = os.open(msg["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    server = os.getpid()
    pid = os.fork()
    if pid == 0:
        sock.close()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in wake:
            os.close(fd)
        _exit_after(lambda: _child(target, msg, log, server))
    os.close(log)
    children.add(pid)
    return {"pid": pid}


def _child(target: Callable[[list[str]], int | None], msg: dict[str, Any], log: int, server: int) -> int | None:
    os.setsid()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)
    _die_with_parent(msg["name"].encode(), server)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    # fresh line-buffered streams on the log: the inherited ones may be anything (a test's capture)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the process
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    if msg["netns_pid"] is not None:
        cwd = os.getcwd()
        _setns(f"/proc/{msg['netns_pid']}/ns/net", _CLONE_NEWNET)
        _setns(f"/proc/{msg['netns_pid']}/ns/mnt", _CLONE_NEWNS)
        os.chdir(cwd)  # entering a mount namespace moves us to its root
    os.environ.update(msg["env"])
    return target(msg["args"])


def _reap(children: set[int]) -> list[tuple[int, int]]:
    done = []
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        children.discard(pid)
        done.append((pid, os.waitstatus_to_exitcode(status)))
    return done


def _end_children(children: set[int], grace_s: float = 3.0) -> None:
    """SIGTERM every child, then SIGKILL those still there after ``grace_s``."""
    for pid in children:
        _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while children and time.monotonic() < deadline:
        _reap(children)
        time.sleep(0.01)
    for pid in children:
        _kill(pid, signal.SIGKILL)
    while children:
        _reap(children)


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:  # reaped meanwhile
        pass

