"""Bad input through the real ``fedmst`` command: one clear line, exit 1, nothing left behind.

Every case runs the command in a fresh process (:func:`conftest.fedmst_cli`; the installed
console script itself where the case changes the environment or runs it under another command)
and checks that it fails with a single ``fedmst: error: ...`` line naming the input at fault,
and that it leaves no process, no emulated interface in the root namespace and no new clean-up
state file, and never touches results already in the output folder.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from conftest import FEDMST, fedmst_cli, leftovers, missing_bpf
from fedmst.net.congestion import BPF_CONGESTION_CONTROLS

pytestmark = pytest.mark.host



def fedmst(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
           prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Run the real command (after ``prefix``) in ``tmp_path`` and check that it left nothing behind."""
    assert not leftovers(), "host not clean before the test"
    if env or prefix:
        full_env = {**os.environ, "COLUMNS": "60", **(env or {})}  # narrow: a message must not wrap
        proc = subprocess.run([*prefix, FEDMST, *args], cwd=tmp_path, env=full_env, text=True,
                              capture_output=True, timeout=120)
    else:
        proc = fedmst_cli(*args, cwd=tmp_path, timeout=120, columns=60)
    left = leftovers()
    assert not left, f"left behind: {left}\nstderr: {proc.stderr}"
    return proc


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a fedmst error (exit 1)."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    assert len(lines) == 1, f"expected one stderr line, got {len(lines)}:\n{proc.stderr}"
    assert lines[0].startswith("fedmst: error: "), lines[0]
    assert "Traceback" not in proc.stderr
    return lines[0]


def _write_topology(tmp_path: Path, name: str, spec: object) -> str:
    path = tmp_path / name
    path.write_text(spec if isinstance(spec, str) else json.dumps(spec))
    return name


def _line(capacity: float) -> dict[str, object]:
    return {"nodes": ["a", "b", "c"],
            "links": [{"a": "a", "b": "b", "capacity_mbps": 10}, {"a": "b", "b": "c", "capacity_mbps": capacity}]}


# Each case: (id, setup(tmp_path) -> (extra args, env), fragments the error line must contain).
Setup = Callable[[Path], tuple[list[str], dict[str, str]]]


