"""Sweeps on a real Ray cluster of two nodes on this host (scripts/ray-local.sh): the same table as
without Ray, points spread over both nodes, a point whose node dies run again on the other, and
nothing left running after ``ray-local.sh stop``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from conftest import FEDMST, leftovers
from fedmst.run.results import read_csv

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="emulations need root")]

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "ray-local.sh"
SWEEP = ["sweep", "--topology", "small", "--local-models", "2,3", "--seeds", "1", "--tasks", "2"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[int]]]:
    """Two Ray nodes started by the script, shared by this module's tests (starting a cluster takes
    10 s): (address, PIDs of their `ray start` processes). The host is clean before; the script
    stops them however the tests end, and then every process under them (raylets, GCS, workers; a
    zombie holds nothing and waits for init to reap it) is gone and nothing of any run is left.
    The test that kills a node comes last in this file."""
    assert not leftovers(), f"host not clean before the cluster: {leftovers()}"
    env = {**os.environ, "RAY_LOCAL_DIR": str(tmp_path_factory.mktemp("ray"))}
    started = subprocess.run(["bash", str(SCRIPT), "start", "2"], capture_output=True, text=True, env=env,
                             timeout=300)
    pids = [int(p.read_text()) for p in sorted(Path(env["RAY_LOCAL_DIR"]).glob("node*.pid"))]
    try:
        assert started.returncode == 0, started.stderr
        yield started.stdout.strip().splitlines()[-1], pids
    finally:
        tree = _with_descendants(pids)
        stopped = subprocess.run(["bash", str(SCRIPT), "stop"], capture_output=True, text=True, env=env,
                                 timeout=300)
        assert stopped.returncode == 0, stopped.stderr
        left = [p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not left, f"ray-local.sh stop left processes of the cluster running: {left}"
        assert not leftovers(), f"left behind: {leftovers()}"


def _with_descendants(pids: list[int]) -> list[psutil.Process]:
    procs = []
    for pid in pids:
        try:
            node = psutil.Process(pid)
            procs += [node, *node.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    return procs


def _bytes(folder: Path) -> dict[tuple[str, str, str], float]:
    return {(r["scheduler"], r["local_models"], r["task"]): float(r["run_link_bytes_measured"])
            for r in read_csv(folder / "sweep.csv")}


def test_a_sweep_at_an_address_without_a_cluster_stops_in_one_line(tmp_path: Path, clean_host: None) -> None:
    """Nothing listens there: one line and exit 1 (Ray alone would retry for minutes), and no point ran."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run([FEDMST, *SWEEP, "--ray", f"127.0.0.1:{port}", "--out", str(tmp_path / "s")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("fedmst: error: ")]
    assert f"--ray 127.0.0.1:{port}: no Ray cluster there" in line, proc.stderr
    assert not (tmp_path / "s" / "sweep.csv").exists()


def test_a_sweep_on_ray_spreads_over_both_nodes_and_matches_the_sweep_without_it(
        tmp_path: Path, cluster: tuple[str, list[int]]) -> None:
    address, _ = cluster
    on_ray = subprocess.run([FEDMST, *SWEEP, "--ray", address, "--out", str(tmp_path / "ray-sweep")],
                            capture_output=True, text=True, timeout=900)
    assert on_ray.returncode == 0, on_ray.stdout[-2000:] + on_ray.stderr[-2000:]
    here = subprocess.run([FEDMST, *SWEEP, "--out", str(tmp_path / "sweep")], capture_output=True, text=True,
                          timeout=900)
    assert here.returncode == 0, here.stderr[-2000:]
    rows = read_csv(tmp_path / "ray-sweep" / "sweep.csv")
    assert len({r["ray_node"] for r in rows}) == 2 and all(len(r["ray_node"]) == 8 for r in rows)
    assert {r["ray_node"] for r in read_csv(tmp_path / "sweep" / "sweep.csv")} == {""}
    with_ray, without = _bytes(tmp_path / "ray-sweep"), _bytes(tmp_path / "sweep")
    assert with_ray.keys() == without.keys() and len(with_ray) == 2 * 2 * 2
    for key, value in with_ray.items():
        assert abs(value / without[key] - 1) < 0.02, (key, value, without[key])
    for name in ("latency_vs_local_models.png", "bandwidth_vs_local_models.png"):
        assert (tmp_path / "ray-sweep" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "ray-sweep" / "k3-seed1" / "mst" / "links.csv").is_file()  # the node's files came back


def test_a_point_that_fails_on_its_node_stops_the_sweep_and_brings_its_folder_back(
        tmp_path: Path, cluster: tuple[str, list[int]]) -> None:
    """A model the command can import (it plans with it) but the nodes cannot (their Python path
    lacks it), as on a host whose checkout misses the user's module: the sweep says which point,
    on which node, why, and where its run folder now is, in one line, and exits 1."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "onlyhere.py").write_text(
        "import torch\n"
        "def make(num_classes, input_shape):\n"
        "    return torch.nn.Sequential(torch.nn.Flatten(),\n"
        "                               torch.nn.Linear(int(torch.tensor(input_shape).prod()), num_classes))\n")
    address, _ = cluster
    proc = subprocess.run([FEDMST, *SWEEP, "--model", "onlyhere:make", "--ray", address, "--out", str(tmp_path / "s")],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(tmp_path / "plugins")})
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("fedmst: error: ")]
    assert ", on ray node " in line and "failed in setup" in line and "No module named 'onlyhere'" in line, line
    folder = Path(line.rsplit("(its run folder: ", 1)[1].rstrip(")"))
    assert (folder / "config.json").is_file() and any((folder / "agents").iterdir()), line


def test_a_point_whose_node_dies_runs_again_on_the_other(tmp_path: Path, cluster: tuple[str, list[int]]) -> None:
    """The second node's raylet is SIGKILLed while a point runs there: Ray runs it again on the
    head, the sweep completes, and the killed point's emulation is left for ``clean`` (which
    ray-local.sh stop runs; the fixture checks nothing is left)."""
    address, (_, second) = cluster
    sweep = subprocess.Popen([FEDMST, *SWEEP, "--rounds", "3", "--ray", address, "--out", str(tmp_path / "s")],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        raylet = next(p for p in psutil.Process(second).children() if p.name() == "raylet")
        deadline = time.monotonic() + 240
        while not [p for p in raylet.children(recursive=True) if p.name().startswith("fedmst-")]:
            assert time.monotonic() < deadline, "no point ran on the second node"
            assert sweep.poll() is None, sweep.communicate()[0][-2000:]
            time.sleep(0.2)
        raylet.send_signal(signal.SIGKILL)
        output = sweep.communicate(timeout=900)[0]
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    assert sweep.returncode == 0, output[-2000:]
    rows = read_csv(tmp_path / "s" / "sweep.csv")
    assert len(rows) == 2 * 2 * 2 * 3  # schedulers x local models x tasks x rounds: every point came back
