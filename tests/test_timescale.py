"""Virtual time's pure half: one conversion between the network's clock and the host's, applied
to the graph, background flows, link traces and TCP's timeout floor (no network here)."""

from __future__ import annotations

import os
from dataclasses import replace

import networkx as nx
import pytest

from fedmst.core.linktrace import LinkChange
from fedmst.core.timescale import (MEASURED_COSTS, REAL_TIME, TCP_RTO_MIN_S, PhaseLoad, TimeScale, keeps_up_at,
                                   pick_scale)
from fedmst.core.traffic import BackgroundFlow
from fedmst.errors import FedmstError
from fedmst.net.link import EmulatedLink, LinkEnd, LinkShaping
from fedmst.net.routes import FlowRoutes
from fedmst.run.config import RunConfig, validate


@pytest.mark.parametrize("factor", [1.0, 2.5, 40.0])
def test_a_time_and_a_rate_go_there_and_back(factor: float) -> None:
    scale = TimeScale(factor)
    assert scale.network_s(scale.real_s(0.37)) == pytest.approx(0.37)
    # what a slowed link carries in a real second is what the network carries in 1/N of one
    assert scale.real_mbps(100.0) * scale.real_s(1.0) == pytest.approx(100.0)


def test_the_slowed_graph_keeps_every_links_bandwidth_delay_product() -> None:
    g = nx.Graph()
    g.add_edge("a", "b", capacity_mbps=100.0, delay_s=0.002, km=400)
    g.add_edge("b", "c", capacity_mbps=10_000.0, delay_s=0.001, km=200)
    slowed = TimeScale(8).graph(g)
    for u, v in g.edges:
        before, after = g.edges[u, v], slowed.edges[u, v]
        assert after["capacity_mbps"] == before["capacity_mbps"] / 8 and after["delay_s"] == before["delay_s"] * 8
        assert after["capacity_mbps"] * after["delay_s"] == pytest.approx(before["capacity_mbps"] * before["delay_s"])
        assert after["km"] == before["km"]
    assert g.edges["a", "b"]["capacity_mbps"] == 100.0, "the run's graph (predictions) is not touched"


def test_real_time_changes_nothing() -> None:
    g = nx.Graph()
    g.add_edge("a", "b", capacity_mbps=50.0, delay_s=0.0005)
    flow = BackgroundFlow("a", "b", 20.0, "tcp", 1.0, None)
    change = LinkChange(3.0, ("a", "b"), capacity_mbps=10.0)
    assert not REAL_TIME.slowed and REAL_TIME.rto_min_s() is None
    assert nx.utils.graphs_equal(REAL_TIME.graph(g), g)
    assert REAL_TIME.flow(flow) == flow and REAL_TIME.change(change) == change


def test_a_flow_and_a_change_keep_what_is_not_time() -> None:
    scale = TimeScale(3)
    flow = scale.flow(BackgroundFlow("a", "c", 30.0, "tcp", 2.0, None))
    assert (flow.src, flow.dst, flow.protocol, flow.end_s) == ("a", "c", "tcp", None)
    assert flow.mbps == 10.0 and flow.start_s == 6.0
    change = scale.change(LinkChange(1.0, ("a", "b"), loss=0.02))
    assert change == LinkChange(3.0, ("a", "b"), loss=0.02)


def test_tcps_timeout_floor_follows_the_scale() -> None:
    assert TimeScale(10).rto_min_s() == pytest.approx(10 * TCP_RTO_MIN_S)


def _routes(rto_min_s: float | None, congestion_control: str | None = None) -> dict[str, list[str]]:
    shaping = LinkShaping("off", "fifo", 1500, 0.0, 0.0)
    ab = EmulatedLink((LinkEnd("a", "a-eth0", "10.0.0.1"), LinkEnd("b", "b-eth0", "10.0.0.2")), 10.0, 0.0, shaping)
    bc = EmulatedLink((LinkEnd("b", "b-eth1", "10.0.0.5"), LinkEnd("c", "c-eth0", "10.0.0.6")), 10.0, 0.0, shaping)
    hops = {("a", "b"): ab, ("b", "a"): ab, ("b", "c"): bc, ("c", "b"): bc}
    lines: dict[str, list[str]] = {}
    FlowRoutes(["a", "b", "c"], hops, lambda node, batch: lines.setdefault(node, []).extend(batch),
               rto_min_s=rto_min_s, congestion_control=congestion_control).install({"t": ("a", "b", "c")})
    return lines


