"""Runs as isolated units: run ids in every shared name, ``clean`` that spares live runs, and two
real runs at once on one host."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import FEDMST
from fedmst.net import cleanup

ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network interfaces")


def test_runs_claim_different_ids_and_name_their_hosts_with_them(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cleanup, "STATE_DIR", tmp_path)
    runs = [cleanup.RunState() for _ in range(50)]
    assert len({r.id for r in runs}) == 50
    assert sorted(p.stem for p in tmp_path.glob("*.json")) == sorted(r.id for r in runs)
    run = runs[0]
    assert run.host_name(12) == f"fm{run.id}12" and cleanup.run_of(f"{run.host_name(12)}-eth3") == run.id
    run.add(os.getpid())
    record = json.loads(run.path.read_text())
    assert record["run"] == run.id and record["coordinator"] == os.getpid()
    assert record["pids"] == [[os.getpid(), psutil.Process().create_time()]]
    assert all(cleanup.is_live(json.loads(r.path.read_text())) for r in runs)
    assert not list(tmp_path.glob("*.tmp"))  # the drafts each claim was linked from
    for r in runs:
        r.remove()
    assert not list(tmp_path.iterdir())


def _dead_pid() -> int:
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


@ROOT
def test_clean_removes_a_dead_runs_leftovers_and_spares_a_live_run(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs' interfaces in the root namespace (what a run killed mid-build could leave), their
    scratch folders and their records: only the dead run's go, each line naming its run."""
    monkeypatch.setattr(cleanup, "STATE_DIR", tmp_path)
    live = cleanup.RunState()
    dead = cleanup.RunState()
    dead._record["coordinator"] = _dead_pid()
    dead._write()
    mine = [f"{r.host_name(0)}-eth0" for r in (live, dead)]
    peers = [f"{r.host_name(1)}-eth0" for r in (live, dead)]
    try:
        for name, peer in zip(mine, peers):  # a veth pair each (this kernel has no dummy interfaces)
            subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", peer], check=True)
        real = cleanup._root_interfaces
        monkeypatch.setattr(cleanup, "_root_interfaces", lambda: [i for i in real() if i in mine + peers])
        done = cleanup.clean()
        links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
        assert f"run {live.id}: live (process {os.getpid()}), left alone" in done
        deleted = [line for line in done if line.startswith(f"run {dead.id}: deleted interface ")]
        assert len(deleted) == 1 and deleted[0].endswith("-eth0"), done  # one end of the pair takes both
        assert any(line.startswith(f"run {dead.id}: removed its record") for line in done)
        assert f" {mine[0]}@" in links and f" {mine[1]}@" not in links, links
        assert live.path.exists() and not dead.path.exists()
        assert f"run {dead.id}: removed its scratch folder {dead.scratch}" in done
        assert live.scratch.is_dir() and not dead.scratch.exists()
    finally:
        for name in mine:
            subprocess.run(["ip", "link", "del", name], capture_output=True)
        live.remove()


def test_clean_removes_the_scratch_of_a_ray_point_whose_worker_is_gone(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ray worker killed with its node leaves its point's scratch folder; ``clean`` removes it by
    the PID in its name, and leaves a live worker's alone."""
    import tempfile

    monkeypatch.setattr(cleanup, "STATE_DIR", tmp_path)
    monkeypatch.setattr(cleanup, "_root_interfaces", lambda: [])
    dead = Path(tempfile.mkdtemp(prefix=f"{cleanup.POINT_PREFIX}{_dead_pid()}-"))
    live = Path(tempfile.mkdtemp(prefix=cleanup.point_prefix()))
    try:
        (dead / "run").mkdir()
        done = cleanup.clean()
        assert not dead.exists() and live.is_dir()
        assert any(line.startswith(f"removed {dead}, a Ray sweep point's scratch folder") for line in done), done
    finally:
        for folder in (dead, live):
            shutil.rmtree(folder, ignore_errors=True)


def test_a_zombie_coordinator_is_dead(tmp_path: Path) -> None:
    """A SIGKILLed ``fedmst run`` that its parent has not reaped yet holds nothing: its run is dead."""
    child = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.01)
        started = psutil.Process(child.pid).create_time()
        assert not cleanup.is_live({"coordinator": child.pid, "started": started})
    finally:
        child.wait()
    assert cleanup.is_live({"coordinator": os.getpid(), "started": psutil.Process().create_time()})


def test_clean_ends_a_dead_runs_process_but_not_a_later_one_given_its_pid(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A dead run's record names processes by PID and start time: one of ours with that PID but
    another start time (the PID was reused) is left running; the very one is ended."""
    monkeypatch.setattr(cleanup, "STATE_DIR", tmp_path)
    monkeypatch.setattr(cleanup, "_root_interfaces", lambda: [])
    ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "fedmst.workers.agent"])
    try:
        started = psutil.Process(ours.pid).create_time()
        for record_started, ended in ((started - 5.0, False), (started, True)):
            dead = cleanup.RunState()
            dead._record.update(coordinator=_dead_pid(), pids=[[ours.pid, record_started]])
            dead._write()
            done = cleanup.clean()
            assert (f"run {dead.id}: ended process {ours.pid}" in done) is ended, done
            assert (ours.poll() is not None) is ended
    finally:
        ours.kill()
        ours.wait()


@ROOT
@pytest.mark.integration
def test_two_runs_at_once_each_measure_their_own_links(tmp_path: Path, clean_host: None) -> None:
    """The issue's check: NSFNET, 4 local models, one MST and one SPFF run started together."""
    procs = {s: subprocess.Popen([FEDMST, "run", "--topology", "nsfnet", "--local-models", "4", "--scheduler", s,
                                  "--rounds", "1", "--epochs", "1", "--out", str(tmp_path / s)],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for s in ("mst", "spff")}
    outputs = {s: p.communicate(timeout=600)[0] for s, p in procs.items()}
    for s, p in procs.items():
        assert p.returncode == 0, outputs[s][-2000:]
        summary = json.loads((tmp_path / s / "summary.json").read_text())
        assert summary["status"] == "completed"
        assert abs(summary["weight_bytes_measured"] / summary["link_bytes_predicted"] - 1) < 0.05, summary
        assert summary["max_link_bytes_error"] < 0.05, summary
    ids = {s: out.split("] run ", 1)[1][:3] for s, out in outputs.items()}
    assert ids["mst"] != ids["spff"], ids
