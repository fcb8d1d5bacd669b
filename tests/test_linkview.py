"""fedmst.views.links and ``fedmst links`` on small hand-made run and compare folders whose every
number can be checked by hand.

The run has two links, 2-10 (100 Mbit/s) and 9-10 (200 Mbit/s), so natural node order
(2 before 9 before 10) differs from string order, and two rounds whose broadcast + upload
times add up to 0.8 s + 1.2 s = 2 s. Compare folders hold two or three such runs.
"""

from __future__ import annotations

import io
import math
import signal
from pathlib import Path
from typing import Callable, Iterator

import pytest
from click.testing import CliRunner, Result
from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.table import Table

from fedmst import cli
from fedmst.core.optical.circuits import OPTICAL_FIELDS
from fedmst.core.topology import node_order
from fedmst.errors import FedmstError
from fedmst.run.layout import run_folder_name
from fedmst.run.results import LINK_FIELDS, ROUND_FIELDS, LinkRow, read_links, write_csv, write_json, write_links
from fedmst.views.links import compare_runs, diff_table, is_compare_dir, link_table, rate_series, render

CAPACITY = {"2-10": 100, "9-10": 200}
# (round, src, dst): (predicted, measured, weight, other, drops), in kB
LINKS = {
    (1, "2", "10"): (1000, 1100, 1000, 100, 0),
    (1, "10", "2"): (0, 50, 0, 50, 1),
    (1, "9", "10"): (2000, 2300, 2200, 100, 0),
    (1, "10", "9"): (0, 80, 0, 80, 0),
    (2, "2", "10"): (1000, 900, 800, 100, 0),
    (2, "10", "2"): (0, 40, 0, 40, 2),
    (2, "9", "10"): (2000, 2000, 2000, 0, 0),
    (2, "10", "9"): (0, 120, 0, 120, 0),
}
# round: (broadcast_s, train_s, upload_s); training time never counts towards utilisation
TIMES = {1: (0.5, 5.0, 0.3), 2: (0.4, 7.0, 0.8)}


def _link_row(rnd: int, src: str, dst: str, values: tuple[int, ...]) -> dict[str, object]:
    predicted, measured, weight, other = (v * 1000 for v in values[:4])
    drops = values[4]
    link = "-".join(sorted((src, dst), key=node_order))
    return {
        **dict.fromkeys(LINK_FIELDS, 0),  # columns these views do not read
        "round": rnd, "link": link, "src": src, "dst": dst, "capacity_mbps": CAPACITY.get(link, 100),
        "predicted_bytes": predicted, "measured_bytes": measured, "measured_weight_bytes": weight,
        "measured_other_bytes": other, "error_pct": 0.0, "broadcast_bytes": 0, "upload_bytes": 0,
        "queue_drops": drops,
    }


def write_run(path: Path, links: dict[tuple[int, str, str], tuple[int, ...]] = LINKS,
              samples: list[tuple[float, int, str, str, str, int]] | None = None, scheduler: str = "mst") -> Path:
    """A run folder as the coordinator writes it (plus samples.csv when given)."""
    path.mkdir(parents=True)
    write_json(path / "config.json", {"scheduler": scheduler, "topology": "test"})
    write_csv(path / "links.csv", LINK_FIELDS, [_link_row(r, s, d, v) for (r, s, d), v in links.items()])
    rounds = sorted({r for r, _, _ in links})
    write_csv(path / "rounds.csv", ROUND_FIELDS, [
        {**dict.fromkeys(ROUND_FIELDS, 0), "round": r, "broadcast_s": TIMES[r][0], "train_s": TIMES[r][1],
         "upload_s": TIMES[r][2], "round_s": sum(TIMES[r])}
        for r in rounds
    ])
    if samples is not None:
        write_csv(path / "samples.csv", ("t_s", "round", "phase", "src", "dst", "bytes"), [
            dict(zip(("t_s", "round", "phase", "src", "dst", "bytes"), s)) for s in samples
        ])
    return path


def by_direction(rows: list[dict]) -> dict[str, dict]:
    return {r["direction"]: r for r in rows}


def directions(rows: list[dict]) -> list[str]:
    return [r["direction"] for r in rows]


