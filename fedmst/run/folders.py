"""Output folders: every command writes into a folder of its own, so two runs' results never mix
and none is lost without being asked.

A folder given with ``--out`` must not exist yet or be empty; one that holds anything is refused
in one line, unless ``--overwrite`` says to replace it whole. Without ``--out`` a command takes a
fresh folder after its default: ``runs/compare``, then ``runs/compare-2``, ``runs/compare-3`` ...
and says which. The folder is created, or emptied for ``--overwrite``, only when the command
begins writing, after its inputs were checked: bad input leaves it as it was. ``--overwrite``
only ever removes a folder fedmst wrote (one holding a run, compare or sweep record), never
another one that a mistyped ``--out`` names.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from fedmst.errors import FedmstError

RECORDS = ("summary.json", "config.json", "comparison.json", "sweep.csv", "sweep.json", "live.json")
"""Files that make a folder fedmst's: each command writes one of them first or last."""


@dataclass(frozen=True)
class OutputFolder:
    """Where a command writes, and whether it may replace what is there (``--overwrite``)."""

    path: Path
    overwrite: bool = False


def choose(out: Path, *, given: bool, overwrite: bool = False) -> OutputFolder:
    """The folder a command will write, checked before anything runs: ``out`` as given (refused
    if it holds anything, unless ``overwrite``), or, when ``out`` is the command's default, the
    first of ``out``, ``out-2``, ``out-3`` ... that is missing or empty.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> (root / "run").mkdir(); (root / "run" / "summary.json").write_text("{}")
    2
    >>> choose(root / "run", given=False).path.name
    'run-2'
    """
    if not given:
        for n in range(1, 10_000):
            path = out if n == 1 else out.with_name(f"{out.name}-{n}")
            if _is_empty(path):
                return OutputFolder(path)
        raise FedmstError(f"output folder {out}: no free name among {out.name}-2 ... {out.name}-9999; give --out")
    _check(out, overwrite)
    return OutputFolder(out, overwrite)


def claim(folder: OutputFolder) -> int:
    """Make the folder (emptied first with ``overwrite``) and lock it for this process; return the
    open folder whose lock is held until it is closed. Two commands writing one folder at once
    would mix their results: the second is refused."""
    path = folder.path
    try:
        path.mkdir(parents=True, exist_ok=True)
        handle = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise FedmstError(f"output folder {path}: cannot write there ({exc.strerror})") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(handle)
        raise FedmstError(f"output folder {path} is in use by another run: give this one its own --out") from None
    try:
        _check(path, folder.overwrite)
        if folder.overwrite:
            _empty(path)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        os.close(handle)
        raise FedmstError(f"output folder {path}: cannot write there ({exc.strerror})") from None
    except BaseException:
        os.close(handle)
        raise
    return handle


def _check(path: Path, overwrite: bool) -> None:
    """Refuse a folder that holds anything, unless ``overwrite`` and fedmst wrote it."""
    if _is_empty(path):
        return
    if not path.is_dir():
        raise FedmstError(f"output folder {path} is a file, not a folder: give another --out")
    what = holds(path)
    if what is None:
        loose = sorted(entry.name for entry in path.iterdir())
        shown = ", ".join(loose[:3]) + (", ..." if len(loose) > 3 else "")
        raise FedmstError(f"output folder {path} holds files fedmst did not write ({shown}): "
                          "give another --out (--overwrite replaces only a folder of fedmst's results)")
    if not overwrite:
        raise FedmstError(f"output folder {path} already holds {what}: give another --out, or add "
                          "--overwrite to replace it")


def holds(path: Path) -> str | None:
    """What fedmst wrote into ``path`` (``a run``, ``a compare``, ``a sweep``), or None where it
    holds anything else: a folder is fedmst's if it has a record at its top, or if every entry
    is a folder of fedmst's (a sweep's ``k4-seed1/``, a compare stopped before it wrote its own)."""
    names = {p.name for p in path.iterdir() if not p.name.startswith(".")}
    if names & {"sweep.csv", "sweep.json"}:
        return "a sweep"
    if "comparison.json" in names:
        return "a compare"
    if names & set(RECORDS):
        return "a run"
    subs = [path / name for name in sorted(names)]
    if subs and all(sub.is_dir() and not sub.is_symlink() and holds(sub) is not None for sub in subs):
        return "runs"
    return None


def _is_empty(path: Path) -> bool:
    return not path.exists() or (path.is_dir() and not any(path.iterdir()))


def _empty(path: Path) -> None:
    """Remove what ``path`` holds, keeping the folder itself (its permissions, a shell's cwd)."""
    for entry in path.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
