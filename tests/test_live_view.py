"""``--live`` in the run's own terminal, without a network: the view takes the whole terminal once
the run writes its first state, the run's progress lines wait until it gives the terminal back,
and a run that never writes a state (an input error) draws nothing at all."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from typing import Callable

from rich.console import Console

from fedmst.run.livestate import LiveStatus
from fedmst.views.live import live_view

ALTERNATE_SCREEN_ON, ALTERNATE_SCREEN_OFF = "\x1b[?1049h", "\x1b[?1049l"


def _terminal() -> Console:
    return Console(file=io.StringIO(), force_terminal=True, width=100, height=30)


def _until(seen: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not seen():
        assert time.monotonic() < deadline, "not seen in time"
        time.sleep(0.02)


def test_live_takes_the_terminal_and_says_the_held_lines_once_it_gives_it_back(tmp_path: Path) -> None:
    console, said = _terminal(), []
    with live_view(tmp_path, console, os.getpid(), said.append) as report:
        report("[mst] task: before the first state")
        assert said == ["[mst] task: before the first state"]  # no view yet: said at once
        (tmp_path / "live.json").write_text(LiveStatus(run_dir=str(tmp_path), scheduler="mst", topology="line3",
                                                       coordinator=os.getpid(), rounds=1, round=1,
                                                       phase="broadcast").to_json())
        _until(lambda: ALTERNATE_SCREEN_ON in console.file.getvalue())
        report("[mst] round 1/1: broadcast 0.02 s")
        time.sleep(0.3)
        assert said == ["[mst] task: before the first state"]  # held: the view has the terminal
        assert ": round 1/1, broadcast; t = 0.0 s" in console.file.getvalue()  # the frame, in the view
    shown = console.file.getvalue()
    assert said == ["[mst] task: before the first state", "[mst] round 1/1: broadcast 0.02 s"]
    assert shown.index(ALTERNATE_SCREEN_ON) < shown.rindex(ALTERNATE_SCREEN_OFF)  # given back
    report("[mst] time: after the view")
    assert said[-1] == "[mst] time: after the view"


def test_live_draws_nothing_for_a_run_that_never_writes_a_state(tmp_path: Path) -> None:
    """An input error stops the run before it writes live.json: its line must be the only one."""
    console, said = _terminal(), []
    with live_view(tmp_path, console, os.getpid(), said.append):
        time.sleep(0.6)  # more than the view's poll
    assert console.file.getvalue() == "" and said == []
