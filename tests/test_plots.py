"""plot_run and plot_sweep on synthetic run and compare folders (topology "small"): no network, no emulation."""

from __future__ import annotations

import json

from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.image import imread

from fedmst.core.topology import load_topology
from fedmst.errors import FedmstError
from fedmst.run.layout import run_folder_name
from fedmst.run.report import Summary
from fedmst.run.results import LINK_FIELDS, SAMPLE_FIELDS, TIMELINE_FIELDS, write_csv, write_json
from fedmst.views import plots
from fedmst.views.plots import plot_link_utilisation, plot_run, plot_sweep, plot_timeline

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MODEL = 1_000_000
# G on 0, local models on 2, 3, 3 and 4: SPFF sends one copy per local model along its shortest
# path, MST one copy per tree link (relays 1 and 3 aggregate).
SPFF = [(["0", "1", "2"], [0]), (["0", "1", "3"], [1]), (["0", "1", "3"], [2]), (["0", "4"], [3])]
MST = [(["0", "1"], [0, 1, 2]), (["1", "2"], [0]), (["1", "3"], [1, 2]), (["0", "4"], [3])]
# a third scheduler, given as package.module:Class: one chain 0-4-3-2
PLUGIN = "mypkg.mod:MySched"
CHAIN = [(["0", "4"], [0, 1, 2, 3]), (["4", "3"], [0, 1, 2]), (["3", "2"], [0])]
LATENCY = {"spff": 1.5, "mst": 1.0, PLUGIN: 1.25}


def write_run(folder: Path, scheduler: str, broadcasts: list[tuple[list[str], list[int]]],
              declared: str | None = None) -> Path:
    """A run folder as `fedmst run` writes it, with measured bytes equal to the plan's; ``declared``
    is the name the scheduler's class declares, as summary.json records it (None: a run from before
    it was recorded)."""
    folder.mkdir(parents=True)
    transfers = [{"phase": "broadcast", "path": p, "models": m} for p, m in broadcasts]
    transfers += [{"phase": "upload", "path": p[::-1], "models": m} for p, m in broadcasts]
    aggregation = ["0"] if scheduler == "spff" else ["0", "1", "3"]
    write_json(folder / "config.json", {"topology": "small", "scheduler": scheduler})
    write_json(folder / "plan.json", {"scheduler": scheduler, "tasks": [{
        "scheduler": scheduler, "task": "task0", "global_node": "0", "local_nodes": ["2", "3", "3", "4"],
        "aggregation_nodes": aggregation, "transfers": transfers, "flows": [],
    }]})
    carried = {}
    for t in transfers:
        for hop in zip(t["path"], t["path"][1:]):
            carried[hop] = carried.get(hop, 0) + MODEL
    rows = []
    for rnd in (1, 2):
        for a, b in load_topology("small").edges:
            for u, v in ((a, b), (b, a)):
                measured = carried.get((u, v), 0)
                rows.append({
                    **dict.fromkeys(LINK_FIELDS, 0),  # columns the plots do not read
                    "round": rnd, "link": f"{a}-{b}", "src": u, "dst": v, "capacity_mbps": 50.0,
                    "predicted_bytes": measured, "measured_bytes": measured, "measured_weight_bytes": measured,
                    "measured_other_bytes": 0, "error_pct": 0.0, "broadcast_bytes": measured // 2,
                    "upload_bytes": measured - measured // 2, "queue_drops": 0,
                })
    write_csv(folder / "links.csv", LINK_FIELDS, rows)
    write_json(folder / "summary.json", {
        **{f.name: 0 for f in fields(Summary) if f.name != "extra"},  # a complete summary; these matter:
        "status": "completed", "rounds": 2, "rounds_planned": 2, "scheduler": scheduler, "scheduler_name": declared,
        "topology": "small", "round_latency_s": LATENCY.get(scheduler, 2.0),
        "link_bytes_measured": sum(r["measured_bytes"] for r in rows), "workers": {"backend": "process"},
    })
    return folder


