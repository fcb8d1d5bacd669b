"""The live state (fedmst.run.livestate) and its view (fedmst.views.live), without a network:
counter readings in, live.json and what the view shows out."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from fedmst.errors import FedmstError
from fedmst.run import livestate
from fedmst.run.livestate import LiveStatus, LivePublisher, read_status
from fedmst.run.measure import CounterSampler
from fedmst.views.live import check_watchable, follow, plain, render, show, watch, which_run

A, B, C = ("a", "b"), ("b", "a"), ("b", "c")


def _publisher(tmp_path: Path, planned: dict) -> LivePublisher:
    base = LiveStatus(run_dir=str(tmp_path), scheduler="mst", topology="line3", coordinator=os.getpid(), rounds=2,
                      time_scale=4.0)
    return LivePublisher(tmp_path, base, capacity_bps={A: 1e8, B: 1e8, C: 5e7},
                         planned=lambda r, phase: planned if phase == "upload" else {})


def test_rates_are_bytes_per_second_of_the_networks_time_and_bytes_count_from_the_phases_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(livestate, "PUBLISH_S", 0.0)
    pub = _publisher(tmp_path, {A: 2_000_000, C: 1_000_000})
    assert read_status(tmp_path).phase == "setting up"
    pub.observe(10.0, 1, "upload", {A: 500, B: 0, C: 100})
    pub.observe(10.1, 1, "upload", {A: 1_000_500, B: 40, C: 100})
    status = read_status(tmp_path)
    assert (status.round, status.phase, status.time_scale) == (1, "upload", 4.0)
    assert status.links[0].src == "a" and status.links[0].rate_bps == pytest.approx(1e7)  # busiest first
    assert status.links[0].phase_bytes == 1_000_000 and status.links[0].planned_bytes == 2_000_000
    assert status.quiet == ()  # b->c has carried nothing for only 0.1 s
    pub.observe(11.2, 1, "upload", {A: 1_900_500, B: 80, C: 100})
    assert read_status(tmp_path).quiet == ("b->c",)  # planned, unfinished, nothing for 1.2 s
    pub.observe(11.3, 1, "train", {A: 1_900_500, B: 80, C: 100})
    assert read_status(tmp_path).quiet == () and read_status(tmp_path).links[0].phase_bytes == 0
    pub.finish()
    last = read_status(tmp_path)
    assert last.finished and last.phase == "finished" and all(link.rate_bps == 0 for link in last.links)


def _bytes(status: LiveStatus) -> dict[tuple[str, str], int]:
    return {(link.src, link.dst): link.phase_bytes for link in status.links}


def test_the_frame_a_phase_and_the_run_end_on_holds_the_last_reading_whatever_the_throttle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(livestate, "PUBLISH_S", 60.0)  # readings far faster than writes, however slow the host
    pub = _publisher(tmp_path, {A: 2_000_000})
    for i in range(5):  # only the first is written
        pub.observe(0.1 * i, 1, "upload", {A: 400_000 * i, B: 10 * i, C: 0})
    assert _bytes(read_status(tmp_path))[A] == 0
    pub.finish()  # the latest reading, not the latest written
    assert read_status(tmp_path).finished and _bytes(read_status(tmp_path)) == {A: 1_600_000, B: 40, C: 0}

    pub = _publisher(tmp_path, {A: 2_000_000})
    for i in range(4):
        pub.observe(0.1 * i, 2, "upload", {A: 500_000 * i, B: 0, C: 0}, final=i == 3)
    status = read_status(tmp_path)  # the phase's last reading is written at once
    assert (status.phase, status.finished, _bytes(status)[A]) == ("upload", False, 1_500_000)
    assert status.links[0].rate_bps == pytest.approx(5e6)
    pub.observe(0.35, 2, "train", {A: 1_500_000, B: 0, C: 0})  # throttled again
    assert read_status(tmp_path).phase == "upload"


def test_a_sampled_phase_ends_on_a_frame_with_the_bytes_it_carried_to_its_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(livestate, "PUBLISH_S", 60.0)
    sent = 0
    sampler = CounterSampler(lambda: {A: sent, B: 0, C: 0}, interval_s=0.01)
    pub = _publisher(tmp_path, {A: 3_000_000})
    sampler.listener = pub.observe
    with sampler.sampling(1, "upload"):
        for _ in range(3):  # the last transfer ends just before the phase does, within PUBLISH_S
            sent += 1_000_000
    assert _bytes(read_status(tmp_path))[A] == 3_000_000
    pub.finish()
    assert _bytes(read_status(tmp_path))[A] == 3_000_000


def test_the_view_shows_the_phase_and_the_busiest_links_rate_against_capacity(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(livestate, "PUBLISH_S", 0.0)
    pub = _publisher(tmp_path, {A: 2_000_000, C: 1_000_000})
    pub.observe(0.0, 2, "upload", {A: 0, B: 0, C: 0})
    pub.observe(0.5, 2, "upload", {A: 3_125_000, B: 1_000, C: 0})
    pub.observe(1.6, 2, "upload", {A: 6_250_000, B: 2_000, C: 0})
    status = read_status(tmp_path)
    console = Console(record=True, width=120)
    console.print(render(status))
    text = console.export_text()
    assert "mst on line3: round 2/2, upload" in text and "time scale 4" in text
    assert "a->b" in text and "22.7" in text and "23%" in text  # 3.125 MB in 1.1 s of 100 Mbit/s
    assert "quiet while their transfers are unfinished: b->c" in text
    assert plain(status).startswith("[mst] round 2/2 upload: a->b 22.7 Mbit/s (23%)")


def test_a_live_file_round_trips_and_a_broken_one_is_refused(tmp_path: Path) -> None:
    status = LiveStatus(run_dir="x", scheduler="spff", topology="t", coordinator=1, rounds=3, round=2, phase="upload",
                        links=(livestate.LinkNow("a", "b", 1.0, 2.0, 3, 4),), quiet=("a->b",))
    assert LiveStatus.from_json(status.to_json()) == status
    (tmp_path / "live.json").write_text('{"run_dir": 3}')
    with pytest.raises(FedmstError, match="not a fedmst live state"):
        read_status(tmp_path)


def test_following_ends_with_a_finished_run_and_plain_lines_say_each_phase_once(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(livestate, "PUBLISH_S", 0.0)
    pub = _publisher(tmp_path, {A: 10})
    pub.observe(0.0, 1, "upload", {A: 0, B: 0, C: 0})
    pub.finish()
    console = Console(record=True, width=200, force_terminal=False)
    show(follow(tmp_path, poll_s=0.01), console)
    lines = console.export_text().splitlines()
    assert lines == ["[mst] round 1/2 finished: no link busy; host CPU " + lines[0].rsplit(" ", 1)[1]]
    assert [s.coordinator for s in follow(tmp_path, coordinator=os.getpid() + 1, poll_s=0.01,
                                          stop=lambda: True)] == []  # another run's file is not this run's


def test_following_shows_a_state_written_within_the_files_timestamp_granularity(tmp_path: Path) -> None:
    pub = _publisher(tmp_path, {A: 10})
    pub.observe(0.0, 1, "upload", {A: 0, B: 0, C: 0}, final=True)
    stamp = (tmp_path / "live.json").stat().st_mtime_ns
    states = follow(tmp_path, poll_s=0.01)
    assert next(states).phase == "upload"
    pub.finish()
    os.utime(tmp_path / "live.json", ns=(stamp, stamp))  # as if both were written in one tick
    assert [s.phase for s in states] == ["finished"]


def test_a_folder_with_no_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FedmstError, match="not a fedmst run or compare folder"):
        check_watchable(tmp_path)
    with pytest.raises(FedmstError, match="no such folder"):
        check_watchable(tmp_path / "nope")


def test_watch_waits_for_a_folder_that_appears_empty_to_hold_the_run(tmp_path: Path) -> None:
    """A run makes its folder a moment before it writes into it: a watch started beside it waits
    for what it writes, not only for the folder, and follows the run once it is there."""
    folder = tmp_path / "run"

    def start_the_run() -> None:
        folder.mkdir()
        time.sleep(0.6)  # more than the watch's poll: it sees the empty folder
        (folder / "live.json").write_text(LiveStatus(run_dir=str(folder), scheduler="mst", topology="t",
                                                     coordinator=os.getpid(), rounds=1, phase="finished",
                                                     finished=True).to_json())

    starter = threading.Timer(0.3, start_the_run)
    starter.start()
    try:
        console = Console(file=io.StringIO(), force_terminal=False)
        watch(folder, console, wait_s=20)
    finally:
        starter.join()
    assert "finished" in console.file.getvalue()


def test_watch_stopped_by_sigterm_says_so_without_a_network_it_never_built(tmp_path: Path) -> None:
    """``fedmst watch`` builds nothing: stopped, it says it was interrupted and no more."""
    (tmp_path / "live.json").write_text(LiveStatus(run_dir=str(tmp_path), scheduler="mst", topology="t",
                                                   coordinator=os.getpid(), rounds=2).to_json())
    watch = subprocess.Popen([str(Path(sys.executable).with_name("fedmst")), "watch", str(tmp_path)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2.0)  # following this process's "run", which never ends
        assert watch.poll() is None, watch.communicate()
        watch.send_signal(signal.SIGTERM)
        _, err = watch.communicate(timeout=30)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert watch.returncode == 130 and err.strip() == "fedmst: interrupted", err


def _state(run: Path, coordinator: int, finished: bool, scheduler: str = "mst") -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "live.json").write_text(LiveStatus(run_dir=str(run), scheduler=scheduler, topology="t",
                                              coordinator=coordinator, rounds=1, finished=finished,
                                              phase="finished" if finished else "upload").to_json())


def _ended_pid() -> int:
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def test_watch_on_a_folder_of_ended_runs_names_them_and_how_to_watch_one(tmp_path: Path) -> None:
    """A compare (or sweep) that has ended holds several runs: watch picks none of them silently
    but says, in one line, which there are and how to watch one."""
    ended = _ended_pid()
    (tmp_path / "cmp").mkdir()
    (tmp_path / "cmp" / ".fedmst").write_text('{"command": "compare"}\n')
    for name in ("spff", "mst"):
        _state(tmp_path / "cmp" / name, ended, finished=True, scheduler=name)
    with pytest.raises(FedmstError) as refused:
        watch(tmp_path / "cmp", Console(file=io.StringIO()), wait_s=1)
    assert str(refused.value) == (f"{tmp_path}/cmp, a compare folder, holds 2 runs (mst, spff): watch one of them, "
                                  f"e.g. fedmst watch {tmp_path}/cmp/mst")
    # a sweep's: its points' runs, two levels down, the running one given as the example
    sweep = tmp_path / "sweep"
    for k in range(2, 6):
        for name in ("spff", "mst"):
            _state(sweep / f"k{k}-seed1" / name, ended, finished=True, scheduler=name)
    _state(sweep / "k6-seed1" / "spff", os.getpid(), finished=False, scheduler="spff")
    (sweep / "k6-seed1" / "mst").mkdir()
    _state(sweep / "k2-seed1" / "extra", os.getpid() + 1, finished=True)  # another process's
    check_watchable(sweep)
    with pytest.raises(FedmstError) as refused:
        watch(sweep, Console(file=io.StringIO()), wait_s=1)
    message = str(refused.value)
    assert message.startswith(f"{sweep} holds 10 runs (k2-seed1/extra, k2-seed1/mst, k2-seed1/spff, k3-seed1/mst, "
                              "k3-seed1/spff, k4-seed1/mst and 4 more): watch one of them"), message
    assert message.endswith(f"e.g. fedmst watch {sweep}/k6-seed1/spff (running now)"), message


def test_watch_follows_a_compare_being_run_and_a_folder_s_only_run_saying_so(tmp_path: Path) -> None:
    compare = tmp_path / "cmp"
    (compare / "spff").mkdir(parents=True)
    (compare / ".fedmst").write_text('{"command": "compare"}\n')
    _state(compare / "spff", os.getpid(), finished=True, scheduler="spff")
    _state(compare / "mst", os.getpid(), finished=False)  # this process runs it now
    assert which_run(compare) == (compare, f"following the compare in {compare}, run after run (now mst)")
    alone = tmp_path / "one"
    _state(alone / "k2-seed1" / "mst", _ended_pid(), finished=True)
    assert which_run(alone) == (alone / "k2-seed1" / "mst", f"watching {alone}/k2-seed1/mst, the one run in {alone}")
    assert which_run(alone / "k2-seed1" / "mst") == (alone / "k2-seed1" / "mst", None)  # a run folder: itself
