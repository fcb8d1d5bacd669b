"""Draw a cluster folder (``fedmst cluster``): which job held which slot when, and how long jobs took.

``jobs.csv`` and ``slots.csv`` (:mod:`fedmst.run.cluster_records`) say it in numbers; the picture
says where the cluster was busy, where it idled and how long jobs waited. The top panel is a Gantt
chart: a row per (node, slot) that any job ever held, time across, a bar per slot interval coloured
by job (colours cycle: with many jobs they repeat), the job's name on the bars wide enough for it
and beside a bar of each job whose bars are all too short (in a key right of the chart where no
room is left beside them either), each job's submission marked on its G's row with a thin line
running to its start, so that queueing shows, and each stop by a preemption marked where the job
stopped and where it resumed. Times are the emulated network's seconds (``--mode emulate``) or
the fluid model's (``--mode simulate``). The bottom panel is the empirical distribution of the finished jobs' completion
times (JCT, submission to end), with their queueing times (submission to start) dashed beside it
and the mean and 99th percentile JCT marked. Everything is drawn as collections, a few artists in
all (their gids: bars, queued, submitted, rejected, stopped, resumed), so a trace of thousands of
jobs draws in seconds (then without names on the bars).
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from pathlib import Path
from statistics import mean
from typing import Any, Iterable, Sequence

from fedmst.core.cluster.slots import SlotInterval
from fedmst.core.topology import node_order
from fedmst.errors import FedmstError
from fedmst.run.cluster_records import (
    JOBS,
    NODE_SEPARATOR,
    SLOTS,
    STOPPED,
    SUMMARY,
    ClusterSummary,
    JobRow,
    percentile,
    read_jobs_csv,
    read_slots_csv,
)
from fedmst.run.layout import COMPARISON
from fedmst.run.report import scheduler_label
from fedmst.views.plots import _pyplot, _save
from fedmst.wording import counted

JOBS_PNG = "jobs.png"
STATUSES = ("finished", "rejected", "failed")
"""The statuses jobs.csv gives, in the order titles count them."""
DPI = 130
WIDTH_IN = 12.0
CDF_IN = 3.4
"""Height of the JCT panel."""
TITLE_IN = 0.9
"""Height left for the figure's title and the panels' own titles."""
SUPTITLE_IN = 0.15
"""Of which the figure's title's own band, which the layout leaves free."""
ROW_IN = 0.2
"""Height of a slot row, until the Gantt panel reaches ``GANTT_MAX_IN``."""
GANTT_MIN_IN, GANTT_MAX_IN = 2.4, 14.0
MAX_LABELS = 400
"""Names written on bars at most (the widest bars get them); more would only blur into each other."""
LABEL_PT = 7.0
"""Font size of a name on a bar, in points."""
EDGED = 600
"""Up to this many intervals, bars get a thin white edge, so that two intervals of the same colour
side by side still read as two; beyond it edges would paint the bars white."""
KEYED = 60
"""Jobs a key right of the chart names at most, where their bars leave no room for a name."""
CLOCKS = {"emulate": "the emulated network", "simulate": "the fluid model"}
"""Whose seconds a cluster's times are, by its mode."""
CDF_STYLE = {
    "jct": {"color": "tab:blue", "linestyle": "-", "label": "JCT (submission to end)"},
    "queue": {"color": "tab:orange", "linestyle": "--", "label": "queueing (submission to start)"},
}


def slot_rows(intervals: Iterable[SlotInterval]) -> list[tuple[str, int]]:
    """The Gantt chart's rows, top to bottom: every (node, slot) some job held, once each, in node
    order (:func:`fedmst.core.topology.node_order`), then by slot. Slots no job ever held get no row.

    >>> held = [SlotInterval("10", 0, "j1", 0.0, 1.0), SlotInterval("2", 1, "j1", 0.0, 1.0),
    ...         SlotInterval("b", 0, "j2", 1.0, 2.0), SlotInterval("2", 0, "j2", 1.0, 2.0),
    ...         SlotInterval("2", 1, "j3", 2.0, 3.0)]
    >>> slot_rows(held)
    [('2', 0), ('2', 1), ('10', 0), ('b', 0)]
    """
    return sorted({(i.node, i.slot) for i in intervals}, key=lambda row: (node_order(row[0]), row[1]))


