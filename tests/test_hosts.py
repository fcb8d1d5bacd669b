"""One emulation across hosts (issue 47), on one machine: ``scripts/ray-local.sh start 2
--namespaces`` makes two Ray nodes, each in a network namespace of its own standing for a host,
joined by a bridge (the hosts' network); a host agent on each builds its share of a topology,
and the link between them is a VXLAN tunnel through that network. Real Ray, real namespaces,
real tunnels, real TCP through them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import networkx as nx
import psutil
import pytest

from conftest import FEDMST, script_cluster

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="emulations need root")]

ray = pytest.importorskip("ray", reason="the ray extra is not installed (scripts/setup.sh --all installs it)")

from fedmst.hosts.agent import start_host_agents  # noqa: E402
from fedmst.hosts.clock import measure  # noqa: E402
from fedmst.hosts.raycluster import cluster_hosts, connect  # noqa: E402
from fedmst.net.tunnels import VXLAN_OVERHEAD, VXLAN_PORT, HostShare  # noqa: E402
from fedmst.run.results import read_csv  # noqa: E402

SENT = 2_000_000


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """Two namespaced hosts of the script, this process joined to their cluster: (the script's
    folder, host address -> Ray node id); the cluster's address is in the folder's ``address``."""
    folder = tmp_path_factory.mktemp("ray")
    with script_cluster(2, {**os.environ, "RAY_LOCAL_DIR": str(folder)}, "--namespaces") as (address, _):
        (folder / "address").write_text(address)
        connect(address)
        try:
            found = cluster_hosts()
            assert len(found) == 2, found
            yield folder, found
        finally:
            ray.shutdown()


def _end(agents: dict[str, Any]) -> None:
    """Close the host agents and end their actors now (not whenever their handles are collected):
    a later test looks for exactly one host agent on a host."""
    try:
        ray.get([agent.close.remote() for agent in agents.values()])
    finally:
        for agent in agents.values():
            ray.kill(agent)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and [p for p in psutil.process_iter(["name"])
                                               if p.info["name"] == "ray::HostAgent"]:
            time.sleep(0.1)


def _line() -> nx.Graph:
    graph = nx.path_graph(["a", "b", "c", "d"])
    nx.set_edge_attributes(graph, 50.0, "capacity_mbps")
    nx.set_edge_attributes(graph, 0.001, "delay_s")
    return graph


def _in_host(folder: Path, index: int, *argv: str) -> subprocess.CompletedProcess[str]:
    """A command in the namespace of host ``index``, with that host's run records."""
    return subprocess.run(["ip", "netns", "exec", f"fmrayh{index}", "env", f"FEDMST_STATE_DIR={folder}/state{index}",
                           *argv], capture_output=True, text=True, timeout=120)


def _share(hosts: dict[str, str], placement: dict[str, int]) -> dict[str, HostShare]:
    names = list(hosts)
    placed = {node: names[i] for node, i in placement.items()}
    return {host: HostShare(host, placed, {h: h for h in names}) for host in names}


