"""The emulation's delay modes, for real: the userspace delay line everywhere, netem where the
kernel has it, and a clear refusal where it does not."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import networkx as nx
import pytest

from conftest import children_running, fedmst_cli, run_past_round_one
from fedmst.net.emulation import Emulation, probe_capabilities
from fedmst.core.topology import validate_topology

NO_NETEM = "this kernel lacks sch_netem (tc qdisc netem)"


@functools.cache
def netem() -> bool:
    """Probed once, when a test that depends on it is about to run: probing creates an interface,
    which merely collecting (or deselecting) tests must not do. The string skip conditions below
    are evaluated then, not at import."""
    return probe_capabilities().netem


def _two_nodes(delay_ms: float) -> nx.Graph:
    g = nx.Graph(name="two")
    g.add_edge("a", "b", capacity_mbps=100.0, delay_s=delay_ms / 1e3, length_km=None)
    return validate_topology(g, "test")


def _rtt_ms(emu: Emulation) -> tuple[float, float]:
    """Least and median RTT of pings along a routed a->b transfer. The median, not the mean: a
    delay line holds each packet until its due time and a busy host can only wake it later, so one
    late wake-up on a 2-core host would move a mean of 20 by more than the tolerance while the
    links' delay is right. ``-U`` times user to user, because ping's default uses the kernel's
    receive stamp, taken before a delay line holds the reply."""
    flow = emu.install_flows({"p": ("a", "b")})["p"]
    out = emu.cmd("a", f"ping -U -n -c 20 -i 0.05 -I {flow.src_addr} {flow.dst_addr}")
    assert " 0% packet loss" in out, out
    times = sorted(float(t) for t in re.findall(r"time=([\d.]+) ms", out))
    assert len(times) == 20, out
    return times[0], (times[9] + times[10]) / 2


@pytest.mark.integration
@pytest.mark.parametrize("mode,mechanism", [
    ("userspace", "nfqueue-delay-line"),
    pytest.param("netem", "netem",
                 marks=pytest.mark.skipif("not netem()", reason=NO_NETEM)),
])
def test_delay_mode_applies_each_links_delay(mode: str, mechanism: str, clean_host: None) -> None:
    with Emulation(_two_nodes(0), delay_mode="off") as emu:
        _, base = _rtt_ms(emu)
    with Emulation(_two_nodes(10), delay_mode=mode) as emu:
        assert emu.emulated()["delay_mechanism"] == mechanism
        least, rtt = _rtt_ms(emu)
    assert least >= 20, (least, base)  # a link's delay is never cut short
    assert abs(rtt - (20 + base)) <= max(0.05 * 20, 0.1), (rtt, base)
    if mode == "userspace":
        for direction in ("a->b", "b->a"):
            stats = emu.delay_stats[direction]
            assert stats["passed"] >= 20 and stats["lost"] == stats["overflow"] == 0, stats


@pytest.mark.integration
def test_userspace_loss_drops_at_the_configured_rate(clean_host: None) -> None:
    with Emulation(_two_nodes(1), delay_mode="userspace", loss=0.1) as emu:
        flow = emu.install_flows({"p": ("a", "b")})["p"]
        emu.cmd("a", f"ping -n -q -c 1000 -i 0.002 -W 1 -I {flow.src_addr} {flow.dst_addr}")
    received = sum(emu.delay_stats[d]["received"] for d in ("a->b", "b->a"))
    lost = sum(emu.delay_stats[d]["lost"] for d in ("a->b", "b->a"))
    assert received >= 1000
    assert abs(lost / received - 0.1) <= 0.01 + 3 * (0.1 * 0.9 / received) ** 0.5


@pytest.mark.integration
def test_a_dying_delay_line_stops_the_run(tmp_path: Path, clean_host: None) -> None:
    with run_past_round_one(tmp_path / "run", "--delay-mode", "userspace") as proc:
        children_running(proc, "fedmst-delay")[0].kill()  # a delay line this test's run started
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "delay line of link" in lines[0], err


@pytest.mark.host
@pytest.mark.skipif("netem()", reason="the kernel has sch_netem, so asking for it is not an error")
def test_netem_mode_without_netem_is_refused_in_one_line(tmp_path: Path) -> None:
    proc = fedmst_cli("run", "--topology", "line3", "--model", "mlp", "--delay-mode", "netem", "--out",
                      str(tmp_path / "out"), timeout=120)
    assert proc.returncode == 1
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "no sch_netem" in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()
