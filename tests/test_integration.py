"""Integration tests in real Mininet: real namespaces, shaped links, gloo transfers, training.

Each test checks, through ``clean_host``, that no namespace, interface or process is left.
"""

from __future__ import annotations

import json
import shutil
import os
import signal
import subprocess
from collections import Counter
from itertools import pairwise
from pathlib import Path

import psutil
import pytest

from conftest import FEDMST, agent_of, assert_fedavg, assert_strategy, fedmst_cli, run_past_round_one
from fedmst.net.cleanup import STATE_DIR
from fedmst.net.circuits import FIRST_CIRCUIT, Circuit
from fedmst.net.emulation import Emulation
from fedmst.run.results import read_csv
from fedmst.core.topology import load_topology

pytestmark = pytest.mark.integration
SUMMARY_KEYS = {
    "scheduler", "topology", "local_models", "rounds", "model_bytes", "link_bytes_measured",
    "link_bytes_predicted", "round_latency_s", "final_accuracy", "emulated",
}


def test_each_transfer_follows_its_planned_path(clean_host: None) -> None:
    """A flow routed the long way round the ring crosses exactly the planned links, both ways."""
    graph = load_topology("small")
    path = ("0", "4", "3", "2")  # 0-1-2 is shorter: plain shortest-path routing would not do this
    with Emulation(graph, delay_mode="off") as emu:
        flow = emu.install_flows({"long": path})["long"]
        before = emu.meters.counters()
        out = emu.cmd("0", f"ping -q -c 40 -i 0.01 -s 1400 -I {flow.src_addr} {flow.dst_addr}")
        after = emu.meters.counters()
    assert " 0% packet loss" in out, out
    delta = {hop: after[hop] - before[hop] for hop in after}
    planned = set(zip(path, path[1:])) | set(zip(path[1:], path))
    for hop, sent in delta.items():
        if hop in planned:
            assert sent >= 40 * 1400, f"{hop} carried only {sent} bytes"
        else:
            assert sent < 40 * 1400 / 10, f"{hop} off the planned path carried {sent} bytes"


PLUGIN = '''"""A user's own tree scheduler written against fedmst.api alone: a breadth-first tree from G."""
import networkx as nx

from fedmst.api import Plan, Scheduler, Transfer


class BfsTree(Scheduler):
    name = "bfs-tree"

    def plan(self, graph, task, link_state=None):
        parent = dict(nx.bfs_predecessors(graph, task.global_node, sort_neighbors=sorted))
        below = {}
        for i, node in enumerate(task.local_nodes):
            while node != task.global_node:
                below.setdefault(node, set()).add(i)
                node = parent[node]
        depth = nx.single_source_shortest_path_length(graph, task.global_node)
        hops = sorted((((parent[n], n), frozenset(m)) for n, m in below.items()), key=lambda h: depth[h[0][1]])
        return Plan(self.name, task, tuple([Transfer("broadcast", p, m) for p, m in hops]
                                           + [Transfer("upload", p[::-1], m) for p, m in reversed(hops)]))
'''
SCHEDULERS = ("spff", "mst", "userplans.trees:BfsTree")


def _compare(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    (out.parent / "plugins" / "userplans").mkdir(parents=True)
    (out.parent / "plugins" / "userplans" / "__init__.py").write_text("")
    (out.parent / "plugins" / "userplans" / "trees.py").write_text(PLUGIN)
    return subprocess.run(
        [FEDMST, "compare", "--topology", "small", "--local-models", "4", "--rounds", "2", "--epochs", "1",
         "--model", "mlp", "--global-node", "0", "--local-nodes", "2,3,3,4", "--save-models", "--out", str(out),
         "--schedulers", ",".join(SCHEDULERS), *extra],
        capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(out.parent / "plugins")},
    )