def test_a_link_between_hosts_is_a_tunnel_measured_like_a_veth(hosts: tuple[Path, dict[str, str]]) -> None:
    """a-b on the first host, c-d on the second: 2 MB of TCP from a to d cross b-c through the
    tunnel. Every link direction carries the same frames (its sender's counter, a veth's or the
    tunnel end's, within 1%); the tunnel's overhead is 50 bytes a frame, and what the hosts'
    network carried for the tunnel (UDP to port 4789, counted by iptables in the first host's
    namespace) is the cut link's frames plus that overhead; the nodes have no route to the hosts'
    network; and nothing of the run is left on either host after it closes."""
    folder, found = hosts
    names = list(found)
    shares = _share(found, {"a": 0, "b": 0, "c": 1, "d": 1})
    count = ["iptables", "-t", "raw", "-I", "OUTPUT", "-p", "udp", "--dport", str(VXLAN_PORT)]
    assert _in_host(folder, 0, *count).returncode == 0
    agents = start_host_agents("tuq", found)
    try:
        built = ray.get([agents[h].build.remote(_line(), shares[h], {}) for h in names])
        assert built == [["a", "b"], ["c", "d"]]
        flows = ray.get([agents[h].install_flows.remote({"x": ["a", "b", "c", "d"]}) for h in names])
        assert flows[0] == flows[1]  # both hosts route the same addresses
        flow = flows[0]["x"]
        sink = (f"{sys.executable} -c \"import socket; s = socket.socket(); s.bind(('{flow.dst_addr}', 5001)); "
                f"s.listen(); c, _ = s.accept(); n = 0\nwhile (b := c.recv(65536)): n += len(b)\nprint(n)\" "
                f"> {folder}/sink.out 2>&1 &")
        ray.get(agents[names[1]].cmd.remote("d", sink))
        time.sleep(1.0)
        send = (f"{sys.executable} -c \"import socket; s = socket.create_connection(('{flow.dst_addr}', 5001), "
                f"source_address=('{flow.src_addr}', 0)); s.sendall(b'x' * {SENT}); s.close()\" 2>&1")
        assert ray.get(agents[names[0]].cmd.remote("a", send)).strip() == ""
        deadline = time.monotonic() + 30
        while not (folder / "sink.out").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (folder / "sink.out").read_text().strip() == str(SENT)
        first, second = ray.get([agents[h].meter.remote("counters") for h in names])
        assert set(first) == {("a", "b"), ("b", "a"), ("b", "c")}  # each direction measured by its sender's host
        assert set(second) == {("c", "b"), ("c", "d"), ("d", "c")}
        for hop, n in [(("a", "b"), first), (("b", "c"), first), (("c", "d"), second)]:
            assert n[hop] == pytest.approx(first[("b", "c")], rel=0.01), (hop, first, second)
        assert first[("b", "c")] > SENT
        (overhead,) = ray.get(agents[names[0]].meter.remote("tunnel_overhead")).values()
        frames = overhead // VXLAN_OVERHEAD
        assert overhead == VXLAN_OVERHEAD * frames and frames >= SENT / 1500
        listed = _in_host(folder, 0, "iptables", "-t", "raw", "-L", "OUTPUT", "-v", "-x", "-n").stdout
        packets, ip_bytes = map(int, re.search(rf"^\s*(\d+)\s+(\d+).*udp dpt:{VXLAN_PORT}", listed, re.M).groups())
        assert packets == frames
        assert ip_bytes + 14 * packets == first[("b", "c")] + overhead  # the hosts' network's frames
        unrouted = ray.get(agents[names[0]].cmd.remote("b", f"ip route get {names[1]} 2>&1"))
        assert "unreachable" in unrouted, unrouted
    finally:
        _end(agents)
        _in_host(folder, 0, "iptables", "-t", "raw", "-D", "OUTPUT", "-p", "udp", "--dport", str(VXLAN_PORT))
    for i in range(2):
        assert not re.search(r"fmtuq", _in_host(folder, i, "ip", "link").stdout)
        assert _in_host(folder, i, FEDMST, "clean").stdout.strip() == "nothing to clean"


def test_an_mtu_the_hosts_network_cannot_carry_is_refused_in_one_line(hosts: tuple[Path, dict[str, str]]) -> None:
    """The hosts' network has MTU 9000; an emulated 9000 needs 9050 with VXLAN's 50 bytes: the host
    whose share has a tunnel end refuses before making a link, and leaves nothing."""
    folder, found = hosts
    names = list(found)
    agents = start_host_agents("tur", found)
    try:
        with pytest.raises(ray.exceptions.RayTaskError) as refused:
            ray.get(agents[names[0]].build.remote(_line(), _share(found, {"a": 0, "b": 0, "c": 1, "d": 1})[names[0]],
                                                  {"mtu": 9000}))
        line = str(refused.value.cause)
        assert line == (f"MTU 9000 needs 9050 on the hosts' network (VXLAN adds 50 bytes), but mgmt0 towards "
                        f"{names[1]} has 9000: lower --mtu to 8950 or raise the hosts' MTU"), line
    finally:
        _end(agents)
    assert _in_host(folder, 0, FEDMST, "clean").stdout.strip() == "nothing to clean"