def test_aggregates_every_round(tmp_path: Path) -> None:
    rows = by_direction(link_table(write_run(tmp_path / "run")))
    assert set(rows) == {"2->10", "10->2", "9->10", "10->9"}
    r = rows["2->10"]
    assert (r["link"], r["src"], r["dst"], r["capacity_mbps"]) == ("2-10", "2", "10", 100)
    assert (r["measured_bytes"], r["predicted_bytes"], r["weight_bytes"], r["other_bytes"]) == (
        2_000_000, 2_000_000, 1_800_000, 200_000)
    assert r["error_pct"] == pytest.approx(-10.0)
    assert rows["9->10"]["error_pct"] == pytest.approx(5.0)
    assert rows["10->2"]["queue_drops"] == 3
    assert rows["10->2"]["error_pct"] == 0.0  # nothing planned on it: no error, not a division by zero


def test_a_fabric_runs_circuits_beside_what_each_direction_carried(tmp_path: Path) -> None:
    """With optical.csv: each direction's circuits (a re-plan's kept one counted once), the Mbit/s
    one plan reserved on it together and its rate in its busier phase; a narrow console leaves them out."""
    run = write_run(tmp_path / "run")
    circuit = {"task": "t", "transfer": "2-10-9", "kind": "ocs", "wavelength": 0, "timeslots": "", "setup_ms": 1.2,
               "measured_mbps": "", "blocked": ""}
    write_csv(run / "optical.csv", OPTICAL_FIELDS, [
        {**circuit, "path": "2-10", "reserved_mbps": 25.0, "from_round": 1},
        {**circuit, "path": "2-10", "reserved_mbps": 25.0, "from_round": 2},
        {**circuit, "wavelength": 1, "path": "2-10", "reserved_mbps": 25.0, "from_round": 2},
        {**circuit, "task": "u", "path": "", "reserved_mbps": "", "from_round": 1, "blocked": "no wavelength"}])
    links = {**LINKS, (1, "2", "10"): (1000, 1100, 1000, 100, 0)}
    write_csv(run / "links.csv", LINK_FIELDS, [{**_link_row(r, s, d, v), "broadcast_bytes": v[1] * 1000}
                                               for (r, s, d), v in links.items()])
    rows = by_direction(link_table(run))
    assert (rows["2->10"]["circuits"], rows["10->2"]["circuits"], rows["9->10"]["circuits"]) == (2, 2, 0)
    assert rows["2->10"]["reserved_mbps"] == 50.0 and rows["9->10"]["reserved_mbps"] is None
    assert rows["2->10"]["busy_mbps"] == pytest.approx(2_000_000 * 8 / 0.9 / 1e6)  # 1.1 + 0.9 MB in 0.5 + 0.4 s
    assert "circuits" not in link_table(run, round_=1)[0]
    lines = printed(render(link_table(run), "links"), 80)
    assert max(map(cell_len, lines)) <= 80
    assert words("not shown at 80 columns: weights MB, other MB, Mbit/s, circuits, reserved Mbit/s, busy Mbit/s") \
        in words("\n".join(lines))
    assert "reserved" in "".join(printed(render(link_table(run), "links"), 200))


def test_one_round(tmp_path: Path) -> None:
    rows = by_direction(link_table(write_run(tmp_path / "run"), round_=2))
    r = rows["2->10"]
    assert (r["measured_bytes"], r["predicted_bytes"], r["weight_bytes"]) == (900_000, 1_000_000, 800_000)
    assert r["error_pct"] == pytest.approx(-20.0)
    assert rows["10->2"]["queue_drops"] == 2
    # round 2 alone could carry traffic for 0.4 + 0.8 s
    assert r["mean_utilisation"] == pytest.approx(900_000 * 8 / (100e6 * 1.2))


def test_unknown_round(tmp_path: Path) -> None:
    with pytest.raises(FedmstError, match=r"no round 3 \(rounds: 1, 2\)"):
        link_table(write_run(tmp_path / "run"), round_=3)


