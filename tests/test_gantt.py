"""plot_jobs on synthetic cluster folders (jobs.csv, slots.csv, summary.json as `fedmst cluster`
writes them, from a small first-come-first-served model of a cluster): no network, no emulation."""

from __future__ import annotations

import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import pytest
from matplotlib.collections import PolyCollection
from matplotlib.image import imread
from matplotlib.legend import Legend

from fedmst.core.cluster.slots import SlotInterval
from fedmst.errors import FedmstError
from fedmst.run.cluster_records import (JOB_FIELDS, NODE_SEPARATOR, SLOT_FIELDS, STOPPED_FIELDS, Appender,
                                        ClusterSummary, JobRow, percentile, read_slots_csv)
from fedmst.views import gantt
from fedmst.views.gantt import DPI, ecdf, figure_size, jobs_figure, plot_jobs, slot_rows

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NODES = ["0", "1", "2", "3", "10", "b"]  # node_order: 0 1 2 3 10 b (not the strings' order)
SLOTS = {"0": 2, "1": 2, "2": 2, "3": 2, "10": 2, "b": 8}  # b has more slots than it ever fills
Spec = tuple[str, float, float, list[str]]  # job, submitted, runs for, nodes (G's first)


def fifo(specs: list[Spec], slots: int | dict[str, int] = SLOTS) -> tuple[list[JobRow], list[SlotInterval]]:
    """Jobs run first come first served: each starts when it was submitted and every slot it needs
    is free (of each node, the lowest slots free at its submission, else those that free first), and
    never before the job ahead of it."""
    free_at: dict[tuple[str, int], float] = {}
    rows, intervals, ahead = [], [], 0.0
    for job, submit, runs, nodes in sorted(specs, key=lambda s: s[1]):
        picked = []
        for node in dict.fromkeys(nodes):
            has = slots if isinstance(slots, int) else slots[node]
            mine = sorted(range(has), key=lambda s: (max(submit, free_at.get((node, s), 0.0)), s))[:nodes.count(node)]
            picked += [(node, s) for s in mine]
        start = max([submit, ahead] + [free_at.get(p, 0.0) for p in picked])
        ahead, end = start, start + runs
        for p in picked:
            free_at[p] = end
            intervals.append(SlotInterval(p[0], p[1], job, start, end))
        rows.append(job_row(job, submit, start, end, nodes))
    return rows, intervals


def job_row(job: str, submit: float, start: float | None, end: float, nodes: list[str],
            status: str = "finished") -> JobRow:
    return JobRow(job=job, submit_s=submit, start_s=start, end_s=end,
                  queue_s=None if start is None else start - submit, jct_s=end - submit,
                  local_models=len(nodes) - 1, rounds=3 if start is not None else 0, nodes=NODE_SEPARATOR.join(nodes),
                  status=status, reason="" if status == "finished" else "no room", preemptions=0,
                  mean_round_s=None if start is None else (end - start) / 3, link_bytes=0, final_accuracy=None,
                  comm_s=0.0, setup_s=0.0, placement="", train_s=0.0)


def write_cluster(folder: Path, rows: list[JobRow], intervals: list[SlotInterval],
                  summary: dict[str, Any] | None = None) -> Path:
    """A cluster folder as `fedmst cluster` writes it, rows appended as jobs end."""
    folder.mkdir(parents=True, exist_ok=True)
    jobs, slots = Appender(folder / "jobs.csv", JOB_FIELDS), Appender(folder / "slots.csv", SLOT_FIELDS)
    jobs.add(asdict(r) for r in rows)
    slots.add(asdict(i) for i in intervals)
    jobs.close()
    slots.close()
    if summary is not None:
        values = {f.name: None for f in fields(ClusterSummary)}
        ClusterSummary(**{**values, **summary}).write(folder)
    return folder


def twelve_jobs() -> tuple[list[JobRow], list[SlotInterval]]:
    """12 jobs of 1 to 3 local models, every 2 s, on 6 nodes of 2 slots (b 8): some wait, b's last
    slots stay idle;
    two more jobs rejected."""
    specs: list[Spec] = []
    for k in range(12):
        g = NODES[k % len(NODES)]
        local = [NODES[(k + d) % len(NODES)] for d in range(1, 2 + k % 3)]
        specs.append((f"job{k}", 2.0 * k, 6.0 + 3 * (k % 4), [g, *local]))
    rows, intervals = fifo(specs)
    rows += [job_row("big0", 5.0, None, 5.0, ["0"] * 9, "rejected"), job_row("big1", 9.0, None, 9.0, ["1"] * 9,
                                                                              "rejected")]
    return rows, intervals


