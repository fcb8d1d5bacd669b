"""The fork server on its own (no namespaces): children start, log, exit, die and are reaped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from fedmst.net import forkserver
from fedmst.net.forkserver import SERVER_NAME, ForkServer, ForkServerError

TARGETS = '''import os, sys, time

def echo(args):
    print("hello", *args, os.environ.get("FEDMST_TEST_VALUE"))
    print("to stderr", file=sys.stderr)
    return int(args[0])

def sleep(args):
    time.sleep(float(args[0]))

def boom(args):
    raise ValueError("boom")

def preloaded(args):
    print("preloaded" if "fedmst_test_preloaded" in sys.modules else "not preloaded")
'''


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ForkServer]:
    (tmp_path / "fedmst_test_targets.py").write_text(TARGETS)
    (tmp_path / "fedmst_test_preloaded.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    forks = ForkServer(preload=lambda: __import__("fedmst_test_preloaded"))
    try:
        yield forks
    finally:
        forks.close()


def _spawn(server: ForkServer, tmp_path: Path, target: str, *args: str, **env: str):
    return server.spawn(None, f"fedmst_test_targets:{target}", list(args), env=env, log=tmp_path / f"{target}.log",
                        name="test")


def test_a_child_runs_its_target_logs_and_exits_with_its_code(server: ForkServer, tmp_path: Path) -> None:
    child = _spawn(server, tmp_path, "echo", "3", "a", FEDMST_TEST_VALUE="v")
    assert child.wait(timeout=10) == 3 and child.poll() == 3
    assert (tmp_path / "echo.log").read_text().splitlines() == ["hello 3 a v", "to stderr"]
    assert psutil.Process(server.pid).name() == SERVER_NAME


def test_the_preload_ran_once_before_the_fork(server: ForkServer, tmp_path: Path) -> None:
    child = _spawn(server, tmp_path, "preloaded")
    assert child.wait(timeout=10) == 0
    assert (tmp_path / "preloaded.log").read_text().strip() == "preloaded"
    assert "fedmst_test_preloaded" not in sys.modules  # the coordinator itself never ran it


def test_a_failing_warm_up_leaves_the_server_serving(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The preload is only a warm-up (e.g. a model factory this host cannot import): the server
    goes on, and its children do the work, and report a failure, themselves."""
    (tmp_path / "fedmst_test_targets.py").write_text(TARGETS)
    monkeypatch.syspath_prepend(str(tmp_path))
    forks = ForkServer(preload=lambda: __import__("fedmst_test_missing_module"))
    try:
        child = _spawn(forks, tmp_path, "echo", "0")
        assert child.wait(timeout=10) == 0
        assert (tmp_path / "echo.log").read_text().splitlines()[0] == "hello 0 None"
    finally:
        forks.close()


def test_a_failing_target_is_exit_code_one_with_its_traceback(server: ForkServer, tmp_path: Path) -> None:
    child = _spawn(server, tmp_path, "boom")
    assert child.wait(timeout=10) == 1
    assert "ValueError: boom" in (tmp_path / "boom.log").read_text()


def test_a_killed_child_reports_the_signal_and_is_named(server: ForkServer, tmp_path: Path) -> None:
    child = _spawn(server, tmp_path, "sleep", "30")
    deadline = time.monotonic() + 5
    while psutil.Process(child.pid).name() != "fedmst-test":  # named by the child itself, just after the fork
        assert time.monotonic() < deadline, psutil.Process(child.pid).name()
        time.sleep(0.01)
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.2)
    child.kill()
    assert child.wait(timeout=10) == -signal.SIGKILL
    child.kill()  # reaped already: nothing is signalled (its PID may belong to someone else now)


def test_closing_the_server_ends_its_children(server: ForkServer, tmp_path: Path) -> None:
    child = _spawn(server, tmp_path, "sleep", "30")
    server.close()
    deadline = time.monotonic() + 10
    while psutil.pid_exists(child.pid) and psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the child outlived its server"
        time.sleep(0.05)
    assert child.poll() is not None
    with pytest.raises(ForkServerError, match="closed"):
        _spawn(server, tmp_path, "echo", "0")


def test_an_unknown_target_is_refused(server: ForkServer, tmp_path: Path) -> None:
    with pytest.raises(ForkServerError, match="cannot start fedmst_test_targets:nope"):
        _spawn(server, tmp_path, "nope")


def test_a_fresh_server_has_this_path_and_nothing_of_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The delay lines' server is a new interpreter running as root: a ``json.py`` in the
    directory it was started from must not shadow the standard library, while the modules this
    process can import stay importable."""
    (tmp_path / "fedmst_test_targets.py").write_text(TARGETS)
    monkeypatch.syspath_prepend(str(tmp_path))
    trap = tmp_path / "cwd"
    trap.mkdir()
    (trap / "json.py").write_text("raise SystemExit('the working directory was on sys.path')\n")
    monkeypatch.chdir(trap)
    forks = ForkServer(fresh=True)
    try:
        child = forks.spawn(None, "fedmst_test_targets:echo", ["0"], env={}, log=tmp_path / "echo.log", name="test")
        assert child.wait(timeout=30) == 0, (tmp_path / "echo.log").read_text()
        assert psutil.Process(forks.pid).name() == SERVER_NAME
        assert "torch" not in " ".join(psutil.Process(forks.pid).cmdline())
    finally:
        forks.close()


@pytest.mark.parametrize("server_alive", [True, False])
def test_a_child_whose_server_died_before_it_asked_to_die_with_it_exits(server_alive: bool) -> None:
    """The server's PID is read before the fork: a child that finds another parent (the server
    died in between and the orphan was re-parented) exits at once instead of outliving its run."""
    server = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: only prctl and _exit, safe in a forked copy of the test process
        forkserver._die_with_parent(b"fedmst-test", server if server_alive else server + 1_000_000)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == (0 if server_alive else 1)
