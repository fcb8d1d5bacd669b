"""Per-link views of a finished run folder, or of a compare folder's runs side by side.

``links.csv`` holds one row per link direction *and round*; the question a reader asks is
"which links carried the traffic, how close to capacity were they, and where did one scheduler
save bytes over another", so these functions aggregate over rounds, add utilisation (mean from
``rounds.csv`` phase times, peak from ``samples.csv`` counters when the run has them) and sort.
Everything here only reads CSV/JSON, so it works on any machine, with no network or torch.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table

from fedmst.run.cluster_records import JOBS, ClusterSummary
from fedmst.core.topology import node_order
from fedmst.errors import FedmstError
from fedmst.run.layout import COMPARISON, run_folder_name
from fedmst.run.report import RunStatus, scheduler_label, scheduler_labels, unmeasured
from fedmst.run.results import read_csv, read_links

LINK_SORTS = ("measured", "predicted", "error", "utilisation", "peak", "link")
DIFF_SORTS = ("measured", "ratio", "link")
"""Sort keys of a compare folder's table besides the schedulers' own names."""
FIRST_SCHEDULERS = ("spff", "mst")
"""Without comparison.json these come first, in this order (the usual baseline, then the tree)."""

# Samples come about every 100 ms, but the sampler also records one at each phase boundary, so
# two samples can be a fraction of a millisecond apart; one frame or an htb burst in such a
# sliver would read as several times the link capacity. Intervals shorter than half the
# sampling period therefore do not count towards the peak.
MIN_SAMPLE_INTERVAL_S = 0.05

_ROUND_COLUMNS = ("round", "broadcast_s", "upload_s")
_SAMPLE_COLUMNS = ("t_s", "round", "src", "dst", "bytes")

Row = dict[str, Any]


def compare_runs(path: Path) -> list[tuple[str, Path]]:
    """The runs of a compare folder as (scheduler, run folder), baseline first; ``[]`` for any other folder.

    ``comparison.json`` names the schedulers and their order. A compare still running or
    interrupted has none yet, so then every subfolder holding ``links.csv`` is a run, ``spff``
    first, then ``mst``, then the others by name, and two of them make a compare folder (so does
    one point of a sweep, ``k4-seed1/``). The one place links and plots learn what a compare holds.
    """
    names = _comparison_schedulers(path / COMPARISON)
    if names is not None:
        runs = [(name, path / run_folder_name(name)) for name in names]
        measured = [(name, run) for name, run in runs if (run / "links.csv").is_file()]
        if len(measured) < len(runs) and len(measured) < 2:
            raise FedmstError(_stopped_early(path, runs, measured))
        return measured
    runs = _scan(path)
    return runs if len(runs) >= 2 else []


def _stopped_early(path: Path, runs: list[tuple[str, Path]], measured: list[tuple[str, Path]]) -> str:
    """Why a compare that stopped early has no two runs to set side by side: how each ended."""
    def ended(run: Path) -> str:
        status = RunStatus.of(run)
        return "not run" if status is None else status.ended()

    label = run_labels(runs)
    how = "; ".join(f"{label[name]} {ended(run)}" for name, run in runs)
    hint = f": give {measured[0][1]} for the one run that measured something" if measured else ""
    return f"{path}: the compare stopped before two runs finished a round ({how}){hint}"


def is_compare_dir(path: Path) -> bool:
    """True for a ``fedmst compare`` folder (see :func:`compare_runs`)."""
    return bool(compare_runs(path))


def _comparison_schedulers(path: Path) -> list[str] | None:
    """The schedulers comparison.json names, baseline first; ``None`` without the file or the key
    (comparison.json of the two-scheduler compare predates the key: the folder scan finds its runs)."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise FedmstError(f"{path}: cannot read JSON: {' '.join(str(exc).split())}") from exc
    names = data.get("schedulers") if isinstance(data, dict) else None
    if names is None:
        return None
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise FedmstError(f"{path}: 'schedulers' is not a list of scheduler names")
    baseline = data.get("baseline")
    if baseline in names:
        names = [baseline] + [n for n in names if n != baseline]
    return list(dict.fromkeys(names))