def test_mean_utilisation_counts_broadcast_and_upload_time_only(tmp_path: Path) -> None:
    rows = by_direction(link_table(write_run(tmp_path / "run")))
    # 2 MB in 2 s on 100 Mbit/s: 16 Mbit / 200 Mbit
    assert rows["2->10"]["mean_utilisation"] == pytest.approx(0.08)
    assert rows["9->10"]["mean_utilisation"] == pytest.approx(4_300_000 * 8 / (200e6 * 2))
    assert rows["10->9"]["mean_utilisation"] == pytest.approx(0.004)


@pytest.mark.parametrize(("sort", "expected"), [
    ("measured", ["9->10", "2->10", "10->9", "10->2"]),
    # ties (nothing predicted) stay in natural link order
    ("predicted", ["9->10", "2->10", "10->2", "10->9"]),
    # by size: -10 % before +5 %
    ("error", ["2->10", "9->10", "10->2", "10->9"]),
    ("utilisation", ["9->10", "2->10", "10->9", "10->2"]),
    # numeric node names numerically, not "10" < "2"
    ("link", ["2->10", "10->2", "9->10", "10->9"]),
])
def test_sort_orders(tmp_path: Path, sort: str, expected: list[str]) -> None:
    assert directions(link_table(write_run(tmp_path / "run"), sort=sort)) == expected


SAMPLES = [
    (0.0, 1, "broadcast", "2", "10", 0),
    (0.1, 1, "broadcast", "2", "10", 1_000_000),  # 10 MB/s = 80 Mbit/s on 100: 0.8
    (0.3, 1, "upload", "2", "10", 1_500_000),  # 2.5 MB/s: 0.2
    (0.3004, 1, "upload", "2", "10", 1_600_000),  # a sliver at a phase boundary: ignored
    (1.0, 2, "broadcast", "2", "10", 1_600_000),
    (1.1, 2, "broadcast", "2", "10", 2_100_000),  # 5 MB/s: 0.4
    (0.0, 1, "broadcast", "9", "10", 0),  # a single sample gives no rate
    (0.0, 1, "broadcast", "10", "9", 0),
    (0.1, 1, "broadcast", "10", "9", 0),  # idle: known to be 0
]