def _closed_port() -> int:
    """A local port where nothing listens (bound once, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _args(*args: str) -> Setup:
    return lambda tmp_path: (list(args), {})


def _beyond_any_host(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """30 tasks x 15 local models of mlp-xl on 3x64x64 inputs (245 MB each): 170 GB of models at least."""
    import numpy as np

    x = np.zeros((176, 3, 64, 64), dtype=np.float32)
    np.savez(tmp_path / "wide.npz", x_train=x[:160], y_train=np.arange(160) % 4, x_test=x[160:],
             y_test=np.arange(16) % 4)
    return ["--topology", "nsfnet", "--tasks", "30", "--local-models", "15", "--model", "mlp-xl", "--dataset",
            str(tmp_path / "wide.npz")], {}


NO_USERS = '{"users": [], "num_samples": [], "user_data": {}}'


def _leaf(tmp_path: Path, text: str) -> Path:
    """A LEAF folder whose one JSON file holds ``text``."""
    (tmp_path / "leaf").mkdir()
    (tmp_path / "leaf" / "all_data_0.json").write_text(text)
    return tmp_path / "leaf"


def _factory_raises(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    (tmp_path / "badmodels.py").write_text(
        "def make(num_classes, input_shape):\n    raise RuntimeError('factory [/is] broken\\non purpose')\n"
    )
    return ["--model", "badmodels:make"], {"PYTHONPATH": os.pathsep.join(filter(None, (str(tmp_path),
                                                                        os.environ.get("PYTHONPATH"))))}


def _without_torchvision(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """``--model torchvision:resnet18`` where torchvision does not import (whether or not it is installed)."""
    (tmp_path / "torchvision.py").write_text("raise ImportError('torchvision hidden by the test')\n")
    return ["--model", "torchvision:resnet18"], {"PYTHONPATH": os.pathsep.join(filter(None, (
        str(tmp_path), os.environ.get("PYTHONPATH"))))}


CASES: list[tuple[str, Setup, tuple[str, ...]]] = [
    ("unknown-topology", _args("--topology", "no-such-topology"), ("no-such-topology", "unknown topology")),
    ("malformed-json",
     lambda p: (["--topology", _write_topology(p, "broken.json", '{"links": [')], {}),
     ("broken.json", "malformed JSON")),
    ("disconnected",
     lambda p: (["--topology", _write_topology(p, "split.json", {
         "capacity_mbps": 10, "links": [{"a": "a", "b": "b"}, {"a": "c", "b": "d"}]})], {}),
     ("split.json", "disconnected")),
    ("zero-capacity",
     lambda p: (["--topology", _write_topology(p, "zero.json", _line(0))], {}),
     ("zero.json", "link b-c", "capacity", "not positive")),
    ("negative-capacity",
     lambda p: (["--topology", _write_topology(p, "negative.json", _line(-5))], {}),
     ("negative.json", "link b-c", "capacity", "not positive")),
    ("spine-leaf-one-leaf", _args("--topology", "spine-leaf:4,1"), ("spine-leaf:4,1", "at least 1 spine and 2 leaves")),
    ("ots-without-ots-wavelengths",
     _args("--topology", "spine-leaf:2,2,1", "--optical", "ots", "--ots-wavelengths", "0"),
     ("--optical ots gives timeslots", "--ots-wavelengths 1 or more")),
    ("global-node-optical", _args("--topology", "spine-leaf:2,2,1", "--global-node", "s0"),
     ("node s0 is all-optical", "cannot hold G or a local model")),
    ("unknown-global-node", _args("--topology", "line3", "--global-node", "zz"), ("'zz'", "line3")),
    ("unknown-local-node", _args("--topology", "line3", "-k", "2", "--local-nodes", "a,qq"), ("'qq'", "line3")),
    ("local-nodes-count", _args("--topology", "line3", "-k", "3", "--local-nodes", "a,b"),
     ("2 local nodes", "3 local models")),
    ("too-many-local-models", _args("--topology", "line3", "-k", "200"), ("200", "local models")),
    ("unknown-model", _args("--model", "no-such-model"), ("'no-such-model'", "unknown model")),
    ("partition-alpha-zero", _args("--partition", "dirichlet:0"),
     ("--partition dirichlet:0: give dirichlet:ALPHA > 0",)),
    ("partition-unknown", _args("--partition", "zipf"), ("--partition zipf: unknown partition 'zipf'",)),
    ("partition-more-classes", _args("--partition", "classes:20"), ("--partition classes:20: the dataset has 10 "
                                                                     "classes",)),
    ("partition-natural-without-users", _args("--partition", "natural"), ("--partition natural: this dataset has no "
                                                                          "natural ids (users)",)),
    ("leaf-missing", _args("--dataset", "leaf:femnist:/nonexistent-leaf"),
     ("dataset 'leaf:femnist:/nonexistent-leaf': no folder /nonexistent-leaf; put LEAF's femnist there",)),
    ("leaf-no-users", lambda p: (["--dataset", "leaf:femnist:" + str(_leaf(p, NO_USERS))], {}),
     ("hold no user with samples",)),
    ("model-beyond-container-memory",
     _args("--topology", "line3", "--workers", "docker", "--memory", "64m", "--model", "mlp-xl"),
     ("--memory 64m: node ", "'s agent holds at least", "more than its container may use")),
    ("models-beyond-host-memory", _beyond_any_host, ("the agents would hold at least", "this host has available")),
    ("leaf-other-format", lambda p: (["--dataset", f"leaf:shakespeare:{_leaf(p, '[1, 2]')}"], {}),
     ("is not in LEAF's format",)),
    ("factory-raises", _factory_raises, ("badmodels:make", "RuntimeError", "factory [/is] broken on purpose")),
    ("missing-module", _args("--model", "no_such_pkg.mod:make"), ("no_such_pkg", "cannot import")),
    ("unwritable-out", _args("--out", "/proc/fedmst-out"), ("/proc/fedmst-out", "cannot write")),
    ("placement-with-tasks", _args("--topology", "line3", "--tasks", "2", "--global-node", "a"),
     ("--global-node", "--tasks")),
    ("negative-cpus", _args("--workers", "docker", "--cpus", "-1"), ("--cpus -1", "positive")),
    ("cpus-unknown-node", _args("--workers", "docker", "--cpus", "zz=1"),
     ("--cpus zz=1", "'zz'", "not in the topology")),
    ("tiny-memory", _args("--workers", "docker", "--memory", "1k"), ("--memory 1k", "at least 6m")),
    ("limits-without-docker", _args("--cpus", "1"), ("--cpus", "--workers docker")),
    ("hosts-without-ray", _args("--hosts", "3"), ("--hosts 3", "needs --ray ADDRESS")),
    ("ray-with-pcap", _args("--ray", "127.0.0.1:1", "--pcap", "all"), ("--pcap: cannot span hosts yet",)),
    ("ray-nothing-there", lambda p: (["--ray", f"127.0.0.1:{_closed_port()}"], {}),
     ("--ray 127.0.0.1:", "no Ray cluster there (nothing accepts a connection: Connection refused)")),
    ("fail-link-not-a-link", _args("--fail-link", "a-c@1"), ("--fail-link a-c@1", "'a-c' is not a link", "line3")),
    ("fail-link-bad-round", _args("--fail-link", "a-b@5"), ("--fail-link a-b@5", "round '5' is not one of 1..1")),
    ("kill-worker-unknown-node", _args("--kill-worker", "zz@1"), ("--kill-worker zz@1", "'zz'", "line3")),
    ("slow-node-unknown", _args("--slow-node", "zz:2"), ("--slow-node zz:2", "'zz'", "line3")),
    ("slow-node-factor", _args("--slow-node", "a:0.5"), ("--slow-node a:0.5", "at least 1")),
    ("negative-deadline", _args("--deadline", "-1"), ("--deadline -1", "positive")),
    ("zero-local-models", _args("-k", "0"), ("--local-models 0", "1 or more")),
    ("negative-seed", _args("--seed", "-3"), ("--seed -3", "0 or more")),
    ("loss-without-delay", _args("--delay-mode", "off", "--loss", "0.1"), ("--loss", "--delay-mode off")),
    ("unknown-scheduler", _args("--scheduler", "no-such-sched"), ("'no-such-sched'", "spff", "mst")),
    ("scheduler-module-missing", _args("--scheduler", "no_such_pkg.mod:Sched"), ("no_such_pkg", "cannot import")),
    ("config-unknown-key", lambda p: (["--config", _write_topology(p, "exp.toml", "local_modles = 3\n")], {}),
     ("exp.toml", "unknown option 'local_modles'")),
    ("traffic-unknown-node", _args("--traffic", "a-zz:10mbit"), ("--traffic a-zz:10mbit", "'a-zz'", "line3")),
    ("traffic-negative-rate", _args("--traffic", "a-c:-5mbit"), ("--traffic a-c:-5mbit", "positive rate")),
    ("workload-missing", _args("--workload", "nope.json"), ("--workload nope.json", "cannot read it")),
    ("workload-unknown-node", lambda p: (["--workload", _write_topology(
        p, "w.json", '{"tasks": [{"name": "A", "global_node": "a", "local_nodes": ["zz"]}]}')], {}),
     ("w.json", "task A", "'zz'")),
    ("workload-rounds-in-lockstep", lambda p: (["--workload", _write_topology(
        p, "w.json", '{"tasks": [{"name": "A", "global_node": "a", "local_nodes": ["c"], "rounds": 3}]}')], {}),
     ("task(s) A", "--clock independent")),
    ("interleave-in-lockstep", _args("--interleave", "cassini"), ("--interleave cassini", "--clock independent")),
    ("link-trace-not-a-link", lambda p: (["--link-trace", _write_topology(
        p, "t.json", '{"changes": [{"at_s": 1, "a": "a", "b": "c", "capacity_mbps": 5}]}')], {}),
     ("t.json", "a-c is not a link")),
    ("unknown-congestion-control", _args("--congestion-control", "vegas"),
     ("--congestion-control vegas", "dctcp", "mltcp", "PATH.bpf.c")),
    # what the user typed is quoted literally: no emoji code or markup in it applies
    ("congestion-control-emoji-code", _args("--congestion-control", "/x:rocket:"), ("/x:rocket:",)),
    ("scheduler-markup", _args("--scheduler", "[red]x[/red]:y"), ("[red]x[/red]:y",)),
    ("ecn-k-not-positive", _args("--ecn-k", "0"), ("--ecn-k 0", "positive")),
    ("negative-reconfig", _args("--reconfig-ms", "-1"), ("--reconfig-ms -1", "0 or more")),
    ("infinite-reconfig", _args("--reconfig-ms", "inf"), ("--reconfig-ms inf", "finite")),
    ("zero-wavelengths", _args("--ocs-wavelengths", "0", "--ots-wavelengths", "0"),
     ("--ocs-wavelengths 0 with --ots-wavelengths 0", "at least one wavelength")),
    ("zero-timeslots", _args("--timeslots", "0"), ("--timeslots 0", "1 or more")),
    ("guard-not-below-slot", _args("--timeslot-us", "100", "--guard-us", "100"),
     ("--guard-us (100) must be below --timeslot-us (100)",)),
    ("unknown-optical-policy", _args("--optical", "mesh"),
     ("unknown optical policy 'mesh'", "choose one of: joint, ocs, ots, size")),
    ("device-without-cuda", _args("--device", "cuda"), ("--device cuda", "this host has no CUDA device")),
    ("device-malformed", _args("--device", "gpu"), ("--device gpu", "give auto, cpu, cuda or cuda:N")),
    ("host-trainer-with-ray", _args("--host-trainer", "--ray", "127.0.0.1:1"), ("--host-trainer", "--ray")),
    ("torchvision-not-installed", _without_torchvision,
     ("'torchvision:resnet18' needs torchvision", "scripts/setup.sh --vision")),
    ("download-with-client", _args("--client", "quickstart:client_fn", "--download"),
     ("--download fetches a torchvision --dataset", "--client")),
    ("download-not-torchvision", _args("--download"), ("--download fetches torchvision:NAME:ROOT datasets",)),
    ("link-trace-delay-without-delay", lambda p: (["--delay-mode", "off", "--link-trace", _write_topology(
        p, "t.json", '{"changes": [{"at_s": 1, "a": "a", "b": "b", "delay_ms": 5}]}')], {}),
     ("t.json", "--delay-mode off")),
]

BASE = {"--topology": "line3", "-k": "2", "--rounds": "1", "--model": "mlp", "--seed": "1"}


def _command(command: str, extra: list[str], out: str) -> list[str]:
    given = set(extra[::2])
    base = [x for k, v in BASE.items() if k not in given for x in (k, v)]
    if "--out" not in given:
        base += ["--out", out]
    return [command, *base, *extra]


COMPARE_CASES = {"unknown-topology", "zero-capacity", "unknown-local-node", "too-many-local-models",
                 "unknown-model", "factory-raises", "unwritable-out", "negative-cpus", "zero-local-models",
                 "config-unknown-key"}


@pytest.mark.parametrize("command,setup,fragments", [
    pytest.param(command, s, f, id=f"{command}-{i}")
    for command in ("run", "compare") for i, s, f in CASES if command == "run" or i in COMPARE_CASES
])
def test_bad_input(tmp_path: Path, command: str, setup: Setup, fragments: tuple[str, ...]) -> None:
    extra, env = setup(tmp_path)
    line = error_line(fedmst(tmp_path, *_command(command, extra, "out"), env=env))
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} missing from {line!r}"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def _jobs(name: str, text: str) -> Setup:
    return lambda p: (["--jobs", _write_topology(p, name, text)], {})


CLUSTER_CASES: list[tuple[str, Setup, tuple[str, ...]]] = [
    ("negative-slots", _args("--slots", "-1"), ("--slots -1", "0 or more")),
    ("no-slot", _args("--slots", "0"), ("line3", "no node has a slot")),
    ("negative-node-slots", lambda p: (["--topology", _write_topology(p, "t.json", {
        "capacity_mbps": 10, "nodes": [{"id": "a", "slots": -2}, "b"], "links": [{"a": "a", "b": "b"}]})], {}),
     ("t.json", "node a: slots -2")),
    ("fractional-node-slots", lambda p: (["--topology", _write_topology(p, "t.json", {
        "capacity_mbps": 10, "nodes": [{"id": "a", "slots": 1.5}, "b"], "links": [{"a": "a", "b": "b"}]})], {}),
     ("t.json", "node a: slots 1.5")),
    ("no-jobs", lambda p: ([], {}), ("needs --jobs",)),
    ("jobs-missing-column", _jobs("j.csv", "job,submit_s,local_models\na,0,1\n"), ("--jobs j.csv", "rounds")),
    ("jobs-negative-submit", _jobs("j.csv", "job,submit_s,local_models,rounds\na,-1,1,1\n"),
     ("--jobs j.csv", "submit_s")),
    ("jobs-zero-local-models", _jobs("j.csv", "job,submit_s,local_models,rounds\na,0,0,1\n"),
     ("--jobs j.csv", "local_models")),
    ("jobs-zero-rounds", _jobs("j.jsonl", '{"job": "a", "submit_s": 0, "local_models": 1, "rounds": 0}\n'),
     ("--jobs j.jsonl", "rounds")),
    ("jobs-unknown-model", _jobs("j.csv", "job,submit_s,local_models,rounds,model\na,0,1,1,no-such-model\n"),
     ("job a", "'no-such-model'")),
    ("poisson-malformed", _args("--jobs", "poisson:60"), ("--jobs poisson:60", "poisson:RATE,N")),
    ("poisson-emoji-code", _args("--jobs", "poisson:abc"), ("--jobs poisson:abc",)),
    ("philly-not-philly", _jobs("p.json", '{"jobs": []}'), ("--jobs philly:p.json", "Philly")),
    ("helios-not-helios", _jobs("h.csv", "id,gpus\n1,2\n"), ("--jobs helios:h.csv", "Helios")),
    ("time-compress-zero", _args("--jobs", "poisson:60,3", "--time-compress", "0"),
     ("--time-compress 0", "positive")),
    ("unknown-placement", _args("--jobs", "poisson:60,3", "--placement", "nope"), ("placement 'nope'", "random")),
    ("policy-unknown-order", _args("--policies", "fifo/random,nope/pack"), ("queue order 'nope'", "fifo, las, sjf")),
    ("policy-four-parts", _args("--policies", "fifo/random/las/x"), ("--policies fifo/random/las/x", "4 parts")),
    ("policy-unknown-preemption", _args("--policies", "fifo/random/nope"), ("preemption 'nope'", "las, network, none")),
    ("policies-empty", _args("--jobs", "poisson:60,3", "--policies", ""), ("--policies is empty", "fifo/random")),
    ("policies-blank", _args("--jobs", "poisson:60,3", "--policies", " "), ("--policies is empty",)),
    ("unknown-preemption", _args("--jobs", "poisson:60,3", "--preempt", "nope"), ("preemption 'nope'", "las")),
    ("preemption-not-a-preemption", _args("--jobs", "poisson:60,3", "--preempt", "fedmst.core.cluster.policies:Fifo"),
     ("fedmst.core.cluster.policies:Fifo", "subclass of fedmst.api.Preemption")),
    ("cluster-ots-without-ots-wavelengths",
     _args("--topology", "spine-leaf:2,2,1", "--optical", "ots", "--ots-wavelengths", "0"),
     ("--optical ots gives timeslots", "--ots-wavelengths 1 or more")),
    ("cluster-unknown-optical-policy", _args("--optical", "mesh"), ("unknown optical policy 'mesh'", "joint, ocs")),
]


@pytest.mark.parametrize("mode", ["emulate", "simulate"])
@pytest.mark.parametrize("setup,fragments", [pytest.param(s, f, id=i) for i, s, f in CLUSTER_CASES])
def test_bad_cluster_input(tmp_path: Path, mode: str, setup: Setup, fragments: tuple[str, ...]) -> None:
    extra, env = setup(tmp_path)
    if fragments[0].startswith("--jobs philly") or fragments[0].startswith("--jobs helios"):
        extra[1] = f"{fragments[0].split()[1].partition(':')[0]}:{extra[1]}"
    base = {"--topology": "line3", "--model": "mlp", "--rounds": "1", "--out": "out", "--mode": mode,
            **({} if fragments == ("needs --jobs",) else {"--jobs": "poisson:60,3"})}
    given = set(extra[::2])
    line = error_line(fedmst(tmp_path, "cluster", *[x for k, v in base.items() if k not in given for x in (k, v)],
                             *extra, env=env))
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} missing from {line!r}"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("extra", [["--congestion-control", "dctcp"], ["--ecn-k", "20p"], ["--cc-arg", "slope=1"]])
def test_a_simulated_cluster_refuses_tcp_options(tmp_path: Path, extra: list[str]) -> None:
    """The fluid model runs no TCP: a congestion control or ECN marking asked of it is refused."""
    line = error_line(fedmst(tmp_path, "cluster", "--topology", "line3", "--jobs", "poisson:60,3", "--mode",
                             "simulate", "--out", "out", *extra))
    assert extra[0] in line and "--mode emulate" in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("extra, fragments", [
    (["--mode", "simulate", "--ray", "127.0.0.1:1"], ("--ray 127.0.0.1:1", "use --mode emulate")),
    (["--ray", "127.0.0.1:1", "--preempt", "las"], ("--preempt: cannot span hosts yet",)),
    (["--pin", "pins.csv"], ("--pin pins.csv", "needs --ray ADDRESS")),
])
def test_a_cluster_refuses_what_cannot_span_hosts(tmp_path: Path, extra: list[str], fragments: tuple[str, ...]) -> None:
    """Before any Ray cluster is asked: the fluid model spreads nothing; a preempted job's
    checkpoint stays on its host; a pin file without hosts."""
    line = error_line(fedmst(tmp_path, "cluster", "--topology", "line3", "--jobs", "poisson:60,3", "--out", "out",
                             *extra))
    assert all(f in line for f in fragments), line
    assert not (tmp_path / "out").exists()


def test_a_sweep_spanning_hosts_needs_a_ray_cluster(tmp_path: Path) -> None:
    """``sweep --hosts 2`` spreads each point over hosts of ``--ray``'s cluster: without one, one line."""
    line = error_line(fedmst(tmp_path, "sweep", "--topology", "line3", "--local-models", "2", "--seeds", "1",
                             "--hosts", "2", "--out", "out"))
    assert line == "fedmst: error: --hosts 2: spanning each point over hosts needs --ray ADDRESS", line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("pins, fragments", [
    ("a 1\n", ("pin file pins.csv, line 1: give NODE,HOST, got 'a 1'",)),
    ("zz,10.0.0.1\n", ("pin file pins.csv, line 1: node 'zz' is not in topology",)),
    ("a,10.0.0.1\na,10.0.0.2\n", ("line 2: node 'a' is pinned to 10.0.0.1 already",)),
])
def test_a_bad_pin_file_is_refused_before_any_host_is_asked(tmp_path: Path, pins: str,
                                                            fragments: tuple[str, ...]) -> None:
    (tmp_path / "pins.csv").write_text(pins)
    line = error_line(fedmst(tmp_path, "run", "--topology", "line3", "--ray", "127.0.0.1:1", "--pin", "pins.csv",
                             "--out", "out"))
    assert all(f in line for f in fragments), line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("schedulers,fragments", [
    ("spff,no-such-sched", ("'no-such-sched'", "choose one of")),
    ("spff,mst,spff", ("--schedulers", "spff given twice")),
])
def test_bad_scheduler_lists(tmp_path: Path, schedulers: str, fragments: tuple[str, ...]) -> None:
    line = error_line(fedmst(tmp_path, *_command("compare", ["--schedulers", schedulers], "out")))
    assert all(f in line for f in fragments), line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["run", "compare"])