def ecdf(values: Iterable[float]) -> tuple[list[float], list[float]]:
    """The empirical distribution of ``values`` as the corners of a step plot (``where="post"``):
    it starts at 0 at the smallest value and climbs by 1/n at each value (ties in one step).

    >>> ecdf([3.0, 1.0, 1.0, 2.0])
    ([1.0, 1.0, 2.0, 3.0], [0.0, 0.5, 0.75, 1.0])
    >>> ecdf([])
    ([], [])
    """
    ordered = sorted(values)
    if not ordered:
        return [], []
    xs, ys = [ordered[0]], [0.0]
    for i, v in enumerate(ordered, 1):
        if i < len(ordered) and ordered[i] == v:
            continue  # a tie: one step for all of them
        xs.append(v)
        ys.append(i / len(ordered))
    return xs, ys


def tally(jobs: Sequence[JobRow]) -> str:
    """How the jobs ended, in words, statuses with no job left out.

    >>> row = lambda status: JobRow("j", 0.0, None, 0.0, None, 0.0, 1, 0, "a", status, "", 0, None, 0, None,
    ...                             0.0, 0.0, "", 0.0)
    >>> tally([row("rejected")] * 3), tally([row("finished"), row("failed"), row("failed")]), tally([])
    ('3 rejected', '1 finished, 2 failed', 'no job on record')
    """
    counts = Counter(j.status for j in jobs)
    order = [*STATUSES, *sorted(set(counts) - set(STATUSES))]
    return ", ".join(f"{counts[s]} {s}" for s in order if counts[s]) or "no job on record"


def gantt_height(rows: int) -> float:
    """Height of the Gantt panel in inches for ``rows`` slot rows.

    >>> gantt_height(0), gantt_height(20), gantt_height(10_000)
    (2.4, 5.2, 14.0)
    """
    return round(min(GANTT_MAX_IN, max(GANTT_MIN_IN, ROW_IN * rows + 1.2)), 6)


def figure_size(rows: int) -> tuple[float, float]:
    """The whole figure's size in inches (width, height) for ``rows`` slot rows: the PNG is this
    times ``DPI`` pixels.

    >>> figure_size(20)
    (12.0, 9.5)
    """
    return WIDTH_IN, round(gantt_height(rows) + CDF_IN + TITLE_IN, 6)


def plot_jobs(folder: Path, out: Path | None = None) -> Path:
    """Draw the cluster folder ``folder`` as one PNG and return its path (``out``, by default
    ``folder / "jobs.png"``): the Gantt chart of slots held over time above, the finished jobs'
    JCT distribution below (see the module's description).

    A folder that is not a cluster folder, or whose jobs.csv holds no finished job, raises
    :class:`FedmstError` in one line. summary.json is optional (a command stopped half-way wrote
    none): the title then names less.
    """
    folder = Path(folder)
    fig = policies_figure(folder) if (folder / COMPARISON).is_file() else jobs_figure(folder)
    target = Path(out) if out is not None else folder / JOBS_PNG
    try:
        _save(fig, target, dpi=DPI)
    finally:
        _pyplot().close(fig)
    return target