def test_a_killed_host_agent_s_share_is_cleaned_on_its_host(hosts: tuple[Path, dict[str, str]]) -> None:
    """A host agent killed outright (its Ray actor) leaves its run's record and scratch folder on its
    host (its shells end with it: their input closes); ``fedmst clean --ray ADDRESS``, run here, removes
    them there, saying which host; no process or interface of the run is left there, and the other
    host's share closes."""
    folder, found = hosts
    names = list(found)
    shares = _share(found, {"a": 0, "b": 0, "c": 1, "d": 1})
    agents: dict[str, Any] = start_host_agents("tus", found)
    try:
        ray.get([agents[h].build.remote(_line(), shares[h], {}) for h in names])
        ray.kill(agents[names[1]])
        time.sleep(1.0)
        cleaned = subprocess.run([FEDMST, "clean", "--ray", (folder / "address").read_text()], capture_output=True,
                                 text=True, timeout=120)
        assert cleaned.returncode == 0, cleaned.stderr
        said = cleaned.stdout
        assert f"{names[1]}: run tus: removed its scratch folder" in said, said
        assert f"{names[1]}: run tus: removed its record" in said and f"{names[0]}: run tus: live" in said, said
        assert "this host: nothing to clean" in said, said
        assert not list((folder / "state1").glob("*.json"))
        assert not re.search(r"fmtus", _in_host(folder, 1, "ip", "link").stdout)
        assert not [p for p in psutil.process_iter(["cmdline"]) if "mininet:fmtus2" in " ".join(p.info["cmdline"] or [])
                    or "mininet:fmtus3" in " ".join(p.info["cmdline"] or [])]
    finally:
        _end({names[0]: agents[names[0]]})
    assert _in_host(folder, 0, FEDMST, "clean").stdout.strip() == "nothing to clean"


def test_each_host_s_clock_offset_is_estimated_within_its_bound(hosts: tuple[Path, dict[str, str]]) -> None:
    """The namespaced hosts share this kernel's monotonic clock, so their true offset is zero: each
    estimate is within its own error bound of it, and the bound (half the shortest Ray round trip) is
    a few milliseconds at most."""
    _, found = hosts
    agents = start_host_agents("tut", found)
    try:
        for host, agent in agents.items():
            offset = measure(lambda agent=agent: ray.get(agent.clock.remote()))
            assert abs(offset.offset_s) <= offset.error_s + 1e-6, (host, offset)
            assert offset.error_s < 0.005, (host, offset)
    finally:
        _end(agents)


def _rounds(folder: Path) -> list[dict[str, str]]:
    return read_csv(folder / "rounds.csv")


