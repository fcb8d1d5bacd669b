"""Sweeps on a real Ray cluster of two nodes on this host (scripts/ray-local.sh): the same table as
without Ray, points spread over both nodes, a point whose node dies run again on the other, and
nothing left running after ``ray-local.sh stop``; and the script's clusters and the user's own Ray
leave each other alone: a plain ``ray.init()`` works after a stop, a Ray token in ~/.ray changes
nothing."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from conftest import FEDMST, fedmst_cli, leftovers, script_cluster
from fedmst.run.results import read_csv

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="emulations need root")]

SWEEP = ["sweep", "--topology", "small", "--local-models", "2,3", "--seeds", "1", "--tasks", "2"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[int]]]:
    """Two Ray nodes started by the script, shared by this module's tests (starting a cluster takes
    10 s): (address, PIDs of their `ray start` processes). The host is clean before; the script
    stops them however the tests end (:func:`_script_cluster` checks what that leaves). The test
    that kills a node comes last in this file."""
    assert not leftovers(), f"host not clean before the cluster: {leftovers()}"
    with script_cluster(2, {**os.environ, "RAY_LOCAL_DIR": str(tmp_path_factory.mktemp("ray"))}) as found:
        yield found


def _bytes(folder: Path) -> dict[tuple[str, str, str], float]:
    return {(r["scheduler"], r["local_models"], r["task"]): float(r["run_link_bytes_measured"])
            for r in read_csv(folder / "sweep.csv")}


def test_a_sweep_at_an_address_without_a_cluster_stops_in_one_line(tmp_path: Path, clean_host: None) -> None:
    """Nothing listens there: one line and exit 1 (Ray alone would retry for minutes), and no point ran."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = fedmst_cli(*SWEEP, "--ray", f"127.0.0.1:{port}", "--out", str(tmp_path / "s"), timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("fedmst: error: ")]
    assert f"--ray 127.0.0.1:{port}: no Ray cluster there" in line, proc.stderr
    assert not (tmp_path / "s" / "sweep.csv").exists()


PLAIN_RAY_INIT = "import ray; ray.init(log_to_driver=False); print(ray.cluster_resources()); ray.shutdown()"
JOIN = ("import sys; from fedmst.hosts.raycluster import SLOT, connect; connect(sys.argv[1]); import ray; "
        "print(ray.cluster_resources()[SLOT]); ray.shutdown()")


def test_once_the_script_s_cluster_is_stopped_a_plain_ray_init_works(tmp_path: Path, clean_host: None) -> None:
    """A user's own Ray job after the script's cluster (or Flower's simulation engine, which starts
    Ray): ``ray.init()`` without an address, in a fresh process, starts a Ray of its own (or joins
    the one Ray's address file named before) instead of waiting on the stopped cluster's address.
    HOME is a temporary folder: Ray writes the token of a Ray it starts there. This and the next
    test run before the module's cluster: two clusters at once would contend for Ray's ports."""
    with script_cluster(1, {**os.environ, "RAY_LOCAL_DIR": str(tmp_path / "ray")}):
        pass
    (tmp_path / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    proc = subprocess.Popen([sys.executable, "-c", PLAIN_RAY_INIT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**env, "HOME": str(tmp_path / "home")}, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    finally:
        left = _end_session(proc.pid, 30)
    assert proc.returncode == 0 and "CPU" in out, err[-2000:]
    assert not left, f"ray.init()'s Ray left processes after ray.shutdown(), KILLed: {left}"


def _end_session(sid: int, wait_s: float) -> list[int]:
    """Wait until the processes of session ``sid`` (one this test started) are gone; KILL, by PID,
    those still there after ``wait_s`` and return their PIDs."""
    deadline = time.monotonic() + wait_s
    while (procs := _in_session(sid)) and time.monotonic() < deadline:
        time.sleep(0.5)
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            continue
    return [proc.pid for proc in procs]


def _in_session(sid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getsid(proc.pid) == sid:
                found.append(proc)
        except ProcessLookupError:
            continue
    return found


def test_the_script_s_cluster_and_a_sweep_s_driver_agree_where_the_user_has_a_ray_token(
        tmp_path: Path, clean_host: None) -> None:
    """Once a local Ray has run (a user's ``ray.init()``, Flower's simulation engine) Ray keeps a
    token in ~/.ray/auth_token, and a head node started with one there requires it, which neither
    ``ray start --address`` nor a client given an address sends: the script's two nodes must still
    come up, and a sweep's driver (:func:`fedmst.hosts.raycluster.connect`, in a fresh process) join
    them at their address and as ``auto`` (with which Ray itself would send the token). HOME is a
    temporary folder holding such a token."""
    (tmp_path / "home" / ".ray").mkdir(parents=True)
    (tmp_path / "home" / ".ray" / "auth_token").write_text(secrets.token_hex(32))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_") and k != "RAY_ADDRESS"}
    env |= {"HOME": str(tmp_path / "home"), "RAY_LOCAL_DIR": str(tmp_path / "ray")}
    with script_cluster(2, env) as (address, _):
        for given in (address, "auto"):
            joined = subprocess.run([sys.executable, "-c", JOIN, given], capture_output=True, text=True, env=env,
                                    timeout=120)
            assert joined.returncode == 0 and joined.stdout.split() == ["2.0"], (given, joined.stderr[-2000:])


def test_a_sweep_on_ray_spreads_over_both_nodes_and_matches_the_sweep_without_it(
        tmp_path: Path, cluster: tuple[str, list[int]]) -> None:
    address, _ = cluster
    on_ray = fedmst_cli(*SWEEP, "--ray", address, "--out", str(tmp_path / "ray-sweep"), timeout=900)
    assert on_ray.returncode == 0, on_ray.stdout[-2000:] + on_ray.stderr[-2000:]
    here = fedmst_cli(*SWEEP, "--out", str(tmp_path / "sweep"), timeout=900)
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
