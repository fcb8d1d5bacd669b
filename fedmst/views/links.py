"""Per-link views of a finished run folder, or of a compare folder's two runs side by side.

``links.csv`` holds one row per link direction *and round*; the question a reader asks is
"which links carried the traffic, how close to capacity were they, and where did MST save
bytes over SPFF", so these functions aggregate over rounds, add utilisation (mean from
``rounds.csv`` phase times, peak from ``samples.csv`` counters when the run has them) and sort.
Everything here only reads CSV/JSON, so it works on any machine, with no network or torch.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from rich.table import Table

from fedmst.errors import FedmstError
from fedmst.run.results import read_csv
from fedmst.core.topology import node_order

LINK_SORTS = ("measured", "predicted", "error", "utilisation", "peak", "link")
DIFF_SORTS = ("measured", "spff", "mst", "ratio", "link")

# Samples come about every 100 ms, but the sampler also records one at each phase boundary, so
# two samples can be a fraction of a millisecond apart; one frame or an htb burst in such a
# sliver would read as several times the link capacity. Intervals shorter than half the
# sampling period therefore do not count towards the peak.
MIN_SAMPLE_INTERVAL_S = 0.05

_LINK_COLUMNS = ("round", "link", "src", "dst", "capacity_mbps", "predicted_bytes", "measured_bytes",
                 "measured_weight_bytes", "measured_other_bytes", "queue_drops")
_ROUND_COLUMNS = ("round", "broadcast_s", "upload_s")
_SAMPLE_COLUMNS = ("t_s", "round", "src", "dst", "bytes")

Row = dict[str, Any]


def is_compare_dir(path: Path) -> bool:
    """True for a ``fedmst compare`` folder: both schedulers' run folders inside it."""
    return all((path / s / "links.csv").is_file() for s in ("spff", "mst"))


def link_table(run_dir: Path, *, sort: str = "measured", round_: int | None = None) -> list[Row]:
    """One row per link direction of a run folder, summed over all rounds or over round ``round_``.

    Rows hold ``link``, ``direction`` ("u->v"), ``src``, ``dst``, ``capacity_mbps``,
    ``measured_bytes``, ``predicted_bytes``, ``weight_bytes``, ``other_bytes``, ``error_pct``
    (weight bytes against predicted, as in links.csv), ``mean_utilisation`` and
    ``peak_utilisation`` (fractions of capacity; ``None`` when unknown) and ``queue_drops``.
    """
    _check_sort(sort, LINK_SORTS)
    _check_run_dir(run_dir)
    links = _read(run_dir / "links.csv", _LINK_COLUMNS)
    rounds = _read(run_dir / "rounds.csv", _ROUND_COLUMNS)
    if round_ is not None:
        present = sorted({int(r["round"]) for r in links})
        if round_ not in present:
            raise FedmstError(f"{run_dir} has no round {round_} (rounds: {', '.join(map(str, present)) or 'none'})")
        links = [r for r in links if int(r["round"]) == round_]
        rounds = [r for r in rounds if int(r["round"]) == round_]
    # a link direction can only carry model traffic while a transfer phase runs
    transfer_s = sum(float(r["broadcast_s"]) + float(r["upload_s"]) for r in rounds)
    peaks = _peak_rates(run_dir / "samples.csv", round_)

    rows: dict[tuple[str, str], Row] = {}
    for r in links:
        hop = (r["src"], r["dst"])
        row = rows.setdefault(hop, {
            "link": r["link"], "direction": f"{hop[0]}->{hop[1]}", "src": hop[0], "dst": hop[1],
            "capacity_mbps": float(r["capacity_mbps"]), "measured_bytes": 0, "predicted_bytes": 0,
            "weight_bytes": 0, "other_bytes": 0, "queue_drops": 0,
        })
        for key, column in (("measured_bytes", "measured_bytes"), ("predicted_bytes", "predicted_bytes"),
                            ("weight_bytes", "measured_weight_bytes"), ("other_bytes", "measured_other_bytes"),
                            ("queue_drops", "queue_drops")):
            row[key] += int(r[column])
    for hop, row in rows.items():
        capacity_bps = row["capacity_mbps"] * 1e6
        row["error_pct"] = _error_pct(row["weight_bytes"], row["predicted_bytes"])
        row["mean_utilisation"] = (row["measured_bytes"] * 8 / (capacity_bps * transfer_s)
                                   if capacity_bps and transfer_s else None)
        rate = peaks.get(hop) if peaks is not None else None
        row["peak_utilisation"] = rate * 8 / capacity_bps if rate is not None and capacity_bps else None
    return _sorted(list(rows.values()), {
        "measured": lambda r: r["measured_bytes"],
        "predicted": lambda r: r["predicted_bytes"],
        # the sign says over or under, the size says how wrong: the worst either way comes first
        "error": lambda r: abs(r["error_pct"]),
        "utilisation": lambda r: r["mean_utilisation"],
        "peak": lambda r: r["peak_utilisation"],
    }, sort)


