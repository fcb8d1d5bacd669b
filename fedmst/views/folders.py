"""Which command wrote a folder, and what ``fedmst plot`` draws of each kind: a flag that a kind of
folder cannot honour is refused in one line that says what the folder offers instead, never
silently ignored.

The kinds: a ``run`` folder, a ``compare`` folder (a run folder per scheduler), a ``sweep`` folder
(its points' compare folders), a ``cluster`` folder (jobs.csv), and a cluster ``--policies``
comparison (a cluster folder per policy). The ``.fedmst`` mark a command leaves names it; a folder
from before the mark is known by its files. Only JSON and file names are read here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from fedmst.errors import FedmstError
from fedmst.run.cluster_records import JOBS
from fedmst.run.folders import MARKER
from fedmst.run.layout import COMPARISON, SWEEP_RECORD
from fedmst.views.links import compare_runs, no_cluster_links

KINDS = ("run", "compare", "sweep", "cluster", "policies")
HONOURS = {
    "run": ("--out", "--task", "--link", "--accuracy", "--timeline", "--slots"),
    "compare": ("--out", "--task", "--accuracy", "--link", "--timeline", "--slots"),  # the last three: refused
    # naming its runs
    "sweep": (),
    "cluster": ("--out", "--jobs", "--link"),
    "policies": ("--out",),
}
"""The flags of ``fedmst plot`` each kind of folder can honour."""
FIGURES = ("--link", "--accuracy", "--timeline", "--jobs", "--slots")
"""The flags that pick a figure other than the folder's own; ``--task`` only picks within the run's
or compare's own figure."""
NEEDS = {
    "--jobs": "draws a cluster folder's jobs (fedmst cluster)",
    "--link": "draws one link of a run folder (or of an emulated cluster)",
    "--accuracy": "draws the rounds of a run or compare folder",
    "--timeline": "draws the phases of one run folder (its timeline.csv)",
    "--slots": "draws the timeslots of one run folder on a fabric (its slot_occupancy.csv)",
    "--task": "picks the task whose trees a run or compare folder's own figure overlays",
}


def folder_kind(path: Path) -> str | None:
    """The kind of folder ``path`` is (one of :data:`KINDS`), None for a folder no command of fedmst
    wrote (or one it left empty)."""
    try:
        marked = json.loads((path / MARKER).read_text()).get("command")
    except (OSError, ValueError, AttributeError):
        marked = None
    comparison = _json(path / COMPARISON)
    if marked == "cluster" or (path / JOBS).is_file() or "policies" in comparison:
        policies = "policies" in comparison or (not (path / JOBS).is_file() and _inside(path, JOBS))
        return "policies" if policies else "cluster"
    if marked == "sweep" or (path / "sweep.csv").is_file() or (path / SWEEP_RECORD).is_file():
        return "sweep"
    if marked == "compare" or comparison:
        return "compare"
    if marked == "run" or any((path / f).is_file() for f in ("config.json", "summary.json", "links.csv")):
        return "run"
    try:
        return "compare" if compare_runs(path) else None
    except FedmstError:
        return "compare"


def check_plot(path: Path, flags: Mapping[str, bool]) -> str | None:
    """Refuse, in one :class:`FedmstError` line, the ``flags`` given (``--out``, ``--task``, ``--link``,
    ``--accuracy``, ``--timeline``, ``--jobs``: True where given) that ``path``'s kind of folder
    cannot honour, saying what it offers instead; return its kind."""
    if not path.exists():
        raise FedmstError(f"{path}: no such folder")
    if not path.is_dir():
        raise FedmstError(f"{path} is a file, not a folder of results")
    kind = folder_kind(path)
    given = [flag for flag, on in flags.items() if on]
    if kind is None:
        if any((path / f).exists() for f in (COMPARISON, "sweep.csv", JOBS)):
            return None  # the drawing's own checks say what is wrong with the files
        raise FedmstError(f"{path} holds no results of fedmst (no run, compare, sweep or cluster folder: "
                          f"{'it is empty' if not any(path.iterdir()) else f'no {MARKER}, config.json or links.csv'})")
    figure = [flag for flag in given if flag in FIGURES]
    for flag in given:
        if flag not in HONOURS[kind]:
            raise FedmstError(_refusal(path, kind, flag))
    if "--task" in given and figure:
        raise FedmstError(f"--task picks the task whose trees the folder's own figure overlays; {figure[0]} draws "
                          f"every task: leave --task out")
    if kind == "cluster" and "--link" in given and not (path / "links.csv").is_file():
        raise FedmstError(no_cluster_links(path))
    return kind