SUMMARY = {"status": "completed", "command": "fedmst cluster", "mode": "independent", "scheduler": "mst",
           "order": "fifo", "placement": "packed", "topology": "small", "slots": 14, "jobs": 14,
           "jobs_finished": 12, "jobs_rejected": 2, "jobs_failed": 0, "time_scale": 1.0, "wall_s": 1.0}


@pytest.fixture
def cluster(tmp_path: Path) -> Path:
    rows, intervals = twelve_jobs()
    return write_cluster(tmp_path / "cluster", rows, intervals, SUMMARY)


def test_slot_rows_are_the_used_pairs_in_node_order() -> None:
    held = [SlotInterval("10", 1, "a", 0.0, 1.0), SlotInterval("2", 0, "a", 0.0, 1.0),
            SlotInterval("b", 0, "b", 1.0, 2.0), SlotInterval("2", 0, "c", 2.0, 3.0),
            SlotInterval("10", 0, "c", 2.0, 3.0), SlotInterval("2", 3, "c", 2.0, 3.0)]
    assert slot_rows(held) == [("2", 0), ("2", 3), ("10", 0), ("10", 1), ("b", 0)]
    assert slot_rows([]) == []


def test_ecdf_steps_to_one() -> None:
    xs, ys = ecdf([4.0, 2.0, 2.0, 8.0, 6.0])
    assert xs == [2.0, 2.0, 4.0, 6.0, 8.0]
    assert ys == [0.0, 0.4, 0.6, 0.8, 1.0]


def test_plot_jobs_writes_a_png_of_the_expected_shape(cluster: Path) -> None:
    out = plot_jobs(cluster)
    assert out == cluster / "jobs.png"
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 20_000
    image = imread(out)
    _, intervals = twelve_jobs()
    width, height = figure_size(len(slot_rows(intervals)))
    assert image.shape[:2] == (round(height * DPI), round(width * DPI))
    assert image[..., :3].std() > 0.05  # not a blank page


def test_rows_drawn_are_the_used_slots_and_every_interval_a_bar(cluster: Path) -> None:
    rows, intervals = twelve_jobs()
    fig = jobs_figure(cluster)
    try:
        chart, cdf = fig.axes[:2]
        used = slot_rows(intervals)
        assert len(used) < sum(SLOTS.values())  # some slot never held, so the test can tell
        assert [t.get_text() for t in chart.get_yticklabels()] == [f"{n}/{s}" for n, s in used]
        assert sorted(chart.get_ylim()) == [-0.5, len(used) - 0.5]
        drawn = {c.get_gid(): c for c in chart.collections}
        bars = drawn["bars"]
        assert isinstance(bars, PolyCollection) and len(bars.get_paths()) == len(intervals)
        for bar, held in zip(bars.get_paths(), intervals):  # each bar on its slot's row, over its interval
            (x0, y0), (x1, y1) = bar.vertices.min(axis=0), bar.vertices.max(axis=0)
            assert (y0 + y1) / 2 == pytest.approx(used.index((held.node, held.slot)))
            assert (x0, x1) == pytest.approx((held.from_s, held.to_s), abs=1e-4)
        finished = [r for r in rows if r.status == "finished"]
        marks = drawn["submitted"].get_offsets()
        assert sorted(marks[:, 0]) == pytest.approx(sorted(r.submit_s for r in finished))
        waited = [r for r in finished if r.queue_s]
        assert waited and len(drawn["queued"].get_segments()) == len(waited)  # each wait a line
        assert sorted(drawn["rejected"].get_offsets()[:, 0]) == [5.0, 9.0]
        names = {t.get_text() for t in chart.texts}
        assert names and names <= {r.job for r in rows if r.status == "finished"}  # wide bars named
        # the figure's title names what ran the cluster, the JCT panel's how the jobs ended
        title = fig.get_suptitle()
        assert all(word in title for word in ("small", "independent", "MST", "fifo", "packed"))
        assert cdf.get_title(loc="left") == "Job completion time: 12 finished, 2 rejected, 0 failed"
        jct = [r.jct_s for r in rows if r.status == "finished"]
        lines = {line.get_label(): line.get_xdata()[0] for line in cdf.get_lines()
                 if line.get_label().startswith(("mean", "p99"))}
        mean_jct, p99 = sum(jct) / len(jct), percentile(jct, 99)
        assert lines == {f"mean JCT {mean_jct:.4g} s": pytest.approx(mean_jct),
                         f"p99 JCT {p99:.4g} s": pytest.approx(p99)}
    finally:
        gantt._pyplot().close(fig)


