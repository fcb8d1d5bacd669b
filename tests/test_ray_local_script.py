"""scripts/ray-local.sh on its own, without Ray: what its stop says about nodes that are gone."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "ray-local.sh"


@pytest.mark.host
@pytest.mark.skipif(os.geteuid() != 0, reason="its stop runs fedmst clean, which needs root")
def test_stop_says_nothing_of_a_node_whose_process_is_already_gone(tmp_path: Path) -> None:
    """A node's PID file whose process has ended (between stop's listing and its read, or before
    stop began) is a node no longer running: stop reads past it without a word about /proc."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp_path / "node0.pid").write_text(f"{gone.pid}\n")
    stopped = subprocess.run(["bash", str(SCRIPT), "stop"], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "RAY_LOCAL_DIR": str(tmp_path)})
    assert stopped.returncode == 0, stopped.stderr
    assert "/proc/" not in stopped.stderr and "No such file" not in stopped.stderr, stopped.stderr
    assert "stopping ray nodes" not in stopped.stderr  # nothing of ours was running
    assert not list(tmp_path.glob("node*.pid"))
