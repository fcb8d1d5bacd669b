"""``fedmst cluster`` for real: jobs that queue, run on the emulated network and end, a job whose
agent dies, and a command interrupted half-way; each leaves nothing behind."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from conftest import FEDMST, children_running, fedmst_cli
from fedmst.run.cluster_records import NODE_SEPARATOR
from fedmst.run.results import read_links

pytestmark = pytest.mark.integration

JOBS = """job,submit_s,local_models,rounds,compute_s
a,0,2,2,
b,0.05,2,2,
c,0.1,1,2,
huge,0.2,5,1,
"""
"""On ``small`` (five nodes of one slot): a holds 3 slots, b waits for them, c fits beside a at
once, huge asks six and is rejected."""


def _cluster(out: Path, jobs: Path, *extra: str) -> list[str]:
    return [FEDMST, "cluster", "--topology", "small", "--slots", "1", "--jobs", str(jobs), "--model", "mlp",
            "--epochs", "1", "--scheduler", "mst", "--time-scale", "2", "--out", str(out), *extra]


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="") as f:
        return {r["job"]: r for r in csv.DictReader(f)}


def _held_once(slots: Path) -> None:
    """No slot is held by two jobs at once (slots.csv)."""
    with slots.open(newline="") as f:
        by: dict[tuple[str, str], list[tuple[float, float, str]]] = {}
        for r in csv.DictReader(f):
            by.setdefault((r["node"], r["slot"]), []).append((float(r["from_s"]), float(r["to_s"]), r["job"]))
    for held in by.values():
        held.sort()
        for (_, end, a), (start, _, b) in zip(held, held[1:]):
            assert end <= start + 1e-6, (a, b, held)


def test_jobs_queue_run_for_real_and_end(tmp_path: Path, clean_host: None) -> None:
    (tmp_path / "jobs.csv").write_text(JOBS)
    proc = subprocess.run(_cluster(tmp_path / "out", tmp_path / "jobs.csv"), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    jobs = _rows(out / "jobs.csv")
    assert {n: r["status"] for n, r in jobs.items()} == {"a": "finished", "b": "finished", "c": "finished",
                                                        "huge": "rejected"}
    assert "asks 6 slots" in jobs["huge"]["reason"] and jobs["huge"]["start_s"] == ""
    assert (jobs["huge"]["rounds"], jobs["huge"]["rounds_asked"]) == ("0", "1")  # what it asked for stays
    a, b, c = (jobs[n] for n in "abc")
    assert float(b["queue_s"]) > 0 and float(b["start_s"]) >= float(a["end_s"]) - 1e-6  # b waited for a's slots
    assert float(c["start_s"]) < float(a["end_s"])  # c fit beside a and did not wait for b
    for r in (a, b, c):
        assert float(r["jct_s"]) == pytest.approx(float(r["end_s"]) - float(r["submit_s"]), abs=1e-4)
        assert int(r["rounds"]) == 2 and 0 < float(r["final_accuracy"]) <= 1
        assert 0 < float(r["setup_s"]) < float(r["end_s"]) - float(r["start_s"])
        assert len(r["nodes"].split(NODE_SEPARATOR)) == int(r["local_models"]) + 1
        assert (out / "jobs" / r["job"] / "plan.json").is_file()
    _held_once(out / "slots.csv")
    with (out / "tasks.csv").open(newline="") as f:
        rounds = sorted((r["task"], r["round"]) for r in csv.DictReader(f))
    assert rounds == [(n, str(i)) for n in "abc" for i in (1, 2)]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["mode"] == "emulate" and summary["time_scale"] == 2
    assert (summary["jobs_finished"], summary["jobs_rejected"], summary["jobs_failed"]) == (3, 1, 0)
    assert summary["mean_queue_s"] > 0 and 0 < summary["slot_utilisation"] <= 1
    assert summary["makespan_s"] == pytest.approx(max(float(r["end_s"]) for r in (a, b, c)), abs=1e-4)
    # the links over the whole trace: the jobs' rounds and set-ups as predicted, within the ACKs and handshakes
    links = read_links(out / "links.csv")
    predicted, weights = sum(r.predicted_bytes for r in links), sum(r.measured_weight_bytes for r in links)
    assert predicted > 0 and abs(weights - predicted) / predicted < 0.15, (weights, predicted)
    shown = fedmst_cli("links", str(out), timeout=60)
    assert shown.returncode == 0 and "total" in shown.stdout, shown.stderr


def _wait_for(condition, what: str, proc: subprocess.Popen[str], timeout_s: float = 180) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert proc.poll() is None, f"ended before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"no {what} in time"
        time.sleep(0.1)


@contextmanager
def _started(command: list[str]) -> Iterator[subprocess.Popen[str]]:
    """``command`` running, killed on the way out if the test left it running."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _agents_of(proc: subprocess.Popen[str], job: str) -> list[psutil.Process]:
    """The agents ``proc`` started for ``job``: those writing their log in its folder."""
    found = []
    for p in children_running(proc, "fedmst-agent"):
        try:
            if f"/jobs/{job}/agents/" in os.readlink(f"/proc/{p.pid}/fd/1"):
                found.append(p)
        except OSError:  # it ended meanwhile
            continue
    return found