def _refusal(path: Path, kind: str, flag: str) -> str:
    if kind == "sweep" and flag == "--out":
        return (f"--out names one PNG, and a sweep folder's figures are several (latency_vs_local_models*.png, "
                f"bandwidth_vs_local_models*.png and, with several models, regime_map*.png), written again into "
                f"{path}/: leave --out out")
    return f"{flag} {NEEDS[flag]}; {path} is {offers(path, kind)}"


def offers(path: Path, kind: str) -> str:
    """What a folder of ``kind`` at ``path`` draws, as the rest of a sentence that names it."""
    if kind == "run":
        return ("a run folder: plot it without flags for its links and trees (--task NAME for another task's), "
                "or with --link A-B, --accuracy, --timeline or --slots")
    if kind == "compare":
        runs = ", ".join(str(run) for _, run in _runs(path))
        return ("a compare folder: plot it without flags for a panel per scheduler (--task NAME for another task's), "
                "or with --accuracy; --link, --timeline and --slots draw one of its runs"
                + (f" ({runs})" if runs else ""))
    if kind == "sweep":
        found = sorted(p.parent for p in path.glob("*/*/links.csv"))
        return ("a sweep folder, with no per-link trace, rounds or timeline of its own: plot it without flags to draw "
                "its figures again from its sweep.csv; --link, --accuracy, --timeline and --slots draw one of its runs"
                + (f", e.g. {found[0]}" if found else " (it holds none)"))
    if kind == "cluster":
        link = (", or with --link A-B for a link's utilisation over the trace" if (path / "links.csv").is_file()
                else "")
        return ("a cluster folder: plot it without flags (or with --jobs) for its Gantt chart and JCT distribution"
                + link)
    policies = sorted(p.parent for p in path.glob(f"*/{JOBS}"))
    return ("a cluster --policies comparison: plot it without flags for every policy's JCT distribution; --jobs and "
            "--link draw one policy's cluster" + (f": give one of {', '.join(map(str, policies))}" if policies else ""))


def _runs(path: Path) -> list[tuple[str, Path]]:
    try:
        return compare_runs(path)
    except FedmstError:
        return []


def _json(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _inside(path: Path, name: str) -> bool:
    """Whether a folder right inside ``path`` holds ``name``."""
    try:
        return any((sub / name).is_file() for sub in path.iterdir())
    except OSError:
        return False


def check_links(folder: Path) -> None:
    """A sweep folder or a cluster --policies comparison holds links only in the folders inside it:
    refuse it naming one of them (``fedmst links`` asks this first)."""
    kind = folder_kind(folder)
    if kind == "sweep":
        points = sorted(p.parent.parent for p in folder.glob("*/*/links.csv"))
        raise FedmstError(f"{folder} is a sweep folder, with no links of its own: give one of its points' folders for "
                          f"its schedulers side by side, or one run folder inside it"
                          + (f" (e.g. {points[0]}, {sorted(points[0].glob('*/links.csv'))[0].parent})"
                             if points else " (it holds none)"))
    if kind == "policies":
        policies = sorted(p.parent for p in folder.glob(f"*/{JOBS}"))
        raise FedmstError(f"{folder} is a cluster --policies comparison, with no links of its own: give one policy's "
                          f"cluster folder" + (f" ({', '.join(map(str, policies))})" if policies else ""))


__all__ = ["FIGURES", "HONOURS", "KINDS", "NEEDS", "check_links", "check_plot", "folder_kind", "offers"]
