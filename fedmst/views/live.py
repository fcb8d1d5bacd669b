"""The live view of a run: what ``--live`` shows in the run's own terminal and ``fedmst watch``
in another, both read from the run folder's ``live.json`` (:mod:`fedmst.run.livestate`).

A run folder has one ``live.json``; a compare folder has one per scheduler, and the view follows
the one that runs now. Without a terminal the view is plain lines: one a phase, once it is over,
with the link directions that were busiest at its busiest moment.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import psutil
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from fedmst.errors import FedmstError
from fedmst.run.folders import holds
from fedmst.run.livestate import LIVE_FILE, LiveStatus, as_rows, read_status

POLL_S = 0.25
BAR = 20


def render(status: LiveStatus) -> RenderableType:
    """The round and phase, the busiest link directions (rate against capacity as a bar, bytes in
    this phase against the plan's), the quiet ones, and the host's CPU busy."""
    scale = f", time scale {status.time_scale:g} (rates are the network's)" if status.time_scale != 1 else ""
    where = (f"round {status.round}/{status.rounds}, {status.phase}" if status.round else status.phase)
    head = Text.assemble((f"{status.scheduler} on {status.topology}", "bold"), f": {where}; ",
                         f"t = {status.t_s:.1f} s; host CPU busy {status.cpu_busy:.0%}{scale}")
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name, justify in (("link direction", "left"), ("Mbit/s", "right"), ("of capacity", "left"),
                          ("MB this phase", "right"), ("planned MB", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in as_rows(status):
        filled = round(min(row["share"], 1.0) * BAR)
        bar = Text("█" * filled + "░" * (BAR - filled) + f" {row['share']:4.0%}",
                   style="red" if row["quiet"] else "green" if row["share"] < 0.9 else "yellow")
        table.add_row(row["direction"], f"{row['mbps']:.1f}", bar, f"{row['phase_mb']:.2f}",
                      f"{row['planned_mb']:.2f}" if row["planned_mb"] else "")
    parts: list[RenderableType] = [head, table]
    if status.quiet:
        parts.append(Text(f"quiet while their transfers are unfinished: {', '.join(status.quiet)}", style="red"))
    if status.finished:
        parts.append(Text(f"run {status.phase}", style="bold"))
    return Group(*parts)


def plain(status: LiveStatus, most: int = 3) -> str:
    """One line: the round and phase, the busiest link directions and the host's CPU busy."""
    busiest = ", ".join(f"{r['direction']} {r['mbps']:.1f} Mbit/s ({r['share']:.0%})" for r in as_rows(status, most)
                        if r["mbps"] > 0)
    where = f"round {status.round}/{status.rounds} {status.phase}" if status.round else status.phase
    quiet = f"; quiet: {', '.join(status.quiet)}" if status.quiet else ""
    return f"[{status.scheduler}] {where}: {busiest or 'no link busy'}; host CPU {status.cpu_busy:.0%}{quiet}"


def follow(folder: Path, coordinator: int | None = None, poll_s: float = POLL_S,
           stop: Callable[[], bool] = lambda: False) -> Iterator[LiveStatus]:
    """Each new state of the run in ``folder`` (or of the compare in it, run after run) until it
    ends (its last run finished, or its process is gone) or ``stop()``. ``coordinator``: only
    states written by that process (a new run in a folder an old one left ``live.json`` in).
    A state is new when it differs, not when the file's time does: two writes can share a
    timestamp (its granularity is the kernel's tick), and the run's last frame must not be missed."""
    seen: tuple[Path, LiveStatus] | None = None
    while True:
        stopping = stop()  # asked before the last look, so that the last state is shown
        path, status = _current(folder, coordinator)
        if status is not None and path is not None:
            stamp = (path, status)
            if stamp != seen:
                seen = stamp
                yield status
            alive = psutil.pid_exists(status.coordinator)
            compare = not (folder / LIVE_FILE).exists()
            if not alive or (status.finished and not compare):
                return
        if stopping:
            return
        time.sleep(poll_s)


RUNS_INSIDE = (f"*/{LIVE_FILE}", f"*/*/{LIVE_FILE}")
"""Where a folder of runs keeps their live states: a compare's ``NAME/``, a sweep's ``POINT/NAME/``."""


def _current(folder: Path, coordinator: int | None) -> tuple[Path | None, LiveStatus | None]:
    """The live state to show: the folder's own, or in a compare (or sweep) folder the newest of
    its runs'."""
    paths = [folder / LIVE_FILE] if (folder / LIVE_FILE).exists() else sorted(
        (p for pattern in RUNS_INSIDE for p in folder.glob(pattern)), key=_mtime, reverse=True)
    for path in paths:
        try:
            status = read_status(path.parent)
        except (FileNotFoundError, FedmstError):
            continue
        if status is not None and (coordinator is None or status.coordinator == coordinator):
            return path, status
    return None, None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:  # replaced (or its folder emptied) since it was listed
        return 0.0


def _holds_run(folder: Path) -> bool:
    """Whether ``folder`` is a run's, a compare's or a sweep's (its live view or its configuration
    is written)."""
    return any(any(folder.glob(pattern)) for pattern in (LIVE_FILE, *RUNS_INSIDE, "config.json", "*/config.json"))


def _runs_in(folder: Path) -> dict[Path, LiveStatus | None]:
    """The runs in a folder of runs (a compare's or a sweep's), by name, with their live states."""
    runs: dict[Path, LiveStatus | None] = {}
    for path in sorted({p.parent for pattern in RUNS_INSIDE for p in folder.glob(pattern)}):
        try:
            runs[path] = read_status(path)
        except (FileNotFoundError, FedmstError):
            runs[path] = None
    return runs


MOST_NAMED = 6
"""Runs a refusal names before it says how many more there are."""


def which_run(folder: Path) -> tuple[Path, str | None]:
    """What ``fedmst watch FOLDER`` follows, and the line that says so: a run folder itself (no
    line: its view names it); the only run in a folder of runs; or the runs of one compare (or
    sweep) still running, one after another as its process runs them. A folder of several runs
    that no one process is running now is refused in one line that names them and says how to
    watch one."""
    runs = _runs_in(folder) if not (folder / LIVE_FILE).exists() else {}
    if not runs:
        return folder, None
    if len(runs) == 1:
        (run,) = runs
        return run, f"watching {run}, the one run in {folder}"
    states = [s for s in runs.values() if s is not None]
    running = [run for run, s in runs.items() if s is not None and not s.finished and psutil.pid_exists(s.coordinator)]
    kind = holds(folder)  # "a compare", "a sweep"; None for a folder fedmst did not make
    if running and len({s.coordinator for s in states}) == 1:
        what = "the runs" if kind is None else kind.replace("a ", "the ", 1)
        return folder, f"following {what} in {folder}, run after run (now {running[-1].relative_to(folder)})"
    names = [str(run.relative_to(folder)) for run in runs]
    listed = ", ".join(names[:MOST_NAMED]) + (f" and {len(names) - MOST_NAMED} more" if len(names) > MOST_NAMED else "")
    example = max(running or list(runs), key=lambda run: _mtime(run / LIVE_FILE))
    raise FedmstError(f"{folder}{'' if kind is None else f', {kind} folder,'} holds {len(runs)} runs ({listed}): "
                      f"watch one of them, e.g. fedmst watch {example}" + (" (running now)" if running else ""))


def check_watchable(folder: Path) -> None:
    """Refuse, in one line, a folder that holds no run."""
    if not folder.is_dir():
        raise FedmstError(f"{folder}: no such folder")
    if not _holds_run(folder):
        raise FedmstError(f"{folder}: not a fedmst run or compare folder (no {LIVE_FILE}); "
                          "give the --out of a run started with this version")


def watch(folder: Path, console: Console, wait_s: float = 60.0) -> None:
    """Show the run in ``folder`` live until it ends (plain lines when ``console`` is no terminal);
    a run folder not yet written (the run is preparing) is waited for up to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    err = Console(stderr=True, markup=False, emoji=False)
    if not folder.exists():  # started beside the run, before the run made its folder
        err.print(f"fedmst watch: waiting up to {wait_s:g} s for {folder} to appear", markup=False, soft_wrap=True)
        # the run makes its folder a moment before it writes anything into it
        while not (folder.is_dir() and _holds_run(folder)) and time.monotonic() < deadline:
            time.sleep(POLL_S)
    check_watchable(folder)
    while _current(folder, None)[1] is None:
        if time.monotonic() > deadline:
            raise FedmstError(f"{folder}: no run started writing {LIVE_FILE} within {wait_s:g} s")
        time.sleep(POLL_S)
    watched, said = which_run(folder)  # a folder of several runs: which, or refused naming them
    if said:
        err.print(f"fedmst watch: {said}", markup=False, soft_wrap=True)
    show(follow(watched), console)


def show(states: Iterator[LiveStatus], console: Console, lines: HeldLines | None = None) -> None:
    """Render ``states`` as they come: a view that follows them in place, or plain lines on a
    non-terminal. With ``lines`` (``--live``) the view takes the whole terminal (its alternate
    screen) from the run's first state until the states end, holding the run's progress lines
    meanwhile; nothing is drawn where no state comes (an input error says only its own line)."""
    if not console.is_terminal:  # a line a phase, at its busiest moment, once the phase is over
        busiest: LiveStatus | None = None
        for status in states:
            if busiest is not None and _key(status) != _key(busiest):
                console.print(plain(busiest), markup=False, soft_wrap=True)
                busiest = None
            if busiest is None or _load(status) > _load(busiest) or status.quiet:
                busiest = status
        if busiest is not None:
            console.print(plain(busiest), markup=False, soft_wrap=True)
        return
    if lines is None:
        with Live(console=console, refresh_per_second=4, transient=False) as live:
            for status in states:
                live.update(render(status))
        return
    first = next(states, None)
    if first is None:
        return
    lines.hold()
    try:
        with Live(render(first), console=console, refresh_per_second=4, screen=True) as live:
            for status in states:
                live.update(render(status))
    finally:
        lines.release()


def _key(status: LiveStatus) -> tuple[str, int, str]:
    return status.scheduler, status.round, status.phase


def _load(status: LiveStatus) -> float:
    return sum(link.rate_bps for link in status.links)


class HeldLines:
    """A run's progress lines under ``--live``: said through ``report`` as they come, but kept
    while the view holds the terminal (they would vanish with its alternate screen) and said, in
    order, once it gives the terminal back."""

    def __init__(self, report: Callable[[str], None]) -> None:
        self.report = report
        self._held: list[str] | None = None
        self._lock = threading.Lock()

    def __call__(self, line: str) -> None:
        with self._lock:
            if self._held is not None:
                self._held.append(line)
                return
        self.report(line)

    def hold(self) -> None:
        with self._lock:
            if self._held is None:
                self._held = []

    def release(self) -> None:
        with self._lock:
            held, self._held = self._held or [], None
            for line in held:
                self.report(line)


@contextmanager
def live_view(folder: Path, console: Console, coordinator: int,
              report: Callable[[str], None]) -> Iterator[Callable[[str], None]]:
    """``--live``: while the block runs, the view of the run this process writes into ``folder``,
    in a thread of its own, taking the whole terminal once the run writes its first state; the
    block says its progress lines through the function it is given, which holds them while the
    view has the terminal and says them, through ``report``, once the view gives it back."""
    lines = HeldLines(report)
    done = threading.Event()
    thread = threading.Thread(target=show, args=(follow(folder, coordinator, stop=done.is_set), console, lines),
                              name="live-view", daemon=True)
    thread.start()
    try:
        yield lines
    finally:
        done.set()
        thread.join(timeout=5)
        lines.release()