def test_a_compare_across_two_hosts_moves_the_bytes_and_reaches_the_model_of_one_host(
        hosts: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """``fedmst compare --ray ADDRESS`` on NSFNET with 4 local models, its nodes placed on the two
    namespaced hosts, against the same command on this host: the same final global model under both
    schedulers (bit for bit: the same seed, the same in-path sums); under MST, whose plan shares no
    link, the weight bytes of every link direction in every round within 1%; under both, all links'
    weight bytes and all their bytes together within 1% (SPFF's shared links drop and retransmit as
    much spread as on one host, but not the same packets: two runs on one host differ by up to 7% on
    such a direction; and a tunnel's receivers acknowledge bursts with fewer ACKs); the links across
    hosts carried through tunnels, whose overhead is reported; every host's share is gone
    afterwards (clean finds nothing on any host)."""
    import torch

    folder, found = hosts
    address = (folder / "address").read_text()
    common = ["compare", "--topology", "nsfnet", "--local-models", "4", "--rounds", "2", "--save-models",
              "--time-scale", "2"]
    one = subprocess.run([FEDMST, *common, "--out", str(tmp_path / "one")], capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-2000:]
    spread = subprocess.run([FEDMST, *common, "--ray", address, "--out", str(tmp_path / "two")], capture_output=True,
                            text=True, timeout=900)
    assert spread.returncode == 0, spread.stderr[-2000:]
    assert "placed on 2 hosts:" in spread.stdout and "a random balanced placement" in spread.stdout
    for scheduler in ("spff", "mst"):
        a, b = tmp_path / "one" / scheduler, tmp_path / "two" / scheduler
        last = sorted((a / "models").iterdir())[-1].name
        assert torch.equal(torch.load(a / "models" / last / "task0-global.pt"),
                           torch.load(b / "models" / last / "task0-global.pt")), scheduler
        assert [r["accuracy"] for r in _rounds(a)] == [r["accuracy"] for r in _rounds(b)]
        here, there = read_csv(a / "links.csv"), read_csv(b / "links.csv")
        assert [(r["round"], r["src"], r["dst"]) for r in here] == [(r["round"], r["src"], r["dst"]) for r in there]
        for column in ("measured_weight_bytes", "measured_bytes"):
            total = sum(int(r[column]) for r in here)
            assert sum(int(s[column]) for s in there) == pytest.approx(total, rel=0.01), (scheduler, column)
        for r, s in zip(here, there) if scheduler == "mst" else ():
            weights = int(r["measured_weight_bytes"])
            assert int(s["measured_weight_bytes"]) == pytest.approx(weights, rel=0.01, abs=200), (r, s)
        emulated = json.loads((b / "summary.json").read_text())["emulated"]
        assert sorted(emulated["hosts"]) == sorted(found) and emulated["links_across_hosts"]
        assert emulated["tunnel_bytes"] > 0 and emulated["tunnel_overhead_bytes"] > 0
        for host, offset in emulated["clock_offsets"].items():
            assert abs(offset["offset_s"]) <= offset["error_s"] + 1e-6, (host, offset)
    cleaned = subprocess.run([FEDMST, "clean", "--ray", address], capture_output=True, text=True, timeout=120)
    assert cleaned.returncode == 0 and set(cleaned.stdout.split("\n")[:-1]) == {
        "this host: nothing to clean", *(f"{h}: nothing to clean" for h in found)}, cleaned.stdout


CLUSTER_JOBS = """job,submit_s,local_models,rounds,compute_s
a,0,2,2,0.2
b,0.05,2,2,0.2
c,0.1,1,2,0.2
d,1.5,3,1,0.2
"""
"""On NSFNET (one slot a node): a and c start at once, b beside them, d after a gap: each job's
nodes where the cluster's random placement puts them, on either host."""


def test_a_cluster_across_two_hosts_runs_every_job_and_agrees_with_the_simulator(
        hosts: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """``fedmst cluster --mode emulate --ray ADDRESS``: every job of the trace runs its rounds on
    agents of both hosts and finishes. With the training time given (both modes train alike) and at
    time scale 8 (at 4 the two Ray nodes and the coordinator on 2 cores made the spread jobs 10-23%
    slower than one host's in one run of three), the makespan is within 5% of the same trace's on
    one host (it ends with d's single round, which carries d's control latency: +1.5% measured),
    each job's completion time within 15% (its control crosses the hosts' network: a job of one or
    two rounds pays it in its set-up; 2-6% measured), and
    ``--mode simulate`` agrees with the spread emulation as it does with the one-host one (mean JCT
    within 10 points of the one-host emulation's error). links.csv holds the jobs' weights within
    the ACKs and handshakes; summary.json says where it ran; nothing is left on any host."""
    folder, found = hosts
    address = (folder / "address").read_text()
    (tmp_path / "jobs.csv").write_text(CLUSTER_JOBS)
    common = ["cluster", "--topology", "nsfnet", "--slots", "1", "--jobs", str(tmp_path / "jobs.csv"), "--model",
              "mlp", "--epochs", "1", "--scheduler", "mst", "--seed", "3"]
    for name, extra in (("one", ["--time-scale", "8"]), ("two", ["--time-scale", "8", "--ray", address]),
                        ("sim", ["--mode", "simulate"])):
        proc = subprocess.run([FEDMST, *common, *extra, "--out", str(tmp_path / name)], capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, (name, proc.stderr[-2000:])
        assert ("placed on 2 hosts:" in proc.stdout) == (name == "two"), proc.stdout
    jobs = {name: {r["job"]: r for r in read_csv(tmp_path / name / "jobs.csv")} for name in ("one", "two", "sim")}
    assert {n: r["status"] for n, r in jobs["two"].items()} == dict.fromkeys("abcd", "finished")
    for n, r in jobs["two"].items():
        assert float(r["jct_s"]) == pytest.approx(float(jobs["one"][n]["jct_s"]), rel=0.15), (r, jobs["one"][n])
    summary = {name: json.loads((tmp_path / name / "summary.json").read_text()) for name in ("one", "two", "sim")}
    assert summary["two"]["makespan_s"] == pytest.approx(summary["one"]["makespan_s"], rel=0.05)
    error = {name: summary["sim"]["mean_jct_s"] / summary[name]["mean_jct_s"] - 1 for name in ("one", "two")}
    assert abs(error["two"] - error["one"]) <= 0.10, error
    spread_over = summary["two"]["hosts"]
    assert sorted(spread_over["hosts"]) == sorted(found) and all(spread_over["hosts"].values())
    assert spread_over["placement"]["per"] == "over the trace as the simulator runs it"
    assert spread_over["links_across_hosts"] and spread_over["tunnel_bytes"] > 0
    assert summary["one"]["hosts"] == summary["sim"]["hosts"] == {}
    links = read_csv(tmp_path / "two" / "links.csv")
    predicted = sum(int(r["predicted_bytes"]) for r in links)
    weights = sum(int(r["measured_weight_bytes"]) for r in links)
    assert predicted > 0 and abs(weights - predicted) / predicted < 0.15, (weights, predicted)
    cleaned = subprocess.run([FEDMST, "clean", "--ray", address], capture_output=True, text=True, timeout=120)
    assert set(cleaned.stdout.split("\n")[:-1]) == {"this host: nothing to clean",
                                                    *(f"{h}: nothing to clean" for h in found)}, cleaned.stdout


def _host_agent_of(index: int) -> psutil.Process:
    """The host agent running in namespaced host ``index`` (a Ray actor's process there)."""
    netns = os.stat(f"/run/netns/fmrayh{index}").st_ino
    found = [p for p in psutil.process_iter(["name"]) if p.info["name"] == "ray::HostAgent"  # not its fork servers
             and os.stat(f"/proc/{p.pid}/ns/net").st_ino == netns]
    assert len(found) == 1, found
    return found[0]


def test_a_host_lost_in_round_2_ends_the_run_in_one_line_naming_it(hosts: tuple[Path, dict[str, str]],
                                                                   tmp_path: Path) -> None:
    """The second host's agent is killed while round 2 runs: the run ends with exit 1 and one line
    naming that host, well within the stall timeout; the first host's share is taken down by the run,
    and ``fedmst clean --ray`` removes what the dead one left, after which no host has anything."""
    folder, found = hosts
    address, lost = (folder / "address").read_text(), list(found)[1]
    run = subprocess.Popen([FEDMST, "run", "--topology", "nsfnet", "--local-models", "4", "--rounds", "6",
                            "--time-scale", "2", "--ray", address, "--out", str(tmp_path / "run")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and run.poll() is None:
            live = tmp_path / "run" / "live.json"
            if live.exists() and json.loads(live.read_text() or "{}").get("round", 0) >= 2:
                break
            time.sleep(0.2)
        assert run.poll() is None, run.communicate()
        killed = time.monotonic()
        _host_agent_of(1).kill()
        out, err = run.communicate(timeout=120)
        took = time.monotonic() - killed
    finally:
        if run.poll() is None:  # the test failed with the run going: end it, and what it left on the hosts
            run.kill()
            run.wait()
            subprocess.run([FEDMST, "clean", "--ray", address], capture_output=True, timeout=120)
    assert run.returncode == 1, (out[-1000:], err[-1000:])
    (line,) = [ln for ln in err.splitlines() if ln.startswith("fedmst: error: ")]
    assert f"host {lost} was lost" in line, err
    assert took < 10, took  # the stall timeout
    cleaned = subprocess.run([FEDMST, "clean", "--ray", address], capture_output=True, text=True, timeout=120)
    assert cleaned.returncode == 0 and f"{lost}: run " in cleaned.stdout, cleaned.stdout
    again = subprocess.run([FEDMST, "clean", "--ray", address], capture_output=True, text=True, timeout=120)
    assert set(again.stdout.split("\n")[:-1]) == {"this host: nothing to clean",
                                                  *(f"{h}: nothing to clean" for h in found)}, again.stdout


def test_pinned_nodes_run_on_the_hosts_their_file_names(hosts: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """``--pin FILE``: each node the file names runs on the host it names (even two neighbours the
    partition would keep together), the others where the partition puts them; the run says so."""
    folder, found = hosts
    address = (folder / "address").read_text()
    first, second = sorted(found)
    (tmp_path / "pins.csv").write_text(f"node,host\n1,{second}  # apart from its neighbours\n3,{first}\n")
    proc = subprocess.run([FEDMST, "run", "--topology", "small", "--rounds", "1", "--ray", address, "--pin",
                           str(tmp_path / "pins.csv"), "--out", str(tmp_path / "r")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    emulated = json.loads((tmp_path / "r" / "summary.json").read_text())["emulated"]
    placed = emulated["hosts"]
    assert "1" in placed[second] and "3" in placed[first], placed
    assert sorted(n for ns in placed.values() for n in ns) == ["0", "1", "2", "3", "4"]
    # auto judged each host's share; the hosts' network measured before the build, and recorded
    said = " ".join(proc.stdout.split())  # as the console wrapped it
    assert re.search(r"time scale \d+[^(]*\(auto: (each of the 2 hosts keeps up|host \S+, the busiest: )", said), said
    (measured,) = emulated["placement"]["hosts_network_mbps"].values()
    assert measured > 100, emulated["placement"]


def test_a_cut_the_hosts_network_cannot_carry_is_refused_before_anything_is_built(
        hosts: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """Links of 1 Tbit/s cut between two hosts: more than the hosts' network carries (measured
    before the build), one line, no run folder, nothing on any host."""
    folder, found = hosts
    address = (folder / "address").read_text()
    fat = tmp_path / "fat.json"
    fat.write_text(json.dumps({"name": "fat", "capacity_mbps": 1_000_000, "nodes": ["a", "b", "c", "d"],
                               "links": [{"a": u, "b": v, "km": 100} for u, v in ("ab", "bc", "cd")]}))
    proc = subprocess.run([FEDMST, "run", "--topology", str(fat), "--local-models", "2", "--time-scale", "1",
                           "--ray", address, "--out", str(tmp_path / "r")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert re.fullmatch(r"fedmst: error: the links cut between hosts \S+ and \S+ carry up to 1e\+06 Mbit/s each "
                        r"way, more than the \d+ Mbit/s measured between them: pin nodes \(or use fewer hosts, or a "
                        r"larger --time-scale\) so that less crosses", line), line
    assert not (tmp_path / "r").exists()
    cleaned = subprocess.run([FEDMST, "clean", "--ray", address], capture_output=True, text=True, timeout=120)
    assert set(cleaned.stdout.split("\n")[:-1]) == {"this host: nothing to clean",
                                                    *(f"{h}: nothing to clean" for h in found)}, cleaned.stdout


def test_a_sweep_spans_each_point_over_the_hosts_and_measures_what_one_host_does(
        hosts: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """``fedmst sweep --ray ADDRESS --hosts 2``: every point spread over both hosts, one after
    another, sweep.csv naming them; the same learning and the same bytes on the links (within 1%)
    as the same sweep on this host."""
    folder, found = hosts
    address = (folder / "address").read_text()
    common = ["sweep", "--topology", "nsfnet", "--local-models", "2,4", "--seeds", "1", "--tasks", "1",
              "--rounds", "1", "--time-scale", "2"]
    one = subprocess.run([FEDMST, *common, "--out", str(tmp_path / "one")], capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-2000:]
    spread = subprocess.run([FEDMST, *common, "--ray", address, "--hosts", "2", "--out", str(tmp_path / "two")],
                            capture_output=True, text=True, timeout=900)
    assert spread.returncode == 0, spread.stderr[-2000:]
    here, there = read_csv(tmp_path / "one" / "sweep.csv"), read_csv(tmp_path / "two" / "sweep.csv")
    assert len(here) == len(there) == 4
    assert {r["ray_node"] for r in here} == {""} and {r["ray_node"] for r in there} == {"+".join(found)}
    for r, s in zip(here, there):
        assert (r["scheduler"], r["local_models"], r["accuracy"]) == (s["scheduler"], s["local_models"], s["accuracy"])
        assert float(s["run_link_bytes_measured"]) == pytest.approx(float(r["run_link_bytes_measured"]), rel=0.01)
    for run in (tmp_path / "two").glob("k*/*/summary.json"):
        assert sorted(json.loads(run.read_text())["emulated"]["hosts"]) == sorted(found), run


@pytest.mark.parametrize("extra, said", [
    (["--hosts", "3"], "--hosts 3: the Ray cluster at {address} has 2 host(s) other than this one offering an "
                       "emulation slot"),
    (["--pin", "{pins}"], "pin file {pins}: host 10.9.9.9 (for node 2) is not one of the Ray cluster's hosts "
                          "offering an emulation slot: {hosts}"),
    (["--topology", "spine-leaf:2,2,1"], "--ray: a fabric with all-optical nodes (spine-leaf:2,2,1) cannot span hosts "
                                         "yet; run it on one host"),
])
def test_what_the_cluster_cannot_hold_is_refused_before_anything_is_built(
        hosts: tuple[Path, dict[str, str]], tmp_path: Path, extra: list[str], said: str) -> None:
    folder, found = hosts
    address, pins = (folder / "address").read_text(), tmp_path / "pins.csv"
    pins.write_text("2,10.9.9.9\n")
    proc = subprocess.run([FEDMST, "run", "--topology", "small", "--ray", address,
                           *[x.format(pins=pins) for x in extra], "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"fedmst: error: {said.format(address=address, pins=pins, hosts=', '.join(found))}"]
    assert not (tmp_path / "r").exists()
    cleaned = subprocess.run([FEDMST, "clean", "--ray", address], capture_output=True, text=True, timeout=120)
    assert set(cleaned.stdout.split("\n")[:-1]) == {"this host: nothing to clean",
                                                    *(f"{h}: nothing to clean" for h in found)}, cleaned.stdout
