"""Faults injected into real runs in Mininet: a link that fails and comes back, a worker that
dies mid-round. Each run must finish its rounds, measure what it planned, aggregate exactly over
the local models that took part, and (through ``clean_host``) leave nothing behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import assert_fedavg, fedmst_cli
from fedmst.run.results import read_csv

pytestmark = pytest.mark.integration

TASK = ["--topology", "small", "--local-models", "4", "--global-node", "0",
        "--local-nodes", "2,3,3,4", "--save-models", "--epochs", "1"]
"""One epoch per round: these runs test faults, not learning, and the straggler's times assume it."""


def _run(out: Path, scheduler: str, *extra: str, rounds: int = 3, task: list[str] = TASK) -> dict:
    proc = fedmst_cli("run", "--scheduler", scheduler, *task, "--rounds", str(rounds), "--out", str(out), *extra,
                      timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds"] == rounds
    return summary


def _assert_exact_over_participants(out: Path, rnd: int, participants: int) -> None:
    weights = assert_fedavg(out / "models" / f"round{rnd}")
    assert len(weights) == participants and abs(sum(weights.values()) - 1) < 1e-9


def _assert_measured_as_planned(out: Path) -> None:
    for row in read_csv(out / "links.csv"):
        predicted = int(row["predicted_bytes"])
        if predicted:
            assert abs(int(row["measured_weight_bytes"]) - predicted) <= 0.02 * predicted, row


def _link_bytes(out: Path, rnd: int, a: str, b: str) -> int:
    return sum(int(r["measured_bytes"]) for r in read_csv(out / "links.csv")
               if int(r["round"]) == rnd and {r["src"], r["dst"]} == {a, b})


@pytest.mark.parametrize("scheduler", ["mst", "spff"])
def test_a_failed_link_is_planned_around_and_used_again_when_back(tmp_path: Path, scheduler: str,
                                                                  clean_host: None) -> None:
    out = tmp_path / scheduler
    summary = _run(out, scheduler, "--model", "mlp", "--fail-link", "0-4@2-3")  # the link fails between rounds
    assert [f["event"] for f in summary["faults"]] == ["link 0-4 down", "link 0-4 up again"]
    events = json.loads((out / "faults.json").read_text())
    for event in events:  # the new plan, how long it took, and what was in flight, recorded
        assert event["replan_s"] > 0 and event["in_flight_lost_bytes"] >= 0 and event["tasks"]
    down_paths = [f["path"] for f in events[0]["tasks"][0]["flows"]]
    assert all(["0", "4"] != p[i:i + 2] and ["4", "0"] != p[i:i + 2] for p in down_paths for i in range(len(p)))
    model = summary["model_bytes"]
    assert _link_bytes(out, 1, "0", "4") > model  # G reaches node 4 directly while the link is up...
    assert _link_bytes(out, 2, "0", "4") < model / 100  # ...nothing crosses it while it is down...
    assert _link_bytes(out, 3, "0", "4") > model  # ...and it is used again once it is back
    _assert_measured_as_planned(out)
    for rnd in (1, 2, 3):
        _assert_exact_over_participants(out, rnd, 4)


def test_a_killed_relay_worker_leaves_the_round_to_the_survivors(tmp_path: Path, clean_host: None) -> None:
    """Node 4 holds local model 3 and, in MST's tree, relays for node 3: it dies in round 2's
    training; round 2 uploads the other three local models over a re-planned tree."""
    out = tmp_path / "run"
    # in real time: a slowed run reports its training without sitting through it, so the kill
    # would come after a training that was over on the run's clock
    summary = _run(out, "mst", "--model", "mlp", "--kill-worker", "4@2", "--time-scale", "1")
    assert summary["local_models_per_round"] == [4, 3, 3]
    (event,) = json.loads((out / "faults.json").read_text())
    assert event["event"].startswith("worker on node 4 killed") and event["event"].endswith("into the training")
    assert event["round"] == 2 and event["before_phase"] == "upload" and "aborted" not in event
    assert event["dropped"] == {"task0": {"3": "its worker on node 4 died"}}
    round_2 = next(r for r in read_csv(out / "rounds.csv") if r["round"] == "2")
    # noticed while round 2 still trained (it died in that training, and before_phase is the upload)
    assert 0 < event["detected_s"]["4"] < float(round_2["train_s"])
    assert all("4" not in f["path"] for f in event["tasks"][0]["flows"])
    assert "4" not in event["tasks"][0]["aggregation_nodes"]
    # the new connections are warmed (a chunk each, here the whole 17 KB model), and those set-up bytes are no phase's
    assert event["setup_link_bytes"] > summary["model_bytes"]
    in_training = sum(int(r["measured_bytes"]) - int(r["broadcast_bytes"]) - int(r["upload_bytes"])
                      for r in read_csv(out / "links.csv") if r["round"] == "2")
    assert in_training < summary["model_bytes"] / 10, in_training
    _assert_measured_as_planned(out)
    _assert_exact_over_participants(out, 1, 4)
    for rnd in (2, 3):
        _assert_exact_over_participants(out, rnd, 3)
        assert not (out / "models" / f"round{rnd}" / "task0-local3.pt").exists()


def test_a_straggler_slows_the_round_and_a_deadline_drops_its_update(tmp_path: Path, clean_host: None) -> None:
    """Node 4 trains 50 times slower (its epoch of the 153 KB ``cnn``, some 0.05 s, takes 2.5 s):
    without a deadline the round waits for it; with a 1 s deadline its update is dropped each
    round, the aggregate is exact over the other three, and the training phase ends at the deadline."""
    straggler = ("--model", "cnn", "--slow-node", "4:50")
    slow = tmp_path / "slow"
    _run(slow, "mst", *straggler, rounds=1)  # one round shows the wait; the deadline's is repeated
    timed = tmp_path / "deadline"
    summary = _run(timed, "mst", *straggler, "--deadline", "1", rounds=2)
    assert summary["late_updates_per_round"] == [1, 1] and summary["local_models_per_round"] == [3, 3]
    (waited,), timed_rounds = read_csv(slow / "rounds.csv"), read_csv(timed / "rounds.csv")
    assert int(waited["late_updates"]) == 0
    for t in timed_rounds:
        assert float(t["train_s"]) >= 1.0  # the late node replies at the deadline...
        assert float(waited["train_s"]) > float(t["train_s"])  # ...and the straggler alone makes the round longer
    _assert_measured_as_planned(timed)  # its node still relays: the plan's bytes all flow
    _assert_exact_over_participants(slow, 1, 4)
    for rnd in (1, 2):
        _assert_exact_over_participants(timed, rnd, 3)


def test_a_link_failing_under_the_broadcast_is_noticed_and_the_phase_redone(tmp_path: Path,
                                                                              clean_host: None) -> None:
    """Link 0-4 dies 0.3 s into round 2's broadcast, with weights on it: once 0->4 has carried
    nothing for the 2 s stall timeout the coordinator aborts the broadcast (every agent answers
    with its reason), the tree is re-planned around 0-4 and the broadcast runs again; the round
    still aggregates exactly."""
    out = tmp_path / "run"
    summary = _run(out, "mst", "--fail-link", "0-4@2+0.3", "--stall-timeout", "2", rounds=2)
    (event,) = json.loads((out / "faults.json").read_text())
    assert event["event"].startswith("link 0-4 down") and event["before_phase"] == "broadcast"
    assert event["aborted"]["failed_nodes"] and event["aborted"]["link_bytes"] > 0
    assert event["stall"].endswith("stalled: link 0->4 on its path carried nothing for 2.0 s")
    assert set(event["aborted"]["failed_nodes"].values()) == {f"PhaseAborted: {event['stall']}"}
    assert event["in_flight_lost_bytes"] >= 0
    for flow in event["tasks"][0]["flows"]:
        assert all({a, b} != {"0", "4"} for a, b in zip(flow["path"], flow["path"][1:])), flow["path"]
    broadcast = [float(r["broadcast_s"]) for r in read_csv(out / "rounds.csv")]
    # after the stall timeout, within round 2's broadcast, which waited it out and ran again
    assert 2.0 <= event["detected_s"]["0-4"] < broadcast[1]
    assert broadcast[1] > 2.0 and broadcast[1] > broadcast[0]
    assert summary["local_models_per_round"] == [4, 4]
    for rnd in (1, 2):
        _assert_exact_over_participants(out, rnd, 4)


def test_a_slow_shared_link_is_not_a_stalled_one(tmp_path: Path, clean_host: None) -> None:
    """SPFF sends G's 4.5 MB model to four local models on node 1 over one 50 Mbit/s link, in
    4 MB chunks: each transfer's first chunk needs 4 x 4 MiB x 8 / 50 Mbit/s = 2.7 s, more than
    the 1 s stall timeout. The link never stands still, so nothing stalls and the round completes
    (when a chunk's wait counted as a stall, this run failed in its broadcast)."""
    out = tmp_path / "run"
    _run(out, "spff", "--model", "mlp-large", "--chunk-kb", "4096", "--stall-timeout", "1", rounds=1,
         task=["--topology", "small", "--local-models", "4", "--global-node", "0", "--local-nodes", "1,1,1,1",
               "--save-models"])
    (row,) = read_csv(out / "rounds.csv")
    assert float(row["broadcast_s"]) > 2.0 and float(row["upload_s"]) > 2.0
    assert not (out / "faults.json").exists()
    _assert_measured_as_planned(out)
    _assert_exact_over_participants(out, 1, 4)


def test_a_relay_killed_under_the_broadcast_is_replanned_and_the_phase_redone(tmp_path: Path,
                                                                               clean_host: None) -> None:
    """Node 4 relays G's weights to node 3 in MST's tree; it dies 0.3 s into round 2's broadcast.
    Its peers' transfers break, the tree is re-planned without it, the broadcast runs again, and
    the round aggregates the three surviving local models exactly."""
    out = tmp_path / "run"
    summary = _run(out, "mst", "--kill-worker", "4@2+0.3", "--stall-timeout", "2", rounds=2)
    assert summary["local_models_per_round"] == [4, 3]
    (event,) = json.loads((out / "faults.json").read_text())
    assert event["event"].startswith("worker on node 4 killed") and event["before_phase"] == "broadcast"
    assert event["aborted"]["failed_nodes"] and "4" not in event["aborted"]["failed_nodes"]
    assert event["dropped"] == {"task0": {"3": "its worker on node 4 died"}}
    assert all("4" not in f["path"] for f in event["tasks"][0]["flows"])
    _assert_exact_over_participants(out, 1, 4)
    _assert_exact_over_participants(out, 2, 3)


@pytest.mark.parametrize("selection", ["random", "loss", "network"])
def test_a_round_with_fewer_clients_replans_for_them_and_averages_them_alone(tmp_path: Path, selection: str,
                                                                            clean_host: None) -> None:
    """--clients-per-round 2 of 4: each round G averages exactly the two it selected, the links
    carry the plan for those two, and a new set is re-planned before its round with the cost
    recorded (re-plan time, set-up bytes) apart from the round's phases."""
    out = tmp_path / selection
    summary = _run(out, "mst", "--model", "mlp", "--clients-per-round", "2", "--selection", selection)
    assert summary["local_models_per_round"] == [2, 2, 2]
    chosen = []
    for rnd in (1, 2, 3):
        chosen.append(sorted(int(i) for i in assert_fedavg(out / "models" / f"round{rnd}")))
        _assert_exact_over_participants(out, rnd, 2)
    _assert_measured_as_planned(out)
    events = json.loads((out / "faults.json").read_text())
    assert events[0]["round"] == 1 and events[0]["event"].startswith(f"participants ({selection}): task0 ")
    for event in events:
        assert event["replan_s"] > 0 and event["setup_link_bytes"] > 0 and event["before_phase"] == "broadcast"
    changes = 1 + sum(a != b for a, b in zip(chosen, chosen[1:]))
    assert len(events) == changes  # re-planned exactly when the set changed


@pytest.mark.parametrize("with_link_cut", [False, True], ids=["alone", "with-a-link-cut"])
def test_a_dead_worker_under_many_tasks_leaves_each_round_to_the_survivors(tmp_path: Path, clean_host: None,
                                                                           with_link_cut: bool) -> None:
    """Ten tasks of eight local models on NSFNET; node 3's worker, which holds a local model of
    nine of them, dies in round 2's training. The re-planned trees route some tasks through
    nodes that had no part in them (a relay that joins mid-round, after the broadcast), which
    stalled the upload until such a relay could add its (empty) share; with a link cut under the
    same round's broadcast too. Every task finishes its rounds, each aggregating exactly the
    local models that survived."""
    out = tmp_path / "run"
    cut = ["--fail-link", "8-12@2+0.05", "--stall-timeout", "1"] if with_link_cut else []
    summary = _run(out, "mst", "--tasks", "10", "--local-models", "8", "--seed", "6", "--model", "mlp",
                   "--kill-worker", "3@2", *cut, task=["--topology", "nsfnet", "--save-models", "--epochs", "1"])
    events = json.loads((out / "faults.json").read_text())
    (death,) = [e for e in events if e["event"].startswith("worker on node 3 killed")]
    dropped = death["dropped"]
    assert len(dropped) >= 2 and all(set(d.values()) == {"its worker on node 3 died"} for d in dropped.values())
    lost = sum(len(d) for d in dropped.values())
    assert summary["local_models_per_round"] == [80, 80 - lost, 80 - lost]
    for rnd in (1, 2, 3):
        for task in (f"task{i}" for i in range(10)):
            weights = assert_fedavg(out / "models" / f"round{rnd}", task)
            gone = set(dropped.get(task, {})) if rnd > 1 else set()
            assert not gone & set(weights) and len(weights) == 8 - len(gone), (rnd, task, weights)
