"""Transports in BPF, for real: fedmst's DCTCP with ECN marking at every link sender, MLTCP told
each connection's bytes by the agents, and a user's own algorithm from a ``.bpf.c``; each one
registered for its run alone and gone after it, even after a SIGKILL and ``fedmst clean``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import fedmst_cli, missing_bpf, run_past_round_one
from fedmst.run.results import read_csv

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(missing_bpf() is not None, reason=f"no BPF congestion controls here: {missing_bpf()}")]

OURS = re.compile(r"fm[a-z]{3}_")

MY_RENO = Path(__file__).resolve().parents[1] / "examples" / "my_reno.bpf.c"
"""The template docs/transports.md points users at: Reno written out in BPF."""


def available() -> list[str]:
    return Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()


def run(out: Path, *extra: str, topology: str = "line3") -> dict:
    """A real one-round run on ``topology``; its summary.json."""
    proc = fedmst_cli("run", "--topology", topology, "--local-models", "2", "--rounds", "1", "--model", "mlp-large",
                      "--epochs", "1", "--out", str(out), *extra, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "summary.json").read_text())


def every_connection_ran(out: Path, name: str) -> None:
    workers = json.loads((out / "workers.json").read_text())
    seen = [w["congestion_control"] for w in workers.values()]
    assert all(s and set(s) == {name} for s in seen), seen


def test_dctcp_negotiates_ecn_and_every_link_sender_marks(clean_host: None, tmp_path: Path) -> None:
    """dctcp runs on every connection under the run's own name, which is gone after the run; the
    markers on the link senders mark CE on its packets (ECN negotiated) once their virtual queue
    holds more than K, and ecn.csv counts it per link direction. Under cubic the same markers find
    the queue as long but mark nothing: cubic does not ask for ECN, so its packets are not ECN-capable."""
    emulated = run(tmp_path / "dctcp", "--congestion-control", "dctcp")["emulated"]
    name = emulated["congestion_control_kernel"]
    assert emulated["congestion_control"] == "dctcp" and OURS.match(name) and name.endswith("_dctcp"), emulated
    every_connection_ran(tmp_path / "dctcp", name)
    assert name not in available()
    # gone from the kernel too, not only from the list of algorithms: no socket of the run's dead
    # namespaces holds it (it would linger as BPF_STRUCT_OPS_STATE_TOBEFREE), and clean has nothing to say
    from fedmst.net.congestion import registered

    assert name not in registered()
    cleaned = fedmst_cli("clean", timeout=120)
    assert name not in cleaned.stdout, cleaned.stdout
    rows = read_csv(tmp_path / "dctcp" / "ecn.csv")
    assert len(rows) == 4  # line3: two links, both directions
    assert all(int(r["marked"]) <= int(r["over_k"]) <= int(r["packets"]) for r in rows), rows
    assert sum(int(r["marked"]) for r in rows) == emulated["ecn_marked"] > 0, rows
    assert emulated["ecn_k"] == "auto" and all(int(r["k_bytes"]) >= 20 * (1500 + 14) for r in rows), rows

    emulated = run(tmp_path / "cubic", "--ecn-k", "20p")["emulated"]
    rows = read_csv(tmp_path / "cubic" / "ecn.csv")
    assert sum(int(r["over_k"]) for r in rows) > 0 and emulated["ecn_marked"] == 0, rows


@pytest.mark.parametrize("mltcp", ["mltcp", "mltcp-cubic"])
def test_mltcp_grows_its_window_by_the_bytes_ratio_the_agents_tell_it(clean_host: None, tmp_path: Path,
                                                                      mltcp: str) -> None:
    """The agents tell each connection its round's bytes; MLTCP's window growth per ACKed packet
    (its own counters, mltcp.csv) follows F = slope x bytes_ratio + intercept with the knobs given,
    over Reno and over CUBIC."""
    out = tmp_path / "mltcp"
    emulated = run(out, "--congestion-control", mltcp, "--cc-arg", "slope=1", "--cc-arg", "intercept=0.5",
                   "--scheduler", "spff")["emulated"]  # a star: both uploads share b->a, which keeps their windows full
    assert emulated["congestion_control_knobs"] == {"slope": 1, "intercept": 0.5, "slow_start": 1}
    every_connection_ran(out, emulated["congestion_control_kernel"])
    bins = [r for r in read_csv(out / "mltcp.csv") if int(r["acked_packets"]) > 0]
    # the window grows only while it limits the sender: from the start of a round until it covers the path
    ratios = [float(r["bytes_ratio"]) for r in bins]
    assert len(ratios) >= 5 and ratios[0] == 0 and max(ratios) >= 0.5, bins
    assert [float(r["mean_aggressiveness"]) for r in bins] == sorted(float(r["mean_aggressiveness"]) for r in bins)
    for r in bins:  # the mean F of a tenth lies within it: from its lower end's F to its upper end's
        low = 0.5 + float(r["bytes_ratio"])
        assert low - 1e-3 <= float(r["mean_aggressiveness"]) <= low + 0.1 + 1e-3, r


def test_a_users_own_algorithm_runs_and_leaves_nothing_registered(clean_host: None, tmp_path: Path) -> None:
    """The Reno a user starts from (examples/my_reno.bpf.c, as docs/transports.md gives it) is
    compiled, registered under the run's name, run on every connection, and unregistered after the
    run; after a SIGKILLed run it stays registered until `fedmst clean` unregisters it."""
    source = MY_RENO
    emulated = run(tmp_path / "once", "--congestion-control", str(source))["emulated"]
    name = emulated["congestion_control_kernel"]
    assert OURS.match(name) and name.endswith("_my_reno"), emulated
    every_connection_ran(tmp_path / "once", name)
    assert name not in available()

    with run_past_round_one(tmp_path / "killed", "--congestion-control", str(source)) as proc:
        left = [n for n in available() if OURS.match(n)]
        assert len(left) == 1 and left[0].endswith("_my_reno"), available()
        proc.kill()
        proc.wait()
    assert left[0] in available()  # a SIGKILL leaves it registered ...
    cleaned = fedmst_cli("clean", timeout=120)
    assert f"unregistered TCP congestion control {left[0]}" in cleaned.stdout, cleaned.stdout
    assert left[0] not in available()  # ... until clean
    # sockets of the killed run's namespaces (which died with it, their FINs undelivered) may hold it on
    # in the kernel for minutes: clean then says so, and does not claim to unregister it again
    from fedmst.net.congestion import FREEING, registered

    held = registered().get(left[0])
    again = fedmst_cli("clean", timeout=120).stdout
    assert f"unregistered TCP congestion control {left[0]}" not in again, again
    if held is not None:
        assert held[1] == FREEING, held
        assert f"TCP congestion control {left[0]} was unregistered; the kernel frees it" in " ".join(again.split())


def test_a_sweep_makes_the_transport_an_axis(clean_host: None, tmp_path: Path) -> None:
    """`fedmst sweep --congestion-control cubic,dctcp` runs every point under each, into its own
    folder, with the congestion control a column of sweep.csv and each its own figures."""
    out = tmp_path / "sweep"
    proc = fedmst_cli("sweep", "--topology", "small", "--schedulers", "mst", "--local-models", "2", "--seeds", "1",
                      "--tasks", "1", "--congestion-control", "cubic,dctcp", "--out", str(out), timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_csv(out / "sweep.csv")
    assert [r["congestion_control"] for r in rows] == ["cubic", "dctcp"]
    for cc in ("cubic", "dctcp"):
        emulated = json.loads((out / f"{cc}-k2-seed1" / "mst" / "summary.json").read_text())["emulated"]
        assert emulated["congestion_control"] == cc
        assert (out / f"latency_vs_local_models-{cc}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_emulated_clusters_jobs_run_the_congestion_control(clean_host: None, tmp_path: Path) -> None:
    """`fedmst cluster --congestion-control dctcp`: every job's connections run the run's DCTCP,
    and the shared links' markers are counted in the cluster folder's ecn.csv."""
    out = tmp_path / "cluster"
    proc = fedmst_cli("cluster", "--topology", "line3", "--slots", "1", "--jobs", "poisson:60,2", "--seed", "3",
                      "--rounds", "1", "--model", "mlp", "--congestion-control", "dctcp", "--out", str(out),
                      timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert [r["status"] for r in read_csv(out / "jobs.csv")] == ["finished", "finished"]
    for job in ("job0", "job1"):
        workers = json.loads((out / "jobs" / job / "workers.json").read_text())
        assert all(set(w["congestion_control"]) == {next(iter(w["congestion_control"]))} and
                   OURS.match(next(iter(w["congestion_control"]))) for w in workers.values()), workers
    assert len(read_csv(out / "ecn.csv")) == 4