def test_without_summary_it_still_draws_with_a_plainer_title(tmp_path: Path) -> None:
    rows, intervals = twelve_jobs()
    folder = write_cluster(tmp_path / "killed", rows[:5], intervals[:7])  # a command killed half-way
    fig = jobs_figure(folder)
    try:
        assert "no summary.json" in fig.get_suptitle() and "MST" not in fig.get_suptitle()
    finally:
        gantt._pyplot().close(fig)
    out = plot_jobs(folder, tmp_path / "elsewhere.png")
    assert out == tmp_path / "elsewhere.png" and out.stat().st_size > 10_000
    assert not (folder / "jobs.png").exists()


def test_two_thousand_jobs_draw_quickly_without_names(tmp_path: Path) -> None:
    nodes = [str(n) for n in range(40)]
    specs: list[Spec] = [(f"j{k}", 0.25 * k, 5.0 + k % 7, [nodes[(3 * k + d) % 40] for d in range(10)])
                         for k in range(2000)]
    rows, intervals = fifo(specs, slots=4)
    assert len(intervals) == 20_000
    folder = write_cluster(tmp_path / "trace", rows, intervals)
    began = time.perf_counter()
    fig = jobs_figure(folder)
    try:
        assert not fig.axes[0].texts  # far too thin for names
        assert len(fig.axes[0].get_yticklabels()) == 40  # a label per node, not per slot
    finally:
        gantt._pyplot().close(fig)
    out = plot_jobs(folder)
    took = time.perf_counter() - began
    print(f"2,000 jobs, 20,000 slot intervals: figure and PNG in {took:.2f} s")
    assert out.is_file() and out.stat().st_size > 10_000


