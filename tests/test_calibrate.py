"""What one emulated link of this host carries: measured, cached per boot, and said in every run.

The integration tests build real two-host emulations (the calibration's own, then a run's) and
send real TCP streams; the 1 Pbit/s link of the last test is shaped by a real htb class at that
rate, which this host cannot carry: the run must name it instead of calling it emulated.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import networkx as nx
import pytest

from fedmst.errors import EmulationError
from fedmst.net import calibrate
from fedmst.net.delayline import running_kind
from fedmst.net.emulation import Capabilities, Emulation, probe_capabilities
from fedmst.core.timescale import keeps_up_at
from fedmst.run.results import read_csv

from conftest import fedmst_cli

ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")


def test_the_best_window_is_the_rate() -> None:
    samples = [(0.0, 0), (0.1, 100_000), (0.2, 1_350_000), (0.3, 2_600_000), (0.4, 2_700_000)]
    assert calibrate.best_rate_mbps(samples, 0.1) == 100.0  # 1.25 MB in 0.1 s, twice
    with pytest.raises(EmulationError, match="no traffic crossed"):
        calibrate.best_rate_mbps([(0.0, 5), (0.2, 5)], 0.1)


def test_only_links_above_the_ceiling_are_cpu_bound() -> None:
    g = nx.Graph([("b", "a", {"capacity_mbps": 2000.0}), ("b", "c", {"capacity_mbps": 999.0}),
                  ("c", "d", {"capacity_mbps": 1000.0})])
    assert calibrate.cpu_bound_links(g, 1000.0) == ["b-a"]
    assert calibrate.cpu_bound_links(g, 5000.0) == []


@ROOT
@pytest.mark.integration
def test_the_ceiling_is_measured_once_per_boot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              clean_host: None) -> None:
    monkeypatch.setattr(calibrate, "CACHE", tmp_path / "link-ceiling")
    said: list[str] = []
    caps = probe_capabilities()
    first = calibrate.link_ceiling_mbps("userspace", 1500, caps, report=said.append)
    assert len(said) == 1 and "once per boot" in said[0]
    assert 10 < first < 1e6, first  # a real rate: more than a slow link, less than the htb's 10 Tbit/s
    assert calibrate.link_ceiling_mbps("userspace", 1500, caps, report=said.append) == first
    assert len(said) == 1, "the second call reads the cache"
    cached = json.loads((tmp_path / "link-ceiling").read_text())
    assert cached["ceilings"] == {f"userspace-{running_kind()}/1500": first}  # per delay line
    # a cache from another boot is not believed
    cached["boot_id"] = "another-boot"
    (tmp_path / "link-ceiling").write_text(json.dumps(cached))
    calibrate.link_ceiling_mbps("userspace", 1500, caps, report=said.append)
    assert len(said) == 2


@ROOT
@pytest.mark.integration
def test_htb_shapes_links_above_one_gigabit(clean_host: None) -> None:
    """Mininet's TCLink silently left links above 1000 Mbit/s unshaped; fedmst's own batch does not."""
    g = nx.Graph([("a", "b", {"capacity_mbps": 2500.0, "delay_s": 0.0})])
    with Emulation(g, delay_mode="off", capabilities=Capabilities(netem=False)) as emu:
        out = emu.cmd("a", f"tc class show dev {emu.interfaces('a')[0]}")
    assert "htb 5:1" in out and "rate 2500Mbit" in out, out


@ROOT
@pytest.mark.integration
def test_a_run_names_the_links_this_host_cannot_carry(tmp_path: Path, clean_host: None) -> None:
    topo = tmp_path / "fast.json"
    topo.write_text(json.dumps({
        "name": "fast", "capacity_mbps": 50, "nodes": ["a", "b", "c"],
        "links": [{"a": "a", "b": "b", "km": 10, "capacity_mbps": 1e9}, {"a": "b", "b": "c", "km": 10}],
    }))
    out = tmp_path / "run"
    proc = fedmst_cli("run", "--topology", str(topo), "--scheduler", "mst", "--rounds", "1", "-k", "2",
                      "--global-node", "a", "--local-nodes", "b,c", "--time-scale", "1", "--out", str(out),
                      timeout=300)  # in real time: auto would slow it 512 times
    assert proc.returncode == 0, proc.stderr[-2000:]
    emulated = json.loads((out / "summary.json").read_text())["emulated"]
    assert emulated["bandwidth_cpu_bound"] == ["a-b"]
    assert 10 < emulated["link_ceiling_mbps"] < 1e9
    assert "warning: 1 link(s) (a-b) have a capacity above the" in proc.stdout
    # how busy the host's CPUs were in each phase is measured, and a phase the host bound is said
    (row,) = read_csv(out / "rounds.csv")
    assert all(0 < float(row[f"{p}_cpu_busy"]) <= 1 for p in ("broadcast", "train", "upload")), row
    bound = [p for p in ("broadcast", "upload") if keeps_up_at(1, float(row[f"{p}_s"]) / float(row[f"predicted_{p}_s"]),
                                                               float(row[f"{p}_cpu_busy"]), cores=os.cpu_count() or 1)]
    assert [b["phase"] for b in emulated["host_bound_phases"]] == bound
    assert row["host_bound"] == ";".join(bound)


def test_a_ceiling_that_cannot_be_measured_is_a_warning_not_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from fedmst.run import engine

    def fail(*args: object, **kw: object) -> float:
        raise EmulationError("calibrating the link ceiling failed: sink.log: boom")

    monkeypatch.setattr(engine, "link_ceiling_mbps", fail)
    said: list[str] = []
    resolved = SimpleNamespace(delay_mode="userspace", config=SimpleNamespace(mtu=1500), graph=nx.Graph())
    keys = engine._link_ceiling(resolved, Capabilities(netem=False), said.append)  # type: ignore[arg-type]
    assert keys == {"link_ceiling_mbps": None, "bandwidth_cpu_bound": None}
    assert said == ["warning: calibrating the link ceiling failed: sink.log: boom; link capacities are not checked "
                    "against what this host carries"]