def diff_table(compare_dir: Path, *, sort: str = "measured") -> list[Row]:
    """Per link direction of a compare folder: measured bytes under SPFF and MST over all rounds.

    Rows hold ``link``, ``direction``, ``src``, ``dst``, ``spff_bytes``, ``mst_bytes``,
    ``difference_bytes`` (MST - SPFF, negative where MST saved traffic) and ``ratio`` (MST / SPFF,
    ``None`` where SPFF sent nothing). The default ``sort="measured"`` orders by the size of the
    difference in measured bytes, biggest change first, since that is where the schedulers part.
    """
    _check_sort(sort, DIFF_SORTS)
    if not is_compare_dir(compare_dir):
        raise FedmstError(f"{compare_dir} is not a compare folder: missing spff/links.csv or mst/links.csv")
    per_scheduler = {s: {r["direction"]: r for r in link_table(compare_dir / s)} for s in ("spff", "mst")}
    rows = []
    for direction in per_scheduler["spff"].keys() | per_scheduler["mst"].keys():
        spff, mst = (per_scheduler[s].get(direction) for s in ("spff", "mst"))
        either = spff or mst
        spff_bytes = spff["measured_bytes"] if spff else 0
        mst_bytes = mst["measured_bytes"] if mst else 0
        rows.append({
            "link": either["link"], "direction": direction, "src": either["src"], "dst": either["dst"],
            "spff_bytes": spff_bytes, "mst_bytes": mst_bytes, "difference_bytes": mst_bytes - spff_bytes,
            "ratio": mst_bytes / spff_bytes if spff_bytes else None,
        })
    return _sorted(rows, {
        "measured": lambda r: abs(r["difference_bytes"]),
        "spff": lambda r: r["spff_bytes"],
        "mst": lambda r: r["mst_bytes"],
        "ratio": lambda r: r["ratio"],
    }, sort)


def render(rows: list[Row], title: str) -> Table:
    """A rich Table of ``link_table`` or ``diff_table`` rows in human units, with a totals row.

    Totals are given only where adding up means something: bytes and drops, the overall error
    of weight against predicted bytes, and the overall MST/SPFF ratio; utilisations and
    capacities are per link and left blank.
    """
    diff = bool(rows) and "spff_bytes" in rows[0]
    columns = _DIFF_RENDER if diff else _LINK_RENDER
    table = Table(title=title)
    table.add_column("link direction")
    for header, _, _ in columns:
        table.add_column(header, justify="right")
    for i, row in enumerate(rows):
        table.add_row(row["direction"], *(fmt(row[key]) for _, key, fmt in columns),
                      end_section=i == len(rows) - 1)
    totals = {key: sum(r[key] for r in rows) for _, key, _ in columns if key in _SUMMED}
    if diff:
        totals["ratio"] = totals["mst_bytes"] / totals["spff_bytes"] if totals["spff_bytes"] else None
    else:
        totals["error_pct"] = _error_pct(totals["weight_bytes"], totals["predicted_bytes"])
    table.add_row("total", *(fmt(totals[key]) if key in totals else "" for _, key, fmt in columns),
                  style="bold")
    return table


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f}"


def _signed_mb(n: int) -> str:
    return f"{n / 1e6:+.2f}"


def _pct(fraction: float | None) -> str:
    return "-" if fraction is None else f"{100 * fraction:.1f} %"


def _ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}"


_SUMMED = {"measured_bytes", "predicted_bytes", "weight_bytes", "other_bytes", "queue_drops",
           "spff_bytes", "mst_bytes", "difference_bytes"}
_LINK_RENDER: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("measured MB", "measured_bytes", _mb),
    ("predicted MB", "predicted_bytes", _mb),
    ("weights MB", "weight_bytes", _mb),
    ("other MB", "other_bytes", _mb),
    ("error", "error_pct", lambda e: f"{e:+.2f} %"),
    ("Mbit/s", "capacity_mbps", lambda c: f"{c:g}"),
    ("mean util", "mean_utilisation", _pct),
    ("peak util", "peak_utilisation", _pct),
    ("drops", "queue_drops", str),
)
_DIFF_RENDER: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("SPFF MB", "spff_bytes", _mb),
    ("MST MB", "mst_bytes", _mb),
    ("MST - SPFF MB", "difference_bytes", _signed_mb),
    ("MST / SPFF", "ratio", _ratio),
)


def _check_sort(sort: str, choices: tuple[str, ...]) -> None:
    if sort not in choices:
        raise FedmstError(f"unknown sort key {sort!r}: choose one of {', '.join(choices)}")


def _check_run_dir(run_dir: Path) -> None:
    """Refuse anything but a run folder with a one-line message saying what is missing."""
    if not run_dir.is_dir():
        raise FedmstError(f"{run_dir} is not a folder")
    if is_compare_dir(run_dir):
        # callers show a compare folder with diff_table; this guards the ones that did not check
        raise FedmstError(f"{run_dir} is a compare folder: give {run_dir / 'spff'} or {run_dir / 'mst'} "
                          f"for one scheduler's links")
    missing = [name for name in ("links.csv", "rounds.csv") if not (run_dir / name).is_file()]
    if missing:
        raise FedmstError(f"{run_dir} is not a run folder (missing {', '.join(missing)}) "
                          f"nor a compare folder (missing spff/ and mst/ run folders)")


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
