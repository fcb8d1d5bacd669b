"""plot_run on synthetic run and compare folders (topology "small"): no network, no emulation."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.image import imread

from fedmst.errors import FedmstError
from fedmst.views.plots import plot_link_utilisation, plot_run
from fedmst.run.results import LINK_FIELDS, SAMPLE_FIELDS, write_csv, write_json
from fedmst.core.topology import load_topology

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MODEL = 1_000_000
# G on 0, local models on 2, 3, 3 and 4: SPFF sends one copy per local model along its shortest
# path, MST one copy per tree link (relays 1 and 3 aggregate).
SPFF = [(["0", "1", "2"], [0]), (["0", "1", "3"], [1]), (["0", "1", "3"], [2]), (["0", "4"], [3])]
MST = [(["0", "1"], [0, 1, 2]), (["1", "2"], [0]), (["1", "3"], [1, 2]), (["0", "4"], [3])]


def write_run(folder: Path, scheduler: str, broadcasts: list[tuple[list[str], list[int]]]) -> Path:
    """A run folder as `fedmst run` writes it, with measured bytes equal to the plan's."""
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
                    "round": rnd, "link": f"{a}-{b}", "src": u, "dst": v, "capacity_mbps": 50.0,
                    "predicted_bytes": measured, "measured_bytes": measured, "measured_weight_bytes": measured,
                    "measured_other_bytes": 0, "error_pct": 0.0, "broadcast_bytes": measured // 2,
                    "upload_bytes": measured - measured // 2, "queue_drops": 0,
                })
    write_csv(folder / "links.csv", LINK_FIELDS, rows)
    write_json(folder / "summary.json", {
        "scheduler": scheduler, "topology": "small", "round_latency_s": 1.5 if scheduler == "spff" else 1.0,
        "link_bytes_measured": sum(r["measured_bytes"] for r in rows),
    })
    return folder


@pytest.fixture
def compare_dir(tmp_path: Path) -> Path:
    root = tmp_path / "cmp"
    write_run(root / "spff", "spff", SPFF)
    write_run(root / "mst", "mst", MST)
    write_json(root / "comparison.json", {"bytes_ratio": 0.8})
    return root


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


def test_only_one_scheduler_in_compare_folder(compare_dir: Path, tmp_path: Path) -> None:
    (compare_dir / "spff" / "plan.json").unlink()  # an interrupted compare: only mst finished
    assert aspect(plot_run(compare_dir, tmp_path / "mst-only.png")) < 1.8


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


def test_link_utilisation_over_time(compare_dir: Path) -> None:
    run = compare_dir / "mst"
    rows = [{"t_s": t / 10, "round": 1, "phase": "broadcast" if t < 5 else "upload", "src": u, "dst": v,
             "bytes": t * 625_000 if (u, v) == ("0", "1") else 0}
            for t in range(10) for u, v in (("0", "1"), ("1", "0"))]
    write_csv(run / "samples.csv", SAMPLE_FIELDS, rows)
    png = plot_link_utilisation(run, "0-1")
    assert png == run / "link-0-1.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(FedmstError, match="no link '0-9'"):
        plot_link_utilisation(run, "0-9")
    (run / "samples.csv").unlink()
    with pytest.raises(FedmstError, match="no samples.csv"):
        plot_link_utilisation(run, "0-1")