def test_compare_measures_plan_and_aggregates_exactly(tmp_path: Path, clean_host: None) -> None:
    """Two built-in schedulers and a user's own, written against fedmst.api, on identical tasks."""
    out = tmp_path / "cmp"
    proc = _compare(out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["schedulers"] == list(SCHEDULERS) and comparison["baseline"] == "spff"
    assert set(comparison["ratios"]) == {"mst", "userplans.trees:BfsTree"}
    accuracies = set()
    for scheduler, folder in zip(SCHEDULERS, ("spff", "mst", "userplans.trees_BfsTree")):
        summary = comparison["summaries"][scheduler]
        assert SUMMARY_KEYS <= summary.keys()
        assert summary["scheduler"] == scheduler and summary["rounds"] == 2
        assert set(summary["emulated"]) >= {"bandwidth", "delay", "loss"}
        accuracies.add(summary["final_accuracy"])
        run = out / folder
        for name in ("config.json", "plan.json", "rounds.csv", "links.csv", "summary.json"):
            assert (run / name).is_file()
        rows = read_csv(run / "links.csv")
        weighted = [r for r in rows if int(r["predicted_bytes"]) > 0]
        assert weighted, "no link carried weights"
        for r in weighted:
            predicted, measured = int(r["predicted_bytes"]), int(r["measured_weight_bytes"])
            assert abs(measured - predicted) <= 0.05 * predicted, r
        # ACKs of the transfers are measured and reported, not hidden
        assert sum(int(r["measured_other_bytes"]) for r in rows) > 0
        for rnd in (1, 2):
            assert_fedavg(run / "models" / f"round{rnd}")
    assert len(accuracies) == 1, "in-path aggregation is exact: every scheduler ends with the same model"
    summaries = comparison["summaries"]
    assert summaries["mst"]["link_bytes_measured"] < summaries["spff"]["link_bytes_measured"]
    assert comparison["bytes_ratio"] < 1
    assert "MST/SPFF" in proc.stdout and "BFS-TREE/SPFF" in proc.stdout  # the name BfsTree declares


def test_a_server_optimizer_steps_from_the_same_mean_under_every_scheduler(tmp_path: Path,
                                                                          clean_host: None) -> None:
    """``--strategy fedadam``: every scheduler's global model is FedAdam's step from the exact mean
    update of its local models, round after round, so SPFF, MST and a ring end round 1 with the
    same model; and that model is not FedAvg's."""
    import torch

    from fedmst.fl import aggregation, data, models

    out = tmp_path / "cmp"
    proc = fedmst_cli("compare", "--topology", "small", "--local-models", "4", "--rounds", "2", "--epochs", "1",
                      "--model", "mlp", "--global-node", "0", "--local-nodes", "2,3,3,4", "--save-models", "--out",
                      str(out), "--schedulers", "spff,mst,ring", "--strategy", "fedadam", timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "strategy fedadam" in " ".join(proc.stdout.split())
    digits = data.load_dataset("digits")
    torch.manual_seed(1)  # task 0's seed: the initial global model every node builds
    initial = aggregation.flatten(models.build_model("mlp", num_classes=digits.num_classes,
                                                     input_shape=digits.input_shape))
    for scheduler in ("spff", "mst", "ring"):
        summary = json.loads((out / scheduler / "summary.json").read_text())
        assert summary["strategy"] == "fedadam" and summary["strategy_knobs"]["eta"] == 0.1
        assert_strategy(out / scheduler, "fedadam", initial)
    first = {s: torch.load(out / s / "models" / "round1" / "task0-global.pt") for s in ("spff", "mst", "ring")}
    assert all((first[s] - first["spff"]).abs().max().item() <= 1e-4 for s in first)
    with pytest.raises(AssertionError, match="off the FedAvg"):
        assert_fedavg(out / "mst" / "models" / "round1")


def test_a_median_gets_every_update_whole_and_the_links_carry_what_the_plan_says(tmp_path: Path,
                                                                                  clean_host: None) -> None:
    """``--strategy fedmedian``: relays forward every update, so G's model is the coordinate-wise
    median of the participants' (from the saved models), each link carries its plan's bytes
    (within 5%), MST's upload more than with FedAvg; a ring, which sums by construction, is
    refused in one line before anything is built."""
    import torch

    from fedmst.fl import aggregation, data, models

    out = tmp_path / "cmp"
    proc = fedmst_cli("compare", "--topology", "small", "--local-models", "4", "--rounds", "2", "--epochs", "1",
                      "--model", "mlp", "--global-node", "0", "--local-nodes", "2,3,3,4", "--save-models", "--out",
                      str(out), "--strategy", "fedmedian", timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    digits = data.load_dataset("digits")
    torch.manual_seed(1)
    initial = aggregation.flatten(models.build_model("mlp", num_classes=digits.num_classes,
                                                     input_shape=digits.input_shape))
    for scheduler in ("spff", "mst"):
        assert_strategy(out / scheduler, "fedmedian", initial, tolerance=1e-5)
        for r in read_csv(out / scheduler / "links.csv"):
            predicted, measured = int(r["predicted_bytes"]), int(r["measured_weight_bytes"])
            assert abs(measured - predicted) <= 0.05 * predicted, (scheduler, r)
    plan = json.loads((out / "mst" / "plan.json").read_text())["tasks"][0]
    uploads = [f for f in plan["flows"] if f["phase"] == "upload"]
    assert len(uploads) > len({tuple(f["path"]) for f in uploads})  # a path carries several updates whole
    ring = fedmst_cli("run", "--topology", "small", "--scheduler", "ring", "--strategy", "fedmedian", "--out",
                      str(tmp_path / "ring"), timeout=120)
    assert ring.returncode == 1 and ring.stderr.count("\n") == 1, ring.stderr
    assert "ring cannot carry each update to G whole" in ring.stderr


def test_a_median_on_tasks_own_clocks_is_the_lockstep_median(tmp_path: Path, clean_host: None) -> None:
    """``--strategy fedmedian --clock independent``: each round's global model is the same as in
    lockstep (the same updates, forwarded whole, whoever's clock runs them), and over the run the
    links carry the plan's bytes."""
    accuracy = {}
    for clock in ("lockstep", "independent"):
        out = tmp_path / clock
        proc = fedmst_cli("run", "--topology", "small", "--scheduler", "mst", "--local-models", "4", "--rounds", "2",
                          "--epochs", "1", "--model", "mlp", "--global-node", "0", "--local-nodes", "2,3,3,4",
                          "--strategy", "fedmedian", "--clock", clock, "--out", str(out), timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        summary = json.loads((out / "summary.json").read_text())
        assert summary["strategy"] == "fedmedian" and summary["clock"] == clock
        assert abs(summary["weight_bytes_measured"] - summary["link_bytes_predicted"]) <= 0.05 * summary[
            "link_bytes_predicted"]
        accuracy[clock] = summary["accuracy_per_round"]
    assert accuracy["independent"] == pytest.approx(accuracy["lockstep"], abs=1e-6)


def test_a_dying_global_model_worker_stops_the_run_cleanly(tmp_path: Path, clean_host: None) -> None:
    """Any other worker's death is survived (tests/test_fault_runs.py); the one holding G's
    model ends the run with one line, keeping the rounds already finished."""
    out = tmp_path / "run"
    # the survivors wait for G's weights until the stall timeout aborts the phase: 2 s, not the default 10 s
    with run_past_round_one(out, "--stall-timeout", "2") as proc:
        rounds_before = (out / "rounds.csv").read_text()
        g = json.loads((out / "plan.json").read_text())["tasks"][0]["global_node"]
        agent_of(proc, g).kill()  # an agent this test's run started, by PID
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and f"node {g}" in lines[0], err  # "held its global model and died", or "exited"
    assert "held its global model" in lines[0] or "exited with code" in lines[0], err
    assert (out / "rounds.csv").read_text().startswith(rounds_before.splitlines()[0])
    finished = len(read_csv(out / "rounds.csv"))
    assert finished >= 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"].startswith("failed: ") and f"node {g}" in summary["status"], summary["status"]
    assert summary["rounds"] == finished and summary["rounds_planned"] == 20


def test_an_output_folder_removed_mid_run_stops_it_in_one_line(tmp_path: Path, clean_host: None) -> None:
    out = tmp_path / "run"
    with run_past_round_one(out) as proc:
        shutil.rmtree(out)
        _, err = proc.communicate(timeout=120)
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 1 and len(lines) == 1, err
    assert f"output folder {out} was removed while the run wrote into it" in lines[0]


def test_ctrl_c_tears_everything_down(tmp_path: Path, clean_host: None) -> None:
    out = tmp_path / "run"
    with run_past_round_one(out) as proc:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    finished = len(read_csv(out / "rounds.csv"))
    assert finished >= 1
    summary = json.loads((out / "summary.json").read_text())  # the finished rounds, marked interrupted
    assert summary["status"] == "interrupted" and summary["rounds"] == finished, summary


def test_sigkill_then_clean_leaves_nothing(tmp_path: Path, clean_host: None) -> None:
    """A coordinator killed outright cannot tear down; ``fedmst clean`` finishes the job: every
    process its record names ends (some die with the coordinator on their own, the rest are
    ended by ``clean``), its record goes, and ``clean_host`` finds nothing left."""
    with run_past_round_one(tmp_path / "run") as proc:
        proc.kill()
        proc.wait(timeout=30)
    [record] = [r for r in map(json.loads, map(Path.read_text, STATE_DIR.glob("*.json")))
                if r["coordinator"] == proc.pid]
    assert record["pids"], record
    cleaned = fedmst_cli("clean", timeout=120)
    assert cleaned.returncode == 0, cleaned.stderr
    assert f"run {record['run']}: removed its record (coordinator {proc.pid} is gone)" in cleaned.stdout
    assert not (STATE_DIR / f"{record['run']}.json").exists()
    pids = {pid for pid, _ in record["pids"]}
    running = [p.pid for p in psutil.process_iter(["status"])
               if p.pid in pids and p.info["status"] != psutil.STATUS_ZOMBIE]
    assert not running, f"processes of the dead run still running: {running}"


def test_concurrent_tasks_share_the_links_and_each_aggregates_exactly(tmp_path: Path, clean_host: None) -> None:
    out = tmp_path / "multi"
    proc = fedmst_cli("compare", "--topology", "small", "--tasks", "3", "--local-models", "3", "--rounds", "1",
                      "--epochs", "1", "--model", "mlp", "--save-models", "--out", str(out), timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    comparison = json.loads((out / "comparison.json").read_text())
    for scheduler in ("spff", "mst"):
        run = out / scheduler
        summary = comparison["summaries"][scheduler]
        assert summary["tasks"] == 3 and summary["tasks_blocked"] == 0
        plan = json.loads((run / "plan.json").read_text())
        assert [t["task"] for t in plan["tasks"]] == ["task0", "task1", "task2"]
        rows = read_csv(run / "tasks.csv")
        assert sorted(r["task"] for r in rows) == ["task0", "task1", "task2"]
        assert all(0 < float(r["broadcast_s"]) <= summary["broadcast_s"] + 1e-6 for r in rows)
        saved = run / "models" / "round1"
        for task in ("task0", "task1", "task2"):
            assert_fedavg(saved, task)
    summaries = comparison["summaries"]
    assert summaries["mst"]["link_bytes_predicted"] <= summaries["spff"]["link_bytes_predicted"]


def test_sweep_writes_a_tidy_table_and_both_figures(tmp_path: Path, clean_host: None) -> None:
    from fedmst.run.experiments import SWEEP_FIELDS

    out = tmp_path / "sweep"
    proc = fedmst_cli("sweep", "--topology", "small", "--local-models", "2,3", "--seeds", "1", "--tasks", "2", "--out",
                      str(out), timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_csv(out / "sweep.csv")
    assert tuple(rows[0]) == SWEEP_FIELDS
    # a row per scheduler x local-model count x seed x task x round
    keys = {(r["scheduler"], r["local_models"], r["seed"], r["task"], r["round"]) for r in rows}
    assert len(rows) == len(keys) == 2 * 2 * 1 * 2 * 1
    for name in ("latency_vs_local_models.png", "bandwidth_vs_local_models.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    picture = fedmst_cli("plot", str(out / "k3-seed1"), timeout=300)
    assert picture.returncode == 0, picture.stderr
    assert (out / "k3-seed1" / "links.png").is_file()


def test_a_sweeps_config_file_takes_a_sweeps_options_and_ignores_none(tmp_path: Path, clean_host: None) -> None:
    """A sweep's TOML file gives its lists as lists (or as the options' own text) and every key is
    used: local_models and seeds choose the points, the command line still wins, and a run's
    singular option the sweep replaces is refused, naming what to give instead."""
    ok = tmp_path / "sweep.toml"
    ok.write_text('local_models = [2]\nseeds = [1]\nschedulers = ["mst"]\ntasks = 1\ntopology = "small"\n')
    proc = fedmst_cli("sweep", "--config", str(ok), "--out", str(tmp_path / "a"), timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_csv(tmp_path / "a" / "sweep.csv")
    assert {(r["scheduler"], r["local_models"], r["seed"]) for r in rows} == {("mst", "2", "1")}
    text = tmp_path / "text.toml"
    text.write_text('local-models = "3"\nseeds = "2"\nschedulers = "mst"\ntasks = 1\ntopology = "small"\n')
    proc = fedmst_cli("sweep", "--config", str(text), "--local-models", "2", "--out", str(tmp_path / "b"), timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_csv(tmp_path / "b" / "sweep.csv")
    assert {(r["scheduler"], r["local_models"], r["seed"]) for r in rows} == {("mst", "2", "2")}
    for line, fragment in (("seed = 3", "'seed' is not an option of this command; give seeds = [1, 2]"),
                           ('scheduler = "mst"', "give schedulers = "),
                           ('local_models = "x"', "local_models 'x': give numbers like 2,4,8"),
                           ("seeds = [0]", "seeds = [0]: give positive whole numbers")):
        bad = tmp_path / "bad.toml"
        bad.write_text(line + "\n")
        proc = fedmst_cli("sweep", "--config", str(bad), "--out", str(tmp_path / "c"), timeout=120)
        assert proc.returncode == 1 and fragment in proc.stderr, (line, proc.stderr)
        assert not (tmp_path / "c").exists()


def test_a_sweep_over_models_maps_where_each_schedule_wins(tmp_path: Path, clean_host: None) -> None:
    out = tmp_path / "regime"
    proc = fedmst_cli("sweep", "--topology", "small", "--schedulers", "spff,ring", "--local-models", "2", "--seeds",
                      "1", "--tasks", "1", "--models", "mlp,cnn", "--out", str(out), timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_csv(out / "sweep.csv")
    assert sorted({(r["model"], r["scheduler"]) for r in rows}) == [
        ("cnn", "ring"), ("cnn", "spff"), ("mlp", "ring"), ("mlp", "spff")]
    assert {r["model"]: int(r["model_bytes"]) for r in rows}["mlp"] == 19_240
    regime = json.loads((out / "regime.json").read_text())
    assert [(p["model"], p["local_models"]) for p in regime] == [("mlp", 2), ("cnn", 2)]  # by size
    assert all(set(p["latency_measured"]) <= {"spff", "ring"} and p["bytes_predicted"] for p in regime)
    for name in ("regime_map.png", "latency_vs_local_models-mlp.png", "bandwidth_vs_local_models-cnn.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "cnn-k2-seed1" / "ring" / "summary.json").is_file()
    assert "Where each schedule wins" in proc.stdout


DATASET = '''"""A user's own dataset: three classes of points in 2x3 "images", made here, not downloaded."""
import torch


def blobs():
    g = torch.Generator().manual_seed(0)
    y = torch.arange(600) % 3
    x = torch.randn(600, 2, 3, generator=g) * 0.5 + y[:, None, None].float()
    return x[:480], y[:480], x[480:], y[480:]
'''


def test_a_users_dataset_shapes_the_model_and_aggregates_exactly(tmp_path: Path, clean_host: None) -> None:
    """--dataset package.module:factory: the model's input shape and class count come from the
    data, the Dirichlet split still gives every local model its shard, and in-path aggregation
    stays exact; the model learns the blobs."""
    (tmp_path / "userdata").mkdir()
    (tmp_path / "userdata" / "__init__.py").write_text(DATASET)
    out = tmp_path / "run"
    proc = subprocess.run(
        [FEDMST, "run", "--topology", "small", "--scheduler", "mst", "--local-models", "3", "--rounds", "2",
         "--model", "mlp", "--dataset", "userdata:blobs", "--save-models", "--out", str(out)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    # mlp with 64 hidden units on 2x3 inputs and 3 classes: (6*64 + 64) + (64*3 + 3) weights
    assert summary["model_bytes"] == 4 * (6 * 64 + 64 + 64 * 3 + 3)
    assert summary["final_accuracy"] > 0.8
    assert json.loads((out / "config.json").read_text())["dataset"] == "userdata:blobs"
    for rnd in (1, 2):
        assert_fedavg(out / "models" / f"round{rnd}")
    assert "time: prepare" in proc.stdout and "fixed cost" in proc.stdout
    assert set(summary["time_breakdown_s"]) == {"prepare", "network", "agents", "rounds", "teardown"}


def _fabric_run(out: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """``fedmst run`` on spine-leaf:2,2,1 at 100 Mbit/s, G on h0_0 sending to l1 and h1_0 under spff
    over the same fibres l0-s1-l1 (one epoch a round), with ``options``, into ``out``."""
    return fedmst_cli("run", "--topology", "spine-leaf:2,2,1,mbps=100", "--global-node", "h0_0", "--local-nodes",
                      "l1,h1_0", "-k", "2", "--scheduler", "spff", "--epochs", "1", *options, "--out", out)


def test_each_optical_circuit_carries_its_wavelengths_rate(tmp_path: Path, clean_host: None) -> None:
    """spine-leaf:2,2,1 at 100 Mbit/s with 4 OCS wavelengths per fibre: G on h0_0 sends to l1 and h1_0
    over two circuits on the same fibres, each held to 25 Mbit/s (the fibre carries 50, not 100); the
    phases keep their prediction, and round 1's broadcast waits out the circuits' set-up."""
    out = tmp_path / "ocs"
    proc = _fabric_run(out, "--ocs-wavelengths", "4", "--ots-wavelengths", "0", "--reconfig-ms", "300", "--rounds", "2",
                       "--time-scale", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    circuits = read_csv(out / "optical.csv")
    assert [(c["kind"], float(c["reserved_mbps"]), c["blocked"]) for c in circuits] == [("ocs", 25.0, "")] * 2
    held = Counter(frozenset(hop) for c in circuits for hop in pairwise(c["path"].split("-")))
    rounds = read_csv(out / "rounds.csv")
    for row in read_csv(out / "links.csv"):
        hop, res = (row["src"], row["dst"]), rounds[int(row["round"]) - 1]
        for phase in ("broadcast", "upload"):
            moved, seconds = int(row[f"{phase}_bytes"]), float(res[f"{phase}_s"])
            if phase == "broadcast" and row["round"] == "1":
                seconds -= 0.3  # the set-up pause, before any transfer
            if held[frozenset(hop)] and moved > 1e6:  # a fibre's weights' direction: each circuit at 25 Mbit/s
                assert abs(moved * 8 / seconds / held[frozenset(hop)] / 1e6 - 25) <= 2.5, (row, phase)
    for res in rounds:
        for phase in ("broadcast", "upload"):
            assert float(res[f"{phase}_s"]) <= 1.15 * float(res[f"predicted_{phase}_s"]), (res, phase)
    paused = float(rounds[0]["broadcast_s"]) - float(rounds[1]["broadcast_s"])
    assert abs(float(rounds[0]["predicted_broadcast_s"]) - float(rounds[1]["predicted_broadcast_s"]) - 0.3) < 1e-6
    assert 0.2 < paused < 0.45 and "2 new lightpath(s) set up in 300 ms before the broadcast" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())["optical"]
    assert summary["optical_nodes"] == ["s0", "s1"] and summary["blocking_ratio"] == 0.0
    assert sorted(summary["wavelengths_used"].values()) == [2, 2]



def test_optical_csv_says_the_rate_each_lightpath_measured(tmp_path: Path, clean_host: None) -> None:
    """One circuit of four wavelengths (25 Mbit/s of a 100 Mbit/s fibre), alone on its fibres:
    optical.csv's measured_mbps is its rate while it sent, within 10% of what it holds."""
    out = tmp_path / "one"
    proc = fedmst_cli("run", "--topology", "spine-leaf:2,2,1,mbps=100", "--global-node", "h0_0", "--local-nodes",
                      "h1_0", "-k", "1", "--scheduler", "spff", "--epochs", "1", "--rounds", "1",
                      "--ocs-wavelengths", "4", "--ots-wavelengths", "0", "--time-scale", "1", "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = read_csv(out / "optical.csv")
    assert float(row["reserved_mbps"]) == 25.0 and abs(float(row["measured_mbps"]) - 25.0) <= 2.5, row


@pytest.mark.parametrize("policy, slots", [
    ("ots", ["0", "1"]),  # one slot each
    ("joint", ["0;2", "1;3"]),  # one slot each, then the two left lent one to each, next after its own
    ("test_optical_policies:Halves", ["0;1", "2;3"]),  # a user's class: two neighbouring slots each
])
def test_a_time_sliced_lightpath_sends_only_in_its_slots(tmp_path: Path, clean_host: None, policy: str,
                                                         slots: list[str]) -> None:
    """spine-leaf:2,2,1 at 100 Mbit/s with one OTS wavelength of 4 slots of 5 ms (0.5 ms guards):
    G's two transfers over l0-s1-l1 hold the slots ``policy`` gives (one slot of 4: 22.4 Mbit/s on
    average); each carries that rate within 10%, the captures find at most 1% of their bytes outside
    their slots, and the phases keep their prediction."""
    out = tmp_path / "ots"
    proc = _fabric_run(out, "--optical", policy, "--ocs-wavelengths", "0", "--ots-wavelengths", "1", "--timeslots",
                       "4", "--timeslot-us", "5000", "--guard-us", "500", "--rounds", "1", "--time-scale", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    paths = read_csv(out / "optical.csv")
    # one slot of 4 at 100 Mbit/s, 4.5 ms open: 37 whole 1,514-byte frames, 22.4 Mbit/s on average
    held = len(slots[0].split(";"))
    assert sorted((p["kind"], p["timeslots"], round(float(p["reserved_mbps"]), 1)) for p in paths) == [
        ("ots", s, round(22.4 * held, 1)) for s in slots]
    slots = read_csv(out / "timeslots.csv")
    inside = sum(int(r["bytes"]) for r in slots)
    over_time = read_csv(out / "slot_occupancy.csv")  # the same captures, by 0.1 s and slot
    assert sum(int(r["bytes"]) for r in over_time) == inside + sum(int(r["outside_bytes"]) for r in slots)
    assert sum(int(r["outside_bytes"]) for r in slots) <= 0.01 * inside, [
        (r["link"], r["slot"], r["outside_bytes"]) for r in slots if r["outside_bytes"] != "0"]
    res = read_csv(out / "rounds.csv")[0]
    for phase in ("broadcast", "upload"):
        assert float(res[f"{phase}_s"]) <= 1.15 * float(res[f"predicted_{phase}_s"]), (res, phase)
    for p in paths:  # G's direction, its broadcast's bytes in its slot over the broadcast (both start with it)
        sent = sum(int(r["bytes"]) for r in slots if r["link"] == "l0->s1" and r["transfer"] == p["transfer"])
        assert abs(sent * 8 / float(res["broadcast_s"]) / 1e6 - 22.4 * held) <= 2.24 * held, (p["transfer"], sent)
    table = json.loads((out / "timeslot_table.json").read_text())
    assert table["frame"] == {"timeslots": 4, "slot_us": 5000.0, "guard_us": 500.0}
    assert {r["slot"] for r in table["link_directions"]["s1->l1"]} == set(range(2 * held))
    summary = json.loads((out / "summary.json").read_text())
    optical = summary["optical"]
    assert optical["wavelengths_used"] == {"l0-s1": 1, "l1-s1": 1} and optical["slot_utilisation"] == held / 2
    assert optical["slots_outside_share"] <= 0.01
    if policy == "joint":
        drawn = fedmst_cli("plot", out, "--slots")
        assert drawn.returncode == 0 and (out / "slots.png").stat().st_size > 10_000, drawn.stderr
    # 2 km fibres (10 µs), shorter than a delay line's timing error: none holds them
    assert {"l0-s1", "l1-s1"} <= set(summary["emulated"]["links_without_delay_line"])
    assert not (out / "delay_lines.json").exists()  # nor any other link of this fabric


def test_a_replans_circuits_are_recorded_from_their_round(tmp_path: Path, clean_host: None) -> None:
    """l0-s1 cut at round 2: the re-plan's circuits over s0 join optical.csv from round 2, each set
    up anew (--reconfig-ms 300), their set-up inside round 2's measured broadcast, and summary.json
    counts both plans' circuits."""
    out = tmp_path / "replan"
    proc = _fabric_run(out, "--ocs-wavelengths", "4", "--ots-wavelengths", "0", "--model", "mlp", "--rounds", "2",
                       "--fail-link", "l0-s1@2", "--reconfig-ms", "300")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [(c["path"], c["from_round"], float(c["setup_ms"])) for c in read_csv(out / "optical.csv")]
    assert rows == [("l0-s1-l1", "1", 300.0)] * 2 + [("l0-s0-l1", "2", 300.0)] * 2
    assert "round 2: 2 new lightpath(s) set up in 300 ms before the broadcast" in proc.stdout
    again = read_csv(out / "rounds.csv")[1]
    assert float(again["broadcast_s"]) >= 0.3 and float(again["predicted_broadcast_s"]) >= 0.3, again
    summary = json.loads((out / "summary.json").read_text())["optical"]
    assert (summary["plans"], summary["circuits"]) == (2, 4) and set(summary["wavelengths_used"].values()) == {2}


def test_a_replans_time_sliced_lightpaths_are_captured_too(tmp_path: Path, clean_host: None) -> None:
    """l0-s1 cut at round 2 under ots: the re-plan's lightpaths over s0 are captured from round 2
    (their own tcpdumps, started as they begin to hold), and they too send only in their slots (the
    4.5 MB model: the old connections' few closing packets, ungated once their lightpaths are gone,
    stay far under 1%)."""
    out = tmp_path / "replan-ots"
    proc = _fabric_run(out, "--optical", "ots", "--ocs-wavelengths", "0", "--ots-wavelengths", "1", "--timeslots",
                       "4", "--timeslot-us", "5000", "--guard-us", "500", "--rounds", "2",
                       "--fail-link", "l0-s1@2", "--time-scale", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_csv(out / "timeslots.csv")
    carried = {r["link"] for r in rows if int(r["bytes"])}
    assert {"l0->s1", "s1->l1", "l0->s0", "s0->l1"} <= carried, carried  # the first plan's fibres, then the re-plan's
    inside = sum(int(r["bytes"]) for r in rows)
    assert sum(int(r["outside_bytes"]) for r in rows) <= 0.01 * inside
    table = json.loads((out / "timeslot_table.json").read_text())
    assert {"l0->s1", "l0->s0"} <= set(table["link_directions"])


def test_on_independent_clocks_every_task_waits_for_its_circuits(tmp_path: Path, clean_host: None) -> None:
    """--clock independent on a fabric: each task's round 1 broadcast starts --reconfig-ms later
    on its own clock, measured and predicted."""
    out = tmp_path / "independent"
    proc = _fabric_run(out, "--ocs-wavelengths", "4", "--ots-wavelengths", "0", "--model", "mlp", "--rounds", "2",
                       "--clock", "independent", "--reconfig-ms", "300")
    assert proc.returncode == 0, proc.stderr[-2000:]
    first = {r["kind"]: float(r["start_s"]) for r in read_csv(out / "timeline.csv")
             if (r["round"], r["phase"]) == ("1", "broadcast")}
    assert first["predicted"] == pytest.approx(0.3) and 0.3 <= first["measured"] < 0.4
    assert "2 lightpath(s) set up in 300 ms" in proc.stdout

def test_a_replans_circuits_replace_the_classes_of_the_ones_before(clean_host: None) -> None:
    """As after a fault's re-plan on spine-leaf:2,2: the first plan's circuit over s1, then the
    re-plan's over s0. Listed inside each node's namespace, every fibre direction's circuit classes
    are exactly the circuits held: the old circuit's are gone."""
    graph = load_topology("spine-leaf:2,2,mbps=100")
    over_s1 = Circuit(("l0", "s1", "l1"), (25.0, 25.0), ("10.128.0.1", "10.128.0.2"))
    over_s0 = Circuit(("l0", "s0", "l1"), (25.0, 25.0), ("10.128.0.1", "10.128.0.2"))

    def classes(emu: Emulation) -> dict[tuple[str, str], list[str]]:
        return {(u, v): [line.split()[2] for line in emu.cmd(u, f"tc class show dev {emu.sender_interface(u, v)}")
                         .splitlines() if int(line.split()[2].split(":")[1], 16) >= FIRST_CIRCUIT]
                for a, b in graph.edges for u, v in ((a, b), (b, a))}

    with Emulation(graph, delay_mode="off") as emu:
        emu.install_circuits([over_s1])
        first = classes(emu)
        emu.install_circuits([over_s0])
        second = classes(emu)
    held = {hop for a, b in (("l0", "s1"), ("s1", "l1")) for hop in ((a, b), (b, a))}
    assert first == {hop: ["5:200"] if hop in held else [] for hop in first}
    held = {hop for a, b in (("l0", "s0"), ("s0", "l1")) for hop in ((a, b), (b, a))}
    assert second == {hop: ["5:200"] if hop in held else [] for hop in second}
