"""Shared fixtures: integration tests prove they leave no namespace, interface or process."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import psutil
import pytest

from fedmst.workers import docker as containers
from forked_cli import ForkedCli
from fedmst.net.cleanup import POINT_PREFIX, STATE_DIR, is_ours, is_ray_local, ray_address_file


def leftovers() -> list[str]:
    """Emulated interfaces in the root namespace, fedmst processes still alive, named network
    namespaces, fedmst's containers, and the clean-up state files, scratch folders and registered
    TCP congestion controls of runs that did not finish their teardown."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found = [f"interface {m}" for m in re.findall(r"^\d+: (fm[\w-]+)", links, re.M)]
    for proc in psutil.process_iter(["pid", "name", "cmdline", "status"]):
        # a zombie holds nothing (no namespace, no memory): processes that died with a SIGKILLed
        # coordinator wait there until init, which reaps at its own pace, collects them
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if is_ours(proc.info["name"] or "", proc.info["cmdline"] or []):
            cmdline = " ".join(proc.info["cmdline"] or [])
            found.append(f"process {proc.info['pid']} ({proc.info['name']}): {cmdline[:80]}")
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    states = sorted(STATE_DIR.glob("*.json")) if STATE_DIR.exists() else []
    boxes = [f"container {name}" for name, _ in containers.labelled()]
    scratch = [f"scratch folder {p}" for p in sorted(Path(tempfile.gettempdir()).glob("fedmst-*"))
               if re.fullmatch(r"fedmst-[a-z]{3}-\w{8}", p.name)  # a run's (RunState.scratch)
               or p.name.startswith(POINT_PREFIX)]  # a Ray sweep point's
    algorithms = [f"congestion control {name}" for name in
                  Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
                  if re.fullmatch(r"fm[a-z]{3}_\w+", name)]  # a run's BPF one (fedmst.net.congestion)
    return found + [f"netns {n}" for n in netns] + boxes + [f"state file {s}" for s in states] + scratch + algorithms


@pytest.fixture
def clean_host() -> Iterator[None]:
    """Fail a test that leaves anything behind (checked even when the test itself fails)."""
    before = leftovers()
    assert not before, f"host not clean before the test: {before}"
    yield
    after = leftovers()
    assert not after, f"left behind: {after}"


FEDMST = str(Path(sys.executable).with_name("fedmst"))
_forked: list[ForkedCli] = []


def fedmst_cli(*args: str | Path, cwd: Path | None = None, timeout: float = 600,
               columns: int | None = None) -> subprocess.CompletedProcess[str]:
    """``fedmst ARGS`` to its end, as the console script would run it, in a process forked from
    one that has imported the command already (:mod:`forked_cli`: 2 s less a call). A call that
    needs its own environment, or the console script's own process, uses ``subprocess`` and ``FEDMST``."""
    if not _forked:
        _forked.append(ForkedCli())
        atexit.register(_forked[0].close)
    return _forked[0].run([str(a) for a in args], cwd=cwd, timeout=timeout, columns=columns)