def test_a_slowed_runs_routes_raise_the_timeout_floor_at_both_ends_of_a_flow() -> None:
    lines = _routes(0.8)
    ends = [line for node in ("a", "c") for line in lines[node] if line.startswith("route")]
    assert ends and all(line.endswith(" rto_min 800ms") for line in ends)
    assert not any("rto_min" in line for line in lines["b"]), "a relay's forwarding routes hold no socket"
    assert not any("rto_min" in line for lines_ in _routes(None).values() for line in lines_)


def test_a_flows_sockets_find_the_runs_congestion_control_on_their_routes() -> None:
    lines = _routes(0.8, "reno")
    ends = [line for node in ("a", "c") for line in lines[node] if line.startswith("route")]
    assert ends and all(line.endswith(" congctl reno rto_min 800ms") for line in ends)
    assert not any("congctl" in line for line in lines["b"])
    assert not any("congctl" in line for lines_ in _routes(None).values() for line in lines_)


@pytest.mark.parametrize("given", ["0.5", "0", "1001", "fast", "", "nan"])
def test_a_scale_below_one_absurd_or_unknown_is_refused_in_one_line(given: str) -> None:
    with pytest.raises(FedmstError, match=r"^--time-scale .*: give a factor from 1 to 1000, or auto$"):
        validate(RunConfig(time_scale=given))


@pytest.mark.parametrize("given", ["1", "4", "12.5", "1000", "auto"])
def test_a_factor_or_auto_is_taken(given: str) -> None:
    validate(RunConfig(time_scale=given))


def test_auto_slows_a_run_until_the_host_keeps_up_in_every_phase() -> None:
    """The busiest phase decides; each criterion alone can, and a faster host needs less."""
    quiet = PhaseLoad(seconds=1.0, transfers=2, packets=1_000)
    busy = PhaseLoad(seconds=0.1, transfers=400, packets=1_000)
    costs = MEASURED_COSTS["python"]
    scale, why = pick_scale([quiet, busy], costs, cores=2, fastest_mbps=100, ceiling_mbps=2546)
    assert scale == 32 and why == "400 transfers' fixed costs in 0.1 s"
    assert pick_scale([quiet], costs, cores=2, fastest_mbps=100, ceiling_mbps=2546)[0] == 1
    assert pick_scale([busy], costs, cores=8, fastest_mbps=100, ceiling_mbps=2546)[0] == 8  # more cores
    # a host whose links carry more is not taken to be faster; one whose links carry less is slower
    assert costs.on_host(4 * 2546) == costs
    assert pick_scale([busy], costs.on_host(2546 / 4), cores=2, fastest_mbps=100, ceiling_mbps=2546 / 4)[0] == 128
    bulk = PhaseLoad(seconds=0.5, transfers=1, packets=200_000)
    assert pick_scale([bulk], costs, cores=2, fastest_mbps=100, ceiling_mbps=None) == (
        8, "200,000 packets in 0.5 s")
    # the compiled delay line's packets cost less: the same phase needs half the slowing
    fewer = PhaseLoad(seconds=0.5, transfers=1, packets=120_000)
    assert [pick_scale([fewer], MEASURED_COSTS[line], cores=2, fastest_mbps=100, ceiling_mbps=None)[0]
            for line in ("python", "compiled")] == [8, 4]
    assert pick_scale([quiet], costs, cores=2, fastest_mbps=1e9, ceiling_mbps=1000)[0] == 512  # capped
    # weights moved through the agents: a fast line's relays need slowing though its packets would not
    relayed = PhaseLoad(seconds=0.04, transfers=2, packets=1_000, agent_bytes=180e6)
    assert pick_scale([relayed], costs, cores=2, fastest_mbps=100, ceiling_mbps=None) == (
        64, "180 MB through the agents in 0.04 s")


def test_more_cores_do_not_speed_one_relay_up() -> None:
    """A relay's bytes go through one agent on one core: sixteen cores slow a 10 Gbit/s line's
    relay chain as much as two do (measured on a 16-core host: 1.29-1.65 times the prediction at
    the 8 the host's cores alone would have given, docs/time-scale.md)."""
    costs = MEASURED_COSTS["compiled"]
    chain = PhaseLoad(seconds=0.04, transfers=2, packets=1_000, agent_bytes=180e6, busiest_agent_bytes=90e6)
    spread = PhaseLoad(seconds=0.04, transfers=20, packets=1_000, agent_bytes=180e6, busiest_agent_bytes=9e6)
    picks = {cores: (pick_scale([chain], costs, cores=cores, fastest_mbps=100, ceiling_mbps=None)[0],
                     pick_scale([spread], costs, cores=cores, fastest_mbps=100, ceiling_mbps=None)[0])
             for cores in (2, 16)}
    assert picks == {2: (64, 64), 16: (64, 8)}


