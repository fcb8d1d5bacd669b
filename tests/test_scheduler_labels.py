"""A plugin scheduler goes by the ``name`` its class declares: the run records it in summary.json,
and ``fedmst links`` reads it from there (never importing the plugin) to head its columns and to
take it for ``--against`` and ``--sort``; folders from before the name was recorded keep working."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedmst.errors import FedmstError
from fedmst.run.layout import run_folder_name
from fedmst.run.measure import _declared_name
from fedmst.run.results import LINK_FIELDS, ROUND_FIELDS, write_csv, write_json
from fedmst.views.links import diff_table

BFS = "mypkg.trees:BfsTree"
MY_MST = "mypkg.trees:MyMst"
"""A subclass of MST's scheduler that keeps MST's ``name``."""
MEASURED = {"spff": 3_000_000, "mst": 1_000_000, BFS: 1_500_000, MY_MST: 500_000}
"""Bytes each scheduler's run put on link direction 0->1, the only one."""


def write_compare(root: Path, declared: dict[str, str | None]) -> Path:
    """A compare folder of one-round runs, each summary.json recording the name its scheduler's
    class declares (None: written before summaries recorded it)."""
    for name, own in declared.items():
        run = root / run_folder_name(name)
        run.mkdir(parents=True)
        write_json(run / "config.json", {"scheduler": name})
        write_csv(run / "links.csv", LINK_FIELDS, [{
            **dict.fromkeys(LINK_FIELDS, 0), "round": 1, "link": "0-1", "src": "0", "dst": "1",
            "capacity_mbps": 50.0, "measured_bytes": MEASURED[name]}])
        write_csv(run / "rounds.csv", ROUND_FIELDS, [{**dict.fromkeys(ROUND_FIELDS, 0), "round": 1}])
        write_json(run / "summary.json", {"scheduler": name, "scheduler_name": own})
    write_json(root / "comparison.json", {"schedulers": list(declared), "baseline": next(iter(declared))})
    return root


def test_links_takes_a_plugin_by_its_declared_name(tmp_path: Path) -> None:
    folder = write_compare(tmp_path / "cmp", {"spff": "spff", "mst": "mst", BFS: "bfs-tree"})
    for against in ("bfs-tree", "BFS-TREE", BFS, "mypkg.trees_BfsTree", "BfsTree"):
        (row,) = diff_table(folder, against=against)
        assert row["against"] == BFS
    assert row["labels"] == {"spff": "SPFF", "mst": "MST", BFS: "BFS-TREE"}
    assert row["ratio"] == {"spff": 2.0, "mst": pytest.approx(2 / 3)}
    (row,) = diff_table(folder, sort="bfs-tree")
    assert row["bytes"][BFS] == 1_500_000


def test_a_folder_from_before_the_name_was_recorded(tmp_path: Path) -> None:
    folder = write_compare(tmp_path / "cmp", {"spff": None, "mst": None, BFS: None})
    (row,) = diff_table(folder, against="BfsTree")
    assert row["against"] == BFS and row["labels"][BFS] == "BFSTREE"
    with pytest.raises(FedmstError, match="no scheduler 'bfs-tree' to compare against"):
        diff_table(folder, against="bfs-tree")


def test_a_subclass_that_keeps_a_built_in_name_keeps_its_own(tmp_path: Path) -> None:
    """``class MyMst(MSTScheduler)`` declares ``mst`` too: beside mst it is MYMST, and ``mst`` is MST's."""
    folder = write_compare(tmp_path / "cmp", {"spff": "spff", "mst": "mst", MY_MST: "mst"})
    (row,) = diff_table(folder, against="mst")
    assert row["against"] == "mst" and row["labels"] == {"spff": "SPFF", "mst": "MST", MY_MST: "MYMST"}
    assert diff_table(folder, against="mymst")[0]["against"] == MY_MST


def test_the_run_records_the_name_the_class_declares(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "labelled_plugins"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "trees.py").write_text(
        "from fedmst.api import Scheduler\n\n\n"
        "class BfsTree(Scheduler):\n    name = 'bfs-tree'\n\n    def plan(self, graph, task, link_state=None):\n"
        "        raise NotImplementedError\n\n\n"
        "class Nameless(Scheduler):\n    def plan(self, graph, task, link_state=None):\n"
        "        raise NotImplementedError\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _declared_name("mst") == "mst" and _declared_name("spff") == "spff"
    assert _declared_name("labelled_plugins.trees:BfsTree") == "bfs-tree"
    assert _declared_name("labelled_plugins.trees:Nameless") is None
