"""Docker workers in real Mininet: each compute node's agent in its own container on the links.

Needs a running Docker daemon and the ``fedmst-worker`` image; ``scripts/test.sh`` sets both up
(``scripts/setup-docker.sh``). Under CI a missing daemon or image fails these tests instead of
skipping them.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from conftest import assert_fedavg, assert_strategy, fedmst_cli, run_past_round_one
from fedmst.core.wire import DEFAULT_MTU
from fedmst.workers import DEFAULT_IMAGE, docker as containers
from fedmst.run.results import read_csv

pytestmark = pytest.mark.integration


def _docker_ready() -> str | None:
    """Why Docker workers cannot run here, or None when they can."""
    try:
        containers.require_docker(DEFAULT_IMAGE)
    except Exception as exc:  # noqa: BLE001 - the reason is the message
        return str(exc)
    return None


@pytest.fixture(scope="module", autouse=True)
def docker_ready() -> None:
    reason = _docker_ready()
    if reason and os.environ.get("CI"):
        pytest.fail(f"CI must test Docker workers: {reason}")
    if reason:
        pytest.skip(f"{reason} (bash scripts/setup-docker.sh sets Docker up)")


FRAME = DEFAULT_MTU + 14
"""One full Ethernet frame: the most a single TCP retransmission adds to a link's bytes."""
TASK = ["--topology", "small", "--local-models", "4", "--rounds", "2", "--global-node", "0",
        "--local-nodes", "2,3,3,4", "--model", "mlp", "--save-models"]


