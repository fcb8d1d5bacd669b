"""How the emulation fails: missing tools, offloads that stay on, Mininet giving up with exit(1).

Each failure must be one EmulationError line that says why, raised before anything is created or
after everything created is gone. Most tests here build no network: they fake the tool or the
Mininet function that fails. Those marked ``integration`` start real Mininet hosts.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

from fedmst.core.topology import load_topology
from fedmst.errors import EmulationError
from fedmst.net import emulation
from fedmst.net import shell as shell_module
from fedmst.net.emulation import Capabilities, Emulation, require_tools
from fedmst.net.shell import HostShell
from fedmst.workers import docker

ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="Mininet needs root")
REPO = Path(__file__).resolve().parents[1]


def _path_without(bin_: Path, missing: str) -> str:
    """A PATH holding every tool an emulation may run except ``missing``."""
    bin_.mkdir()
    for tool, _ in [*emulation._TOOLS, ("iptables", ""), ("nsenter", "")]:
        found = shutil.which(tool)
        if tool != missing and found:
            (bin_ / tool).symlink_to(found)
    return str(bin_)


@pytest.mark.parametrize("tool,package,kw", [
    *((tool, package, {}) for tool, package in emulation._TOOLS),
    ("iptables", "iptables", {"delay_mode": "userspace"}),
    ("nsenter", "util-linux", {"join_netns": True}),
])
def test_require_tools_names_the_missing_tool_and_its_package(tool: str, package: str, kw: dict,
                                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("PATH", _path_without(tmp_path / "all", missing=""))
    require_tools(**kw)  # everything there: passes
    monkeypatch.setenv("PATH", _path_without(tmp_path / "lacking", missing=tool))
    with pytest.raises(EmulationError) as err:
        require_tools(**kw)
    assert str(err.value) == f"{tool} not found on PATH: install Debian's {package} package"


def test_ifconfig_is_checked_because_mininet_exits_without_it() -> None:
    """Mininet's Node.setup demands exactly these; require_tools must cover them."""
    from mininet.node import Node

    source = Path(sys.modules[Node.__module__].__file__).read_text()  # type: ignore[arg-type]
    assert "pathCheck( 'mnexec', 'ifconfig', moduleName='Mininet')" in source
    assert {"mnexec", "ifconfig"} <= {tool for tool, _ in emulation._TOOLS}


# segmentation offloads ---------------------------------------------------------------------------
def _fake_shell(outputs: dict[str, str]) -> HostShell:
    """Node a's host shell, with no host, answering the ethtool script of ``offloads_off`` with
    ``outputs`` (per interface), as the shell would: one report after the other."""
    shell = HostShell("a", object(), Path("unused"))  # script is replaced: no command file is written
    shell.script = lambda lines: "".join(  # type: ignore[method-assign]
        f"{outputs[intf]}{shell_module._END}\r\n" for intf in re.findall(r"ethtool -K (\S+)", "\n".join(lines)))
    return shell


OFF = "rc=0\ntcp-segmentation-offload: off\ngeneric-segmentation-offload: off\ngeneric-receive-offload: off\n"


def test_offloads_that_are_off_pass() -> None:
    _fake_shell({"fm0-eth0": OFF, "fm0-eth1": OFF}).offloads_off(["fm0-eth0", "fm0-eth1"])


@pytest.mark.parametrize("output,reason", [
    ("netlink error: Operation not supported\nrc=92\n" + OFF[5:], "netlink error: Operation not supported"),
    ("rc=1\n", "ethtool exited with code 1"),
    (OFF.replace("generic-receive-offload: off", "generic-receive-offload: on"), "generic-receive-offload is still on"),
])
def test_an_offload_that_stays_on_is_one_line_naming_node_and_interface(output: str, reason: str) -> None:
    shell = _fake_shell({"fm0-eth0": OFF, "fm0-eth1": output})
    with pytest.raises(EmulationError) as err:
        shell.offloads_off(["fm0-eth0", "fm0-eth1"])
    assert str(err.value) == f"switching off segmentation offloads on node a, interface fm0-eth1, failed: {reason}"