def test_a_job_whose_agent_dies_fails_and_the_others_finish(tmp_path: Path, clean_host: None) -> None:
    (tmp_path / "jobs.csv").write_text("job,submit_s,local_models,rounds,compute_s\n"
                                       "long,0,2,40,0.2\nshort,0.1,1,2,\nafter,1,1,2,\n")
    with _started(_cluster(tmp_path / "out", tmp_path / "jobs.csv")) as proc:
        tasks = tmp_path / "out" / "jobs" / "long" / "live.json"
        _wait_for(lambda: tasks.exists() and len(_agents_of(proc, "long")) == 3, "agents of job long", proc)
        time.sleep(1.0)  # into its rounds
        _agents_of(proc, "long")[0].kill()
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    jobs = _rows(tmp_path / "out" / "jobs.csv")
    assert jobs["long"]["status"] == "failed" and "agent on node" in jobs["long"]["reason"], jobs["long"]
    assert jobs["short"]["status"] == jobs["after"]["status"] == "finished"
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (summary["jobs_finished"], summary["jobs_failed"]) == (2, 1)


def test_an_interrupted_cluster_keeps_what_finished(tmp_path: Path, clean_host: None) -> None:
    (tmp_path / "jobs.csv").write_text("job,submit_s,local_models,rounds,compute_s\n"
                                       "quick,0,1,1,\nlong,0.1,2,200,0.2\n")
    jobs = tmp_path / "out" / "jobs.csv"
    with _started(_cluster(tmp_path / "out", tmp_path / "jobs.csv")) as proc:
        _wait_for(lambda: jobs.exists() and "quick" in jobs.read_text(), "finished job", proc)
        time.sleep(4)  # long's rounds take about 0.6 s here (0.2 s of compute at time scale 2, and its transfers)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    rows = _rows(jobs)  # every job is accounted for: the one running with the rounds it finished
    assert {n: r["status"] for n, r in rows.items()} == {"quick": "finished", "long": "interrupted"}
    long = rows["long"]
    assert 1 <= int(long["rounds"]) < 200 and long["reason"] == "running when the command was interrupted"
    assert long["start_s"] and float(long["end_s"]) >= float(long["start_s"]) and long["nodes"]
    with (tmp_path / "out" / "slots.csv").open(newline="") as f:  # and the slots it held until the stop
        held = [r for r in csv.DictReader(f) if r["job"] == "long"]
    assert len(held) == 3 and all(float(r["to_s"]) == pytest.approx(float(long["end_s"])) for r in held), held
    with (tmp_path / "out" / "tasks.csv").open(newline="") as f:  # and its finished rounds, told as they went
        finished = [r for r in csv.DictReader(f) if r["task"] == "long"]
    assert [int(r["round"]) for r in finished] == list(range(1, int(long["rounds"]) + 1)), finished
    assert all(float(long["start_s"]) <= float(r["start_s"]) <= float(r["end_s"]) <= float(long["end_s"]) + 1e-6
               for r in finished), (finished, long)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["jobs_finished"] == 1 and summary["jobs"] == 2
    assert summary["jobs_interrupted"] == 1


def _stopped_once_and_resumed(out: Path, job: str, *, by: str, reason: str, rounds: int) -> int:
    """``job`` was stopped once, for ``by``, at a round boundary before ``by`` started, for a reason
    starting ``reason``; placed again it ran as a run of its own that took its checkpoint up bit for
    bit, and every one of its ``rounds`` ran once, numbered on after the resumption. Returns the
    rounds it had done when it stopped."""
    import torch

    with (out / "preemptions.csv").open(newline="") as f:
        (stop,) = list(csv.DictReader(f))
    assert (stop["job"], stop["by"]) == (job, by) and stop["reason"].startswith(reason), stop
    done = int(stop["rounds_done"])
    started = float(_rows(out / "jobs.csv")[by]["start_s"])
    assert 1 <= done < rounds and float(stop["asked_s"]) <= float(stop["stopped_s"]) <= started, stop
    checkpoint, resumed = (out / "jobs" / job / f"{kind}-{done}" / f"{job}-global.pt"
                           for kind in ("checkpoint", "resumed"))
    assert torch.equal(torch.load(checkpoint), torch.load(resumed))
    assert (out / "jobs" / job / "run-2" / "plan.json").is_file()
    with (out / "tasks.csv").open(newline="") as f:
        assert sorted(int(r["round"]) for r in csv.DictReader(f) if r["task"] == job) == list(range(1, rounds + 1))
    return done