def _scan(path: Path) -> list[tuple[str, Path]]:
    """Every subfolder of ``path`` holding links.csv, named by its scheduler, in compare order."""
    if not path.is_dir():
        return []
    runs = [(_scheduler_of(sub), sub) for sub in path.iterdir() if (sub / "links.csv").is_file()]
    rank = {name: i for i, name in enumerate(FIRST_SCHEDULERS)}
    return sorted(runs, key=lambda run: (rank.get(run[0], len(rank)), run[0]))


def _scheduler_of(run: Path) -> str:
    """The scheduler config.json names (written when the run starts), if the folder is named after it:
    that turns ``mypkg.mod_MySched/`` back into ``mypkg.mod:MySched``; else the folder's name."""
    try:
        name = json.loads((run / "config.json").read_text()).get("scheduler")
    except (OSError, ValueError, AttributeError):
        return run.name
    return name if isinstance(name, str) and run_folder_name(name) == run.name else run.name


def run_labels(runs: list[tuple[str, Path]]) -> dict[str, str]:
    """Each run's scheduler as tables and figures show it (:func:`fedmst.run.report.scheduler_labels`),
    from the name its summary.json records the scheduler's class declaring."""
    return scheduler_labels({name: _recorded_name(run) for name, run in runs})


def _recorded_name(run: Path) -> str | None:
    """The scheduler's own name from summary.json; None for a run still going, or one from before
    summaries recorded it."""
    try:
        name = json.loads((run / "summary.json").read_text()).get("scheduler_name")
    except (OSError, ValueError, AttributeError):
        return None
    return name if isinstance(name, str) and name else None


def _resolve(name: str, labels: dict[str, str]) -> str | None:
    """``name`` as one of the schedulers of ``labels`` (scheduler: its label): the scheduler itself, or,
    if only one fits, its run folder's name, or in any case its label or the class name it was given
    (``mypkg.trees_BfsTree``, ``bfs-tree`` or ``BfsTree`` for ``mypkg.trees:BfsTree`` named ``bfs-tree``)."""
    if name in labels:
        return name
    matches = [s for s, label in labels.items()
               if name == run_folder_name(s) or name.upper() in (label, scheduler_label(s))]
    return matches[0] if len(matches) == 1 else None


def link_table(run_dir: Path, *, sort: str = "measured", round_: int | None = None) -> list[Row]:
    """One row per link direction of a run folder, summed over all rounds or over round ``round_``.

    Rows hold ``link``, ``direction`` ("u->v"), ``src``, ``dst``, ``capacity_mbps``,
    ``measured_bytes``, ``predicted_bytes``, ``weight_bytes``, ``other_bytes``, ``error_pct``
    (weight bytes against predicted, as in links.csv), ``mean_utilisation`` and
    ``peak_utilisation`` (fractions of capacity; ``None`` when unknown) and ``queue_drops``.

    The peak is the busiest interval between two counter readings (about 100 ms of the network's
    time), at most the capacity: htb lets a link that was less than full send its 15 KiB burst at
    once, so a saturated link's reading can hold up to that much more than capacity times the
    interval (1.2 % of 100 ms at 100 Mbit/s, 12 % at 10 Mbit/s; on NSFNET at 100 Mbit/s, 20
    readings came out above capacity, by at most 15.9 kB: 101.2 %). That is the link at its
    capacity, not above it.
    """
    _check_sort(sort, LINK_SORTS)
    _check_run_dir(run_dir)
    links = read_links(run_dir / "links.csv")
    rounds = _read(run_dir / "rounds.csv", _ROUND_COLUMNS)
    if round_ is not None:
        present = sorted({r.round for r in links})
        if present == [0]:  # links.csv's round 0 is a whole run
            raise FedmstError(f"{run_dir}: its links were measured over the whole run, not round by round (tasks on "
                              "independent clocks, or a cluster's jobs, overlap): leave out --round")
        if round_ not in present:
            raise FedmstError(f"{run_dir} has no round {round_} (rounds: {', '.join(map(str, present)) or 'none'})")
        links = [r for r in links if r.round == round_]
        rounds = [r for r in rounds if int(r["round"]) == round_]
    # a link direction can only carry model traffic while a transfer phase runs; a cluster's jobs
    # overlap and set up while others run, so its links are measured over the whole trace
    transfer_s = (ClusterSummary.read(run_dir).makespan_s or 0.0 if (run_dir / JOBS).is_file()
                  else sum(float(r["broadcast_s"]) + float(r["upload_s"]) for r in rounds))
    peaks = _peak_rates(run_dir / "samples.csv", round_)

    rows: dict[tuple[str, str], Row] = {}
    for r in links:
        hop = (r.src, r.dst)
        row = rows.setdefault(hop, {
            "link": r.link, "direction": f"{hop[0]}->{hop[1]}", "src": hop[0], "dst": hop[1],
            "capacity_mbps": r.capacity_mbps, "measured_bytes": 0, "predicted_bytes": 0,
            "weight_bytes": 0, "other_bytes": 0, "queue_drops": 0,
        })
        for key, value in (("measured_bytes", r.measured_bytes), ("predicted_bytes", r.predicted_bytes),
                           ("weight_bytes", r.measured_weight_bytes), ("other_bytes", r.measured_other_bytes),
                           ("queue_drops", r.queue_drops)):
            row[key] += value
    captured = _captures(run_dir) if round_ is None else {}  # a capture spans every round
    circuits = _circuits(run_dir) if round_ is None else None  # a circuit may be held across rounds
    busy = _busy_mbps(links, rounds) if circuits is not None else {}
    for hop, row in rows.items():
        if captured:
            row["capture_bytes"] = captured.get(hop)
        if circuits is not None:
            row["circuits"], row["reserved_mbps"] = circuits.get(hop, (0, None))
            row["busy_mbps"] = busy.get(hop)
        capacity_bps = row["capacity_mbps"] * 1e6
        row["error_pct"] = _error_pct(row["weight_bytes"], row["predicted_bytes"])
        row["mean_utilisation"] = (row["measured_bytes"] * 8 / (capacity_bps * transfer_s)
                                   if capacity_bps and transfer_s else None)
        rate = peaks.get(hop) if peaks is not None else None
        row["peak_utilisation"] = min(rate * 8 / capacity_bps, 1.0) if rate is not None and capacity_bps else None
    return _sorted(list(rows.values()), {
        "measured": lambda r: r["measured_bytes"],
        "predicted": lambda r: r["predicted_bytes"],
        # the sign says over or under, the size says how wrong: the worst either way comes first
        "error": lambda r: abs(r["error_pct"]),
        "utilisation": lambda r: r["mean_utilisation"],
        "peak": lambda r: r["peak_utilisation"],
    }, sort)


