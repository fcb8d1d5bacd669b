"""Sizes on the console in the unit their value picks: a 4.5 KB model is not ``0.00 MB``."""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

from rich.console import Console

from fedmst.run.report import Summary, size_label, size_unit, summary_table
from fedmst.workers.description import BackendDescription


def _summary(**values: Any) -> Summary:
    """A Summary with every required field empty but for ``values``."""
    empty = {"int": 0, "float": 0.0, "str": ""}
    base = {f.name: empty.get(str(f.type), [] if str(f.type).startswith("list") else {})
            for f in fields(Summary) if f.default is MISSING and f.default_factory is MISSING}
    base.update(emulated={"delay_mechanism": "userspace"}, workers=BackendDescription("process"), topology="line3")
    return Summary(**{**base, **values})


def _text(table: Any) -> str:
    console = Console(width=160, record=True)
    console.print(table)
    return console.export_text()


def test_a_small_model_is_shown_in_kilobytes() -> None:
    small = {"model": "myext:tiny_cnn", "model_bytes": 4_505, "rounds": 2}
    text = _text(summary_table({"spff": _summary(**small, link_bytes_measured=200_000, weight_bytes_measured=190_000),
                                "mst": _summary(**small, link_bytes_measured=100_000, weight_bytes_measured=95_000)},
                               ratios_to_first=True))
    assert "model myext:tiny_cnn (4.5 KB)" in text and "0.00 MB" not in text
    (row,) = [line for line in text.splitlines() if "link bytes measured" in line]
    assert [cell.strip() for cell in row.split("│")[1:5]] == ["link bytes measured (KB)", "100.00", "50.00", "0.50"]
    assert "weights (KB)" in text


def test_a_large_model_stays_in_megabytes() -> None:
    large = {"model": "mlp-large", "model_bytes": 4_505_640, "rounds": 5, "link_bytes_measured": 868_550_000}
    text = _text(summary_table({"spff": _summary(**large)}))
    assert "model mlp-large (4.51 MB)" in text
    (row,) = [line for line in text.splitlines() if "link bytes measured" in line]
    assert "link bytes measured (MB)" in row and "173.71" in row
    assert [c.strip() for c in next(ln for ln in text.splitlines() if "ACKs" in ln).split("│")[1:3]] == \
        ["ACKs and other (B)", "0"]


def test_the_unit_follows_the_value() -> None:
    assert [size_unit(n)[0] for n in (0, 999, 1_000, 999_999, 1e6, 2.5e9)] == ["B", "B", "KB", "KB", "MB", "GB"]
    assert [size_label(n) for n in (0, 4_505, 19_240, 173_710_000, 2.5e9)] == \
        ["0 B", "4.5 KB", "19 KB", "174 MB", "2.5 GB"]


def test_counts_of_one_read_in_the_singular() -> None:
    """The caption of a one-round compare says ``1 round``, of one local model ``1 local model``."""
    one = _text(summary_table({"spff": _summary(model="mlp", local_models=1, rounds=1)}))
    assert "1 local model, model mlp" in one and "1 round;" in one and "1 rounds" not in one
    two = _text(summary_table({"spff": _summary(model="mlp", local_models=4, rounds=2)}))
    assert "4 local models, model mlp" in two and "2 rounds;" in two


def test_the_caption_names_the_strategys_knobs_and_the_clients_per_round() -> None:
    """What a compare ran with, beside its table: every knob of the strategy, and how many local
    models took part in a round and who chose them (nothing where every one did)."""
    knobs = {"eta": 0.01, "beta_1": 0.9, "beta_2": 0.99, "tau": 1e-9}
    text = " ".join(_text(summary_table({"spff": _summary(model="mlp", local_models=8, rounds=2, strategy="fedadam",
                                                            strategy_knobs=knobs, clients_per_round=4,
                                                            selection="loss")})).split())
    assert "8 local models (4 a round, chosen by loss), model mlp" in text
    assert "strategy fedadam: eta=0.01, beta_1=0.9, beta_2=0.99, tau=1e-09" in text
    plain = " ".join(_text(summary_table({"spff": _summary(model="mlp", local_models=8, rounds=2)})).split())
    assert "8 local models, model mlp" in plain and "a round" not in plain and "strategy" not in plain


def test_a_plugin_is_headed_by_the_name_its_class_declares() -> None:
    """``mypkg.trees:BfsTree`` whose ``name`` is ``bfs-tree`` heads its columns BFS-TREE, as a registered
    ``bfs-tree`` would be; a summary from before the name was recorded keeps the class name; two that
    would read alike keep the names they were given."""
    plugin = "mypkg.trees:BfsTree"

    def headers(declared: dict[str, str | None]) -> list[str]:
        table = summary_table({n: _summary(scheduler=n, scheduler_name=d) for n, d in declared.items()},
                              ratios_to_first=True)
        return [str(column.header) for column in table.columns][1:]

    assert headers({"spff": "spff", "mst": "mst", plugin: "bfs-tree"}) == \
        ["SPFF", "MST", "BFS-TREE", "MST/SPFF", "BFS-TREE/SPFF"]
    assert headers({"spff": None, plugin: None}) == ["SPFF", "BFSTREE", "BFSTREE/SPFF"]
    assert headers({"spff": "spff", "mst": "mst", "mypkg.mine:MyMst": "mst"}) == \
        ["SPFF", "MST", "MYMST", "MST/SPFF", "MYMST/SPFF"]