def _failing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tool: str, when: str, error: str, end: str) -> None:
    """Put a ``tool`` first on PATH that prints ``error`` and fails when the shell test ``when``
    (closed by ``end``) holds, and runs the real one otherwise."""
    fake = tmp_path / tool
    fake.write_text(f'#!/bin/sh\n{when} echo "{error}" >&2; exit 1{end}\nexec {shutil.which(tool)} "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")


@ROOT
@pytest.mark.integration
def test_a_failing_ethtool_stops_the_build_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              clean_host: None) -> None:
    """A real build on line3 whose hosts find an ethtool that cannot switch tso off."""
    _failing(monkeypatch, tmp_path, "ethtool", 'case " $* " in *" tso off "*)',
             "netlink error: Operation not permitted", ";; esac")
    with pytest.raises(EmulationError) as err:
        with Emulation(load_topology("line3"), delay_mode="off"):
            pass
    assert re.fullmatch(r"switching off segmentation offloads on node a, interface fm[a-z]{3}0-eth0, failed: "
                        "netlink error: Operation not permitted", str(err.value)), err.value


# Mininet giving up ------------------------------------------------------------------------------
@pytest.fixture
def no_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """No netem probe: these tests must not touch the host's network namespace."""
    monkeypatch.setattr(emulation, "probe_capabilities", lambda: Capabilities(netem=False))


def _two_nodes() -> nx.Graph:
    from fedmst.core.topology import validate_topology

    g = nx.Graph(name="two")
    g.add_edge("a", "b", capacity_mbps=100.0, delay_s=0.001, length_km=None)
    return validate_topology(g, "test")


@ROOT
def test_mininet_exiting_for_a_missing_tool_is_one_emulation_error(monkeypatch: pytest.MonkeyPatch, no_probe: None,
                                                                   clean_host: None) -> None:
    """Mininet's own check (Node.setup -> pathCheck -> exit(1)) fails as if ifconfig were missing."""
    import mininet.moduledeps
    from mininet.node import Host

    real = mininet.moduledeps.quietRun
    monkeypatch.setattr(mininet.moduledeps, "quietRun", lambda cmd, **kw: "" if cmd == "which ifconfig"
                        else real(cmd, **kw))
    monkeypatch.setattr(Host, "isSetup", False)  # so that Mininet runs its check again
    with pytest.raises(EmulationError) as err:
        with Emulation(_two_nodes(), delay_mode="off"):
            pass
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("Mininet gave up: Cannot find required executable ifconfig."), message


@ROOT
@pytest.mark.integration
def test_links_failing_with_hosts_built_tears_them_down(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                        no_probe: None, clean_host: None) -> None:
    """The one ``ip -batch`` that makes every veth pair fails after both hosts exist: their
    shells and namespaces go, and the error is ip's own line."""
    _failing(monkeypatch, tmp_path, "ip", 'if [ "$*" = "-batch -" ]; then', "RTNETLINK answers: File exists", "; fi")
    emu = Emulation(_two_nodes(), delay_mode="off")
    with pytest.raises(EmulationError) as err:
        with emu:
            pass
    assert str(err.value) == "making the links failed: RTNETLINK answers: File exists"
    assert emu._state is None and not emu._processes.procs and not emu._shells


@ROOT
def test_a_node_whose_namespace_process_is_gone_is_refused_before_anything_starts(
        no_probe: None, clean_host: None) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    with pytest.raises(EmulationError, match=f"node a: process {gone.pid}, whose network namespace"):
        with Emulation(_two_nodes(), delay_mode="off", netns={"a": gone.pid}):
            pass


