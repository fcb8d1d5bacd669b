"""The agent on its own: the limits it reports from its cgroup, and its refusal of other fedmst code."""

from __future__ import annotations

from pathlib import Path

from fedmst.workers.agent import runs_in


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "sys/fs/cgroup" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return root


def test_cgroup_v2_limits_and_container_marker(tmp_path: Path) -> None:
    root = _write(tmp_path, {"cpu.max": "50000 100000", "memory.max": str(512 << 20)})
    (root / ".dockerenv").write_text("")
    assert runs_in(root) == {"container": True, "cpus": 0.5, "memory_bytes": 512 << 20}


def test_cgroup_v2_unlimited(tmp_path: Path) -> None:
    root = _write(tmp_path, {"cpu.max": "max 100000", "memory.max": "max"})
    assert runs_in(root) == {"container": False, "cpus": None, "memory_bytes": None}


def test_cgroup_v1_limits(tmp_path: Path) -> None:
    root = _write(tmp_path, {"cpu/cpu.cfs_quota_us": "150000", "cpu/cpu.cfs_period_us": "100000",
                             "memory/memory.limit_in_bytes": str(1 << 30)})
    assert runs_in(root) == {"container": False, "cpus": 1.5, "memory_bytes": 1 << 30}


def test_cgroup_v1_unlimited(tmp_path: Path) -> None:
    root = _write(tmp_path, {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000",
                             "memory/memory.limit_in_bytes": "9223372036854771712"})
    assert runs_in(root) == {"container": False, "cpus": None, "memory_bytes": None}


def test_no_cgroup_files(tmp_path: Path) -> None:
    assert runs_in(tmp_path) == {"container": False, "cpus": None, "memory_bytes": None}


def test_an_agent_refuses_other_fedmst_code() -> None:
    """A worker image built from another checkout stops the run in setup, before any training."""
    import pytest

    import fedmst
    from fedmst.workers.agent import Agent

    agent = Agent({"chunk_bytes": 1024, "tasks": []}, node="0")
    with pytest.raises(RuntimeError, match="rebuild the worker image"):
        agent.setup({"cmd": "setup", "source_digest": "not-" + fedmst.source_digest()[4:]})
