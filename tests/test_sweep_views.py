"""What a sweep shows from its sweep.csv rows, without a network: its figures' titles and ticks,
and the results table it prints at the end, for one transport and for several."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure
from rich.console import Console

from fedmst.run.experiments import sweep_points, sweep_table
from fedmst.views.plots import plot_sweep


def rows(ks: tuple[int, ...] = (2, 3), transports: tuple[str, ...] = ("cubic",), model: str = "mlp",
         schedulers: tuple[str, ...] = ("spff", "mst"), opticals: tuple[str, ...] = ("ocs",),
         tasks: tuple[int, ...] = (1,)) -> list[dict[str, Any]]:
    """sweep.csv rows: every scheduler at every local-model count under every congestion control and
    optical policy, two seeds, one task and round; SPFF moves twice MST's bytes, each communicating
    0.1 s a local model; a policy other than ocs lights half the wavelengths and blocks one task."""
    return [{"model": model, "model_bytes": 19_240, "congestion_control": cc, "optical": o, "tasks": n, "scheduler": s,
             "local_models": k, "run_wavelengths_lit": 8 * k // (1 if o == "ocs" else 2),
             "run_slot_utilisation": 0.0 if o == "ocs" else 0.5,
             "seed": seed, "task": "task0", "round": 1, "broadcast_s": 0.05 * k, "train_s": 1.0,
             "upload_s": 0.05 * k * (2 if s == "spff" else 1), "round_s": 1.0 + 0.1 * k + seed / 100,
             "accuracy": 0.9, "run_link_bytes_measured": k * (200_000 if s == "spff" else 100_000) + seed,
             "run_link_bytes_predicted": k * (190_000 if s == "spff" else 95_000), "run_reserved_capacity_mbps": 1e3,
             "run_tasks_blocked": int(o != "ocs"), "run_predicted_comm_s": 0.1 * k, "time_scale": 1.0,
             "cpu_busy": 0.5, "ray_node": "", "host_bound": ""}
            for cc in transports for o in opticals for n in tasks for k in ks for seed in (1, 2) for s in schedulers]


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every figure saved: its title over the panels and each panel's title and x ticks."""
    figures: list[dict[str, Any]] = []
    save = Figure.savefig

    def spy(fig: Figure, *args: Any, **kw: Any) -> None:
        fig.canvas.draw()  # the tick locator places its ticks
        figures.append({"suptitle": fig._suptitle.get_text() if fig._suptitle else "",
                        "titles": [ax.get_title() for ax in fig.axes],
                        "ticks": [[t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
                                  for ax in fig.axes]})
        save(fig, *args, **kw)

    monkeypatch.setattr(Figure, "savefig", spy)
    return figures


def test_a_sweeps_figures_tick_whole_local_models_and_name_what_they_ran(tmp_path: Path,
                                                                       drawn: list[dict[str, Any]]) -> None:
    """Two local-model counts tick 2 and 3, never 2.25 or 2.5; both figures name the transport."""
    plot_sweep(rows(), tmp_path, subject="TCP dctcp")
    latency, bandwidth = drawn
    assert latency["titles"] == ["Latency (training + communication) vs local models\n(TCP dctcp)"]
    assert bandwidth["suptitle"] == "TCP dctcp"
    assert all(ticks == [2, 3] for figure in drawn for ticks in figure["ticks"])


def test_many_local_model_counts_get_whole_number_ticks(tmp_path: Path, drawn: list[dict[str, Any]]) -> None:
    plot_sweep(rows(ks=tuple(range(1, 31))), tmp_path)
    for figure in drawn:
        for ticks in figure["ticks"]:
            assert len(ticks) >= 3 and all(float(t).is_integer() for t in ticks), ticks
    assert drawn[0]["titles"] == ["Latency (training + communication) vs local models"]  # no subject, no line


def _text(table: Any, width: int = 80) -> str:
    console = Console(record=True, width=width, force_terminal=False)
    console.print(table)
    return console.export_text()


def test_the_results_table_has_a_row_per_point_and_scheduler_with_ratios_to_the_first() -> None:
    text = _text(sweep_table(sweep_points(rows(transports=("cubic", "dctcp")))))
    lines = text.splitlines()
    assert "…" not in text and max(map(len, lines)) <= 80, text
    body = [line.split() for line in lines if line.split()[:1] in (["cubic"], ["dctcp"])]
    assert [b[:3] for b in body] == [[cc, k, s] for cc in ("cubic", "dctcp") for k in ("2", "3")
                                     for s in ("SPFF", "MST")]
    # MST at 3 local models: comm. 0.3 s and 300 KB a round, against SPFF's 0.45 s and 600 KB
    mst3 = body[3]
    assert mst3[3:] == ["1.315", "0.300", "0.300", "300.00", "285.00", "0.67", "0.50"], text
    assert len(body[2]) == 8  # the baseline has no ratio to itself
    # one transport, one scheduler: neither the TCP column nor ratios
    alone = _text(sweep_table(sweep_points(rows(schedulers=("mst",)))))
    assert "TCP" not in alone and "vs" not in alone and "cubic" not in alone


def test_with_several_optical_policies_the_table_shows_blocking_and_wavelengths() -> None:
    text = _text(sweep_table(sweep_points(rows(ks=(2,), opticals=("ocs", "joint")))), width=100)
    assert "optical" in text and "blocked" in text and "λ lit" in text, text
    body = [line.split() for line in text.splitlines() if line.split()[:1] in (["ocs"], ["joint"])]
    # policy, k, scheduler, five figures, two ratios (none for the baseline), blocked, wavelengths lit
    assert [(b[0], b[2], b[-2], b[-1]) for b in body] == [("ocs", "SPFF", "0", "16"), ("ocs", "MST", "0", "16"),
                                                         ("joint", "SPFF", "1", "8"), ("joint", "MST", "1", "8")]
    one = _text(sweep_table(sweep_points(rows(ks=(2,)))))
    assert "blocked" not in one and "optical" not in one


def test_with_several_numbers_of_tasks_the_table_names_each() -> None:
    text = _text(sweep_table(sweep_points(rows(ks=(2,), tasks=(1, 8)))), width=100)
    body = [line.split() for line in text.splitlines() if line.split()[:1] in (["1"], ["8"])]
    assert [(b[0], b[1], b[2]) for b in body] == [(n, "2", s) for n in ("1", "8") for s in ("SPFF", "MST")], text
    assert "tasks" in text and "λ lit" in text
