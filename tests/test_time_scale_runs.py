"""Virtual time for real (``--time-scale``): the emulation runs slower by the factor, and every
time, rate and change the run reports is the network's (each test leaves nothing behind)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from fedmst.run.results import read_csv

from conftest import fedmst_cli

pytestmark = pytest.mark.integration
SCALE = 2
CAPACITY_MBPS = 50.0
"""line3's links."""


def test_a_slowed_run_reports_the_networks_times_rates_and_changes(clean_host: None, tmp_path: Path) -> None:
    """line3 twice as slow, with a background flow and a link trace: the rounds really take
    twice the predicted phases, yet the phases, the links' sampled rates, the background
    flow's rate and the change's time come out in the network's terms, and the weights' bytes
    are the plan's."""
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"changes": [{"at_s": 0.3, "a": "b", "b": "c", "loss": 0.0}]}))
    out = tmp_path / "run"
    proc = fedmst_cli("run", "--topology", "line3", "--global-node", "a", "--local-nodes", "b,c", "--local-models",
                      "2", "--rounds", "1", "--epochs", "1", "--time-scale", str(SCALE), "--traffic", "a-c:5mbit:udp",
                      "--link-trace", str(trace), "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "time scale 2: 50 Mbit/s links run at 25 Mbit/s; times are the network's" in " ".join(proc.stdout.split())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["emulated"]["time_scale"] == SCALE
    assert json.loads((out / "config.json").read_text())["time_scale"] == str(SCALE)  # a re-run repeats it

    (round_,) = read_csv(out / "rounds.csv")
    for phase in ("broadcast", "upload"):  # the host's clock beside the network's, for the transfer phases N times
        assert float(round_[f"{phase}_host_s"]) == pytest.approx(SCALE * float(round_[f"{phase}_s"]), rel=1e-4)
    assert float(round_["train_host_s"]) > 0  # the training's real length, beside its counted CPU time
    predicted = float(round_["predicted_broadcast_s"]) + float(round_["predicted_upload_s"])
    measured = float(round_["broadcast_s"]) + float(round_["upload_s"])
    assert measured >= 0.9 * predicted  # htb never lets the network go faster than its links
    # the host really ran it twice as slow as the network it reports on
    assert summary["time_breakdown_s"]["rounds"] >= 0.9 * SCALE * predicted
    for row in read_csv(out / "links.csv"):
        planned = int(row["predicted_bytes"])
        if planned:
            assert abs(int(row["measured_weight_bytes"]) - planned) <= 0.02 * planned, row

    # sampled rates are the network's: a-b is busy near its 50 Mbit/s in the broadcast, never far above
    samples: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
    for s in read_csv(out / "samples.csv"):
        samples[(s["src"], s["dst"])].append((float(s["t_s"]), int(s["bytes"])))
    a_b = samples[("a", "b")]
    rates = [(b2 - b1) * 8 / (t2 - t1) / 1e6 for (t1, b1), (t2, b2) in zip(a_b, a_b[1:]) if t2 - t1 >= 0.05]
    assert rates and 0.6 * CAPACITY_MBPS <= max(rates) <= 1.25 * CAPACITY_MBPS, rates

    # where the host's time went, phase by phase: the agents train, the delay lines hold the weights
    cpu = {(r["phase"], r["process"]): float(r["cpu_s"]) for r in read_csv(out / "cpu.csv")}
    assert {p for p, _ in cpu} == {"broadcast", "train", "upload"}
    assert {k for _, k in cpu} >= {"agent", "delay", "coordinator", "send", "sink"}
    assert cpu[("train", "agent")] > 0 and cpu[("broadcast", "delay")] > 0

    (flow,) = summary["background"]
    assert 0.7 * 5 < flow["sent_mbps"] < 5.5, flow  # paced at 5 Mbit/s of the network's (2.5 on the host)
    (change,) = json.loads((out / "link_changes.json").read_text())
    assert 0.3 <= change["applied_s"] <= float(round_["round_s"]), change  # never early, in the network's time


def test_every_connection_runs_the_congestion_control_asked_for(clean_host: None, tmp_path: Path) -> None:
    """--congestion-control is set on the flows' routes, not taken from the host's default: the
    agents read it back from each of their connections (reno: neither Linux's default, cubic,
    nor this development machine's, bbr). Slow start after idle is off in every host."""
    out = tmp_path / "run"
    proc = fedmst_cli("run", "--topology", "line3", "--local-models", "2", "--rounds", "1", "--model", "mlp",
                      "--congestion-control", "reno", "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "TCP congestion control reno" in " ".join(proc.stdout.split())
    assert json.loads((out / "summary.json").read_text())["emulated"]["congestion_control"] == "reno"
    workers = json.loads((out / "workers.json").read_text())
    seen = [w["congestion_control"] for w in workers.values()]
    assert all(s and set(s) == {"reno"} for s in seen), seen
    # and every host keeps TCP's window across the training's idle time, whatever the host's own setting
    assert [w["slow_start_after_idle"] for w in workers.values()] == [False] * len(workers), workers


def test_a_run_too_fast_for_its_host_flags_its_host_bound_phases(clean_host: None, tmp_path: Path) -> None:
    """The poster's point (30 tasks of 15 local models) forced to real time on this host: its
    phases take several times their prediction with the CPUs busy, and the run says so in the
    console, in rounds.csv and in summary.json, with a larger scale that would keep up."""
    out = tmp_path / "run"
    proc = fedmst_cli("run", "--topology", "nsfnet", "--tasks", "30", "--local-models", "15", "--model", "mlp",
                      "--ocs-wavelengths", "120", "--rounds", "1", "--epochs", "1", "--scheduler", "spff",
                      "--time-scale", "1", "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = read_csv(out / "rounds.csv")
    bound = row["host_bound"].split(";") if row["host_bound"] else []
    assert bound, row  # at least one transfer phase was the host's
    for phase in bound:
        assert float(row[f"{phase}_s"]) > 1.2 * float(row[f"predicted_{phase}_s"]), row
    assert int(row["keeps_up_at"]) >= 2 and float(row["time_scale"]) == 1
    flagged = json.loads((out / "summary.json").read_text())["emulated"]["host_bound_phases"]
    assert [f["phase"] for f in flagged] == bound
    assert all(f["measured_over_predicted"] > 1.2 and 2 <= f["keeps_up_at"] <= int(row["keeps_up_at"])
               for f in flagged), flagged
    said = " ".join(proc.stdout.split())
    assert "bound by the host, not the links" in said
    assert f"--time-scale {row['keeps_up_at']} would keep up" in said
