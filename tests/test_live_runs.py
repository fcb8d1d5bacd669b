"""--live and fedmst watch on real runs: in a terminal (tmux, read with capture-pane) they show the
links with their rates and the phase; without one they fall back to plain lines."""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

from conftest import FEDMST, fedmst_cli
from fedmst.run.livestate import read_status
from test_bad_input import error_line, fedmst

pytestmark = pytest.mark.integration
LINK_ROW = re.compile(r"^\d+->\d+\s+(\d+\.\d)\s+[█░]+\s+\d+%", re.MULTILINE)
PHASE = re.compile(r"round \d/2, (broadcast|upload)")


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout


class Terminal:
    """A detached tmux session running one shell command, its screen read with capture-pane."""

    def __init__(self, command: str) -> None:
        self.name = f"fedmst-test-{uuid.uuid4().hex[:8]}"
        _tmux("new-session", "-d", "-s", self.name, "-x", "160", "-y", "60", command)

    def screen(self) -> str:
        return _tmux("capture-pane", "-p", "-J", "-S", "-300", "-t", self.name)

    def wait_for(self, seen: Callable[[str], bool], timeout_s: float) -> str:
        """The screen once ``seen`` holds; fails as soon as the command has ended without it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.screen()
            if seen(text):
                return text
            if "-EXIT " in text:
                break
            time.sleep(0.2)
        raise AssertionError(f"not seen within {timeout_s} s; the screen:\n{self.screen()}")

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


@pytest.fixture
def terminal() -> Iterator[Callable[[str], Terminal]]:
    assert shutil.which("tmux"), "tmux is missing: bash scripts/setup.sh --all installs it"
    opened: list[Terminal] = []
    yield lambda command: opened.append(Terminal(command)) or opened[-1]
    for t in opened:
        t.close()


def _busy(text: str) -> bool:
    return bool(PHASE.search(text)) and any(float(rate) > 1 for rate in LINK_ROW.findall(text))


def _ends_on_the_last_upload(run_dir: Path) -> None:
    """live.json's last frame holds every link direction's bytes of the last upload as links.csv
    counted them (both from the phase's own counter readings, a few ACK bytes apart at most)."""
    status = read_status(run_dir)
    assert status is not None and status.finished and status.round == status.rounds, status
    with open(run_dir / "links.csv", newline="") as f:
        rows = [row for row in csv.DictReader(f) if int(row["round"]) == status.rounds]
    counted = {(row["src"], row["dst"]): int(row["upload_bytes"]) for row in rows}
    shown = {(link.src, link.dst): link.phase_bytes for link in status.links}
    assert shown.keys() == counted.keys()
    assert all(abs(shown[hop] - n) <= max(0.001 * n, 3000) for hop, n in counted.items()), (shown, counted)


def test_a_live_compare_shows_links_with_rates_and_the_phase_then_the_table(
        tmp_path: Path, clean_host: None, terminal: Callable[[str], Terminal]) -> None:
    out = tmp_path / "cmp"
    t = terminal(f"{FEDMST} compare --topology nsfnet --local-models 8 --rounds 2 --live --out {out}; "
                 "echo COMMAND-EXIT $?; sleep 600")
    t.wait_for(_busy, timeout_s=240)
    text = t.wait_for(lambda s: "COMMAND-EXIT" in s, timeout_s=240)
    assert "COMMAND-EXIT 0" in text and "per round (mean)" in text and "MST/SPFF" in text
    runs = sorted(path.parent for path in out.glob("*/live.json"))
    assert len(runs) == 2, runs
    for run_dir in runs:
        _ends_on_the_last_upload(run_dir)


def test_watch_from_a_second_terminal_follows_a_run_and_exits_when_it_ends(
        tmp_path: Path, clean_host: None, terminal: Callable[[str], Terminal]) -> None:
    out = tmp_path / "run"
    run = subprocess.Popen([FEDMST, "run", "--topology", "nsfnet", "--scheduler", "mst", "--local-models", "8",
                            "--rounds", "2", "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
    try:
        t = terminal(f"{FEDMST} watch {out}; echo WATCH-EXIT $?; sleep 600")
        t.wait_for(_busy, timeout_s=240)
        text = t.wait_for(lambda s: "WATCH-EXIT" in s, timeout_s=240)
        assert "WATCH-EXIT 0" in text and "run finished" in text
        assert run.wait(timeout=120) == 0, run.stderr.read() if run.stderr else ""
        _ends_on_the_last_upload(out)
    finally:
        if run.poll() is None:
            run.terminate()
            run.wait(timeout=60)


def test_live_without_a_terminal_writes_the_plain_lines(tmp_path: Path, clean_host: None) -> None:
    proc = fedmst_cli("run", "--topology", "line3", "-k", "2", "--rounds", "1", "--model", "mlp", "--live", "--out",
                      str(tmp_path / "run"), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--live: the output is not a terminal" in proc.stdout
    assert "round 1/1: broadcast" in proc.stdout and "results in" in proc.stdout
    assert "of capacity" not in proc.stdout and "█" not in proc.stdout
    watched = fedmst_cli("watch", str(tmp_path / "run"), timeout=60)
    assert watched.returncode == 0 and "[mst] round 1/1 finished" in watched.stdout, watched.stdout
    _ends_on_the_last_upload(tmp_path / "run")


@pytest.mark.host
def test_watch_on_a_folder_that_is_no_run_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "notarun").mkdir()
    line = error_line(fedmst(tmp_path, "watch", "notarun"))
    assert "notarun: not a fedmst run or compare folder (no live.json)" in line
