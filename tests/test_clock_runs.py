"""Contention over time, for real: background flows, compute time, tasks on their own clocks and
interleaving, through the real ``fedmst`` command in Mininet (each test leaves nothing behind)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from fedmst.core.wire import FRAME_OVERHEAD
from fedmst.run.results import read_csv

from conftest import fedmst_cli

pytestmark = pytest.mark.integration
WORKLOADS = Path(__file__).resolve().parents[1] / "topologies" / "workloads"


def fedmst(*args: str) -> subprocess.CompletedProcess[str]:
    proc = fedmst_cli(*args, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_a_udp_background_flow_is_counted_apart_from_the_weights(clean_host: None, tmp_path: Path) -> None:
    """Issue 14's first check: 20 Mbit/s of UDP from a to c on line3 shows on a->b as
    background bytes within 10% of the rate the sender kept x time, while the weights stay within
    5% of the plan."""
    out = tmp_path / "run"
    # in real time: at line3's auto scale (2) the background's bytes in the rounds' windows came out 12% short
    # of its rate x the windows (noted, not yet understood), and this checks the counting, not virtual time
    fedmst("run", "--topology", "line3", "--global-node", "a", "--local-nodes", "b,c", "--local-models", "2",
           "--rounds", "2", "--traffic", "a-c:20mbit:udp", "--time-scale", "1", "--out", str(out))
    summary = json.loads((out / "summary.json").read_text())
    (flow,) = summary["background"]
    assert flow["flow"] == "a-c:20mbit:udp@0" and flow["protocol"] == "udp"
    assert 0 < flow["sent_mbps"] < 22, flow  # paced: never above the rate asked, however fast the host
    rounds = {r["round"]: r for r in read_csv(out / "rounds.csv")}
    tasks = {r["round"]: r for r in read_csv(out / "tasks.csv")}
    for row in read_csv(out / "links.csv"):
        window = float(tasks[row["round"]]["end_s"]) - float(tasks[row["round"]]["start_s"])
        assert abs(float(window) - float(rounds[row["round"]]["round_s"])) < 0.2
        expected = flow["sent_mbps"] * 1e6 / 8 * window
        background = int(row["background_bytes"])
        if (row["src"], row["dst"]) in (("a", "b"), ("b", "c")):
            assert abs(background - expected) <= 0.10 * expected, (row, expected)
        else:  # the flow's reverse direction carries nothing of it (UDP: no ACKs)
            assert background < 0.01 * expected, row
        if int(row["predicted_bytes"]):
            assert abs(float(row["error_pct"])) <= 5.0, row
    assert json.loads((out / "background.json").read_text()) == summary["background"]


def test_background_bytes_leave_a_small_models_weights_exact(clean_host: None, tmp_path: Path) -> None:
    """20 Mbit/s of UDP beside a 17 KB model: the background's bytes and every byte are counted in
    one snapshot at each link's receiver, so no field of links.csv goes negative and every loaded
    direction's weights are within 1% of the plan (read at two hosts a moment apart, a->b once
    read 8.7 KB below its weights). The data direction also carries a connection's header-only
    frames (handshake, FIN's ACK), whose count differs by one between runs: 66 B, 0.33% of this
    model (a CI run read 1.13% where 0.80% is usual), so one such frame more is allowed; a leak
    of the background would be thousands of bytes."""
    out = tmp_path / "run"
    fedmst("run", "--topology", "line3", "--traffic", "a-c:20mbit:udp", "--model", "mlp", "--rounds", "2",
           "--epochs", "1", "--out", str(out))
    rows = read_csv(out / "links.csv")
    numeric = ("measured_bytes", "measured_weight_bytes", "measured_other_bytes", "broadcast_bytes", "upload_bytes",
               "background_bytes")
    assert all(int(row[f]) >= 0 for row in rows for f in numeric), rows
    loaded = [row for row in rows if int(row["predicted_bytes"])]
    assert loaded and all(abs(int(row["measured_weight_bytes"]) - int(row["predicted_bytes"]))
                          <= 0.01 * int(row["predicted_bytes"]) + FRAME_OVERHEAD for row in loaded), loaded
    assert sum(int(row["background_bytes"]) for row in rows) > 2 * sum(int(row["predicted_bytes"]) for row in loaded)


def test_a_tcp_background_flow_backs_off_and_is_counted_both_ways(clean_host: None, tmp_path: Path) -> None:
    """A TCP flow from c to a starting 0.5 s into the run: its data on c->b and b->a, its ACKs the
    other way; and compute time in lockstep holds the training phase for at least its seconds."""
    out = tmp_path / "run"
    fedmst("run", "--topology", "line3", "--global-node", "a", "--local-nodes", "b,c", "--local-models", "2",
           "--rounds", "1", "--model", "mlp", "--compute-s", "1.5", "--traffic", "c-a:10mbit:tcp@0.5",
           "--time-scale", "1",  # a slowed run reports its compute time without sitting through it
           "--out", str(out))
    (round_,) = read_csv(out / "rounds.csv")
    assert float(round_["train_s"]) >= 1.5
    links = {(r["src"], r["dst"]): int(r["background_bytes"]) for r in read_csv(out / "links.csv")}
    (task,) = read_csv(out / "tasks.csv")
    most = 10e6 / 8 * (float(task["end_s"]) - 0.5) * 1.1 + 70_000  # paced to 10 Mbit/s, in 64 KB writes
    (flow,) = json.loads((out / "summary.json").read_text())["background"]
    kept = flow["sent_mbps"] * 1e6 / 8 * (float(task["end_s"]) - 0.5)  # at the rate the sender kept
    for data, acks in ((("c", "b"), ("b", "c")), (("b", "a"), ("a", "b"))):
        assert 0.5 * kept < links[data] <= most, (links, kept, most)
        assert 0 < links[acks] < links[data] / 10, links


def test_tasks_run_on_their_own_clocks(clean_host: None, tmp_path: Path) -> None:
    """Two tasks on the dumbbell from a workload file, one with its own model, rounds, compute time
    and start: each runs its rounds back to back, the timeline and per-task latencies are written,
    weights on the links match the plans over the whole run, and the timeline figure is drawn."""
    workload = tmp_path / "w.json"
    workload.write_text(json.dumps({"tasks": [
        {"name": "A", "global_node": "g1", "local_nodes": ["w1", "w2"], "rounds": 2},
        {"name": "B", "global_node": "g2", "local_nodes": ["w2", "w3"], "rounds": 3, "start_s": 0.5,
         "compute_s": 0.4, "model": "cnn"},
    ]}))
    out = tmp_path / "run"
    fedmst("run", "--topology", "dumbbell", "--workload", str(workload), "--clock", "independent",
           "--compute-s", "0.2", "--model", "mlp", "--epochs", "1", "--out", str(out))
    rows = read_csv(out / "tasks.csv")
    assert [(r["task"], r["round"]) for r in rows] == [("A", "1"), ("A", "2"), ("B", "1"), ("B", "2"), ("B", "3")]
    for task, compute in (("A", 0.2), ("B", 0.4)):
        mine = [r for r in rows if r["task"] == task]
        for r in mine:
            assert float(r["train_s"]) >= compute - 0.01, r
            # each phase lies within the round, and the upload begins after the broadcast ended;
            # training may begin on a near node while a far one still receives, so it may overlap
            round_s = float(r["round_s"]) + 0.01
            assert all(0 < float(r[f"{p}_s"]) <= round_s for p in ("broadcast", "train", "upload")), r
            assert float(r["broadcast_s"]) + float(r["upload_s"]) <= round_s, r
            assert r["accuracy"] != "" and float(r["predicted_round_s"]) > 0
        for a, b in zip(mine, mine[1:]):  # back to back: the next round starts as this one ends,
            gap = float(b["start_s"]) - float(a["end_s"])  # not after a wait as long as a round
            assert 0 <= gap < 0.5 * float(b["round_s"]), (a, b)
    assert float(next(r for r in rows if r["task"] == "B")["start_s"]) >= 0.5
    timeline = read_csv(out / "timeline.csv")
    assert {(r["kind"], r["task"]) for r in timeline} == {(k, t) for k in ("measured", "predicted") for t in "AB"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["clock"] == "independent" and summary["status"] == "completed"
    assert set(summary["round_latency_by_task_s"]) == {"A", "B"} and summary["rounds"] == 3
    assert summary["start_offsets_s"] == {"A": 0.0, "B": 0.5}
    assert abs(summary["weight_bytes_measured"] / summary["link_bytes_predicted"] - 1) < 0.05
    # a 17 KB model: a direction's count also holds the ACKs of other tasks' transfers going the other way
    assert summary["max_link_bytes_error"] < 0.10
    links = read_csv(out / "links.csv")
    assert {r["round"] for r in links} == {"0"}
    plans = {t["task"]: t for t in json.loads((out / "plan.json").read_text())["tasks"]}
    assert (plans["A"]["model"], plans["B"]["model"]) == ("mlp", "cnn")
    assert plans["B"]["model_bytes"] > 5 * plans["A"]["model_bytes"]
    plot = fedmst_cli("plot", str(out), "--timeline", timeout=120)
    assert plot.returncode == 0, plot.stderr
    assert (out / "timeline.png").stat().st_size > 10_000
    # rounds.csv has no bytes per round here (they overlap): the accuracy figure says so instead of failing
    assert {r["bytes_measured"] for r in read_csv(out / "rounds.csv")} == {""}
    plot = fedmst_cli("plot", str(out), "--accuracy", timeout=120)
    assert plot.returncode == 0, plot.stdout + plot.stderr
    assert (out / "accuracy.png").stat().st_size > 10_000
    links = fedmst_cli("links", str(out), "--round", "1", timeout=120)
    assert links.returncode == 1 and "Traceback" not in links.stderr
    assert "measured over the whole run" in links.stderr and "leave out --round" in links.stderr


def test_cassini_shifts_a_contending_task(clean_host: None, tmp_path: Path) -> None:
    """With two tasks crossing the dumbbell's bottleneck (fair queues), --interleave cassini starts
    the second later by the shift it predicts, and the run keeps that shift."""
    out = tmp_path / "run"
    fedmst("run", "--topology", "dumbbell", "--workload", str(WORKLOADS / "dumbbell-2tasks.json"),
           "--clock", "independent", "--interleave", "cassini", "--compute-s", "0.5", "--rounds", "2",
           "--epochs", "1", "--queue", "fair", "--out", str(out))
    summary = json.loads((out / "summary.json").read_text())
    shift = summary["start_offsets_s"]["B"]
    assert summary["start_offsets_s"]["A"] == 0.0 and 0.1 < shift < 2.0
    rows = {(r["task"], r["round"]): r for r in read_csv(out / "tasks.csv")}
    starts = {task: float(rows[(task, "1")]["start_s"]) for task in "AB"}
    # each task starts at its offset (never earlier), B before A's first round is over
    assert starts["A"] >= -0.01 and shift - 0.01 <= starts["B"] < shift + float(rows[("A", "1")]["round_s"]), starts
    assert summary["predicted_round_latency_s"] > 0


@pytest.mark.parametrize("queue", ["fifo", "fair"])
def test_a_link_trace_changes_links_live_and_the_prediction_follows(clean_host: None, tmp_path: Path,
                                                                    queue: str) -> None:
    """a-b drops to 20 Mbit/s at once and b-c gets 5 ms of delay later: the broadcast takes
    as long as 20 Mbit/s makes it (with fair queues too: every queue's ceiling drops), the
    predictions say so too, the delay lines were retuned, and link_changes.json records both
    changes on time."""
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"changes": [{"at_s": 0, "a": "a", "b": "b", "capacity_mbps": 20},
                                             {"at_s": 1.0, "a": "b", "b": "c", "delay_ms": 5}]}))
    out = tmp_path / "run"
    fedmst("run", "--topology", "line3", "--global-node", "a", "--local-nodes", "b,c", "--local-models", "2",
           "--rounds", "1", "--epochs", "1", "--link-trace", str(trace), "--queue", queue, "--out", str(out))
    (round_,) = read_csv(out / "rounds.csv")
    at_20mbit = 4.5e6 * 8 / 20e6  # 2.5 times what line3's 50 Mbit/s take
    assert float(round_["broadcast_s"]) > 0.9 * at_20mbit
    assert float(round_["predicted_broadcast_s"]) > at_20mbit
    applied = json.loads((out / "link_changes.json").read_text())
    assert [(c["a"], c["b"]) for c in applied] == [("a", "b"), ("b", "c")]
    assert all(c["applied_s"] >= c["at_s"] for c in applied)  # never early; in time: the broadcast above
    lines = json.loads((out / "delay_lines.json").read_text())  # what they held, on the host's clock
    scale = float(round_["time_scale"])  # line3's 0.5 ms links: auto slows it to 2 for the delay lines
    assert lines["b->c"]["delay_s"] == pytest.approx(0.005 * scale) == lines["c->b"]["delay_s"]
    assert lines["a->b"]["delay_s"] == pytest.approx(0.0005 * scale)


def test_measured_link_state_re_plans_around_a_loaded_link(clean_host: None, tmp_path: Path) -> None:
    """On a square with two equal paths from G to its local model, background traffic on the
    path MST took makes it re-plan onto the other before round 2 (--link-state measured)."""
    topology = tmp_path / "square.json"
    topology.write_text(json.dumps({"name": "square", "capacity_mbps": 50, "links": [
        {"a": "a", "b": "b", "delay_ms": 1}, {"a": "b", "b": "d", "delay_ms": 1},
        {"a": "a", "b": "c", "delay_ms": 1}, {"a": "c", "b": "d", "delay_ms": 1}]}))
    out = tmp_path / "run"
    fedmst("run", "--topology", str(topology), "--global-node", "a", "--local-nodes", "d", "--local-models", "1",
           "--rounds", "2", "--epochs", "1", "--traffic", "a-b:20mbit:udp", "--link-state", "measured",
           "--out", str(out))
    first = [f["path"] for t in json.loads((out / "plan.json").read_text())["tasks"] for f in t["flows"]]
    assert first == [["a", "b", "d"], ["d", "b", "a"]]
    (event,) = json.loads((out / "faults.json").read_text())
    assert event["round"] == 2 and "measured link load" in event["event"]
    assert [f["path"] for t in event["tasks"] for f in t["flows"]] == [["a", "c", "d"], ["d", "c", "a"]]
    weights = {(r["round"], r["src"], r["dst"]): int(r["measured_weight_bytes"]) for r in read_csv(out / "links.csv")}
    assert weights[("2", "a", "b")] == 0 and weights[("2", "a", "c")] > 4_000_000