def test_netns_naming_an_unknown_node_is_refused(no_probe: None) -> None:
    with pytest.raises(EmulationError, match="netns names node.s. z, not in the topology"):
        Emulation(_two_nodes(), delay_mode="off", netns={"z": 1})


@ROOT
def test_track_outside_a_running_emulation_is_refused(no_probe: None) -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    with pytest.raises(EmulationError, match="not running"):
        Emulation(_two_nodes(), delay_mode="off").track(proc)


# layering and test hygiene ------------------------------------------------------------------------
def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_the_network_layer_imports_no_worker_backend() -> None:
    proc = _python("import sys, fedmst.net.emulation, fedmst.net.cleanup, fedmst.net.delayline\n"
                   "print(sorted(m for m in sys.modules if m.startswith('fedmst.workers')))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_collecting_the_delay_mode_tests_probes_nothing() -> None:
    """Importing the module must not probe the kernel (probing creates an interface)."""
    proc = _python("import sys; sys.path.insert(0, 'tests')\n"
                   "import fedmst.net.emulation as e\n"
                   "def probed(): raise SystemExit('probed at import')\n"
                   "e.probe_capabilities = probed\n"
                   "import test_delay_modes")
    assert proc.returncode == 0, proc.stderr


# docker's share of fedmst clean ------------------------------------------------------------------
def test_clean_dead_removes_only_containers_of_dead_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run abc's coordinator is gone; run pqr's record is dead although its container's owner PID
    runs (a later process was given it); run xyz is live."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    removed: list[list[str]] = []
    monkeypatch.setattr(docker, "labelled", lambda: [("fedmst-fmabc0", gone.pid), ("fedmst-fmxyz1", os.getppid()),
                                                    ("fedmst-fmabc2", gone.pid), ("fedmst-fmpqr3", os.getppid())])
    monkeypatch.setattr(docker, "live_runs", lambda: {"xyz"})
    monkeypatch.setattr(docker, "remove_names", lambda names: removed.append(list(names)))
    assert docker.clean_dead() == ["run abc: removed container fedmst-fmabc0",
                                   "run abc: removed container fedmst-fmabc2",
                                   "run pqr: removed container fedmst-fmpqr3"]
    assert removed == [["fedmst-fmabc0", "fedmst-fmabc2", "fedmst-fmpqr3"]]


@ROOT
@pytest.mark.integration
def test_a_node_with_forty_links_is_built_whole(no_probe: None, clean_host: None) -> None:
    """A hub's per-interface commands exceed the 4,095 characters a terminal line holds; they
    run from a script, so every interface gets its offloads switched off, htb and its address."""
    g = nx.star_graph(40)
    nx.relabel_nodes(g, {i: f"n{i}" for i in g}, copy=False)
    nx.set_edge_attributes(g, 100.0, "capacity_mbps")
    nx.set_edge_attributes(g, 0.0, "delay_s")
    with Emulation(g, delay_mode="off") as emu:
        hub = emu.interfaces("n0")
        assert len(hub) == 40
        offloads = emu.cmd("n0", f"ethtool -k {hub[-1]}")
        shaped = emu.cmd("n0", f"tc class show dev {hub[-1]}")
        addresses = emu.cmd("n0", "ip -o -4 addr show").count("inet 10.")
    assert "tcp-segmentation-offload: off" in offloads and "rate 100Mbit" in shaped
    assert addresses == 40


def test_a_topology_whose_interface_names_linux_cannot_take_is_refused_before_anything_is_built() -> None:
    """Host fmabc1000's 1000th port would be fmabc1000-eth999, 16 characters: refused in one line."""
    star = nx.relabel_nodes(nx.star_graph(1000), str)
    nx.set_edge_attributes(star, 10.0, "capacity_mbps")
    with pytest.raises(EmulationError, match=r"1001 nodes, one with 1000 links, make interface names like "
                                             r"fmxxx1000-eth999: longer than Linux's 15 characters"):
        Emulation(star, capabilities=Capabilities(netem=False))
