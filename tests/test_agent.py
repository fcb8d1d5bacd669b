"""The agent on its own: the limits it reports from its cgroup, and its refusal of other fedmst code."""

from __future__ import annotations

from pathlib import Path

import pytest

import fedmst
from fedmst.protocol import AgentSpec, Failed, RunsIn, Setup, Stop, root_id
from fedmst.workers.agent import Agent, runs_in


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "sys/fs/cgroup" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return root


def test_cgroup_v2_limits_and_container_marker(tmp_path: Path) -> None:
    root = _write(tmp_path, {"cpu.max": "50000 100000", "memory.max": str(512 << 20)})
    (root / ".dockerenv").write_text("")
    assert runs_in(root) == RunsIn(container=True, cpus=0.5, memory_bytes=512 << 20)


def test_cgroup_v2_unlimited(tmp_path: Path) -> None:
    root = _write(tmp_path, {"cpu.max": "max 100000", "memory.max": "max"})
    assert runs_in(root) == RunsIn(container=False, cpus=None, memory_bytes=None)


def test_cgroup_v1_limits(tmp_path: Path) -> None:
    root = _write(tmp_path, {"cpu/cpu.cfs_quota_us": "150000", "cpu/cpu.cfs_period_us": "100000",
                             "memory/memory.limit_in_bytes": str(1 << 30)})
    assert runs_in(root) == RunsIn(container=False, cpus=1.5, memory_bytes=1 << 30)


def test_cgroup_v1_unlimited(tmp_path: Path) -> None:
    root = _write(tmp_path, {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000",
                             "memory/memory.limit_in_bytes": "9223372036854771712"})
    assert runs_in(root) == RunsIn(container=False, cpus=None, memory_bytes=None)


def test_no_cgroup_files(tmp_path: Path) -> None:
    assert runs_in(tmp_path) == RunsIn(container=False, cpus=None, memory_bytes=None)


def test_a_container_is_a_root_file_system_other_than_the_coordinators(tmp_path: Path) -> None:
    """Docker's marker file misleads where fedmst itself runs in a container: an agent beside its
    coordinator shares its root, however the machine came to be."""
    (tmp_path / ".dockerenv").write_text("")
    assert not runs_in(tmp_path, coordinator_root=root_id(str(tmp_path))).container
    assert runs_in(tmp_path, coordinator_root=root_id("/")).container
    assert not runs_in(Path("/"), coordinator_root=root_id("/")).container


def _spec() -> AgentSpec:
    return AgentSpec(control_socket="unused", store_dir="unused", model="mlp", dataset="digits", epochs=1,
                     batch_size=32, lr=0.05, optimizer="sgd", partition="dirichlet:0.5", chunk_bytes=1024,
                     timeout_s=5.0, slow={},
                     strategy="fedavg", strategy_args={}, tasks=())


def test_an_agent_refuses_other_fedmst_code() -> None:
    """A worker image built from another checkout stops the run in setup, before any training."""
    agent = Agent(_spec(), node="0")
    with pytest.raises(RuntimeError, match="rebuild the worker image"):
        agent.setup(Setup(source_digest="not-" + fedmst.source_digest()[4:]))


def test_a_failing_command_is_a_one_line_failed_reply() -> None:
    """What the agent's loop sends back when a command raises: the exception's type and first line."""
    reply = Agent(_spec(), node="0").handle(Setup(source_digest="other"))
    assert isinstance(reply, Failed) and reply.error.startswith("RuntimeError: this worker runs other fedmst code")
    assert "\n" not in reply.error and reply.seconds >= 0
    assert Agent(_spec(), node="0").handle(Stop()).error == "TypeError: Stop is not a command an agent runs"


def test_the_spec_file_round_trips_and_refuses_another_protocol() -> None:
    import dataclasses
    import json

    from fedmst.protocol import PROTOCOL_VERSION, ProtocolError, TaskSpec, TransferSpec

    xfer = TransferSpec(key="task0-000-broadcast", phase="broadcast", path=("0", "1", "2"), models=(0, 3),
                        src_addr="10.0.0.1", dst_addr="10.0.0.2", segment=(0, 8), step=1, carries="global",
                        connection="task0-c000", window_bytes=0)
    task = TaskSpec(name="task0", global_node="0", local_nodes=("2", "2"), seed=1, active=(0, 3), transfers=(xfer,))
    spec = dataclasses.replace(_spec(), slow={"2": 3.0}, tasks=(task,))
    back = AgentSpec.from_json(spec.to_json())
    assert back == spec and back.tasks[0].transfers[0].dst == "2" and isinstance(back.tasks[0].active, tuple)
    obj = json.loads(spec.to_json())
    assert obj["version"] == PROTOCOL_VERSION and obj["tasks"][0]["transfers"][0]["path"] == ["0", "1", "2"]
    other = PROTOCOL_VERSION + 1
    with pytest.raises(ProtocolError, match=f"version {other}, this side speaks {PROTOCOL_VERSION}"):
        AgentSpec.from_json(json.dumps({**obj, "version": other}))
    obj["tasks"][0]["transfers"][0]["hops"] = 2
    with pytest.raises(ProtocolError, match=r"AgentSpec.tasks\[0\].transfers\[0\]: unknown field hops"):
        AgentSpec.from_json(json.dumps(obj))
    with pytest.raises(ProtocolError, match="expected an AgentSpec, got a Stop"):
        AgentSpec.from_json(json.dumps({"type": "Stop", "version": PROTOCOL_VERSION}))


def test_g_says_which_round_began_when_in_one_line_at_a_time(tmp_path: Path) -> None:
    from fedmst.workers.agent import _began_round

    path = tmp_path / "job0"
    _began_round(path, 1, 12.5)
    _began_round(path, 2, 13.25)
    assert path.read_text() == "2 13.25\n" and [p.name for p in tmp_path.iterdir()] == ["job0"]