def jobs_figure(folder: Path) -> Any:
    """The matplotlib figure :func:`plot_jobs` writes, its axes the Gantt chart then the JCT panel;
    the caller closes it."""
    folder = Path(folder)
    jobs = read_jobs_csv(folder)
    finished = [j for j in jobs if j.status == "finished"]
    if not finished:
        raise FedmstError(f"{folder}: no job finished ({tally(jobs)}), so there is nothing to draw")
    intervals = read_slots_csv(folder)
    summary = ClusterSummary.read(folder) if (folder / SUMMARY).is_file() else None
    rows = slot_rows(intervals)
    stops = stops_and_resumes(intervals, read_stops(folder, jobs, intervals))
    clock = clock_of(folder, summary)
    colours = _colours(jobs, intervals)

    plt = _pyplot()
    fig, (gantt, cdf) = plt.subplots(2, 1, figsize=figure_size(len(rows)),
                                     gridspec_kw={"height_ratios": [gantt_height(len(rows)), CDF_IN]})
    try:
        fig.suptitle(_title(folder, summary), fontsize=11)
        bars = _draw_gantt(gantt, jobs, intervals, rows, colours, stops, clock)
        _draw_cdf(cdf, jobs, clock)

        def laid_out() -> None:
            fig.tight_layout(rect=(0.0, 0.0, 1.0, 1.0 - SUPTITLE_IN / fig.get_figheight()))  # title clear of legend

        laid_out()
        unnamed = _label_bars(gantt, bars)
        if unnamed:  # a key right of the chart takes room from it: lay out again, then name the bars anew
            _key(gantt, unnamed, colours)
            laid_out()
            for text in [t for t in gantt.texts if t.get_gid() == "name"]:
                text.remove()
            more = [run for run in _label_bars(gantt, bars) if run not in unnamed]
            if more:  # the narrower chart left more runs unnamed: they join the key (its names stay by their bars)
                _key(gantt, sorted([*unnamed, *more], key=lambda run: run[1]), colours)
                laid_out()
    except BaseException:
        plt.close(fig)
        raise
    return fig