@pytest.mark.parametrize("delay_s, lines, scale", [(0.000275, True, 4), (0.0005, True, 2), (0.0015, True, 1),
                                                   (0.000275, False, 1)])
def test_short_links_are_slowed_until_the_delay_lines_hold_them(delay_s: float, lines: bool, scale: int) -> None:
    """A link delay below a millisecond on the host's clock is slowed up to it where delay lines
    apply the delays (their lateness is not small beside it); netem or no delay needs nothing."""
    quiet = PhaseLoad(seconds=1.0, transfers=2, packets=1_000, shortest_delay_s=delay_s)
    assert pick_scale([quiet], MEASURED_COSTS["compiled"], cores=2, fastest_mbps=100, ceiling_mbps=None,
                      delay_lines=lines)[0] == scale


def test_a_compare_runs_every_scheduler_at_the_largest_scale_auto_picks_for_any(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's main job with Python delay lines: SPFF alone keeps up in real time, MST's
    shorter phases with the same packet rate per link need 2; both run at 2, so their training is
    counted on one clock. With compiled ones both keep up in real time."""
    from fedmst.net import calibrate, delayline
    from fedmst.run.prepare import Host, resolve

    monkeypatch.setattr(calibrate, "link_ceiling_mbps", lambda *a, **k: 2546.0)  # the development machine's
    monkeypatch.setattr("os.cpu_count", lambda: 2)  # ... and its cores
    config = RunConfig(topology="nsfnet", local_models=8, rounds=5, time_scale="auto")
    host = Host(delay_mode="userspace", netem_available=False)
    monkeypatch.setattr(delayline, "running_kind", lambda: "compiled")
    assert [r.time_scale for r in resolve(config, ["spff", "mst"], host)] == [1.0, 1.0]
    monkeypatch.setattr(delayline, "running_kind", lambda: "python")
    alone = {s: resolve(config, [s], host)[0].time_scale for s in ("spff", "mst")}
    assert alone == {"spff": 1.0, "mst": 2.0}
    spff, mst = resolve(config, ["spff", "mst"], host)
    assert spff.time_scale == mst.time_scale == 2.0
    assert spff.scale_reason == f"as mst: {mst.scale_reason}" and mst.scale_reason.endswith("packets in 0.614 s")
    assert [r.time_scale for r in resolve(replace(config, time_scale="3"), ["spff", "mst"], host)] == [3.0, 3.0]


def test_a_phase_is_host_bound_only_when_slow_with_the_cpus_busy() -> None:
    """The rule: more than 1.2x the prediction while the CPUs were busy for at least 0.9 of a core,
    or CPUs all but saturated whatever the ratio; the scale offered at least doubles, and grows with
    how far off and how busy the phase was."""
    from fedmst.core.timescale import HOST_BOUND_CORES, HOST_BOUND_RATIO, SATURATED

    assert keeps_up_at(1, HOST_BOUND_RATIO, 0.9, cores=2) is None  # at the ratio: not above it
    assert keeps_up_at(1, 0.5, SATURATED, cores=2) == 2  # it beat a prediction on saturated CPUs
    assert keeps_up_at(1, 1.5, HOST_BOUND_CORES / 2 - 0.01, cores=2) is None  # an idle host
    assert keeps_up_at(1, 1.5, HOST_BOUND_CORES / 2, cores=2) == 2
    assert keeps_up_at(1, 1.5, 0.1, cores=16) == 2  # 1.6 cores busy of 16
    assert keeps_up_at(16, 1.6, 0.7, cores=2) == 32
    assert keeps_up_at(1, 20.0, 0.99, cores=2) == 32
    assert [keeps_up_at(4, r, 0.9, cores=2) for r in (1.3, 2.0, 4.0)] == [8, 16, 32]


def test_a_round_names_the_phases_the_host_bound_and_the_run_ends_saying_so() -> None:
    from fedmst.core.plan import Plan, Transfer
    from fedmst.core.tasks import Task
    from fedmst.run.measure import RoundResult, host_bound_line, host_bound_phases

    task = Task("t", "a", ("b",), 1_000)
    plan = Plan("mst", task, (Transfer("broadcast", ("a", "b"), frozenset({0})),
                              Transfer("upload", ("b", "a"), frozenset({0}))))
    res = RoundResult(round=3, time_scale=2.0, seconds={"broadcast": 1.0, "train": 5.0, "upload": 1.5},
                      predicted_s={"broadcast": 1.0, "upload": 1.0}, plans={"broadcast": (plan,), "upload": (plan,)},
                      cpu_busy={"broadcast": 0.9, "train": 1.0, "upload": 0.9})
    cores = os.cpu_count() or 1
    expected = keeps_up_at(2.0, 1.5, 0.9, cores=cores)
    assert res.host_bound == ({"upload": expected} if expected else {})
    if expected:  # on a host with at least one core's worth at 90%: the upload, not the broadcast on time
        (bound,) = host_bound_phases([res])
        assert bound == {"round": 3, "phase": "upload", "measured_over_predicted": 1.5, "cpu_busy": 0.9,
                         "time_scale": 2.0, "keeps_up_at": expected}
        line = host_bound_line([bound])
        assert line and "(round 3 upload 1.50x of their prediction)" in line
        assert f"--time-scale {expected} would keep up" in line
    assert host_bound_line([]) is None


def test_auto_judges_a_run_spread_over_hosts_by_its_busiest_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each host's share (its nodes' agents, the links they receive on) against its own cores: the
    README's job that needs 2 on one 2-core host keeps up on two such hosts; Geant2012 with 16
    local models needs 4 on one and 2 on two or three, and the reason names the host that decided."""
    from fedmst.net import calibrate, delayline
    from fedmst.run.prepare import Host, pick_time_scale, resolve
    from fedmst.run.spread import SpreadHosts, spread_over

    monkeypatch.setattr(calibrate, "link_ceiling_mbps", lambda *a, **k: 2546.0)  # the development machine's
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    monkeypatch.setattr(delayline, "running_kind", lambda: "python")
    host = Host(delay_mode="userspace", netem_available=False)
    picked = {}
    for topology, k in (("nsfnet", 8), ("topozoo/Geant2012", 16)):
        config = RunConfig(topology=topology, local_models=k, rounds=5, time_scale="auto", scheduler="mst")
        (one,) = resolve(config, ["mst"], host)
        picked[topology, 1] = one.time_scale
        for n in (2, 3):
            on = SpreadHosts({f"h{i}": f"node{i}" for i in range(n)}, dict.fromkeys((f"h{i}" for i in range(n)), 2),
                             {}, {})
            spread = spread_over(on, one.graph, one.workload.plans, "a round", seed=1, mtu=config.mtu)
            picked[topology, n], reason = pick_time_scale(config, host, one.graph, one.workload, spread)
            assert reason == f"each of the {n} hosts keeps up" if picked[topology, n] == 1 else (
                reason.startswith("host h") and ", the busiest: " in reason), reason
    assert picked == {("nsfnet", 1): 2, ("nsfnet", 2): 1, ("nsfnet", 3): 1,
                      ("topozoo/Geant2012", 1): 4, ("topozoo/Geant2012", 2): 2, ("topozoo/Geant2012", 3): 2}


def test_the_hosts_shares_of_a_phase_add_up_to_the_whole() -> None:
    """Every weight byte an agent moves and every packet a link's receiver takes is on exactly one
    host; a transfer between two hosts costs its set-up on both."""
    from fedmst.core.placement import place
    from fedmst.core.timescale import phase_load
    from fedmst.core.topology import load_topology
    from fedmst.core.workload import make_tasks, schedule_workload

    g = load_topology("topozoo/Geant2012")
    plans = schedule_workload(g, make_tasks(g, 2, 16, 4_500_000, 4), "mst", wavelengths=40).plans
    hosts = place(g, plans, {"h1": 2, "h2": 2, "h3": 2}).hosts
    for phase in ("broadcast", "upload"):
        whole = phase_load(plans, phase, 1.0, mtu=1500, graph=g)
        shares = [phase_load(plans, phase, 1.0, mtu=1500, graph=g, on={n for n in g if hosts[n] == h})
                  for h in ("h1", "h2", "h3")]
        assert sum(s.agent_bytes for s in shares) == pytest.approx(whole.agent_bytes)
        assert sum(s.packets for s in shares) == pytest.approx(whole.packets)
        assert whole.transfers < sum(s.transfers for s in shares) <= 2 * whole.transfers
        assert max(s.busiest_agent_bytes for s in shares) == whole.busiest_agent_bytes
        assert min(s.shortest_delay_s for s in shares) == whole.shortest_delay_s
