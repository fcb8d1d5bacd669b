"""Output folders never mix two runs: a used ``--out`` is refused unless ``--overwrite``, a default
one moves on to a fresh name, and whatever a folder holds says how its run ended.

Pure: files in ``tmp_path`` and the click commands' parsing; nothing is built.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from fedmst.errors import FedmstError
from fedmst.run.folders import MARKER, Kind, OutputFolder, choose, claim, holds
from fedmst.run.report import RunStatus, Summary, comparison, unmeasured
from fedmst.run.results import write_json


def _run_folder(path: Path, status: str = "completed", rounds: int = 2, kind: Kind = "run") -> Path:
    """A folder as a command leaves it: claimed (marked ``kind``'s), with a status-only summary."""
    os.close(claim(OutputFolder(path), kind))
    write_json(path / "summary.json", {"status": status, "rounds_planned": 2, "scheduler": "mst",
                                       "topology": "small", "rounds": rounds, "wall_s": 1.0})
    return path


def test_a_new_or_empty_folder_is_taken_as_given(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert choose(tmp_path / "new", given=True) == OutputFolder(tmp_path / "new")
    assert choose(tmp_path / "empty", given=True) == OutputFolder(tmp_path / "empty")


@pytest.mark.parametrize("kind", ["run", "compare", "sweep"])
def test_a_used_folder_is_refused_in_one_line_naming_what_it_holds(tmp_path: Path, kind: Kind) -> None:
    used = _run_folder(tmp_path / "x", kind=kind)
    assert holds(used) == f"a {kind}"
    with pytest.raises(FedmstError, match=f"already holds a {kind}: give another --out, or add --overwrite"):
        choose(used, given=True)
    assert choose(used, given=True, overwrite=True).overwrite


@pytest.mark.parametrize("layout", [
    {"notes.txt": "mine", "thesis/ch1.tex": ""},
    {"config.json": "{}", "summary.json": "{}", ".git/HEAD": ""},  # names fedmst writes, but not fedmst's
    {"a/.fedmst": '{"command": "run"}'},  # fedmst's folders inside are not a folder of fedmst's
])
def test_overwrite_never_removes_a_folder_fedmst_did_not_make(tmp_path: Path, layout: dict[str, str]) -> None:
    home = tmp_path / "home"
    for name, text in layout.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    with pytest.raises(FedmstError, match="is not empty .* and holds no results of this fedmst"):
        choose(home, given=True, overwrite=True)
    with pytest.raises(FedmstError, match="holds no results of this fedmst"):
        claim(OutputFolder(home, overwrite=True), "run")
    assert all((home / name).read_text() == text for name, text in layout.items())
    (tmp_path / "file").write_text("")
    with pytest.raises(FedmstError, match="is a file, not a folder"):
        choose(tmp_path / "file", given=True)


def test_a_folder_inside_another_commands_results_is_refused(tmp_path: Path) -> None:
    compare = _run_folder(tmp_path / "cmp", kind="compare")
    for inside in (compare / "mst", compare / "mst" / "deeper"):
        with pytest.raises(FedmstError, match=f"is inside {compare}, which holds a compare: give a folder outside"):
            choose(inside, given=True, overwrite=True)
    with pytest.raises(FedmstError, match="which holds a compare"):
        choose(compare / "runs" / "run", given=False)  # a default folder, from a shell inside it


def test_the_default_folder_moves_on_to_a_fresh_name(tmp_path: Path) -> None:
    _run_folder(tmp_path / "run")
    (tmp_path / "run-2").mkdir()
    (tmp_path / "run-2" / "mine.txt").write_text("")  # not fedmst's: passed over, not refused
    (tmp_path / "run-3").mkdir()  # empty: free
    assert choose(tmp_path / "run", given=False) == OutputFolder(tmp_path / "run-3")
    assert choose(tmp_path / "other", given=False) == OutputFolder(tmp_path / "other")
    # --overwrite without --out: the default folder itself, replaced
    assert choose(tmp_path / "run", given=False, overwrite=True) == OutputFolder(tmp_path / "run", True)


def test_claim_replaces_a_used_folder_whole_only_with_overwrite(tmp_path: Path) -> None:
    old = _run_folder(tmp_path / "run")
    (old / "pcap").mkdir()
    (old / "pcap" / "10-11.pcap").write_text("")
    with pytest.raises(FedmstError, match="already holds a run"):
        claim(OutputFolder(old), "run")
    assert (old / "pcap" / "10-11.pcap").exists()  # refused: untouched
    os.close(claim(OutputFolder(old, overwrite=True), "compare"))
    assert sorted(p.name for p in old.iterdir()) == [MARKER] and holds(old) == "a compare"


def test_a_folder_takes_one_command_at_a_time(tmp_path: Path) -> None:
    first = claim(OutputFolder(tmp_path / "run"), "run")
    try:
        with pytest.raises(FedmstError, match="is in use by another run: give this one its own --out"):
            claim(OutputFolder(tmp_path / "run", overwrite=True), "run")
    finally:
        os.close(first)
    os.close(claim(OutputFolder(tmp_path / "run", overwrite=True), "run"))  # free again once the first let go


def test_overwrite_removes_nothing_while_a_run_inside_still_writes(tmp_path: Path) -> None:
    compare = _run_folder(tmp_path / "cmp", kind="compare")
    running = claim(OutputFolder(compare / "spff"), "run")
    try:
        with pytest.raises(FedmstError, match=f"output folder {compare / 'spff'} is in use by another run"):
            claim(OutputFolder(compare, overwrite=True), "compare")
        assert (compare / "spff" / MARKER).exists() and (compare / "summary.json").exists()
    finally:
        os.close(running)


def test_a_name_the_file_system_refuses_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(FedmstError, match="output folder .*: File name too long"):
        choose(tmp_path / ("a" * 300), given=True)


def test_result_files_get_the_mode_of_any_new_file(tmp_path: Path) -> None:
    write_json(tmp_path / "summary.json", {})
    (tmp_path / "links.png").write_text("")
    assert stat.S_IMODE((tmp_path / "summary.json").stat().st_mode) == stat.S_IMODE(
        (tmp_path / "links.png").stat().st_mode)


def test_a_run_that_measured_nothing_says_how_it_ended(tmp_path: Path) -> None:
    run = _run_folder(tmp_path / "spff", status="interrupted", rounds=0)
    status = RunStatus.read(run / "summary.json")
    assert status.ended() == "interrupted after 0 of 2 rounds"
    assert RunStatus.of(run) == status and RunStatus.of(tmp_path / "never-ran") is None
    with pytest.raises(FedmstError) as caught:
        Summary.read(run / "summary.json")
    assert str(caught.value) == unmeasured(run, status)
    assert "the mst run was interrupted after 0 of 2 rounds (summary.json), so it measured nothing" in str(caught.value)
    failed = RunStatus(status="failed: link a-b died", rounds_planned=1, scheduler="mst", topology="t", rounds=0,
                       wall_s=0.0)
    assert failed.ended() == "failed after 0 of 1 round (link a-b died)"


def test_links_explain_a_run_and_a_compare_that_stopped_early(tmp_path: Path) -> None:
    from fedmst.views.links import compare_runs, link_table

    run = _run_folder(tmp_path / "cmp" / "spff", status="interrupted", rounds=0)
    with pytest.raises(FedmstError, match="interrupted after 0 of 2 rounds .* measured nothing to show"):
        link_table(run)
    whole = tmp_path / "whole"  # a whole summary whose links.csv went missing is no unmeasured run
    whole.mkdir()
    write_json(whole / "summary.json", {**json.loads((run / "summary.json").read_text()), "rounds": 2,
                                        "link_bytes_measured": 5})
    with pytest.raises(FedmstError, match="is not a run folder \\(missing links.csv, rounds.csv\\)"):
        link_table(whole)
    write_json(tmp_path / "cmp" / "comparison.json", {"status": "interrupted", "schedulers": ["spff", "mst"],
                                                      "baseline": "spff"})
    with pytest.raises(FedmstError, match=r"stopped before two runs finished a round \(SPFF interrupted after 0 "
                                          r"of 2 rounds; MST not run\)"):
        compare_runs(tmp_path / "cmp")


def test_a_compare_without_its_baseline_keeps_every_scheduler_and_no_ratios() -> None:
    from dataclasses import fields

    s = Summary.from_json({**{f.name: 0 for f in fields(Summary)}, "scheduler": "mst",
                           "workers": {"backend": "process"}})
    record = comparison({"mst": s}, ["spff", "mst"])
    assert (record["schedulers"], record["baseline"], record["ratios"]) == (["spff", "mst"], "spff", {})
    assert list(record["summaries"]) == ["mst"]
    json.dumps(record)


def test_out_counts_as_given_on_the_command_line_or_in_a_config_file(tmp_path: Path) -> None:
    from fedmst import cli

    def given(*args: str) -> bool:
        ctx = cli.run.make_context("run", list(args))
        return cli._config(ctx, dict(ctx.params))[1]["out_given"]

    toml = tmp_path / "exp.toml"
    toml.write_text('out = "runs/x"\n')
    earlier = tmp_path / "config.json"
    earlier.write_text(json.dumps({"out": "runs/old", "rounds": 1}))
    assert (given(), given("--out", "runs/run"), given("--config", str(toml)), given("--config", str(earlier))) == (
        False, True, True, False)
