"""What ``fedmst sweep`` prints and draws at its end, and its progress rows on Ray, from sweep.csv
rows, without a network."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from fedmst import cli
import test_sweep_views
from test_sweep_views import rows

drawn = test_sweep_views.drawn  # the fixture: every figure saved, its titles and ticks


def test_a_sweep_over_transports_names_each_in_its_figures_and_prints_its_table(
        tmp_path: Path, drawn: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    console = Console(record=True, width=80, force_terminal=False)
    monkeypatch.setattr(cli, "console", console)
    cli._draw_sweep(rows(transports=("cubic", "dctcp")), tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        f"{what}_vs_local_models-{cc}.png" for what in ("bandwidth", "latency") for cc in ("cubic", "dctcp")]
    assert [f["titles"][0].splitlines()[-1] for f in drawn[::2]] == ["(TCP cubic)", "(TCP dctcp)"]
    assert [f["suptitle"] for f in drawn[1::2]] == ["TCP cubic", "TCP dctcp"]
    text = " ".join(console.export_text().split())
    assert "The sweep, per task and round" in text and text.count("dctcp") == 4, text
    assert text.endswith(f"sweep.csv and the latency and bandwidth figures of each congestion control in {tmp_path}/")


def test_a_sweep_over_models_and_transports_names_both_in_each_figure(
        tmp_path: Path, drawn: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    console = Console(record=True, width=80, force_terminal=False)
    monkeypatch.setattr(cli, "console", console)
    cli._draw_sweep(rows(transports=("cubic", "dctcp")) + rows(transports=("cubic", "dctcp"), model="mlp-xl"),
                    tmp_path)
    text = " ".join(console.export_text().split())
    assert "ties within 1%), TCP cubic" in text and "ties within 1%), TCP dctcp" in text
    assert [f["suptitle"] for f in drawn if f["suptitle"]] == [
        f"model {m}, TCP {cc}" for m in ("mlp", "mlp-xl") for cc in ("cubic", "dctcp")] + [
        f"Where each schedule wins, TCP {cc} (under each cell: the Plans' prediction; (!) where it differs)"
        for cc in ("cubic", "dctcp")]
    assert (tmp_path / "latency_vs_local_models-mlp-xl-dctcp.png").is_file()
    assert (tmp_path / "regime_map-dctcp.png").is_file()


def test_a_ray_nodes_progress_row_counts_its_points_of_all_without_a_time_of_its_own() -> None:
    """On Ray the sweep's bar has a row per node: the points it ran of all the sweep's (``2/4``, never
    ``2/?``), and no elapsed or remaining time, which are the sweep's."""
    from rich.progress import Progress

    console = Console(record=True, width=120, force_terminal=False)
    progress = Progress(*cli._sweep_columns(), console=console, auto_refresh=False)
    job = progress.add_task("all points", total=4)
    node = progress.add_task("  of which on ray node 1a2b3c4d", total=4, node="1a2b3c4d")
    progress.advance(job, 3)
    progress.advance(node, 2)
    console.print(progress.get_renderable())
    sweep_row, node_row = [line for line in console.export_text().splitlines() if line.strip()]
    assert "3/4" in sweep_row and "left" in sweep_row, sweep_row
    assert "2/4" in node_row and "?" not in node_row and "left" not in node_row and ":" not in node_row, node_row


def test_a_sweep_over_optical_policies_names_each_in_its_figures(
        tmp_path: Path, drawn: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    console = Console(record=True, width=100, force_terminal=False)
    monkeypatch.setattr(cli, "console", console)
    cli._draw_sweep(rows(opticals=("ocs", "ots", "joint")), tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(
        f"{what}_vs_local_models-{o}.png" for what in ("bandwidth", "latency") for o in ("ocs", "ots", "joint"))
    assert [f["suptitle"] for f in drawn[1::2]] == [f"TCP cubic, optical {o}" for o in ("ocs", "ots", "joint")]
    text = " ".join(console.export_text().split())
    assert text.endswith(f"sweep.csv and the latency and bandwidth figures of each optical policy in {tmp_path}/")


def test_a_sweep_over_tasks_and_optical_policies_names_both_in_its_figures(
        tmp_path: Path, drawn: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    console = Console(record=True, width=100, force_terminal=False)
    monkeypatch.setattr(cli, "console", console)
    cli._draw_sweep(rows(opticals=("ocs", "ots"), tasks=(1, 8)), tmp_path)
    assert (tmp_path / "latency_vs_local_models-ots-tasks8.png").is_file()
    assert [f["suptitle"] for f in drawn[1::2]] == [f"TCP cubic, optical {o}, {n}" for o in ("ocs", "ots")
                                                    for n in ("1 task", "8 tasks")]
    text = " ".join(console.export_text().split())
    assert text.endswith("sweep.csv and the latency and bandwidth figures of each optical policy and number of tasks "
                         f"in {tmp_path}/")