def one_line(exc: pytest.ExceptionInfo[FedmstError]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_no_finished_job_is_one_line(tmp_path: Path) -> None:
    rejected = [job_row(f"big{k}", float(k), None, float(k), ["0"] * 9, "rejected") for k in range(3)]
    folder = write_cluster(tmp_path / "full", rejected, [])
    with pytest.raises(FedmstError) as exc:
        plot_jobs(folder)
    assert one_line(exc) == f"{folder}: no job finished (3 rejected), so there is nothing to draw"
    assert not (folder / "jobs.png").exists()
    empty = write_cluster(tmp_path / "empty", [], [])
    with pytest.raises(FedmstError, match="no job finished \\(no job on record\\)") as exc:
        plot_jobs(empty)
    one_line(exc)


def test_not_a_cluster_folder_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(FedmstError) as exc:
        plot_jobs(tmp_path)
    assert one_line(exc) == f"{tmp_path} is not a cluster folder (no jobs.csv)"


def test_unwritable_output_is_one_line(cluster: Path, tmp_path: Path) -> None:
    with pytest.raises(FedmstError, match="cannot write") as exc:
        plot_jobs(cluster, tmp_path / "missing" / "jobs.png")
    one_line(exc)


def test_plot_knows_a_cluster_folder_from_a_run_or_compare_folder(tmp_path: Path) -> None:
    from fedmst.views.folders import folder_kind

    one, policies, compare, run = (tmp_path / n for n in ("one", "policies", "compare", "run"))
    for folder in (one, policies, compare, run):
        folder.mkdir()
    (one / "jobs.csv").write_text("job\n")
    (policies / "comparison.json").write_text('{"status": "completed", "policies": ["fifo+random"]}')
    (compare / "comparison.json").write_text('{"status": "completed", "schedulers": ["spff", "mst"]}')
    (run / "config.json").write_text("{}")
    assert [folder_kind(f) for f in (one, policies, compare, run)] == ["cluster", "policies", "compare", "run"]


def preempted_cluster(folder: Path, mode: str, *, with_record: bool = True, crowd: int = 40) -> Path:
    """``long`` on nodes 0 and 1, stopped at 4 s by a preemption for ``tick`` (0.05 s), resumed at
    4.05 s; ``crowd`` jobs of 0.02 s each, back to back on node 2, far too short for their names."""
    rows = [job_row("long", 0.0, 0.0, 12.0, ["0", "1"]), job_row("tick", 3.9, 4.0, 4.05, ["0", "1"])]
    rows[0] = JobRow(**{**asdict(rows[0]), "preemptions": 1})
    intervals = [SlotInterval(n, 0, "long", 0.0, 4.0) for n in ("0", "1")]
    intervals += [SlotInterval(n, 0, "tick", 4.0, 4.05) for n in ("0", "1")]
    intervals += [SlotInterval(n, 0, "long", 4.05, 12.0) for n in ("0", "1")]
    for k in range(crowd):
        at = round(0.02 * k, 6)
        rows.append(job_row(f"c{k}", at, at, at + 0.02, ["2"]))
        intervals.append(SlotInterval("2", 0, f"c{k}", at, at + 0.02))
    write_cluster(folder, rows, intervals, {**SUMMARY, "mode": mode, "order": "las", "placement": "random",
                                            "preempt": "las", "preemptions": 1, "jobs": len(rows),
                                            "jobs_finished": len(rows), "jobs_rejected": 0})
    if with_record:
        stopped = Appender(folder / "preemptions.csv", STOPPED_FIELDS)
        stopped.add([{"asked_s": 3.9, "stopped_s": 4.0, "job": "long", "by": "tick", "reason": "las",
                      "rounds_done": 2}])
        stopped.close()
    return folder


@pytest.mark.parametrize("mode,clock", [("simulate", "s of the fluid model"), ("emulate", "s of the emulated network")])
def test_times_are_said_to_be_the_fluid_models_or_the_emulated_networks(tmp_path: Path, mode: str,
                                                                        clock: str) -> None:
    fig = jobs_figure(preempted_cluster(tmp_path / mode, mode))
    try:
        chart, cdf = fig.axes[:2]
        assert clock in chart.get_xlabel() and clock.removeprefix("s ") in cdf.get_xlabel()
        other = "emulated network" if mode == "simulate" else "fluid model"
        assert other not in chart.get_xlabel() + cdf.get_xlabel()
    finally:
        gantt._pyplot().close(fig)


@pytest.mark.parametrize("with_record", [True, False])
def test_a_preemption_is_in_the_title_and_marked_where_the_job_stopped_and_resumed(tmp_path: Path,
                                                                                   with_record: bool) -> None:
    folder = preempted_cluster(tmp_path / "las", "simulate", with_record=with_record)
    fig = jobs_figure(folder)
    try:
        chart = fig.axes[0]
        assert fig.get_suptitle().endswith("las order, random placement, las preemption (1 stop)")
        drawn = {c.get_gid(): c for c in chart.collections}
        top = slot_rows(read_slots_csv(folder)).index(("0", 0))  # long's top row
        assert drawn["stopped"].get_offsets().tolist() == [[4.0, top]]
        assert drawn["resumed"].get_offsets().tolist() == [[4.05, top]]
        shown = [t.get_text() for legend in chart.findobj(Legend) for t in legend.get_texts()]
        assert "stopped by a preemption (1)" in shown and "resumed" in shown
    finally:
        gantt._pyplot().close(fig)
    quiet = write_cluster(tmp_path / "fifo", *twelve_jobs(), {**SUMMARY, "preempt": "none"})
    fig = jobs_figure(quiet)
    try:
        assert fig.get_suptitle().endswith("fifo order, packed placement, no preemption")
        assert {"stopped", "resumed"}.isdisjoint(c.get_gid() for c in fig.axes[0].collections)
    finally:
        gantt._pyplot().close(fig)


def test_every_run_of_a_job_is_named_on_the_chart_or_in_its_key(tmp_path: Path) -> None:
    folder = preempted_cluster(tmp_path / "crowd", "simulate")
    fig = jobs_figure(folder)
    try:
        chart = fig.axes[0]
        names = [(t.get_text(), t.get_position()[0]) for t in chart.texts if t.get_gid() == "name"]
        key = chart.get_legend()
        keyed = [t.get_text() for t in key.get_texts()] if key is not None else []
        runs = {(i.job, i.from_s, i.to_s) for i in read_slots_csv(folder)}
        assert len(runs) == 43
        for job, start, end in runs:  # a name by its bar (within a second of it), or in the key
            assert (any(n == job and start - 1.0 <= x <= end + 1.0 for n, x in names)
                    or f"{job} from {start:.4g} s" in keyed), (job, start)
        # the short ones beside their bars where there is room, the rest in the key: both at work here
        assert "tick" in {n for n, _ in names} and keyed and len(keyed) < 40
        assert {"long"} <= {n for n, _ in names}
    finally:
        gantt._pyplot().close(fig)


def test_a_policies_comparison_says_whose_seconds_it_shows(tmp_path: Path) -> None:
    for name in ("fifo+random", "las+random+las"):
        preempted_cluster(tmp_path / "cmp" / name, "simulate", crowd=0)
    (tmp_path / "cmp" / "comparison.json").write_text(
        '{"status": "completed", "policies": ["fifo+random", "las+random+las"], "summaries": {}}')
    fig = gantt.policies_figure(tmp_path / "cmp")
    try:
        assert all(ax.get_xlabel().endswith("(s of the fluid model)") for ax in fig.axes)
    finally:
        gantt._pyplot().close(fig)