def policies_figure(folder: Path) -> Any:
    """A ``--policies`` comparison (``folder/comparison.json``): every policy's JCT distribution
    and its queueing on one pair of axes, side by side; the caller closes the figure."""
    try:
        record = json.loads((folder / COMPARISON).read_text())
        names = [str(n) for n in record["policies"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise FedmstError(f"{folder / COMPARISON}: not a cluster comparison ({' '.join(str(exc).split())})") from None
    finished = {n: [j for j in read_jobs_csv(folder / n) if j.status == "finished"]
                for n in names if (folder / n / JOBS).is_file()}
    finished = {n: jobs for n, jobs in finished.items() if jobs}
    if not finished:
        raise FedmstError(f"{folder}: no policy's cluster finished a job, so there is nothing to draw")
    plt = _pyplot()
    fig, (jct, queue) = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for name, jobs in finished.items():
        for ax, values in ((jct, [j.jct_s for j in jobs]), (queue, [j.queue_s or 0.0 for j in jobs])):
            x, y = ecdf(values)
            ax.step(x, y, where="post", label=f"{name} (mean {mean(values):.3g} s)")
    clocks = {clock_of(folder / n, None, (record.get("summaries") or {}).get(n)) for n in finished}
    clock = clocks.pop() if len(clocks) == 1 else "the network"
    for ax, what in ((jct, "job completion time"), (queue, "queueing (submission to start)")):
        ax.set_xlabel(f"{what} (s of {clock})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    jct.set_ylabel("share of finished jobs")
    fig.suptitle(f"{len(finished)} policies on one trace: {_trace_label(folder, names, record)}")
    fig.tight_layout()
    return fig


def _trace_label(folder: Path, names: Sequence[str], record: dict[str, Any]) -> str:
    """``JOBS on TOPOLOGY`` of a comparison, from its policies' config.json and summaries (a file's
    name, not its path: the figure is read away from the folder); the folder's name where none says."""
    jobs = topology = None
    for name in names:
        try:
            jobs = jobs or json.loads((folder / name / "config.json").read_text()).get("jobs")
        except (OSError, ValueError, AttributeError):
            pass
        summary = (record.get("summaries") or {}).get(name) or {}
        topology = topology or (summary.get("topology") if isinstance(summary, dict) else None)
    if not jobs:
        return folder.name or str(folder)
    kind, colon, source = str(jobs).rpartition(":")  # poisson:60,3, philly:/data/trace.json, /data/jobs.csv
    trace = kind + colon + Path(source).name
    return f"{trace} on {Path(str(topology)).name}" if topology else trace


def _title(folder: Path, summary: ClusterSummary | None) -> str:
    if summary is None:
        return f"Jobs of {folder.name or folder} (no {SUMMARY}: the command did not end, or wrote none)"
    ended = "" if summary.status == "completed" else f" ({summary.status})"
    stops = ("no preemption" if summary.preempt == "none" else
             f"{summary.preempt} preemption ({counted(summary.preemptions, 'stop')})")
    return (f"{Path(summary.topology).name}, {summary.slots} slots: {summary.mode} mode, "
            f"{scheduler_label(summary.scheduler)} scheduler, {summary.order} order, "
            f"{summary.placement} placement, {stops}{ended}")


def clock_of(folder: Path, summary: ClusterSummary | None, recorded: Any = None) -> str:
    """Whose seconds a cluster folder's times are: the emulated network's or the fluid model's, by
    its mode (``summary``, else a summary ``recorded`` in a comparison.json, else its summary.json or
    config.json); the network's where none says.

    >>> clock_of(Path("/nowhere"), None, {"mode": "simulate"}), clock_of(Path("/nowhere"), None)
    ('the fluid model', 'the network')
    """
    mode = summary.mode if summary is not None else recorded.get("mode") if isinstance(recorded, dict) else None
    for name in (SUMMARY, "config.json"):
        if mode is None:
            try:
                mode = json.loads((folder / name).read_text()).get("mode")
            except (OSError, ValueError, AttributeError):
                mode = None
    return CLOCKS.get(str(mode), "the network")


def read_stops(folder: Path, jobs: Sequence[JobRow], intervals: Sequence[SlotInterval]) -> list[tuple[str, float]]:
    """Each stop by a preemption as (job, when it stopped), from preemptions.csv; in a folder from
    before that file, from slots.csv: the end of each run of a job that jobs.csv says a preemption
    stopped, but its last. A malformed file is refused in one line."""
    path = folder / STOPPED
    if path.is_file():
        try:
            with path.open(newline="") as f:
                return [(r["job"], float(r["stopped_s"])) for r in csv.DictReader(f)]
        except (KeyError, TypeError, ValueError) as exc:
            raise FedmstError(f"{path}: malformed row ({' '.join(str(exc).split())})") from None
    stopped = {j.job: j.preemptions for j in jobs if j.preemptions > 0}
    ends: dict[str, set[float]] = {}
    for i in intervals:
        if i.job in stopped:
            ends.setdefault(i.job, set()).add(i.to_s)
    return [(job, end) for job, times in ends.items() for end in sorted(times)[:-1][:stopped[job]]]


def stops_and_resumes(intervals: Sequence[SlotInterval],
                      stops: Sequence[tuple[str, float]]) -> list[tuple[str, float, float | None]]:
    """Each stop as (job, stopped, resumed): it resumed when it next held slots (slots.csv), None
    if it never did (the command ended first).

    >>> held = [SlotInterval("a", 0, "j", 0.0, 2.0), SlotInterval("b", 0, "j", 5.0, 7.0),
    ...         SlotInterval("a", 0, "k", 2.0, 4.0)]
    >>> stops_and_resumes(held, [("j", 2.0), ("k", 4.0)])
    [('j', 2.0, 5.0), ('k', 4.0, None)]
    """
    found = []
    for job, at in stops:
        later = [i.from_s for i in intervals if i.job == job and i.from_s >= at - 1e-9 and i.to_s > at + 1e-9]
        found.append((job, at, min(later) if later else None))
    return found


def _colours(jobs: Sequence[JobRow], intervals: Sequence[SlotInterval]) -> dict[str, Any]:
    """A colour per job, in submission order, cycling through tab20 reordered so that its ten hues
    come first and their light shades after: jobs submitted one after the other differ."""
    import matplotlib

    palette = matplotlib.colormaps["tab20"].colors
    palette = [*palette[0::2], *palette[1::2]]
    names = [j.job for j in sorted(jobs, key=lambda j: j.submit_s)]  # sorted is stable: ties keep the file's order
    names = list(dict.fromkeys([*names, *(i.job for i in intervals)]))
    return {name: palette[k % len(palette)] for k, name in enumerate(names)}


def _draw_gantt(ax: Any, jobs: Sequence[JobRow], intervals: Sequence[SlotInterval], rows: Sequence[tuple[str, int]],
                colours: dict[str, Any], stops: Sequence[tuple[str, float, float | None]],
                clock: str) -> list[tuple[float, float, int, str]]:
    """Bars, submission and preemption marks and row labels; returns the bars, as (start, end, row,
    job), the candidates for a job's name."""
    from matplotlib.collections import PolyCollection
    from matplotlib.legend import Legend

    index = {row: k for k, row in enumerate(rows)}
    half = 0.4
    verts = [[(i.from_s, y - half), (i.from_s, y + half), (i.to_s, y + half), (i.to_s, y - half)]
             for i in intervals for y in (index[(i.node, i.slot)],)]
    edged = len(intervals) <= EDGED
    ax.add_collection(PolyCollection(verts, facecolors=[colours[i.job] for i in intervals],
                                     edgecolors="white" if edged else "none", linewidths=0.5 if edged else 0.0,
                                     zorder=2, gid="bars"))
    bars = [(i.from_s, i.to_s, index[(i.node, i.slot)], i.job) for i in intervals]
    handles = _draw_submissions(ax, jobs, intervals, index, colours, half)
    handles += _draw_stops(ax, bars, stops)

    times = [t for j in jobs for t in (j.submit_s, j.end_s)] + [t for i in intervals for t in (i.from_s, i.to_s)]
    lo, hi = min(times), max(times)
    pad = 0.01 * (hi - lo) if hi > lo else 1.0
    ax.set_xlim(lo - pad, hi + pad)
    ax.set_ylim(len(rows) - 0.5 if rows else 0.5, -0.5)  # first row on top
    _row_ticks(ax, rows)
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlabel(f"time (s of {clock})")
    ax.set_title("Slots held by each job over time", loc="left", fontsize=10)
    ax.add_artist(Legend(ax, handles, [h.get_label() for h in handles], loc="lower right", bbox_to_anchor=(1.0, 1.0),
                         ncol=len(handles), frameon=False, fontsize="small", borderaxespad=0.2, handletextpad=0.3,
                         columnspacing=1.2))  # an artist of its own: the key of unnamed jobs is the axes' legend
    if not rows:
        ax.text(0.5, 0.5, f"no slot interval on record (an empty {SLOTS})",
                ha="center", va="center", transform=ax.transAxes, color="grey")
    return bars


def _draw_submissions(ax: Any, jobs: Sequence[JobRow], intervals: Sequence[SlotInterval],
                      index: dict[tuple[str, int], int], colours: dict[str, Any], half: float) -> list[Any]:
    """Each job's submission, a mark on the top edge of its G's row with a line along it until the
    job started, and each rejection at the bottom; returns their legend's handles."""
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D
    from matplotlib.transforms import blended_transform_factory

    held: dict[str, list[tuple[str, int]]] = {}
    for i in intervals:
        held.setdefault(i.job, []).append((i.node, i.slot))
    g_rows: dict[str, int] = {}
    for j in jobs:
        if j.job in held:  # G takes its node's lowest free slot first; any row it held if G's is not on record
            rows_held = [index[r] for r in held[j.job]]
            on_g = [index[r] for r in held[j.job] if [r[0]] == j.nodes.split(NODE_SEPARATOR)[:1]]
            g_rows[j.job] = min(on_g or rows_held)
    marked = [j for j in jobs if j.job in g_rows]
    top = [g_rows[j.job] - half - 0.05 for j in marked]
    many = len(marked) > 100
    waited = [(j, y) for j, y in zip(marked, top) if j.start_s is not None and j.start_s > j.submit_s]
    ax.add_collection(LineCollection([[(j.submit_s, y), (j.start_s, y)] for j, y in waited],
                                     colors=[colours[j.job] for j, _ in waited],
                                     linewidths=0.6 if many else 1.6, zorder=3, gid="queued"))
    ax.scatter([j.submit_s for j in marked], top, marker="v", s=6 if many else 22,
               c=[colours[j.job] for j in marked], edgecolors="black", linewidths=0.3 if many else 0.6, zorder=4,
               clip_on=False, gid="submitted")  # the top row's marks stand on the axes' edge
    handles = [Line2D([], [], marker="v", color="grey", markeredgecolor="black", linestyle="none",
                      label="submitted (on its G's row)"),
               Line2D([], [], color="grey", linewidth=1.6, label="queued until it started")]
    rejected = [j.submit_s for j in jobs if j.status == "rejected"]
    if rejected:
        ax.scatter(rejected, [0.0] * len(rejected), marker="x", s=14, c="tab:red", linewidths=0.8, clip_on=False,
                   transform=blended_transform_factory(ax.transData, ax.transAxes), zorder=5, gid="rejected")
        handles.append(Line2D([], [], marker="x", color="tab:red", linestyle="none",
                              label=f"rejected ({len(rejected)}, at submission)"))
    return handles


def _draw_stops(ax: Any, bars: Sequence[tuple[float, float, int, str]],
                stops: Sequence[tuple[str, float, float | None]]) -> list[Any]:
    """Each stop by a preemption, a black square at the end of the job's top bar that ends then, and
    its resumption, a black triangle at the start of its top bar that begins then; returns their
    legend's handles (none without a stop)."""
    from matplotlib.lines import Line2D

    if not stops:
        return []

    def row_at(job: str, at: float, edge: int) -> int | None:
        found = [row for bar in bars if bar[3] == job and abs(bar[edge] - at) <= 1e-6 for row in (bar[2],)]
        return min(found) if found else None

    stopped = [(at, row) for job, at, _ in stops for row in (row_at(job, at, 1),) if row is not None]
    resumed = [(at, row) for job, _, at in stops if at is not None for row in (row_at(job, at, 0),) if row is not None]
    size = 8 if len(stops) > 200 else 22
    for marks, marker, gid in ((stopped, "s", "stopped"), (resumed, ">", "resumed")):
        ax.scatter([at for at, _ in marks], [row for _, row in marks], marker=marker, s=size, c="black",
                   edgecolors="white", linewidths=0.5, zorder=5, gid=gid)
    return [Line2D([], [], marker=marker, color="black", linestyle="none", label=label)
            for marker, label in (("s", f"stopped by a preemption ({len(stops)})"), (">", "resumed"))]


def _row_ticks(ax: Any, rows: Sequence[tuple[str, int]]) -> None:
    """A label per row (``3/0``) where rows are tall enough and few, else one per node in the middle
    of its rows (every k-th node where even those would collide); thin lines between nodes."""
    groups: list[tuple[str, int, int]] = []  # node, first row, rows
    for k, (node, _) in enumerate(rows):
        if groups and groups[-1][0] == node:
            groups[-1] = (node, groups[-1][1], groups[-1][2] + 1)
        else:
            groups.append((node, k, 1))
    row_pt = 72 * (gantt_height(len(rows)) - 1.2) / max(1, len(rows))
    if rows and row_pt >= 8 and len(rows) <= 80:
        ax.set_yticks(range(len(rows)), [f"{n}/{s}" for n, s in rows], fontsize=min(8.0, 0.8 * row_pt))
        ax.set_ylabel("node/slot")
    else:
        step = max(1, math.ceil(9 / (row_pt * max(1.0, len(rows) / max(1, len(groups))))))
        shown = groups[::step]
        ax.set_yticks([first + (n - 1) / 2 for _, first, n in shown], [node for node, _, _ in shown], fontsize=7)
        ax.set_ylabel("node" + ("" if step == 1 else f" (one in {step} named)"))
    ax.tick_params(axis="y", length=0)
    if len(groups) > 1:
        ax.hlines([first - 0.5 for _, first, _ in groups[1:]], 0, 1, transform=ax.get_yaxis_transform(),
                  colors="0.55", linewidths=0.5, zorder=1)


def _label_bars(ax: Any, bars: Sequence[tuple[float, float, int, str]]) -> list[tuple[str, float]]:
    """A job's name on each bar wide and tall enough to hold it, the widest ``MAX_LABELS`` at most,
    then, for each run of a job (the bars it held from one start to one end, on every row) none of
    whose bars holds its name, beside one of them where the name covers no other name (and, if it
    can, no other job's bar); run after the layout, since it measures the axes on the page. Returns
    the runs left unnamed as (job, start), in the order they started (none where the trace has more
    than ``MAX_LABELS`` runs: too many to name)."""
    box = ax.get_window_extent()
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    px_per_s = box.width / (x1 - x0)
    px_per_pt = ax.figure.dpi / 72
    runs: dict[tuple[str, float, float], list[tuple[float, float, int, str]]] = {}
    for bar in sorted(bars):
        runs.setdefault((bar[3], bar[0], bar[1]), []).append(bar)
    if len(runs) > MAX_LABELS:
        return []
    if box.height / abs(y0 - y1) * 0.8 < 1.1 * LABEL_PT * px_per_pt:
        return [(job, start) for job, start, _ in runs]  # rows too thin for any name

    def width_px(job: str) -> float:
        return (0.62 * LABEL_PT * len(job) + 3) * px_per_pt

    taken: dict[int, list[tuple[float, float]]] = {}  # row: names' extents on it, in pixels
    named = set()
    fits = [b for b in bars if (b[1] - b[0]) * px_per_s >= width_px(b[3])]
    for start, end, row, job in sorted(fits, key=lambda b: b[0] - b[1])[:MAX_LABELS]:
        ax.text((start + end) / 2, row, job, ha="center", va="center", fontsize=LABEL_PT, clip_on=True, zorder=6,
                gid="name")
        middle = ((start + end) / 2 - x0) * px_per_s
        taken.setdefault(row, []).append((middle - width_px(job) / 2, middle + width_px(job) / 2))
        named.add((job, start, end))
    spans: dict[int, list[tuple[float, float, str]]] = {}
    for start, end, row, job in bars:
        spans.setdefault(row, []).append(((start - x0) * px_per_s, (end - x0) * px_per_s, job))
    left = []
    for (job, start, end), mine in runs.items():
        spot = None if (job, start, end) in named else _beside(job, mine, width_px(job), box.width, x0, px_per_s,
                                                                  taken, spans)
        if spot is not None:
            at, row, align = spot
            ax.text(x0 + at / px_per_s, row, job, ha=align, va="center", fontsize=LABEL_PT, clip_on=True, zorder=7,
                    gid="name", bbox={"boxstyle": "square,pad=0.05", "fc": "white", "ec": "none", "alpha": 0.6})
        elif (job, start, end) not in named:
            left.append((job, start))
    return left


def _beside(job: str, mine: Sequence[tuple[float, float, int, str]], width: float, limit: float, x0: float,
            px_per_s: float, taken: dict[int, list[tuple[float, float]]],
            spans: dict[int, list[tuple[float, float, str]]]) -> tuple[float, int, str] | None:
    """Where ``job``'s name goes beside one of its bars (``mine``), as (x in pixels from the axes'
    left, row, alignment): right of a bar, left of it or across it, on its row, covering no name
    ``taken`` there, best covering no other job's bar either; None where every place covers a name
    or leaves the axes. The place is added to ``taken``."""
    candidates = []
    for start, end, row, _ in sorted(mine, key=lambda b: (b[0] - b[1], b[0])):  # the widest bar first
        a, b = (start - x0) * px_per_s, (end - x0) * px_per_s
        candidates += [(b + 2, b + 2 + width, b + 2, row, "left"), (a - 2 - width, a - 2, a - 2, row, "right"),
                       ((a + b - width) / 2, (a + b + width) / 2, (a + b) / 2, row, "center")]
    usable = [c for c in candidates  # within the axes, clear of the names on its row
              if c[0] >= 0 and c[1] <= limit and not any(c[0] < n1 and n0 < c[1] for n0, n1 in taken.get(c[3], []))]
    clear = [c for c in usable if not any(c[0] < s1 and s0 < c[1] and other != job for s0, s1, other in spans[c[3]])]
    if not usable:
        return None
    lo, hi, at, row, align = (clear or usable)[0]
    taken.setdefault(row, []).append((lo, hi))
    return at, row, align


def _key(ax: Any, runs: Sequence[tuple[str, float]], colours: dict[str, Any]) -> None:
    """A key right of the chart naming the jobs of ``runs`` (job, start) by colour and start, the
    first ``KEYED`` of them at most, replacing any key drawn before."""
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=colours[job], label=f"{job} from {start:.4g} s") for job, start in runs[:KEYED]]
    if len(runs) > KEYED:
        handles.append(Patch(facecolor="none", edgecolor="none", label=f"and {len(runs) - KEYED} more"))
    if ax.get_legend() is not None:
        ax.get_legend().remove()
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=6.5, frameon=False,
              ncol=1 if len(handles) <= 30 else 2, title="bars too short\nto name", title_fontsize=6.5,
              handlelength=1.2, borderaxespad=0.0)