def diff_table(compare_dir: Path, *, sort: str = "measured", against: str | None = None,
               round_: int | None = None) -> list[Row]:
    """Per link direction of a compare folder: measured bytes under every scheduler, and each other
    scheduler against ``against`` (default: the baseline), over all rounds or round ``round_`` of each run.

    Rows hold ``link``, ``direction``, ``src``, ``dst``, ``against`` (the scheduler compared against),
    ``labels`` ({scheduler: its label in headers}, :func:`run_labels`),
    ``bytes`` ({scheduler: measured bytes}, in compare order), and for every other scheduler
    ``difference_bytes`` ({scheduler: its bytes - against's}, negative where it saved traffic) and
    ``ratio`` ({scheduler: its bytes / against's}; ``math.inf`` where only it sent anything there, ``None``
    where neither did, shown as ``new`` and ``-``). ``sort`` is
    ``measured`` (the default: the largest absolute difference of any scheduler first, since that is
    where the schedulers part), ``ratio`` (the largest ratio), ``link``, or a scheduler's name (its bytes).
    """
    runs = compare_runs(compare_dir)
    if not runs:
        raise FedmstError(f"{compare_dir} is not a compare folder: no {COMPARISON} and fewer than two run folders "
                          f"(subfolders with links.csv) inside")
    names = [name for name, _ in runs]
    labels = run_labels(runs)
    by_name = None if sort in DIFF_SORTS else _resolve(sort, labels)
    if by_name is None:
        _check_sort(sort, (DIFF_SORTS[0], *names, *DIFF_SORTS[1:]))
    base = names[0] if against is None else _resolve(against, labels)
    if base is None:
        raise FedmstError(f"{compare_dir}: no scheduler {against!r} to compare against "
                          f"(schedulers: {', '.join(names)})")
    others = [n for n in names if n != base]
    per_run = {name: {r["direction"]: r for r in link_table(run, round_=round_)} for name, run in runs}
    rows = []
    for direction in set().union(*per_run.values()):
        any_run = next(r[direction] for r in per_run.values() if direction in r)
        measured = {n: per_run[n][direction]["measured_bytes"] if direction in per_run[n] else 0 for n in names}
        rows.append({
            "link": any_run["link"], "direction": direction, "src": any_run["src"], "dst": any_run["dst"],
            "against": base, "labels": labels, "bytes": measured,
            "difference_bytes": {n: measured[n] - measured[base] for n in others},
            "ratio": {n: _quotient(measured[n], measured[base]) for n in others},
        })
    keys: dict[str, Callable[[Row], float | None]] = {
        "measured": lambda r: max(map(abs, r["difference_bytes"].values()), default=0),
        "ratio": lambda r: max((x for x in r["ratio"].values() if x is not None), default=None),
    }
    if by_name is not None:
        keys[sort] = lambda r: r["bytes"][by_name]
    return _sorted(rows, keys, sort)


