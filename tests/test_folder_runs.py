"""Run folders never mix two runs, and one stopped early still says what became of it: real runs
on the ``small`` topology (3 local models of the 153 KB ``cnn``, one epoch).

Each test checks, through ``clean_host``, that no namespace, interface or process is left.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

import pytest

from conftest import FEDMST, fedmst_cli

pytestmark = pytest.mark.integration
SMALL = ("--topology", "small", "--local-models", "3", "--model", "cnn", "--epochs", "1")


def fedmst(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return fedmst_cli(*args, cwd=cwd, timeout=timeout)


def one_error_line(proc: subprocess.CompletedProcess[str], code: int = 1) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == code and len(lines) == 1, (proc.returncode, proc.stdout, proc.stderr)
    return lines[0]


def files(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` with when it was last written."""
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_a_second_run_never_mixes_with_the_first(tmp_path: Path, clean_host: None) -> None:
    first = fedmst("run", *SMALL, "--rounds", "1", "--pcap", "0-1", "--save-models", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    used = tmp_path / "runs" / "run"
    assert (used / "pcap").is_dir() and (used / "models").is_dir()
    before = files(used)

    # without --out: a fresh folder, said so
    second = fedmst("run", *SMALL, "--rounds", "1", "--scheduler", "spff", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "runs/run holds earlier results: this one goes to runs/run-2/" in second.stdout
    assert json.loads((tmp_path / "runs" / "run-2" / "summary.json").read_text())["scheduler"] == "spff"

    # into the used folder, by name: refused in one line before anything runs, the folder untouched
    for command in ("run", "compare"):
        refused = fedmst(command, *SMALL, "--rounds", "1", "--out", str(used))
        assert f"output folder {used} already holds a run: give another --out, or add --overwrite" in \
            one_error_line(refused)
    assert files(used) == before

    # --overwrite replaces it whole: nothing of the first run is left beside the second
    again = fedmst("run", *SMALL, "--rounds", "1", "--scheduler", "spff", "--out", str(used), "--overwrite")
    assert again.returncode == 0, again.stderr
    assert not (used / "pcap").exists() and not (used / "models").exists()
    assert not set(files(used)) - set(files(tmp_path / "runs" / "run-2")), "files of the first run are left"
    summary = json.loads((used / "summary.json").read_text())
    assert (summary["scheduler"], summary["pcap"], summary["status"]) == ("spff", None, "completed")


def _interrupt(out: Path, ready: Callable[[], bool], *args: str) -> subprocess.CompletedProcess[str]:
    """A real ``fedmst compare`` into ``out`` sent SIGINT once ``ready()``; its outcome."""
    proc = subprocess.Popen([FEDMST, "compare", *SMALL, "--rounds", "20", "--out", str(out), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not ready():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the compare never got there"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _live(run: Path) -> dict[str, object]:
    try:
        return json.loads((run / "live.json").read_text())
    except (OSError, ValueError):
        return {}


@pytest.mark.parametrize("when", ["setting up", "round 1"])
def test_a_compare_stopped_before_any_round_finished_says_so(tmp_path: Path, clean_host: None, when: str) -> None:
    out, spff = tmp_path / "cmp", tmp_path / "cmp" / "spff"
    if when == "setting up":  # as soon as the first run claimed its folder
        stopped = _interrupt(out, lambda: (spff / "config.json").exists())
    else:  # while round 1 trains (each local model trains for 30 s of compute)
        stopped = _interrupt(out, lambda: _live(spff).get("phase") == "train", "--compute-s", "30")
    assert stopped.returncode == 130, stopped.stderr
    assert "interrupted; the emulated network was torn down" in stopped.stderr
    assert not (spff / "rounds.csv").exists()

    record = json.loads((out / "comparison.json").read_text())
    assert (record["status"], record["runs"]) == ("interrupted", {"spff": "interrupted", "mst": "not run"})
    summary = json.loads((spff / "summary.json").read_text())
    assert (summary["status"], summary["rounds"], summary["rounds_planned"]) == ("interrupted", 0, 20)
    assert json.loads((spff / "live.json").read_text())["phase"] == "interrupted"

    said = "the spff run was interrupted after 0 of 20 rounds (summary.json), so it measured nothing to show"
    for view in (["links", str(spff)], ["plot", str(spff)], ["plot", str(spff), "--accuracy"],
                 ["plot", str(spff), "--link", "0-1"], ["plot", str(spff), "--timeline"]):
        assert said in one_error_line(fedmst(*view)), view
    for view in (["links", str(out)], ["plot", str(out)], ["plot", str(out), "--accuracy"]):
        line = one_error_line(fedmst(*view))
        assert "the compare stopped before two runs finished a round (SPFF interrupted after 0 of 20 rounds; " \
               "MST not run)" in line, view