def _compare(out: Path, *extra: str) -> dict:
    proc = fedmst_cli("compare", *TASK, "--out", str(out), *extra, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((out / "comparison.json").read_text())["summaries"]


def _weight_bytes(run: Path) -> dict[tuple[str, str, str], int]:
    return {(r["round"], r["src"], r["dst"]): int(r["measured_weight_bytes"])
            for r in read_csv(run / "links.csv") if int(r["predicted_bytes"]) > 0}


def test_docker_workers_match_the_plan_processes_and_aggregate_exactly(tmp_path: Path, clean_host: None) -> None:
    docker = _compare(tmp_path / "docker", "--workers", "docker", "--cpus", "1", "--cpus", "3=0.5",
                      "--memory", "1g")
    process = _compare(tmp_path / "process")
    for scheduler in ("spff", "mst"):
        run = tmp_path / "docker" / scheduler
        summary = docker[scheduler]
        assert summary["workers"]["backend"] == "docker"
        assert process[scheduler]["workers"]["backend"] == "process"
        # at least 3 containerised workers, each limited as asked, as seen from inside
        seen = json.loads((run / "workers.json").read_text())
        assert len(seen) >= 3 and all(w["container"] for w in seen.values()), seen
        assert seen["3"]["cpus"] == 0.5 and seen["0"]["cpus"] == 1.0, seen
        assert all(w["memory_bytes"] == 1 << 30 for w in seen.values()), seen
        # every weight-carrying link direction: measured as planned, and as with processes
        dock, proc = _weight_bytes(run), _weight_bytes(tmp_path / "process" / scheduler)
        assert dock.keys() == proc.keys() and dock
        predicted = {(r["round"], r["src"], r["dst"]): int(r["predicted_bytes"]) for r in read_csv(run / "links.csv")}
        for hop, measured in dock.items():  # within 2%, or one resent segment (a tail-loss probe on a 20 KB model)
            assert abs(measured - predicted[hop]) <= max(0.02 * predicted[hop], FRAME), (hop, measured, predicted[hop])
            assert abs(measured - proc[hop]) <= max(0.02 * proc[hop], FRAME), (hop, measured, proc[hop])
        for rnd in (1, 2):  # in-path aggregation inside containers is exact
            assert_fedavg(run / "models" / f"round{rnd}")
    assert docker["mst"]["link_bytes_measured"] < docker["spff"]["link_bytes_measured"]


def test_containers_run_a_median_over_the_selected_models_exactly(tmp_path: Path, clean_host: None) -> None:
    """A robust strategy and client selection with Docker workers: three of the four local models
    take part in each round, relays forward their updates whole, and G's model is their median."""
    import torch

    from fedmst.fl import aggregation, data, models

    out = tmp_path / "run"
    proc = fedmst_cli("run", *TASK, "--scheduler", "mst", "--workers", "docker", "--strategy", "fedmedian",
                      "--clients-per-round", "3", "--out", str(out), timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["workers"]["backend"] == "docker" and summary["local_models_per_round"] == [3, 3]
    digits = data.load_dataset("digits")
    torch.manual_seed(1)
    initial = aggregation.flatten(models.build_model("mlp", num_classes=digits.num_classes,
                                                     input_shape=digits.input_shape))
    assert_strategy(out, "fedmedian", initial, tolerance=1e-5)
    predicted = {(r["round"], r["src"], r["dst"]): int(r["predicted_bytes"]) for r in read_csv(out / "links.csv")}
    for hop, measured in _weight_bytes(out).items():
        assert abs(measured - predicted[hop]) <= max(0.02 * predicted[hop], FRAME), (hop, measured, predicted[hop])


def test_missing_image_is_one_line_and_leaves_nothing(tmp_path: Path, clean_host: None) -> None:
    proc = fedmst_cli("run", *TASK, "--workers", "docker", "--image", "fedmst-no-such-image", "--out",
                      str(tmp_path / "run"), timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "fedmst-no-such-image" in lines[0] and "not found" in lines[0]


def test_ctrl_c_removes_the_containers(tmp_path: Path, clean_host: None) -> None:
    with run_past_round_one(tmp_path / "run", "--workers", "docker") as proc:
        assert len(containers.labelled()) >= 3
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert len(read_csv(tmp_path / "run" / "rounds.csv")) >= 1
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "interrupted"


def test_sigkill_then_clean_removes_the_containers(tmp_path: Path, clean_host: None) -> None:
    with run_past_round_one(tmp_path / "run", "--workers", "docker") as proc:
        names = [name for name, _ in containers.labelled()]
        proc.kill()
        proc.wait(timeout=30)
    assert len(names) >= 3 and [name for name, _ in containers.labelled()] == names  # left behind...
    cleaned = fedmst_cli("clean", timeout=120)
    assert cleaned.returncode == 0, cleaned.stderr
    for name in names:  # ...and removed by name, one line each
        assert f"removed container {name}" in cleaned.stdout


def test_a_killed_container_worker_leaves_the_round_to_the_survivors(tmp_path: Path, clean_host: None) -> None:
    """--kill-worker on a container kills every process in it; the round goes on without it."""
    out = tmp_path / "run"
    proc = fedmst_cli("run", *TASK, "--rounds", "3", "--workers", "docker", "--kill-worker", "4@2", "--out", str(out),
                      timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["local_models_per_round"] == [4, 3, 3]
    (event,) = json.loads((out / "faults.json").read_text())
    assert event["cause"]["4"].startswith("agent on node 4 exited")
    for rnd in (2, 3):
        weights = assert_fedavg(out / "models" / f"round{rnd}")
        assert sorted(weights) == ["0", "1", "2"]


def test_docker_workers_run_tasks_on_their_own_clocks(tmp_path: Path, clean_host: None) -> None:
    """Containers share the host's monotonic clock, so tasks on independent clocks, Cassini's
    shifts and a background flow work with Docker workers as with processes."""
    workload = Path(__file__).resolve().parents[1] / "topologies" / "workloads" / "dumbbell-2tasks.json"
    out = tmp_path / "run"
    proc = fedmst_cli("run", "--workers", "docker", "--topology", "dumbbell", "--workload", str(workload), "--clock",
                      "independent", "--interleave", "cassini", "--compute-s", "0.3", "--rounds", "2", "--epochs", "1",
                      "--traffic", "g1-w1:10mbit:udp", "--out", str(out), timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["workers"]["backend"] == "docker" and summary["clock"] == "independent"
    assert summary["start_offsets_s"]["B"] > 0 and summary["rounds"] == 2
    starts = {r["task"]: float(r["start_s"]) for r in read_csv(out / "tasks.csv") if r["round"] == "1"}
    # each task starts at its offset (never earlier), B before A's first round is over
    a_round = next(float(r["round_s"]) for r in read_csv(out / "tasks.csv") if (r["task"], r["round"]) == ("A", "1"))
    shift = summary["start_offsets_s"]["B"]
    assert starts["A"] >= -0.01 and shift - 0.01 <= starts["B"] < shift + a_round, starts
    assert abs(summary["weight_bytes_measured"] / summary["link_bytes_predicted"] - 1) < 0.05
    background = {(r["src"], r["dst"]): int(r["background_bytes"]) for r in read_csv(out / "links.csv")}
    assert background[("sl", "sr")] > 0 and background[("sr", "sl")] == 0


def test_containers_train_their_models_on_the_host_trainer(tmp_path: Path, clean_host: None) -> None:
    """``--host-trainer`` with Docker workers: the agents in their containers reach the host's trainer
    through the run's scratch folder (bind-mounted), which trains their models as process agents
    would: the same global models bit for bit. (``--device cuda`` takes this path: the containers
    need no GPU of their own.)"""
    import torch

    for name, extra in (("docker", ["--workers", "docker", "--host-trainer"]), ("process", [])):
        proc = fedmst_cli("run", *TASK, "--scheduler", "mst", *extra, "--out", str(tmp_path / name), timeout=900)
        assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((tmp_path / "docker" / "summary.json").read_text())
    assert summary["workers"]["backend"] == "docker" and summary["training"]["trainer"] == "host"
    assert set(summary["training"]["busy_s"]) == {"2", "3", "4"}
    for rnd in ("round1", "round2"):
        docker, process = (torch.load(tmp_path / n / "models" / rnd / "task0-global.pt") for n in ("docker", "process"))
        assert torch.equal(docker, process), rnd
