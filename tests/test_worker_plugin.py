"""A worker backend given as ``--workers package.module:Class`` runs a real one-round run."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import FEDMST

pytestmark = pytest.mark.integration
USER_MODULES = str(Path(__file__).with_name("userbackends"))


def test_a_backend_subclass_named_by_module_runs_every_agent(tmp_path: Path, clean_host: None) -> None:
    out = tmp_path / "run"
    proc = subprocess.run(
        [FEDMST, "run", "--topology", "line3", "-k", "2", "--rounds", "1", "--model", "mlp", "--seed", "1",
         "--workers", "recording:Recording", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [USER_MODULES, os.environ.get("PYTHONPATH")]))},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["workers"] == {"backend": "recording"}
    started = (out / "agents" / "started-by-recording.txt").read_text().split()
    logs = sorted(p.name.removeprefix("node-").removesuffix(".log") for p in (out / "agents").glob("node-*.log"))
    assert logs and sorted(started) == logs  # every agent, and only through the plugin
    assert "agents (recorded processes) ready" in proc.stdout + proc.stderr