def _draw_cdf(ax: Any, jobs: Sequence[JobRow], clock: str) -> None:
    """The finished jobs' JCT and queueing distributions, mean and p99 JCT marked."""
    done = [j for j in jobs if j.status == "finished"]
    jct = [j.jct_s for j in done]
    queue = [j.queue_s or 0.0 for j in done]
    for key, values in (("jct", jct), ("queue", queue)):
        xs, ys = ecdf(values)
        ax.step([*xs, max(jct)], [*ys, 1.0], where="post", linewidth=1.6, **CDF_STYLE[key])
    avg, p99 = mean(jct), percentile(jct, 99)
    ax.axvline(avg, color="0.3", linestyle=":", linewidth=1.2, label=f"mean JCT {avg:.4g} s")
    ax.axvline(p99, color="tab:red", linestyle="-.", linewidth=1.2, label=f"p99 JCT {p99:.4g} s")
    ax.set_xlim(left=min(0.0, *queue))
    ax.set_ylim(0, 1.03)
    ax.set_xlabel(f"seconds (of {clock})")
    ax.set_ylabel("share of finished jobs")
    counts = Counter(j.status for j in jobs)
    others = sorted(set(counts) - set(STATUSES))
    ax.set_title("Job completion time: " + ", ".join(f"{counts[s]} {s}" for s in (*STATUSES, *others)),
                 loc="left", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")


__all__ = ["JOBS_PNG", "clock_of", "ecdf", "figure_size", "jobs_figure", "plot_jobs", "read_stops",
           "slot_rows", "stops_and_resumes", "tally"]
