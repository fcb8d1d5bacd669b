"""The README's commands run as written, in a shell, after ``scripts/setup.sh``: ``fedmst`` is on
the PATH, and the README's short commands (its own scheduler beside the built-ins, then an
earlier run's ``config.json`` run once more) run for real in a fresh folder, one after the other
as a newcomer would paste them.

Each run checks, through ``clean_host``, that no namespace, interface or process is left.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
VENV_BIN = Path(sys.executable).parent


def _shell(command: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``command`` as bash runs it, with the environment a shell after set-up has (the PATH
    ``source .venv/bin/activate`` gives: this checkout's, whatever another checkout linked)."""
    path = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PATH": path, **env})


def _readme_command(pattern: str) -> str:
    """The one README command matching ``pattern`` (so the test runs what the README shows)."""
    found = re.findall(pattern, README)
    assert len(found) == 1, f"README.md shows {len(found)} commands like {pattern!r}"
    return found[0]


@pytest.mark.host
def test_setup_puts_fedmst_on_the_path() -> None:
    """What ``scripts/setup.sh`` links, a plain root shell finds: README's commands say ``fedmst``."""
    found = shutil.which("fedmst", path="/usr/local/bin")
    assert found is not None, "no /usr/local/bin/fedmst: run bash scripts/setup.sh"
    assert Path(found).resolve().parent.parent.joinpath("bin", "python").exists(), found
    proc = subprocess.run(["bash", "-c", "fedmst --help"], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})
    assert proc.returncode == 0 and "Usage: fedmst" in proc.stdout, proc.stderr


@pytest.mark.integration
def test_the_readmes_short_commands_run_as_written(tmp_path: Path, clean_host: None) -> None:
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    [source] = [block for block in re.findall(r"```python\n(.*?)```", README, re.S) if "class BfsTree" in block]
    (tmp_path / "mypkg" / "trees.py").write_text("\n".join(line[2:] for line in source.splitlines()))

    compare = _readme_command(r"`(fedmst compare --topology small [^`]*mypkg\.trees:BfsTree)`")
    ran = _shell(compare, tmp_path, PYTHONPATH=str(tmp_path))  # "with mypkg on PYTHONPATH"
    assert ran.returncode == 0, ran.stderr
    record = json.loads((tmp_path / "runs" / "compare" / "comparison.json").read_text())
    assert (record["status"], record["schedulers"]) == ("completed", ["spff", "mst", "mypkg.trees:BfsTree"])

    again = _readme_command(r"\n(fedmst run --config runs/compare/mst/config.json --out runs/again)")
    ran = _shell(again, tmp_path)
    assert ran.returncode == 0, ran.stderr
    first, second = (json.loads((tmp_path / "runs" / d / "config.json").read_text())
                     for d in ("compare/mst", "again"))
    assert {k: v for k, v in first.items() if k != "out"} == {k: v for k, v in second.items() if k != "out"}
    assert json.loads((tmp_path / "runs" / "again" / "summary.json").read_text())["status"] == "completed"

    refused = _shell(again, tmp_path)  # pasted twice: the second is refused, the first run kept
    assert refused.returncode == 1 and "already holds a run" in refused.stderr, refused.stderr