def write_compare(root: Path, runs: dict[str, list[tuple[list[str], list[int]]]], *, comparison: bool = True) -> Path:
    """A compare folder as `fedmst compare --schedulers ...` writes it (without comparison.json: still running)."""
    for name, broadcasts in runs.items():
        write_run(root / run_folder_name(name), name, broadcasts)
    if comparison:
        write_json(root / "comparison.json", {"schedulers": list(runs), "baseline": next(iter(runs))})
    return root


@pytest.fixture
def compare_dir(tmp_path: Path) -> Path:
    return write_compare(tmp_path / "cmp", {"spff": SPFF, "mst": MST})


@pytest.fixture
def panels(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What every panel drawn was given: its scheduler and latency, and the positions and colour
    scale it shared with the others."""
    drawn: list[dict[str, Any]] = []
    draw = plots._draw_panel

    def spy(ax: Any, panel: dict[str, Any], pos: dict[str, Any], cmap: Any, norm: Any, unit: tuple[str, float]) -> None:
        drawn.append({"label": panel["label"], "latency_s": panel["latency_s"], "pos": pos, "norm": norm,
                      "unit": unit})
        draw(ax, panel, pos, cmap, norm, unit)

    monkeypatch.setattr(plots, "_draw_panel", spy)
    return drawn


def aspect(png: Path) -> float:
    assert png.read_bytes()[:8] == PNG_MAGIC
    height, width = imread(png).shape[:2]
    return width / height


def test_run_folder_default_output(compare_dir: Path) -> None:
    out = plot_run(compare_dir / "mst")
    assert out == compare_dir / "mst" / "links.png"
    assert out.stat().st_size > 10_000
    assert 0.6 < aspect(out) < 1.8


def test_compare_folder_is_two_panels_wide(compare_dir: Path, tmp_path: Path) -> None:
    single = plot_run(compare_dir / "spff", tmp_path / "one.png")
    both = plot_run(compare_dir, tmp_path / "both.png")
    assert both == tmp_path / "both.png"
    assert aspect(both) > 1.5 * aspect(single)


def test_only_one_scheduler_in_compare_folder(compare_dir: Path, tmp_path: Path, panels: list[dict]) -> None:
    (compare_dir / "spff" / "plan.json").unlink()  # an interrupted compare: only mst finished
    assert aspect(plot_run(compare_dir, tmp_path / "mst-only.png")) < 1.8
    assert [p["label"] for p in panels] == ["MST"]


def test_three_schedulers_in_compare_order(tmp_path: Path, panels: list[dict]) -> None:
    two = plot_run(write_compare(tmp_path / "two", {"spff": SPFF, "mst": MST}), tmp_path / "two.png")
    panels.clear()
    # comparison.json's order, baseline first, not spff first
    three = write_compare(tmp_path / "three", {"mst": MST, PLUGIN: CHAIN, "spff": SPFF})
    assert (three / "mypkg.mod_MySched" / "links.csv").is_file()
    assert aspect(plot_run(three, tmp_path / "three.png")) > 1.3 * aspect(two)
    assert [p["label"] for p in panels] == ["MST", "MYSCHED", "SPFF"]
    assert [p["latency_s"] for p in panels] == [1.0, 1.25, 1.5]  # each run's summary.json
    assert all(p["pos"] is panels[0]["pos"] and p["norm"] is panels[0]["norm"] for p in panels)
    # one colour scale, up to SPFF's busiest link: 0-1, 3 copies each way in each of 2 rounds
    assert panels[0]["norm"].vmax == pytest.approx(12.0) and panels[0]["unit"] == ("MB", 1e6)


def test_many_schedulers_wrap_onto_rows(tmp_path: Path, panels: list[dict]) -> None:
    three = plot_run(write_compare(tmp_path / "three", {"spff": SPFF, "mst": MST, PLUGIN: CHAIN}))
    five = write_compare(tmp_path / "five", {"spff": SPFF, "mst": MST, PLUGIN: CHAIN, "a": MST, "b": CHAIN})
    assert aspect(plot_run(five)) < 0.7 * aspect(three)  # 2 rows of 3, the last panel empty
    assert [p["label"] for p in panels][3:] == ["SPFF", "MST", "MYSCHED", "A", "B"]


def test_compare_folder_without_comparison_json(tmp_path: Path, panels: list[dict]) -> None:
    """A compare still running: every run folder drawn, spff first, then mst, then the others by name;
    a run without summary.json yet has no latency."""
    folder = write_compare(tmp_path / "cmp", {"zz": CHAIN, "mst": MST, PLUGIN: CHAIN, "spff": SPFF},
                           comparison=False)
    (folder / "zz" / "summary.json").unlink()
    plot_run(folder)
    assert [p["label"] for p in panels] == ["SPFF", "MST", "MYSCHED", "ZZ"]
    assert panels[-1]["latency_s"] is None


def test_summary_read_through_the_typed_summary(compare_dir: Path, tmp_path: Path) -> None:
    write_json(compare_dir / "mst" / "summary.json", {"scheduler": "mst", "round_latency_s": 1.0})
    with pytest.raises(FedmstError, match="summary.json: not a fedmst summary \\(missing "):
        plot_run(compare_dir, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_summary_keeps_the_workers_description(compare_dir: Path) -> None:
    """summary.json's ``workers`` reads into one record and writes back as it was, for either backend."""
    docker = {"backend": "docker", "image": "fedmst-worker", "limits": {"3": {"cpus": 1.0}}}
    for workers, label in (({"backend": "process"}, "processes"), (docker, "docker (fedmst-worker)")):
        obj = {**json.loads((compare_dir / "mst" / "summary.json").read_text()), "workers": workers}
        summary = Summary.from_json(obj)
        assert summary.workers.label == label and summary.to_json() == obj
    with pytest.raises(FedmstError, match="'workers' is not a worker backend's description"):
        Summary.from_json({**obj, "workers": "docker"})


def test_bad_folders_raise_one_line_fedmst_errors(compare_dir: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FedmstError, match="neither a run folder") as err:
        plot_run(empty)
    assert "\n" not in str(err.value)
    with pytest.raises(FedmstError, match="has no task 'task7'"):
        plot_run(compare_dir / "mst", tmp_path / "x.png", task="task7")
    (compare_dir / "mst" / "plan.json").write_text("{not json")
    with pytest.raises(FedmstError, match="cannot read JSON"):
        plot_run(compare_dir / "mst", tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
    for run in ("spff", "mst"):
        (compare_dir / run / "config.json").unlink()
    with pytest.raises(FedmstError, match="nor a compare folder with a finished run"):
        plot_run(compare_dir)


def write_samples(run: Path) -> None:
    """samples.csv of a run whose link 0->1 runs at 50 Mbit/s (full) for a second, 1->0 idle."""
    rows = [{"t_s": t / 10, "round": 1, "phase": "broadcast" if t < 5 else "upload", "src": u, "dst": v,
             "bytes": t * 625_000 if (u, v) == ("0", "1") else 0}
            for t in range(10) for u, v in (("0", "1"), ("1", "0"))]
    write_csv(run / "samples.csv", SAMPLE_FIELDS, rows)


def test_link_utilisation_over_time(compare_dir: Path) -> None:
    run = compare_dir / "mst"
    write_samples(run)
    png = plot_link_utilisation(run, "0-1")
    assert png == run / "link-0-1.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(FedmstError, match="no link '0-9'"):
        plot_link_utilisation(run, "0-9")
    (run / "samples.csv").unlink()
    with pytest.raises(FedmstError, match="no samples.csv"):
        plot_link_utilisation(run, "0-1")
    with pytest.raises(FedmstError, match="is a compare folder: --link draws one run"):
        plot_link_utilisation(compare_dir, "0-1")


def write_timeline(run: Path, *, predicted: bool) -> None:
    """timeline.csv of two tasks' round: measured phases, and with ``predicted`` (an independent
    clock) the predicted ones too; a lockstep run has measured rows only."""
    rows = []
    for task, start in (("task0", 0.0), ("task1", 0.3)):
        for kind in ("measured", "predicted") if predicted else ("measured",):
            t = start
            for phase, seconds in (("broadcast", 0.1), ("train", 0.4), ("upload", 0.1)):
                rows.append({"kind": kind, "task": task, "round": 1, "phase": phase, "start_s": t,
                             "end_s": t + seconds})
                t += seconds
    write_csv(run / "timeline.csv", TIMELINE_FIELDS, rows)


@pytest.fixture
def saved(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Each axes of every figure saved: its title, and where it and its legend were drawn."""
    axes: list[dict[str, Any]] = []
    save = Figure.savefig

    def spy(fig: Figure, *args: Any, **kw: Any) -> None:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            legend = ax.get_legend()
            axes.append({"title": ax.get_title(), "box": ax.get_window_extent(renderer),
                         "legend": legend.get_window_extent(renderer) if legend else None})
        save(fig, *args, **kw)

    monkeypatch.setattr(Figure, "savefig", spy)
    return axes


@pytest.mark.parametrize("predicted", [False, True])
def test_timeline_promises_predicted_bars_only_where_it_draws_them(compare_dir: Path, saved: list[dict[str, Any]],
                                                                   predicted: bool) -> None:
    """A lockstep run's timeline has no predicted phases, and its title says none; the legends of
    phases and links stand outside every axes, so they hide no bar and no line."""
    run = compare_dir / "mst"
    write_timeline(run, predicted=predicted)
    write_samples(run)
    png = plot_timeline(run)
    assert png == run / "timeline.png" and png.read_bytes()[:8] == PNG_MAGIC
    phases, links = saved
    assert phases["title"] == "phases of each task" + (" (thin bars beneath: predicted)" if predicted else "")
    assert phases["legend"] is not None and links["legend"] is not None
    assert not any(ax["legend"].overlaps(other["box"]) for ax in saved for other in saved)


def test_timeline_of_a_compare_folder_names_its_runs(compare_dir: Path) -> None:
    for run in ("spff", "mst"):
        write_timeline(compare_dir / run, predicted=False)
    runs = f"{compare_dir / 'spff'}, {compare_dir / 'mst'}"
    with pytest.raises(FedmstError) as err:
        plot_timeline(compare_dir)
    assert str(err.value) == f"{compare_dir} is a compare folder: --timeline draws one run, give one of {runs}"


def test_a_plugin_is_drawn_under_the_name_its_class_declares(tmp_path: Path, panels: list[dict]) -> None:
    """summary.json records the name a scheduler's class declares: ``mypkg.trees:BfsTree`` named
    ``bfs-tree`` is BFS-TREE in a compare and alone, without importing mypkg."""
    bfs = "mypkg.trees:BfsTree"
    folder = tmp_path / "cmp"
    for name, broadcasts, declared in (("spff", SPFF, "spff"), ("mst", MST, "mst"), (bfs, CHAIN, "bfs-tree")):
        write_run(folder / run_folder_name(name), name, broadcasts, declared)
    write_json(folder / "comparison.json", {"schedulers": ["spff", "mst", bfs], "baseline": "spff"})
    plot_run(folder)
    plot_run(folder / run_folder_name(bfs))
    assert [p["label"] for p in panels] == ["SPFF", "MST", "BFS-TREE", "BFS-TREE"]


def sweep_rows(scheduler: str, scale: float) -> list[dict[str, Any]]:
    """sweep.csv rows of one scheduler: two local-model counts, two seeds, one task and round."""
    return [{"scheduler": scheduler, "local_models": k, "seed": seed, "task": "task0", "round": 1,
             "broadcast_s": 0.1, "train_s": 1.0, "upload_s": 0.1, "round_s": scale * k + seed / 10, "accuracy": 0.9,
             "run_link_bytes_measured": scale * k * 1e6, "run_link_bytes_predicted": scale * k * 1e6,
             "run_reserved_capacity_mbps": scale * 1e4, "run_tasks_blocked": 0, "run_predicted_comm_s": scale * k,
             "run_wavelengths_lit": 0, "run_slot_utilisation": 0.0, "time_scale": 1.0, "cpu_busy": 0.5,
             "host_bound": "", "tasks": 30}
            for k in (2, 4) for seed in (1, 2)]


def test_sweep_draws_a_line_per_scheduler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    legends: list[dict[str, str]] = []
    save = Figure.savefig

    def spy(fig: Figure, *args: Any, **kw: Any) -> None:
        for ax in fig.axes:
            handles, labels = ax.get_legend_handles_labels()
            legends.append({label: to_hex((h[0] if isinstance(h, tuple) else h).get_color())
                            for h, label in zip(handles, labels)})
        save(fig, *args, **kw)

    monkeypatch.setattr(Figure, "savefig", spy)
    rows = sweep_rows(PLUGIN, 0.8) + sweep_rows("mst", 0.5) + sweep_rows("spff", 1.0)
    latency, bandwidth = plot_sweep(rows, tmp_path)
    assert latency.read_bytes()[:8] == PNG_MAGIC and bandwidth.read_bytes()[:8] == PNG_MAGIC
    # in the order the rows name them; spff red and mst blue whatever the order, the others from the cycle
    colour = {"MYSCHED": to_hex("tab:green"), "MST": to_hex("tab:blue"), "SPFF": to_hex("tab:red")}
    latency_axes, bytes_axes, capacity_axes = legends
    assert latency_axes == {f"{s} {what}": c for s, c in colour.items()
                            for what in ("measured", "predicted (fluid model + measured training)")}
    assert bytes_axes == {f"{s} {what}": c for s, c in colour.items() for what in ("measured", "predicted")}
    assert list(capacity_axes.items()) == list(colour.items())


@pytest.mark.parametrize("scale,unit,top", [(1.0, "MB", 4.0), (1e-3, "KB", 4.0)])
def test_sweep_bytes_axis_is_in_the_unit_its_values_pick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         scale: float, unit: str, top: float) -> None:
    """Link bytes of 2-4 MB are plotted in MB; of 2-4 KB (a small model) in KB, not as 0.00 MB."""
    axes: list[tuple[str, float]] = []
    save = Figure.savefig

    def spy(fig: Figure, *args: Any, **kw: Any) -> None:
        axes.extend((ax.get_ylabel(), max(max(line.get_ydata()) for line in ax.get_lines())) for ax in fig.axes[:1])
        save(fig, *args, **kw)

    monkeypatch.setattr(Figure, "savefig", spy)
    plot_sweep(sweep_rows("mst", scale), tmp_path)
    ylabel, highest = axes[1]
    assert ylabel == f"{unit} on all links per round" and highest == pytest.approx(top)


def test_accuracy_against_round_time_and_bytes_per_scheduler(compare_dir: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.axes import Axes

    from fedmst.run.results import ROUND_FIELDS

    for name, seconds, mb in (("spff", 3.0, 20.0), ("mst", 1.5, 10.0)):
        write_csv(compare_dir / name / "rounds.csv", ROUND_FIELDS,
                  [{**dict.fromkeys(ROUND_FIELDS, 0), "round": r, "round_s": seconds, "accuracy": a,
                    "bytes_measured": int(mb * 1e6)} for r, a in ((1, 0.5), (2, 0.85), (3, 0.9))])
        summary = Summary.read(compare_dir / name / "summary.json")
        write_json(compare_dir / name / "summary.json", {**summary.to_json(), "target_accuracy": 0.8,
                                                         "rounds_to_accuracy": 2, "time_to_accuracy_s": 2 * seconds,
                                                         "bytes_to_accuracy": int(2 * mb * 1e6)})
    lines: list[tuple[str, list[float], list[float]]] = []
    plot = Axes.plot
    monkeypatch.setattr(Axes, "plot", lambda ax, x, y, **kw: (lines.append((kw["label"], list(x), list(y))),
                                                               plot(ax, x, y, **kw))[1])
    png = plots.plot_accuracy(compare_dir)
    assert png == compare_dir / "accuracy.png" and png.read_bytes()[:8] == PNG_MAGIC
    assert sorted(lines) == sorted([
        ("SPFF", [1, 2, 3], [0.5, 0.85, 0.9]), ("SPFF, 0.8 after 6.0 s", [3.0, 6.0, 9.0], [0.5, 0.85, 0.9]),
        ("SPFF, 0.8 after 40 MB", [20.0, 40.0, 60.0], [0.5, 0.85, 0.9]),
        ("MST", [1, 2, 3], [0.5, 0.85, 0.9]), ("MST, 0.8 after 3.0 s", [1.5, 3.0, 4.5], [0.5, 0.85, 0.9]),
        ("MST, 0.8 after 20 MB", [10.0, 20.0, 30.0], [0.5, 0.85, 0.9])])
    (compare_dir / "mst" / "rounds.csv").unlink()
    with pytest.raises(FedmstError, match="no rounds.csv"):
        plots.plot_accuracy(compare_dir)


def test_regime_map_picks_winners_with_ties_and_draws_every_cell(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from fedmst.run.experiments import regime_map
    from fedmst.views.plots import plot_regime_map

    def row(model: str, size: int, k: int, scheduler: str, seconds: float, predicted_s: float, mb: float) -> dict:
        return {"model": model, "model_bytes": size, "local_models": k, "scheduler": scheduler, "broadcast_s": 0.5,
                "upload_s": seconds - 0.5,
                "run_predicted_comm_s": predicted_s, "run_link_bytes_measured": mb * 1e6,
                "run_link_bytes_predicted": mb * 1e6}

    rows = [row("big", 45_000_000, 2, "mst", 9.0, 4.0, 200.0), row("big", 45_000_000, 2, "ring", 7.0, 5.0, 180.0),
            row("small", 19_000, 2, "mst", 1.0, 0.1, 0.100), row("small", 19_000, 2, "ring", 1.2, 0.2, 0.1005),
            row("small", 19_000, 4, "mst", 1.1, 0.1, 0.2), row("small", 19_000, 4, "ring", 1.0, 0.05, 0.3)]
    points = regime_map(rows + [dict(r, upload_s=r["upload_s"] + 0.2) for r in rows])  # a second seed
    assert [(p["model"], p["local_models"]) for p in points] == [("small", 2), ("small", 4), ("big", 2)]
    small2, small4, big2 = points
    assert small2["bytes_measured"] == ["mst", "ring"]  # within 1%: both win
    assert small2["latency_measured"] == ["mst"] and small4["latency_measured"] == ["ring"]
    assert big2["latency_measured"] == ["ring"] and big2["latency_predicted"] == ["mst"]  # the plan disagrees
    assert big2["latency_measured_values"]["ring"] == pytest.approx(7.1)

    texts: list[str] = []
    monkeypatch.setattr("matplotlib.axes.Axes.text", lambda ax, x, y, s, **kw: texts.append(s))
    figure = plot_regime_map(points, tmp_path / "regime.png")
    assert figure.read_bytes()[:8] == PNG_MAGIC
    assert "pred MST (!)" in texts and "MST=RING" in texts and len(texts) == 2 * 2 * len(points)


def test_sweep_csv_reads_back_with_its_numbers_typed(tmp_path: Path) -> None:
    """One record for sweep.csv: what a sweep writes reads back equal, each column as its type,
    so a figure drawn again from the file sees what the sweep saw."""
    from fedmst.run.experiments import SWEEP_FIELDS, SweepRow, read_sweep, write_sweep

    rows = [SweepRow(**{**row, "model": "mlp", "model_bytes": 19_240, "congestion_control": "dctcp",
                        "optical": "joint", "round_s": 1.25, "ray_node": node, "host_bound": bound})
            for row, node, bound in zip(sweep_rows("mst", 0.5), ("", "10.0.0.2", "", ""), ("", "upload", "", ""))]
    write_sweep(tmp_path / "sweep.csv", rows)
    assert (tmp_path / "sweep.csv").read_text().splitlines()[0] == ",".join(SWEEP_FIELDS)
    back = read_sweep(tmp_path / "sweep.csv")
    assert back == [asdict(r) for r in rows]
    assert type(back[0]["seed"]) is int and type(back[0]["run_tasks_blocked"]) is int
    write_csv(tmp_path / "other.csv", ("model", "seed"), [{"model": "mlp", "seed": 1}])
    with pytest.raises(FedmstError, match="other.csv lacks the columns model_bytes, scheduler"):
        read_sweep(tmp_path / "other.csv")
    # a sweep from before the transport was an axis reads back, its congestion control unrecorded
    # and from before the optical policy was: every point held circuits (ocs), none lit on no fabric
    new = {"congestion_control", "optical", "tasks", "run_wavelengths_lit", "run_slot_utilisation"}
    old = [name for name in SWEEP_FIELDS if name not in new]
    write_csv(tmp_path / "old.csv", old, [{k: v for k, v in asdict(r).items() if k in old} for r in rows])
    back = read_sweep(tmp_path / "old.csv")
    assert {(r["congestion_control"], r["optical"], r["tasks"], r["run_wavelengths_lit"]) for r in back} == {
        ("unrecorded", "ocs", 0, 0)}


def flags(*given: str) -> dict[str, bool]:
    return {flag: flag in given for flag in ("--jobs", "--link", "--accuracy", "--timeline", "--task", "--out")}


def test_a_flag_a_folder_cannot_honour_is_refused_saying_what_it_offers(compare_dir: Path, tmp_path: Path) -> None:
    from fedmst.views.folders import check_plot, folder_kind

    sweep, cluster, fluid, policies = (tmp_path / n for n in ("sweep", "cluster", "fluid", "policies"))
    write_compare(sweep / "k2-seed1", {"spff": SPFF, "mst": MST}, comparison=False)
    (sweep / "sweep.csv").write_text("scheduler\n")
    for folder, mode in ((cluster, "emulate"), (fluid, "simulate"), (policies / "fifo+random", "simulate")):
        folder.mkdir(parents=True)
        (folder / "jobs.csv").write_text("job\n")
        write_json(folder / "config.json", {"mode": mode})
    (cluster / "links.csv").write_text("round\n")
    write_json(policies / "comparison.json", {"status": "completed", "policies": ["fifo+random"]})
    run, plain = compare_dir / "mst", tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("not results\n")
    assert [folder_kind(f) for f in (run, compare_dir, sweep, cluster, policies, plain)] == \
        ["run", "compare", "sweep", "cluster", "policies", None]

    def refused(folder: Path, *given: str) -> str:
        with pytest.raises(FedmstError) as err:
            check_plot(folder, flags(*given))
        assert "\n" not in str(err.value)
        return str(err.value)

    # what each kind honours passes, and says its kind
    for folder, given, kind in ((run, ("--link", "--out"), "run"), (run, ("--task",), "run"),
                                (compare_dir, ("--accuracy", "--out"), "compare"), (sweep, (), "sweep"),
                                (cluster, ("--jobs", "--out"), "cluster"), (cluster, ("--link",), "cluster"),
                                (policies, ("--out",), "policies")):
        assert check_plot(folder, flags(*given)) == kind
    assert refused(compare_dir, "--jobs").startswith(f"--jobs draws a cluster folder's jobs (fedmst cluster); "
                                                     f"{compare_dir} is a compare folder: plot it without flags")
    assert refused(policies, "--jobs").endswith(f"--jobs and --link draw one policy's cluster: give one of "
                                                f"{policies / 'fifo+random'}")
    for given in ("--accuracy", "--timeline", "--task"):
        assert (f"{cluster} is a cluster folder: plot it without flags (or with --jobs) for its Gantt chart and JCT "
                f"distribution, or with --link A-B") in refused(cluster, given)
    assert "on the fluid model (--mode simulate) measured no link" in refused(fluid, "--link")
    assert f"written again into {sweep}/: leave --out out" in refused(sweep, "--out")
    for given in ("--link", "--accuracy", "--timeline"):
        line = refused(sweep, given)
        assert f"{sweep} is a sweep folder, with no per-link trace, rounds or timeline of its own" in line
        assert line.endswith(f"draw one of its runs, e.g. {sweep / 'k2-seed1' / 'mst'}")
    assert "--timeline draws every task: leave --task out" in refused(run, "--timeline", "--task")
    (tmp_path / "empty").mkdir()
    assert refused(tmp_path / "empty").endswith("holds no results of fedmst (no run, compare, sweep or cluster "
                                                "folder: it is empty)")
    assert refused(tmp_path / "nowhere") == f"{tmp_path / 'nowhere'}: no such folder"
