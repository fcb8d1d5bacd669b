"""Link traces (pure): reading and checking them, and the network as it stands at a time."""

from __future__ import annotations

import json

import pytest

from fedmst.core.linktrace import LinkChange, graph_at, read_link_trace
from fedmst.core.topology import load_topology
from fedmst.errors import FedmstError

LINE3 = load_topology("line3")


def _trace(tmp_path, changes) -> str:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"changes": changes}) if not isinstance(changes, str) else changes)
    return str(path)


def test_a_trace_reads_sorted_by_time(tmp_path) -> None:
    path = _trace(tmp_path, [{"at_s": 5, "a": "b", "b": "c", "delay_ms": 20, "loss": 0.01},
                             {"at_s": 1.5, "a": "a", "b": "b", "capacity_mbps": 10}])
    assert read_link_trace(path, LINE3) == (LinkChange(1.5, ("a", "b"), capacity_mbps=10.0),
                                           LinkChange(5.0, ("b", "c"), delay_ms=20.0, loss=0.01))


@pytest.mark.parametrize("changes,fragment", [
    ("{", "not JSON"),
    ({"a": 1}, 'expected {"changes": [...]}'),
    ([{"at_s": 1, "a": "a", "b": "c", "capacity_mbps": 5}], "a-c is not a link"),
    ([{"at_s": -1, "a": "a", "b": "b", "capacity_mbps": 5}], "at_s -1"),
    ([{"at_s": 1, "a": "a", "b": "b", "capacity_mbps": 0}], "capacity_mbps 0: give a positive capacity"),
    ([{"at_s": 1, "a": "a", "b": "b", "delay_ms": -2}], "delay_ms -2"),
    ([{"at_s": 1, "a": "a", "b": "b", "loss": 1}], "loss 1: give a probability in [0, 1)"),
    ([{"at_s": 1, "a": "a", "b": "b"}], "changes nothing"),
    ([{"at_s": "soon", "a": "a", "b": "b", "loss": 0.1}], "at_s = 'soon' is not a number"),
    ([{"at_s": 1, "a": "a", "b": "b", "bandwidth": 3}], "give at_s, a, b and any of"),
])
def test_a_bad_trace_is_refused_in_one_line(tmp_path, changes, fragment: str) -> None:
    with pytest.raises(FedmstError) as exc:
        read_link_trace(_trace(tmp_path, changes), LINE3)
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def test_graph_at_applies_what_is_due_and_leaves_the_original_alone() -> None:
    changes = (LinkChange(1.0, ("a", "b"), capacity_mbps=10.0), LinkChange(2.0, ("b", "a"), delay_ms=30.0),
               LinkChange(3.0, ("a", "b"), capacity_mbps=20.0))
    assert graph_at(LINE3, changes, 0.5) is LINE3
    at = graph_at(LINE3, changes, 2.0)
    assert at.edges["a", "b"]["capacity_mbps"] == 10.0 and at.edges["a", "b"]["delay_s"] == pytest.approx(0.03)
    assert graph_at(LINE3, changes, 9.0).edges["a", "b"]["capacity_mbps"] == 20.0
    assert LINE3.edges["a", "b"]["capacity_mbps"] == 50.0 and at.edges["b", "c"] == LINE3.edges["b", "c"]