def test_peak_utilisation_from_samples(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", samples=SAMPLES)
    rows = by_direction(link_table(run))
    assert rows["2->10"]["peak_utilisation"] == pytest.approx(0.8)
    assert rows["10->9"]["peak_utilisation"] == 0.0
    assert rows["9->10"]["peak_utilisation"] is None
    assert rows["10->2"]["peak_utilisation"] is None
    assert by_direction(link_table(run, round_=2))["2->10"]["peak_utilisation"] == pytest.approx(0.4)
    # unknown peaks go last
    assert directions(link_table(run, sort="peak")) == ["2->10", "10->9", "10->2", "9->10"]


def test_peak_is_at_most_the_capacity(tmp_path: Path) -> None:
    """A saturated link's reading can hold htb's 15 KiB burst on top of capacity x interval: that
    is the link at its capacity, so the peak stops there (the readings themselves are kept)."""
    burst = [(0.0, 1, "upload", "2", "10", 0), (0.1, 1, "upload", "2", "10", 1_250_000 + 15_360),
             (0.2, 1, "upload", "2", "10", 2_500_000)]
    run = write_run(tmp_path / "run", samples=burst)
    rates = rate_series(run / "samples.csv")
    assert rates is not None and rates[("2", "10")][0][1] * 8 / 100e6 == pytest.approx(1.0123, abs=1e-4)
    assert by_direction(link_table(run))["2->10"]["peak_utilisation"] == 1.0
    cells = {c.header: c.cells for c in render(link_table(run, sort="link"), "links").columns}
    assert cells["peak util %"][0] == "100.0"


def test_no_samples_means_no_peak(tmp_path: Path) -> None:
    rows = link_table(write_run(tmp_path / "run"))
    assert [r["peak_utilisation"] for r in rows] == [None] * 4


# measured kB per direction in round 1 of each scheduler's run
SPFF = {"2->10": 3000, "10->2": 100, "9->10": 1000, "10->9": 0}
MST = {"2->10": 1000, "10->2": 50, "9->10": 1500, "10->9": 40}
MINE = {"2->10": 500, "10->2": 100, "9->10": 4000, "10->9": 0}
PLUGIN = "mypkg.mod:MySched"


def one_round(measured: dict[str, int]) -> dict[tuple[int, str, str], tuple[int, ...]]:
    return {(1, *d.split("->")): (0, kb, 0, kb, 0) for d, kb in measured.items()}


def write_compare(path: Path, runs: dict[str, dict[str, int]] | None = None, *, comparison: bool = True) -> Path:
    """A compare folder as `fedmst compare --schedulers spff,mst[,...]` writes it (by default spff and mst);
    without ``comparison`` it is one still running: its run folders and no comparison.json."""
    runs = runs or {"spff": SPFF, "mst": MST}
    for name, measured in runs.items():
        write_run(path / run_folder_name(name), one_round(measured), scheduler=name)
    if comparison:
        write_json(path / "comparison.json", {"schedulers": list(runs), "baseline": next(iter(runs))})
    return path


def test_diff_of_a_compare_folder(tmp_path: Path) -> None:
    folder = write_compare(tmp_path / "cmp")
    assert is_compare_dir(folder) and not is_compare_dir(folder / "spff")
    assert compare_runs(folder) == [("spff", folder / "spff"), ("mst", folder / "mst")]
    rows = diff_table(folder)
    assert directions(rows) == ["2->10", "9->10", "10->2", "10->9"]  # by size of the difference
    r = by_direction(rows)
    assert r["2->10"]["against"] == "spff"
    assert r["2->10"]["bytes"] == {"spff": 3_000_000, "mst": 1_000_000}
    assert r["2->10"]["difference_bytes"] == {"mst": -2_000_000}
    assert r["2->10"]["ratio"]["mst"] == pytest.approx(1 / 3)
    assert r["9->10"]["difference_bytes"]["mst"] == 500_000 and r["9->10"]["ratio"]["mst"] == pytest.approx(1.5)
    assert r["10->9"]["ratio"] == {"mst": math.inf}  # SPFF sent nothing there, MST did
    assert directions(diff_table(folder, sort="ratio")) == ["10->9", "9->10", "10->2", "2->10"]
    assert directions(diff_table(folder, sort="link")) == ["2->10", "10->2", "9->10", "10->9"]
    assert directions(diff_table(folder, sort="spff")) == ["2->10", "9->10", "10->2", "10->9"]
    assert directions(diff_table(folder, sort="mst")) == ["9->10", "2->10", "10->2", "10->9"]


def test_three_schedulers(tmp_path: Path) -> None:
    folder = write_compare(tmp_path / "cmp", {"spff": SPFF, "mst": MST, PLUGIN: MINE})
    assert compare_runs(folder) == [("spff", folder / "spff"), ("mst", folder / "mst"),
                                    (PLUGIN, folder / "mypkg.mod_MySched")]
    r = by_direction(diff_table(folder))
    assert r["9->10"]["bytes"] == {"spff": 1_000_000, "mst": 1_500_000, PLUGIN: 4_000_000}
    assert r["9->10"]["difference_bytes"] == {"mst": 500_000, PLUGIN: 3_000_000}
    assert r["2->10"]["ratio"] == {"mst": pytest.approx(1 / 3), PLUGIN: pytest.approx(1 / 6)}
    assert r["10->2"]["ratio"] == {"mst": 0.5, PLUGIN: 1.0}
    # the largest change of any scheduler first: MySched's +3 MB on 9->10 beats MST's -2 MB on 2->10
    assert directions(diff_table(folder)) == ["9->10", "2->10", "10->2", "10->9"]
    assert r["10->9"]["ratio"] == {"mst": math.inf, PLUGIN: None}  # SPFF sent nothing there, MySched too
    # the largest ratio of any scheduler: traffic where SPFF sent nothing first
    assert directions(diff_table(folder, sort="ratio")) == ["10->9", "9->10", "10->2", "2->10"]
    # a scheduler's name sorts by its bytes; its run folder's name or label does the same
    for key in (PLUGIN, "mypkg.mod_MySched", "MySched"):
        assert directions(diff_table(folder, sort=key)) == ["9->10", "2->10", "10->2", "10->9"]
    with pytest.raises(FedmstError, match=f"choose one of measured, spff, mst, {PLUGIN}, ratio, link$"):
        diff_table(folder, sort="ring")


def test_render_three_schedulers(tmp_path: Path) -> None:
    folder = write_compare(tmp_path / "cmp", {"spff": SPFF, "mst": MST, PLUGIN: MINE})
    table = render(diff_table(folder, sort="link"), "diff")
    cells = {str(col.header): list(col.cells) for col in table.columns}
    assert list(cells) == ["link direction", "SPFF MB", "MST MB", "MYSCHED MB", "MST - SPFF MB", "MST / SPFF",
                           "MYSCHED - SPFF MB", "MYSCHED / SPFF"]
    assert cells["MYSCHED MB"] == ["0.50", "0.10", "4.00", "0.00", "4.60"]
    assert cells["MYSCHED - SPFF MB"] == ["-2.50", "+0.00", "+3.00", "+0.00", "+0.50"]
    assert cells["MYSCHED / SPFF"] == ["0.17", "1.00", "4.00", "-", f"{4.6 / 4.1:.2f}"]  # 10->9: 0 / 0
    assert cells["MST / SPFF"][3] == "new"  # 10->9: 40 kB / 0
    assert cells["MST - SPFF MB"][-1] == "-1.51"


def test_against_another_scheduler(tmp_path: Path) -> None:
    folder = write_compare(tmp_path / "cmp", {"spff": SPFF, "mst": MST, PLUGIN: MINE})
    r = by_direction(diff_table(folder, against="mst"))
    assert r["2->10"]["against"] == "mst"
    assert r["2->10"]["difference_bytes"] == {"spff": 2_000_000, PLUGIN: -500_000}
    assert r["10->9"]["ratio"] == {"spff": 0.0, PLUGIN: 0.0}  # MST sent 40 kB there, the others nothing
    assert by_direction(diff_table(folder, against="mypkg.mod_MySched"))["2->10"]["against"] == PLUGIN
    cells = {str(col.header): list(col.cells) for col in render(diff_table(folder, against="mst"), "x").columns}
    assert "SPFF - MST MB" in cells and "MYSCHED / MST" in cells and "MST / SPFF" not in cells
    with pytest.raises(FedmstError) as exc:
        diff_table(folder, against="ring")
    assert str(exc.value) == f"{folder}: no scheduler 'ring' to compare against (schedulers: spff, mst, {PLUGIN})"


def test_one_round_of_a_compare_folder(tmp_path: Path) -> None:
    folder = tmp_path / "cmp"
    write_run(folder / "spff", scheduler="spff")
    # MST sends as much as SPFF in round 1 and half of it in round 2
    write_run(folder / "mst", {(r, s, d): (v[0], v[1] // 2 if r == 2 else v[1], *v[2:])
                               for (r, s, d), v in LINKS.items()}, scheduler="mst")
    write_json(folder / "comparison.json", {"schedulers": ["spff", "mst"], "baseline": "spff"})
    assert by_direction(diff_table(folder, round_=1))["2->10"]["difference_bytes"] == {"mst": 0}
    r = by_direction(diff_table(folder, round_=2))["2->10"]
    assert r["bytes"] == {"spff": 900_000, "mst": 450_000} and r["ratio"] == {"mst": 0.5}
    assert by_direction(diff_table(folder))["2->10"]["difference_bytes"] == {"mst": -450_000}
    with pytest.raises(FedmstError, match=r"spff has no round 3 \(rounds: 1, 2\)"):
        diff_table(folder, round_=3)


def test_compare_folder_without_comparison_json(tmp_path: Path) -> None:
    """A compare still running or interrupted: its run folders, spff then mst then by name."""
    folder = write_compare(tmp_path / "cmp", {"zz": MINE, PLUGIN: MINE, "mst": MST, "aa": MINE, "spff": SPFF},
                           comparison=False)
    (folder / "notes").mkdir()  # a folder without links.csv is no run
    write_run(folder / "renamed", one_round(MINE), scheduler="ring")  # config.json names another folder
    assert [name for name, _ in compare_runs(folder)] == ["spff", "mst", "aa", PLUGIN, "renamed", "zz"]
    assert compare_runs(folder)[3][1] == folder / "mypkg.mod_MySched"
    assert by_direction(diff_table(folder))["2->10"]["against"] == "spff"
    # the comparison.json of the two-scheduler compare names no schedulers: its runs are found the same way
    write_json(folder / "comparison.json", {"spff": {}, "mst": {}, "bytes_ratio": 0.5, "latency_ratio": 0.5})
    assert [name for name, _ in compare_runs(folder)][:2] == ["spff", "mst"]


def test_one_run_folder_is_no_compare_folder(tmp_path: Path) -> None:
    folder = write_compare(tmp_path / "cmp", {"mst": MST}, comparison=False)
    assert compare_runs(folder) == [] and not is_compare_dir(folder)
    with pytest.raises(FedmstError, match=f"only one run folder inside: give {folder / 'mst'}"):
        link_table(folder)


def test_comparison_json_order_and_faults(tmp_path: Path) -> None:
    folder = write_compare(tmp_path / "cmp", {PLUGIN: MINE, "spff": SPFF})
    assert [name for name, _ in compare_runs(folder)] == [PLUGIN, "spff"]  # its order, not spff first
    write_json(folder / "comparison.json", {"schedulers": ["spff", PLUGIN], "baseline": PLUGIN})
    assert [name for name, _ in compare_runs(folder)] == [PLUGIN, "spff"]  # the baseline always first
    write_json(folder / "comparison.json", {"schedulers": "spff,mst"})
    with pytest.raises(FedmstError, match="'schedulers' is not a list of scheduler names"):
        compare_runs(folder)
    (folder / "comparison.json").write_text("{")
    with pytest.raises(FedmstError, match="comparison.json: cannot read JSON"):
        compare_runs(folder)


def test_unknown_sort_lists_the_choices(tmp_path: Path) -> None:
    with pytest.raises(FedmstError, match="unknown sort key 'bytes': choose one of measured, predicted, error"):
        link_table(write_run(tmp_path / "run"), sort="bytes")
    with pytest.raises(FedmstError, match="choose one of measured, spff, mst, ratio, link"):
        diff_table(write_compare(tmp_path / "cmp"), sort="utilisation")


def test_not_a_run_folder(tmp_path: Path) -> None:
    (tmp_path / "links.csv").write_text("round\n")
    with pytest.raises(FedmstError) as exc:
        link_table(tmp_path)
    message = str(exc.value)
    assert str(tmp_path) in message and "rounds.csv" in message and "\n" not in message
    with pytest.raises(FedmstError, match="is not a folder"):
        link_table(tmp_path / "nowhere")
    with pytest.raises(FedmstError, match="is not a compare folder"):
        diff_table(write_run(tmp_path / "run"))


def test_a_sweep_or_policies_folder_names_the_folders_inside_that_hold_links(tmp_path: Path) -> None:
    sweep, policies = tmp_path / "sweep", tmp_path / "policies"
    write_compare(sweep / "k2-seed1")
    (sweep / "sweep.csv").write_text("scheduler\n")
    (policies / "fifo+random").mkdir(parents=True)
    (policies / "fifo+random" / "jobs.csv").write_text("job\n")
    write_json(policies / "comparison.json", {"status": "completed", "policies": ["fifo+random"]})
    from fedmst.views.folders import check_links

    with pytest.raises(FedmstError) as exc:
        check_links(sweep)
    point = sweep / "k2-seed1"
    assert str(exc.value) == (f"{sweep} is a sweep folder, with no links of its own: give one of its points' folders "
                              f"for its schedulers side by side, or one run folder inside it (e.g. {point}, "
                              f"{point / 'mst'})")
    with pytest.raises(FedmstError) as exc:
        check_links(policies)
    assert str(exc.value) == (f"{policies} is a cluster --policies comparison, with no links of its own: give one "
                              f"policy's cluster folder ({policies / 'fifo+random'})")


def test_compare_folder_given_as_run_folder(tmp_path: Path) -> None:
    folder = write_compare(tmp_path / "cmp")
    with pytest.raises(FedmstError, match="is a compare folder: give one of its run folders"):
        link_table(folder)


def test_render_links_with_totals(tmp_path: Path) -> None:
    rows = link_table(write_run(tmp_path / "run", samples=SAMPLES))
    table = render(rows, "links").fit()
    assert isinstance(table, Table) and table.title == "links" and table.caption is None
    assert table.row_count == len(rows) + 1
    cells = {str(col.header): list(col.cells) for col in table.columns}
    assert cells["link direction"] == directions(rows) + ["total"]
    assert cells["measured MB"] == ["4.30", "2.00", "0.20", "0.09", "6.59"]
    assert cells["error %"][-1] == "+0.00"  # 6.0 MB of weights for 6.0 MB predicted
    assert cells["mean util %"][1] == "8.0"
    assert cells["peak util %"][:2] == ["-", "80.0"]
    assert cells["drops"][-1] == "3"


def test_render_diff_with_totals(tmp_path: Path) -> None:
    """Two schedulers read exactly as before the compare took any list of them."""
    table = render(diff_table(write_compare(tmp_path / "cmp")), "diff")
    cells = {str(col.header): list(col.cells) for col in table.columns}
    assert list(cells) == ["link direction", "SPFF MB", "MST MB", "MST - SPFF MB", "MST / SPFF"]
    assert cells["link direction"][-1] == "total"
    assert cells["SPFF MB"][-1] == "4.10" and cells["MST MB"][-1] == "2.59"
    assert cells["MST - SPFF MB"] == ["-2.00", "+0.50", "-0.05", "+0.04", "-1.51"]
    assert cells["MST / SPFF"][-2:] == ["new", f"{2.59 / 4.10:.2f}"]  # 10->9: SPFF sent nothing, MST 40 kB


def printed(renderable: RenderableType, width: int) -> list[str]:
    """The lines a console ``width`` characters wide prints."""
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text().splitlines()


# a topology's own node names, longer than NSFNET's numbers
NAMED = {(1, "Seattle", "Denver"): (1000, 1100, 1000, 100, 0), (1, "Denver", "Seattle"): (0, 50, 0, 50, 0),
         (1, "Sunnyvale", "Houston"): (2000, 2300, 2200, 100, 3), (1, "Houston", "Sunnyvale"): (0, 80, 0, 80, 0)}


def test_run_table_fits_80_columns(tmp_path: Path) -> None:
    """At 80 columns (a default terminal, or any output piped) every row stays on one line with its
    link direction whole: the least needed columns are left out, and the caption says which and
    how wide a terminal shows them all."""
    samples = [(0.0, 1, "broadcast", "Seattle", "Denver", 0), (0.1, 1, "broadcast", "Seattle", "Denver", 900_000)]
    table = render(link_table(write_run(tmp_path / "run", NAMED, samples=samples)), "links")
    lines = printed(table, 80)
    assert max(map(cell_len, lines)) <= 80 and "…" not in "".join(lines)
    rows = [line for line in lines if "->" in line]
    assert [line.split()[1] for line in rows] == ["Sunnyvale->Houston", "Seattle->Denver", "Houston->Sunnyvale",
                                                  "Denver->Seattle"]
    assert [cell.strip() for cell in rows[1].split("│")][-3] == "72.0"  # peak: 0.9 MB in 0.1 s of 100 Mbit/s
    text = words("\n".join(lines))
    assert words("not shown at 80 columns: weights MB, other MB, Mbit/s") in text
    full = int(text.split("COLUMNS=")[1].split(",")[0])
    wide = printed(table, full)
    assert max(map(cell_len, wide)) <= full and "notshown" not in words("\n".join(wide))
    assert "weights" in wide[2] and "Mbit/s" in wide[3]  # headers sit at the bottom of their row
    assert "measured MB" in printed(table, 200)[2]  # room for every header on one line


def test_compare_table_fits_80_columns(tmp_path: Path) -> None:
    """Three schedulers at 80 columns: every column, headers on two lines; narrower, the differences
    (one MB column less another) go first, then the ratios."""
    table = render(diff_table(write_compare(tmp_path / "cmp", {"spff": SPFF, "mst": MST, PLUGIN: MINE})), "diff")
    lines = printed(table, 80)
    assert max(map(cell_len, lines)) <= 80 and "…" not in "".join(lines)
    # headers on two lines, each wrapped at its best space ("MST /" over "SPFF", not "MST", "/", "SPFF")
    assert lines[4].startswith("┡") and "MST /" in lines[2] and "/ SPFF" in lines[3]
    assert [line.split()[1] for line in lines if "->" in line] == ["9->10", "2->10", "10->2", "10->9"]
    narrow = printed(table, 60)
    assert max(map(cell_len, narrow)) <= 60
    assert words("not shown at 60 columns: MST - SPFF MB, MYSCHED - SPFF MB") in words("\n".join(narrow))
    assert words("not shown at 40 columns: MST - SPFF MB, MST / SPFF") in words("\n".join(printed(table, 40)))


@pytest.fixture
def fedmst_links(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Result]]:
    """``fedmst links ARGS`` in this process, on a console wide enough that no header wraps; the
    signal handlers the command installs are put back afterwards."""
    monkeypatch.setattr(cli, "console", Console(highlight=False, width=250))
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield lambda *args: CliRunner().invoke(cli.main, ["links", *map(str, args)])
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)