def test_a_usage_error_is_one_line_too(tmp_path: Path, command: str) -> None:
    proc = fedmst(tmp_path, command, "--topology", "line3", "--delay-mode", "zzz", "--out", "out")
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("fedmst: error: ") and "--delay-mode" in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command,out,bad", [
    ("run", "out", ["--model", "no-such-model"]),
    ("compare", "out", ["--model", "no-such-model"]),
    ("compare", "out", ["-k", "200"]),
])
def test_failing_run_keeps_existing_results(tmp_path: Path, command: str, out: str, bad: list[str]) -> None:
    """Even with --overwrite, bad input leaves the folder's earlier results as they were."""
    folder = tmp_path / out
    (folder / "spff").mkdir(parents=True)
    results = {
        folder / ".fedmst": '{"command": "compare"}\n',  # an earlier command's: --overwrite may replace it
        folder / "summary.json": json.dumps({"scheduler": "mst", "final_accuracy": 0.875}) + "\n",
        folder / "comparison.json": '{"bytes_ratio": 0.5}\n',
        folder / "spff" / "summary.json": '{"scheduler": "spff"}\n',
    }
    for path, text in results.items():
        path.write_text(text)
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in results}

    line = error_line(fedmst(tmp_path, *_command(command, bad, out), "--overwrite"))
    assert bad[1] in line

    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == sorted(
        [Path("spff"), *(p.relative_to(folder) for p in results)]
    )
    for path, (mtime, content) in before.items():
        assert path.read_bytes() == content
        assert path.stat().st_mtime_ns == mtime