@contextmanager
def run_past_round_one(out: Path, *extra: str) -> Iterator[subprocess.Popen[str]]:
    """A real ``fedmst run`` (MST on ``small``, 3 local models of the 153 KB ``cnn``, 20 rounds of
    one epoch, some 0.3 s each) that has finished its first round; killed on the way out if the
    test left it running."""
    proc = subprocess.Popen(
        [FEDMST, "run", "--topology", "small", "--scheduler", "mst", "--local-models", "3", "--model", "cnn",
         "--rounds", "20", "--epochs", "1", "--out", str(out), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not (out / "rounds.csv").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no round finished in time"
            time.sleep(0.2)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def assert_fedavg(saved: Path, task: str = "task0") -> dict[str, Any]:
    """Check that G's model saved in ``saved`` is exactly (within 1e-5, relative where an entry is
    larger than 1: BatchNorm's running variances reach thousands) the FedAvg of the local models
    saved beside it; return the round's FedAvg weights (``<task>-weights.json``), which stand
    in for the sample counts: ``fedavg`` only needs numbers proportional to them."""
    import json

    import torch

    from fedmst.fl.aggregation import fedavg

    weights = json.loads((saved / f"{task}-weights.json").read_text())
    models = sorted(weights, key=int)
    expected = fedavg([torch.load(saved / f"{task}-local{i}.pt") for i in models], [float(weights[i]) for i in models])
    error = ((torch.load(saved / f"{task}-global.pt") - expected).abs() / expected.abs().clamp(min=1)).max().item()
    assert error <= 1e-5, f"{saved.name}: {task}'s global model is {error:g} off the FedAvg of models {models}"
    return weights


def assert_strategy(run: Path, strategy: str, initial: Any, task: str = "task0", tolerance: float = 1e-4) -> None:
    """Replay ``strategy`` over a run's saved rounds (``--save-models``) from the ``initial`` global
    model: each round's global model must be its step from the round before's by the weighted mean
    of the saved local models' updates (or its aggregate of them all), within ``tolerance`` (an
    adaptive step divides by the size of each update, so it magnifies float32's rounding of the
    in-path sums: up to 6e-5 measured)."""
    import json

    import torch

    from fedmst.fl.strategies import build_strategy

    server, current = build_strategy(strategy, {}), initial
    rounds = sorted((run / "models").glob("round*"), key=lambda p: int(p.name[5:]))
    assert rounds, f"{run}: no saved models"
    for r, saved in enumerate(rounds, start=1):
        weights = {int(i): float(w) for i, w in json.loads((saved / f"{task}-weights.json").read_text()).items()}
        updates = {i: torch.load(saved / f"{task}-local{i}.pt") - current for i in weights}
        expected = (server.step(r, current, sum(weights[i] * u for i, u in updates.items())) if server.decomposable
                    else server.aggregate(r, current, updates, weights))
        current = torch.load(saved / f"{task}-global.pt")
        error = (current - expected).abs().max().item()
        assert error <= tolerance, f"{saved}: {task}'s global model is {error:g} off {strategy}'s step"


def children_running(proc: subprocess.Popen[str], name: str) -> list[psutil.Process]:
    """The processes ``proc`` started (forked or run) called ``name`` (e.g. fedmst-agent); a child that
    ends while they are listed (a short-lived ``tc`` or ``ip``) is no longer one of them."""
    found = []
    for p in psutil.Process(proc.pid).children(recursive=True):
        try:
            if p.name() == name:
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


def agent_of(proc: subprocess.Popen[str], node: str) -> psutil.Process:
    """The agent of ``node`` that ``proc`` (a ``fedmst run``) started: the one writing its log."""
    (agent,) = [p for p in children_running(proc, "fedmst-agent")
                if os.readlink(f"/proc/{p.pid}/fd/1").endswith(f"/node-{node}.log")]
    return agent


def missing_bpf() -> str | None:
    """What this host lacks to build and register BPF congestion controls, or None."""
    if not Path("/sys/kernel/btf/vmlinux").exists():
        return "this kernel has no BTF (CONFIG_DEBUG_INFO_BTF: /sys/kernel/btf/vmlinux)"
    for tool in ("clang", "bpftool"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/setup.sh --all installs clang, libbpf-dev, bpftool)"
    return None


RAY_LOCAL = Path(__file__).resolve().parents[1] / "scripts" / "ray-local.sh"


@contextmanager
def script_cluster(nodes: int, env: dict[str, str], *options: str) -> Iterator[tuple[str, list[int]]]:
    """A cluster of ``nodes`` started by the script with ``env``: (address, PIDs of its `ray start`
    processes); ``options`` are the script's (``--namespaces``). The script stops it however the
    block ends, and then every process under them (raylets, GCS, workers; a zombie holds nothing and
    waits for init to reap it) is gone, nothing of any run is left (nor the namespaces), and Ray's
    address file holds what it held before (nothing where that named a stopped cluster of the
    script, as older fedmst versions left it)."""
    before = ray_address()
    started = subprocess.run(["bash", str(RAY_LOCAL), "start", str(nodes), *options], capture_output=True, text=True,
                             env=env, timeout=300)
    pids = [int(p.read_text()) for p in sorted(Path(env["RAY_LOCAL_DIR"]).glob("node*.pid"))]
    try:
        assert started.returncode == 0, started.stderr
        yield started.stdout.strip().splitlines()[-1], pids
    finally:
        tree = _with_descendants(pids)
        stopped = subprocess.run(["bash", str(RAY_LOCAL), "stop"], capture_output=True, text=True, env=env,
                                 timeout=300)
        assert stopped.returncode == 0, stopped.stderr
        assert "No such file" not in stopped.stderr, stopped.stderr  # nodes ending as stop reads them: no word
        left = [p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not left, f"ray-local.sh stop left processes of the cluster running: {left}"
        assert not leftovers(), f"left behind: {leftovers()}"
        expected = None if before is not None and is_ray_local(before) else before
        assert ray_address() == expected, f"{ray_address_file()}: {ray_address()!r}, before the cluster {before!r}"


def ray_address() -> str | None:
    """What Ray's address file (the cluster a plain ``ray.init()`` on this host joins) holds."""
    return ray_address_file().read_text() if ray_address_file().exists() else None


def _with_descendants(pids: list[int]) -> list[psutil.Process]:
    procs = []
    for pid in pids:
        try:
            node = psutil.Process(pid)
            procs += [node, *node.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    return procs