def words(text: str) -> str:
    """Text without whitespace: rich wraps a title to its table's width, anywhere in a long path."""
    return "".join(text.split())


def test_links_command_on_a_compare_folder(tmp_path: Path, fedmst_links: Callable[..., Result]) -> None:
    folder = write_compare(tmp_path / "cmp", {"spff": SPFF, "mst": MST, PLUGIN: MINE})
    result = fedmst_links(folder, "--against", "mst", "--round", "1", "--sort", "link")
    assert result.exit_code == 0, result.output
    assert words(f"{folder}: SPFF, MYSCHED - MST per link direction, round 1") in words(result.stdout)
    assert "SPFF - MST MB" in result.stdout and "MYSCHED / MST" in result.stdout
    result = fedmst_links(folder, "--against", "ring")
    assert result.exit_code == 1
    assert result.stderr == f"fedmst: error: {folder}: no scheduler 'ring' to compare against " \
                            f"(schedulers: spff, mst, {PLUGIN})\n"
    result = fedmst_links(folder, "--round", "2")
    assert result.exit_code == 1 and "has no round 2 (rounds: 1)" in result.stderr
    two = write_compare(tmp_path / "two")
    result = fedmst_links(two)
    assert result.exit_code == 0 and words(f"{two}: MST - SPFF per link direction") in words(result.stdout)