def render(rows: list[Row], title: str) -> FittedTable:
    """``link_table`` or ``diff_table`` rows in human units, with a totals row, as a table that fits
    the console it is printed on (:class:`FittedTable`).

    Totals are given only where adding up means something: bytes and drops, the overall error
    of weight against predicted bytes, and each scheduler's overall ratio; utilisations and
    capacities are per link and left blank.
    """
    columns = _diff_columns(rows) if rows and "bytes" in rows[0] else _link_columns(rows)
    return FittedTable(title, [Column("link direction", [r["direction"] for r in rows] + ["total"]), *columns])


@dataclass(frozen=True)
class Column:
    """A rendered column: its header, its cells (each row's, then the total's), and ``drop``: the
    columns with the highest are the first a narrow console leaves out, together (0: never)."""

    header: str
    cells: list[str]
    drop: int = 0


class FittedTable:
    """A table laid out for the width it is printed at (rich passes the console's): at 80 columns,
    a default terminal's and what rich takes when the output is piped, every column at once would
    cut link names short and wrap every row. So headers wrap at their spaces first, then whole
    groups of columns are left out, the least needed first (:attr:`Column.drop`), and the caption
    names them and the width that shows them all. No cell is ever cut."""

    def __init__(self, title: str, columns: list[Column]) -> None:
        self.title, self.columns = title, columns

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.fit(options.max_width)

    def fit(self, width: int | None = None) -> Table:
        """The table within ``width`` characters; every column, each header on one line, for ``None``."""
        shown, widths, dropped = self.columns, _widths(self.columns, width), set()
        for drop in sorted({c.drop for c in self.columns if c.drop}, reverse=True):
            if widths is not None:
                break
            dropped.add(drop)
            shown = [c for c in self.columns if c.drop not in dropped]
            widths = _widths(shown, width)
        left_out = [c for c in self.columns if c.drop in dropped]
        caption = None
        if left_out:
            full = _table_width(_wrapped_widths(self.columns))
            caption = (f"not shown at {width} columns: {', '.join(c.header for c in left_out)} "
                       f"(a terminal {full} wide, or COLUMNS={full}, shows every column)")
        table = Table(title=self.title, caption=caption)
        # nothing left to leave out: rich squeezes what remains
        for i, (column, w) in enumerate(zip(shown, widths or [None] * len(shown))):
            table.add_column(column.header, justify="right" if i else "left", width=w)
        last = len(self.columns[0].cells) - 1
        for i in range(last + 1):
            table.add_row(*(c.cells[i] for c in shown), end_section=i == last - 1, style="bold" if i == last else None)
        return table


def _widths(columns: list[Column], width: int | None) -> list[int] | None:
    """Each column's width: its header on one line where every header fits so in ``width``, else
    on two; ``None`` if the columns do not fit even so."""
    one_line = [max(cell_len(c.header), *map(cell_len, c.cells)) for c in columns]
    if width is None or _table_width(one_line) <= width:
        return one_line
    wrapped = _wrapped_widths(columns)
    return wrapped if _table_width(wrapped) <= width else None


def _wrapped_widths(columns: list[Column]) -> list[int]:
    """The narrowest each column gets without cutting a cell or wrapping its header onto a third line."""
    return [max(_two_lines(c.header), *map(cell_len, c.cells)) for c in columns]


def _two_lines(header: str) -> int:
    """The narrowest width that wraps ``header`` at a space onto two lines ("MST /" over "SPFF", not
    "MST", "/", "SPFF"): rich wraps greedily, so the best split's longer half is enough."""
    words = header.split()
    return min((max(cell_len(" ".join(words[:i])), cell_len(" ".join(words[i:]))) for i in range(1, len(words))),
               default=cell_len(header))


