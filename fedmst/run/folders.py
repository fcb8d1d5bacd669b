"""Output folders: every command writes into a folder of its own, so two runs' results never mix
and none is lost without being asked.

A folder given with ``--out`` must not exist yet or be empty, and must not lie inside a folder of
fedmst's results; one that holds anything is refused in one line, unless ``--overwrite`` says to
replace it whole. Without ``--out`` a command takes a fresh folder after its default:
``runs/compare``, then ``runs/compare-2``, ``runs/compare-3`` ... and says which. The folder is
created, or emptied for ``--overwrite``, only when the command begins writing, after its inputs
were checked: bad input leaves it as it was.

Each folder a command writes is marked with :data:`MARKER`, naming the command. ``--overwrite``
only ever removes a marked folder, never one a mistyped ``--out`` names, and never one a run is
still writing (each run holds a lock on its folder while it writes).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Literal, get_args

from fedmst.errors import FedmstError

Kind = Literal["run", "compare", "sweep", "cluster"]
MARKER = ".fedmst"
"""The file that makes a folder fedmst's: ``{"command": KIND}``, written when the folder is claimed."""


@dataclass(frozen=True)
class OutputFolder:
    """Where a command writes, and whether it may replace what is there (``--overwrite``)."""

    path: Path
    overwrite: bool = False


def choose(out: Path, *, given: bool, overwrite: bool = False) -> OutputFolder:
    """The folder a command will write, checked before anything runs: ``out`` as given (refused
    if it holds anything, unless ``overwrite``, or if it lies in a folder of fedmst's results);
    when ``out`` is the command's default, ``out`` itself with ``overwrite``, else the first of
    ``out``, ``out-2``, ``out-3`` ... that is missing or empty.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as root:
    ...     (Path(root) / "run").mkdir()
    ...     (Path(root) / "run" / "notes").touch()
    ...     choose(Path(root) / "run", given=False).path.name
    'run-2'
    """
    try:
        _check_outside(out)
        if not given and not overwrite:
            free = next((path for path in _names(out) if _is_empty(path)), None)
            if free is None:
                raise FedmstError(f"output folder {out}: {out.name}-2 to {out.name}-{MAX_NAMES} are taken too: "
                                  "give --out")
            return OutputFolder(free)
        _check(out, overwrite)
    except OSError as exc:
        raise FedmstError(f"output folder {out}: {exc.strerror or exc}") from None
    return OutputFolder(out, overwrite)


MAX_NAMES = 9999
"""The last default folder tried: ``out-9999``."""


def _names(out: Path) -> Iterator[Path]:
    """``out``, ``out-2``, ``out-3`` ... ``out-9999``, the names a default folder may take."""
    yield out
    yield from (out.with_name(f"{out.name}-{n}") for n in range(2, MAX_NAMES + 1))


def claim(folder: OutputFolder, kind: Kind) -> int:
    """Make the folder (emptied first with ``overwrite``), mark it as ``kind``'s and lock it for
    this process; return the open folder whose lock is held until it is closed. Two commands
    writing one folder at once would mix their results: the second is refused."""
    path = folder.path
    try:
        path.mkdir(parents=True, exist_ok=True)
        handle = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise FedmstError(f"output folder {path}: cannot write there ({exc.strerror})") from None
    try:
        _lock(handle, path)
        _check(path, folder.overwrite)
        if folder.overwrite:
            _empty(path)
        (path / MARKER).write_text(json.dumps({"command": kind}) + "\n")
    except OSError as exc:
        os.close(handle)
        raise FedmstError(f"output folder {path}: cannot write there ({exc.strerror})") from None
    except BaseException:
        os.close(handle)
        raise
    return handle


def holds(path: Path) -> str | None:
    """What fedmst wrote into ``path`` (``a run``, ``a compare``, ``a sweep``), as its marker
    says; None for a folder fedmst did not write (or an older fedmst, before folders were marked)."""
    try:
        kind = json.loads((path / MARKER).read_text()).get("command")
    except (OSError, ValueError, AttributeError):
        return None
    return f"a {kind}" if kind in get_args(Kind) else None


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
        raise FedmstError(f"output folder {path} is not empty ({shown}) and holds no results of this fedmst "
                          f"(no {MARKER}): give another --out; --overwrite only replaces a folder fedmst made")
    if not overwrite:
        raise FedmstError(f"output folder {path} already holds {what}: give another --out, or add "
                          "--overwrite to replace it")


def _check_outside(out: Path) -> None:
    """Refuse a folder inside another command's results: its files would mix with theirs."""
    for parent in out.absolute().parents:
        what = holds(parent)
        if what is not None:
            raise FedmstError(f"output folder {out} is inside {parent}, which holds {what}: give a folder outside it")


def _lock(handle: int, path: Path) -> None:
    """Lock the open folder ``handle`` for this process; refused while another process holds it."""
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise FedmstError(f"output folder {path} is in use by another run: give this one its own --out") from None


def _is_empty(path: Path) -> bool:
    return not path.exists() or (path.is_dir() and not any(path.iterdir()))


def _empty(path: Path) -> None:
    """Remove what ``path`` holds, keeping the folder itself (its permissions, a shell's cwd);
    refused, removing nothing, while a run still writes any folder in it."""
    held = []
    try:
        for marker in path.rglob(MARKER):
            if marker.parent != path:  # this process holds that one
                held.append(os.open(marker.parent, os.O_RDONLY | os.O_DIRECTORY))
                _lock(held[-1], marker.parent)
        for entry in path.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    finally:
        for handle in held:
            os.close(handle)