def test_not_root_is_one_line(tmp_path: Path) -> None:
    """A real unprivileged user (uid 1000 in a user namespace, so the files stay readable)."""
    proc = fedmst(tmp_path, *_command("run", [], "out"),
                  prefix=("unshare", "--user", "--map-user=1000", "--map-group=1000"))
    assert "needs root" in error_line(proc)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("missing,package", [("mnexec", "mininet"), ("tc", "iproute2"), ("ethtool", "ethtool")])
def test_missing_tool_is_one_line(tmp_path: Path, missing: str, package: str) -> None:
    """PATH holds every tool fedmst uses but one."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ip", "mnexec", "tc", "ethtool", "iptables"):
        if tool != missing:
            (bin_dir / tool).symlink_to(shutil.which(tool))
    line = error_line(fedmst(tmp_path, *_command("run", [], "out"), env={"PATH": str(bin_dir)}))
    assert f"{missing} not found" in line and package in line, line
    assert not (tmp_path / "out").exists()


WITH_KNOBS = ", ".join(name for name, algorithm in BPF_CONGESTION_CONTROLS.items() if algorithm.knobs)
NOT_RENO = "#include \"vmlinux.h\"\nchar _license[] __attribute__((section(\"license\"))) = \"GPL\";\n"


def _source(name: str, text: str) -> Setup:
    return lambda p: (["--congestion-control", _write_topology(p, name, text)], {})


BPF_CASES: list[tuple[str, Setup, tuple[str, ...]]] = [
    ("does-not-compile", _source("broken.bpf.c", "#include \"vmlinux.h\"\nint x = ;\n"),
     ("broken.bpf.c: does not compile", "error: expected expression")),
    ("no-congestion-ops", _source("nothing.bpf.c", NOT_RENO), ("nothing.bpf.c", "no tcp_congestion_ops")),
    ("not-an-object", _source("text.bpf.o", "not ELF\n"), ("text.bpf.o", "not a BPF object")),
    ("missing-file", _args("--congestion-control", "absent.bpf.c"), ("absent.bpf.c", "no such file")),
    ("knob-out-of-range", _args("--congestion-control", "mltcp", "--cc-arg", "slope=99"),
     ("--cc-arg slope=99", "mltcp's slope is from 0 to 8")),
    ("unknown-knob", _args("--congestion-control", "dctcp", "--cc-arg", "slope=1"),
     ("--cc-arg slope=1", "dctcp has no knob 'slope'", "g_shift")),
    # the algorithms named as having knobs are those that declare some, mltcp-cubic among them
    ("knob-of-kernel-algorithm", _args("--cc-arg", "slope=1"),
     ("--cc-arg", f"cubic has no knobs (those with knobs: {WITH_KNOBS})", "mltcp-cubic")),
    ("knob-of-users-algorithm", lambda p: (["--congestion-control", _write_topology(p, "mine.bpf.c", NOT_RENO),
                                            "--cc-arg", "slope=1"], {}),
     ("--cc-arg: ", "mine.bpf.c is your own algorithm, run as you wrote it: --cc-arg sets nothing in it",
      f"the algorithms with knobs are fedmst's {WITH_KNOBS}")),
    # a repeatable option's value is quoted as typed, not as a Python tuple
    ("knob-without-value", _args("--congestion-control", "dctcp", "--cc-arg", "slope"), ("--cc-arg slope: give",)),
    ("strategy-knob-without-value", _args("--strategy-arg", "eta"), ("--strategy-arg eta: give KNOB=NUMBER",)),
    ("told-bytes-in-containers", _args("--congestion-control", "mltcp", "--workers", "docker"),
     ("--congestion-control mltcp", "container", "--workers process")),
]


@pytest.mark.skipif(missing_bpf() is not None, reason=f"no BPF congestion controls here: {missing_bpf()}")
@pytest.mark.parametrize("setup,fragments", [pytest.param(s, f, id=i) for i, s, f in BPF_CASES])
def test_bad_transport(tmp_path: Path, setup: Setup, fragments: tuple[str, ...]) -> None:
    """A congestion control that cannot be built or run is refused before any network."""
    extra, env = setup(tmp_path)
    line = error_line(fedmst(tmp_path, *_command("run", extra, "out"), env=env))
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} missing from {line!r}"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("missing", ["clang", "bpftool"])
def test_missing_bpf_tool_is_one_line(tmp_path: Path, missing: str) -> None:
    """PATH holds every tool a run uses (those of the emulation, as fedmst.net.emulation lists
    them) but one of the BPF toolchain's."""
    from fedmst.net.emulation import _TOOLS

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in {t for t, _ in _TOOLS} | {"iptables", "clang", "bpftool"}:
        if tool != missing and shutil.which(tool):
            (bin_dir / tool).symlink_to(shutil.which(tool))
    line = error_line(fedmst(tmp_path, *_command("run", ["--congestion-control", "dctcp"], "out"),
                             env={"PATH": str(bin_dir)}))
    assert missing in line and "apt-get install clang libbpf-dev bpftool" in line, line


@pytest.mark.parametrize("args", [
    ("run", "--topology", "no-such-topology"),
    ("run", "--topology", "line3", "--model", "no-such-model", "--live"),
    ("compare", "--topology", "line3", "--model", "no-such-model", "--live"),
    ("sweep", "--topology", "no-such-topology", "--local-models", "2", "--seeds", "1"),
], ids=["run-default-folder-taken", "run-live", "compare-live", "sweep"])
def test_an_input_error_prints_its_line_and_nothing_on_stdout(tmp_path: Path, args: tuple[str, ...]) -> None:
    """No progress bar, no --live fallback note and no 'this one goes to runs/run-2' beside it,
    even where the default folder is taken; the line alone, and no folder made."""
    for taken in ("runs/run", "runs/compare", "runs/sweep"):
        (tmp_path / taken).mkdir(parents=True)
        (tmp_path / taken / "config.json").write_text("{}")
    proc = fedmst(tmp_path, *args)
    assert "no-such" in error_line(proc)
    assert proc.stdout == "", proc.stdout
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["compare", "run", "sweep"]