def _table_width(widths: list[int]) -> int:
    """Characters a rich Table of these column widths takes: a space either side of each cell, and a
    border before each column and after the last."""
    return sum(widths) + 3 * len(widths) + 1


def _link_columns(rows: list[Row]) -> list[Column]:
    shown = (_LINK_COLUMNS + (_CAPTURE_COLUMN if rows and "capture_bytes" in rows[0] else ())
             + (_CIRCUIT_COLUMNS if rows and "circuits" in rows[0] else ()))
    totals = {c.key: sum(r[c.key] or 0 for r in rows) for c in shown if c.summed}
    totals["error_pct"] = _error_pct(totals["weight_bytes"], totals["predicted_bytes"])
    return [Column(c.header, [c.fmt(r[c.key]) for r in rows] + [c.fmt(totals[c.key]) if c.key in totals else ""],
                   c.drop) for c in shown]


def _captures(run_dir: Path) -> dict[tuple[str, str], int]:
    """Bytes each captured link direction's file holds (``--pcap``), from ``pcap/index.json``."""
    try:
        index = json.loads((run_dir / "pcap" / "index.json").read_text())
        return {(c["src"], c["dst"]): int(c["bytes"]) for c in index["captures"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _circuits(run_dir: Path) -> dict[tuple[str, str], tuple[int, float]] | None:
    """Per link direction, from optical.csv: how many circuits crossed it (either way, each once
    however many plans held it) and the most Mbit/s one plan's circuits reserved on it together.
    None where the run has no optical.csv."""
    if not (run_dir / "optical.csv").is_file():
        return None
    plans: dict[int, list[dict[str, str]]] = defaultdict(list)
    for r in _read(run_dir / "optical.csv", ("task", "transfer", "path", "wavelength", "reserved_mbps")):
        if r["path"]:
            plans[int(r.get("from_round") or 1)].append(r)  # optical.csv before from_round: the first plan
    seen: dict[tuple[str, str], set[tuple[str, ...]]] = defaultdict(set)
    reserved: dict[tuple[str, str], float] = {}
    for held in plans.values():
        at_once: dict[tuple[str, str], float] = defaultdict(float)
        for c in held:
            nodes = c["path"].split("-")
            for hop in [*zip(nodes, nodes[1:]), *zip(nodes[1:], nodes)]:
                seen[hop].add((c["task"], c["transfer"], c["path"], c["wavelength"]))
                at_once[hop] += float(c["reserved_mbps"])
        for hop, mbps in at_once.items():
            reserved[hop] = max(reserved.get(hop, 0.0), mbps)
    return {hop: (len(keys), reserved[hop]) for hop, keys in seen.items()}


def _busy_mbps(links: list[Any], rounds: list[dict[str, str]]) -> dict[tuple[str, str], float]:
    """Each link direction's Mbit/s in the transfer phase that carried it faster, over the rounds in
    which that phase carried it: what its circuits' reserved rate is measured against. Empty where
    links.csv has no bytes per phase (independent clocks)."""
    seconds = {(int(r["round"]), p): float(r[f"{p}_s"]) for r in rounds for p in ("broadcast", "upload")}
    moved: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: {"broadcast": [0, 0.0],
                                                                                "upload": [0, 0.0]})
    for r in links:
        for p, n in (("broadcast", r.broadcast_bytes), ("upload", r.upload_bytes)):
            if n is None:
                return {}
            if n and seconds.get((r.round, p)):
                moved[(r.src, r.dst)][p][0] += n
                moved[(r.src, r.dst)][p][1] += seconds[(r.round, p)]
    return {hop: max(n * 8 / s / 1e6 for n, s in by.values() if s) for hop, by in moved.items()}


def _diff_columns(rows: list[Row]) -> list[Column]:
    """Each scheduler's MB in compare order, then per other scheduler its difference and ratio, so two
    schedulers read SPFF MB, MST MB, MST - SPFF MB, MST / SPFF. A narrow console leaves out the
    differences first (each is one MB column less another), then the ratios."""
    base, names, others = rows[0]["against"], list(rows[0]["bytes"]), list(rows[0]["ratio"])
    label = rows[0]["labels"]
    total = {n: sum(r["bytes"][n] for r in rows) for n in names}
    columns = [Column(f"{label[n]} MB", [_mb(r["bytes"][n]) for r in rows] + [_mb(total[n])]) for n in names]
    for n in others:
        vs = f"{label[n]} {{}} {label[base]}"
        columns += [
            Column(vs.format("-") + " MB", [_signed_mb(r["difference_bytes"][n]) for r in rows]
                   + [_signed_mb(total[n] - total[base])], drop=2),
            Column(vs.format("/"), [_ratio(r["ratio"][n]) for r in rows] + [_ratio(_quotient(total[n], total[base]))],
                   drop=1),
        ]
    return columns


def _quotient(bytes_: int, against: int) -> float | None:
    """``bytes_ / against``: ``inf`` where only ``bytes_`` is traffic, ``None`` where neither is."""
    if against:
        return bytes_ / against
    return math.inf if bytes_ else None


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f}"