def test_a_preempted_job_resumes_from_its_checkpoint_elsewhere_and_loses_no_round(tmp_path: Path,
                                                                                 clean_host: None) -> None:
    """las: once the long job has had more than las's first threshold of service (16 slot-rounds:
    6 rounds of 3 slots), the short one that arrives stops it at a round boundary; the long one
    resumes from its checkpoint when slots free, its global model exactly the checkpoint's."""

    (tmp_path / "jobs.csv").write_text("job,submit_s,local_models,rounds,compute_s\n"
                                       "long,0,2,20,0.3\nshort,3,2,2,\n")
    proc = subprocess.run(_cluster(tmp_path / "out", tmp_path / "jobs.csv", "--order", "las", "--preempt", "las"),
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    jobs = _rows(out / "jobs.csv")
    assert {n: (r["status"], r["rounds"]) for n, r in jobs.items()} == {"long": ("finished", "20"),
                                                                       "short": ("finished", "2")}
    assert (jobs["long"]["preemptions"], jobs["short"]["preemptions"]) == ("1", "0")
    done = _stopped_once_and_resumed(out, "long", by="short", reason="las:", rounds=20)
    assert 6 <= done
    assert 0 < float(jobs["long"]["final_accuracy"]) <= 1
    _held_once(out / "slots.csv")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["preemptions"] == 1 and summary["preempt"] == "las" and summary["jobs_finished"] == 2


NETWORK_PREEMPTION = """job,submit_s,local_models,rounds,compute_s
slow,0,2,5,1.0
chatty,1,2,2,0.01
"""
"""On ``small``: the delay placement puts slow on 0, 1 and 4 (consolidated around 0), leaving 2 and 3;
chatty, whose rounds are nearly all communication (network-sensitive), cannot be consolidated on
two slots, while slow, whose rounds are nearly all training, is not sensitive: the network
preemption stops slow for it once slow has finished a round."""


def test_network_preemption_stops_an_insensitive_job_for_real_and_it_resumes_bit_exact(
        tmp_path: Path, clean_host: None) -> None:
    """Seed 002's network-sensitive preemption, emulated: the job stopped at a round boundary,
    its checkpoint taken up again bit for bit when it is placed again, every round run once, and
    the rounds' bytes (the resumed run's broadcast of the checkpoint among them) on the links."""

    (tmp_path / "jobs.csv").write_text(NETWORK_PREEMPTION)
    proc = subprocess.run(_cluster(tmp_path / "out", tmp_path / "jobs.csv", "--placement", "delay",
                                   "--preempt", "network"), capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    jobs = _rows(out / "jobs.csv")
    assert {n: (r["status"], r["rounds"], r["preemptions"]) for n, r in jobs.items()} == {
        "slow": ("finished", "5", "1"), "chatty": ("finished", "2", "0")}
    _stopped_once_and_resumed(out, "slow", by="chatty", reason="network: chatty", rounds=5)
    _held_once(out / "slots.csv")
    # slow's bytes are its plans' over all five rounds, the resumed run's first broadcast of the
    # checkpoint included, and the links carried at least every job's (plus the set-ups' and ACKs')
    assert int(jobs["slow"]["link_bytes"]) > 2 * int(jobs["chatty"]["link_bytes"]) > 0
    carried = sum(row.measured_bytes for row in read_links(out / "links.csv"))
    assert carried >= sum(int(r["link_bytes"]) for r in jobs.values())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["preemptions"] == 1 and summary["preempt"] == "network" and summary["jobs_finished"] == 2


def test_the_seeds_policies_run_for_real_on_one_trace(tmp_path: Path, clean_host: None) -> None:
    """SJF-BCO's, Cassini's and the delay scheduler with network preemption, each on the same jobs
    (over DCTCP, which each summary and the table name)."""
    (tmp_path / "jobs.csv").write_text(JOBS)
    policies = "smallest/sjf-bco,fifo/cassini,srtf/delay/network"
    proc = subprocess.run(_cluster(tmp_path / "out", tmp_path / "jobs.csv", "--policies", policies,
                                   "--congestion-control", "dctcp"),
                          capture_output=True, text=True, timeout=400, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "TCP congestion control" in proc.stdout and "ECN K auto)" in proc.stdout, proc.stdout
    record = json.loads((tmp_path / "out" / "comparison.json").read_text())
    assert record["status"] == "completed" and record["policies"] == ["smallest+sjf-bco", "fifo+cassini",
                                                                      "srtf+delay+network"]
    for name, summary in record["summaries"].items():
        assert (summary["jobs_finished"], summary["jobs_rejected"], summary["jobs_failed"]) == (3, 1, 0), name
        assert summary["mode"] == "emulate" and summary["mean_jct_s"] > 0
        assert summary["transport"]["congestion_control"] == "dctcp", summary["transport"]
        assert isinstance(summary["transport"]["ecn_marked"], int)
        _held_once(tmp_path / "out" / name / "slots.csv")


def _fabric_cluster(tmp_path: Path, *optical: str) -> tuple[Path, dict[str, dict[str, str]]]:
    """Three one-model jobs of mlp-large at once on spine-leaf:1,2,3 at 100 Mbit/s, a user's
    placement sending every job across l0-s0-l1, with the ``optical`` options; the folder and jobs.csv."""
    (tmp_path / "jobs.csv").write_text("job,submit_s,local_models,rounds,compute_s\nj0,0,1,1,\nj1,0,1,1,\n"
                                       "j2,0,1,1,\n")
    users = str(Path(__file__).with_name("userbackends"))
    proc = subprocess.run(
        [FEDMST, "cluster", "--topology", "spine-leaf:1,2,3,mbps=100", "--slots", "1", "--jobs",
         str(tmp_path / "jobs.csv"), "--model", "mlp-large", "--epochs", "1", "--scheduler", "spff",
         "--placement", "userpolicies:Across", *optical, "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [users, os.environ.get("PYTHONPATH")]))})
    assert proc.returncode == 0, proc.stderr
    jobs = _rows(tmp_path / "out" / "jobs.csv")
    assert {n: r["status"] for n, r in jobs.items()} == dict.fromkeys(("j0", "j1", "j2"), "finished")
    return tmp_path / "out", jobs


def test_jobs_on_a_fabric_hold_their_circuits_and_wait_for_them(tmp_path: Path, clean_host: None) -> None:
    """Two circuit wavelengths a fibre (50 Mbit/s each): j0 and j1 run at once on a wavelength
    each, j2 waits for one of them to give its wavelength back; each job's optical.csv says what it
    held, and its weights go at its wavelength's rate, not the fibre's."""
    out, jobs = _fabric_cluster(tmp_path, "--ocs-wavelengths", "2", "--ots-wavelengths", "0", "--reconfig-ms", "100")
    j0, j1, j2 = (jobs[n] for n in ("j0", "j1", "j2"))
    assert float(j2["start_s"]) >= min(float(j0["end_s"]), float(j1["end_s"])) - 1e-6  # it waited for a wavelength
    assert float(j0["start_s"]) < float(j1["end_s"]) and float(j1["start_s"]) < float(j0["end_s"])  # side by side
    for r in (j0, j1, j2):
        circuits = list(csv.DictReader((out / "jobs" / r["job"] / "optical.csv").open()))
        assert [(c["path"], float(c["reserved_mbps"])) for c in circuits] == [("l0-s0-l1", 50.0)]
        assert float(r["setup_s"]) >= 0.1  # its circuit's set-up, before its first broadcast
        assert 2 * 4.5e6 * 8 / 50e6 <= float(r["comm_s"]) * 1.1, r  # down and up on its own 50 Mbit/s
    optical = json.loads((out / "summary.json").read_text())["optical"]
    assert optical["wavelengths_used"] == {"l0-s0": 2, "l1-s0": 2} and optical["jobs_blocked_on_wavelengths"] == 1


def test_jobs_on_a_fabric_share_a_time_sliced_wavelength_each_in_its_slot(tmp_path: Path, clean_host: None) -> None:
    """One OTS wavelength of 4 slots of 5 ms: the three jobs run at once, a slot each, and the
    gates, which take each new job's slots as it starts, keep every job's bytes in its own slot."""
    out, jobs = _fabric_cluster(tmp_path, "--optical", "ots", "--ocs-wavelengths", "0", "--ots-wavelengths", "1",
                                "--timeslots", "4", "--timeslot-us", "5000", "--guard-us", "500")
    assert all(float(r["start_s"]) < min(float(o["end_s"]) for o in jobs.values()) for r in jobs.values())
    slots = set()
    for name in jobs:
        (held,) = csv.DictReader((out / "jobs" / name / "optical.csv").open())
        slots.add(held["timeslots"])
        rows = list(csv.DictReader((out / "jobs" / name / "timeslots.csv").open()))
        inside = sum(int(r["bytes"]) for r in rows)
        assert inside > 4 * 4.5e6 and sum(int(r["outside_bytes"]) for r in rows) <= 0.01 * inside, name
    assert slots == {"0", "1", "2"}
    assert json.loads((out / "summary.json").read_text())["optical"]["jobs_blocked_on_wavelengths"] == 0