def test_links_command_on_a_run_folder(tmp_path: Path, fedmst_links: Callable[..., Result]) -> None:
    run = write_run(tmp_path / "run")
    result = fedmst_links(run, "--round", "2", "--sort", "link")
    assert result.exit_code == 0 and words(f"{run}: links") in words(result.stdout) and "measured MB" in result.stdout
    result = fedmst_links(run, "--against", "mst")
    assert result.exit_code == 1 and "--against compares the runs of a compare folder" in result.stderr


def test_links_csv_reads_back_what_was_written(tmp_path: Path) -> None:
    """One record for links.csv: the rows a lockstep and an independent run write read back equal,
    an independent clock's unknown phase bytes as None (written empty), in the file's column order."""
    rows = [LinkRow(1, "2-10", "2", "10", 100, 1000, 1100, 1000, 100, 0.0, 600, 500, 7, 1, 3),
            LinkRow(0, "2-10", "10", "2", 2.5, 0, 50, 0, 50, 12.5, None, None, 0, 0, 0)]
    write_links(tmp_path / "links.csv", rows)
    text = (tmp_path / "links.csv").read_text().splitlines()
    assert text[0] == ",".join(LINK_FIELDS) and text[2].split(",")[10:12] == ["", ""]
    assert read_links(tmp_path / "links.csv") == rows


def test_links_csv_of_another_format_is_refused(tmp_path: Path) -> None:
    write_csv(tmp_path / "links.csv", ("round", "src", "dst"), [{"round": 1, "src": "a", "dst": "b"}])
    with pytest.raises(FedmstError, match="lacks the columns link, capacity_mbps"):
        read_links(tmp_path / "links.csv")
    write_csv(tmp_path / "links.csv", LINK_FIELDS, [{**dict.fromkeys(LINK_FIELDS, 0), "measured_bytes": "lots"}])
    with pytest.raises(FedmstError, match="malformed row"):
        read_links(tmp_path / "links.csv")