def _signed_mb(n: int) -> str:
    return f"{n / 1e6:+.2f}"


def _pct(fraction: float | None) -> str:
    return "-" if fraction is None else f"{100 * fraction:.1f}"


def _ratio(r: float | None) -> str:
    """``new`` where only the scheduler carried anything (x/0), ``-`` where neither did (0/0)."""
    return "-" if r is None else "new" if math.isinf(r) else f"{r:.2f}"


@dataclass(frozen=True)
class _LinkColumn:
    """A column of a run folder's table: header, ``link_table`` key, format; ``drop`` as :attr:`Column.drop`;
    ``summed`` where the totals row adds it up."""

    header: str
    key: str
    fmt: Callable[[Any], str]
    drop: int
    summed: bool = False


_LINK_COLUMNS = (
    _LinkColumn("measured MB", "measured_bytes", _mb, 0, summed=True),
    _LinkColumn("predicted MB", "predicted_bytes", _mb, 3, summed=True),
    _LinkColumn("weights MB", "weight_bytes", _mb, 7, summed=True),
    _LinkColumn("other MB", "other_bytes", _mb, 7, summed=True),
    _LinkColumn("error %", "error_pct", lambda e: f"{e:+.2f}", 2),
    _LinkColumn("Mbit/s", "capacity_mbps", lambda c: f"{c:g}", 6),
    _LinkColumn("mean util %", "mean_utilisation", _pct, 1),
    _LinkColumn("peak util %", "peak_utilisation", _pct, 1),
    _LinkColumn("drops", "queue_drops", str, 4, summed=True),
)
"""The run folder's columns; a narrow console leaves out weights and other MB (they add up to
measured, and the error is weights against predicted) first, then capacity, pcap MB, drops,
predicted MB, error and last the utilisations."""
_CAPTURE_COLUMN = (
    _LinkColumn("pcap MB", "capture_bytes", lambda n: "" if n is None else _mb(n), 5, summed=True),
)
"""With ``--pcap``: the bytes of each direction's capture (pcap/SRC-DST.pcap), beside what the counters measured."""
_CIRCUIT_COLUMNS = (
    _LinkColumn("circuits", "circuits", lambda n: str(n or ""), 5),
    _LinkColumn("reserved Mbit/s", "reserved_mbps", lambda m: "" if m is None else f"{m:g}", 5),
    _LinkColumn("busy Mbit/s", "busy_mbps", lambda m: "" if m is None else f"{m:.1f}", 5),
)
"""On a topology with all-optical nodes (optical.csv): the circuits each direction carried, the
Mbit/s they reserved on it together, and its measured rate in its busier transfer phase; a narrow
console leaves them out with pcap MB."""


def _check_sort(sort: str, choices: tuple[str, ...]) -> None:
    if sort not in choices:
        raise FedmstError(f"unknown sort key {sort!r}: choose one of {', '.join(choices)}")


def check_measured(run_dir: Path) -> None:
    """Refuse a run folder whose run finished no round, saying how it ended (its summary.json),
    rather than calling it no run folder."""
    status = RunStatus.unmeasured(run_dir / "summary.json") if (run_dir / "summary.json").is_file() else None
    if status is not None:
        raise FedmstError(unmeasured(run_dir, status))


def _check_run_dir(run_dir: Path) -> None:
    """Refuse anything but a run folder with a one-line message saying what is missing."""
    if not run_dir.is_dir():
        raise FedmstError(f"{run_dir} is not a folder")
    runs = compare_runs(run_dir)
    if runs:
        # callers show a compare folder with diff_table; this guards the ones that did not check
        raise FedmstError(f"{run_dir} is a compare folder: give one of its run folders "
                          f"({', '.join(str(path) for _, path in runs)}) for one scheduler's links")
    check_measured(run_dir)
    if (run_dir / JOBS).is_file() and not (run_dir / "links.csv").is_file():
        raise FedmstError(no_cluster_links(run_dir))
    missing = [name for name in ("links.csv", "rounds.csv") if not (run_dir / name).is_file()]
    if missing:
        inside = _scan(run_dir)
        raise FedmstError(f"{run_dir} is not a run folder (missing {', '.join(missing)}) nor a compare folder ("
                          + (f"only one run folder inside: give {inside[0][1]}" if inside else
                             f"no {COMPARISON}, no run folders inside") + ")")


def no_cluster_links(run_dir: Path) -> str:
    """Why a cluster folder has no links.csv: it ran on the fluid model, or it was emulated and
    ended before writing its counters (killed: no summary.json either)."""
    try:
        mode = json.loads((run_dir / "config.json").read_text()).get("mode")
    except (OSError, ValueError, AttributeError):
        mode = None
    if mode == "simulate":
        return (f"{run_dir}: a cluster that ran on the fluid model (--mode simulate) measured no link; "
                "--mode emulate measures them")
    if not (run_dir / "summary.json").is_file():
        return (f"{run_dir}: an emulated cluster that did not end (killed, it wrote no summary.json) and never wrote "
                "its link counters (links.csv, written when the command ends): its jobs.csv and slots.csv hold what "
                "finished")
    return f"{run_dir}: a cluster folder without links.csv (its summary.json says how it ended)"


def _read(path: Path, needed: tuple[str, ...]) -> list[dict[str, str]]:
    """Read a CSV of the run folder, naming the file and columns if it is from another format."""
    rows = read_csv(path)
    missing = [c for c in needed if rows and c not in rows[0]]
    if missing:
        raise FedmstError(f"{path} lacks the columns {', '.join(missing)}")
    return rows


def rate_series(path: Path, round_: int | None = None) -> dict[tuple[str, str], list[tuple[float, float]]] | None:
    """Each link direction's rate over time from ``samples.csv``: (interval midpoint in seconds,
    bytes per second) between consecutive counter samples.

    ``None`` when the run has no ``samples.csv`` (older run folders), so "unknown" is never
    shown as zero. The counters are cumulative over the run, so any two consecutive samples of a
    direction give its rate over that interval, across phase boundaries too; intervals shorter
    than ``MIN_SAMPLE_INTERVAL_S`` (the extra sample at each phase boundary) are skipped, since one
    frame in them reads as many times the capacity.
    """
    if not path.is_file():
        return None
    series: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
    for s in _read(path, _SAMPLE_COLUMNS):
        if round_ is None or int(s["round"]) == round_:
            series[(s["src"], s["dst"])].append((float(s["t_s"]), int(s["bytes"])))
    rates = {}
    for hop, points in series.items():
        points.sort()
        rates[hop] = [((t0 + t1) / 2, (b1 - b0) / (t1 - t0)) for (t0, b0), (t1, b1) in zip(points, points[1:])
                      if t1 - t0 >= MIN_SAMPLE_INTERVAL_S]
    return rates


def _peak_rates(path: Path, round_: int | None) -> dict[tuple[str, str], float] | None:
    """Highest bytes per second of each link direction between consecutive counter samples."""
    series = rate_series(path, round_)
    if series is None:
        return None
    return {hop: max(r for _, r in points) for hop, points in series.items() if points}


def _sorted(rows: list[Row], keys: dict[str, Callable[[Row], float | None]], sort: str) -> list[Row]:
    """Rows in natural link order, then (unless ``sort == "link"``) by the key, largest first.

    The sort is stable, so ties stay in link order; unknown values (``None``) go last.
    """
    rows.sort(key=lambda r: (sorted(map(node_order, (r["src"], r["dst"]))), node_order(r["src"])))
    if sort != "link":
        key = keys[sort]
        rows.sort(key=lambda r: (key(r) is None, -(key(r) or 0)))
    return rows


def _error_pct(weight_bytes: int, predicted_bytes: int) -> float:
    """Same definition as the coordinator's links.csv ``error_pct``: 0 where nothing was planned."""
    return 100 * (weight_bytes - predicted_bytes) / predicted_bytes if predicted_bytes else 0.0
