"""Topology loading and validation: shipped files, topohub keys, GraphML, and every fault."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

import networkx as nx
import pytest

from fedmst.errors import TopologyError
from fedmst.core.topology import (
    PROPAGATION_S_PER_KM,
    SPINE_LEAF_DEFAULTS,
    SPINE_LEAF_FORM,
    TOPOHUB_DEFAULT_CAPACITY_MBPS,
    available_topologies,
    load_topology,
    optical_nodes,
    validate_topology,
)


def _check_contract(g: nx.Graph) -> None:
    assert type(g) is nx.Graph
    assert isinstance(g.graph["name"], str) and g.graph["source"]
    assert all(isinstance(n, str) for n in g)
    assert nx.is_connected(g)
    for _, _, d in g.edges(data=True):
        assert isinstance(d["capacity_mbps"], float) and d["capacity_mbps"] > 0
        assert isinstance(d["delay_s"], float) and d["delay_s"] >= 0
        assert d["length_km"] is None or isinstance(d["length_km"], float)


def test_nsfnet() -> None:
    g = load_topology("nsfnet")
    _check_contract(g)
    assert (len(g), g.number_of_edges()) == (14, 21)
    assert set(g) == {str(i) for i in range(14)}
    assert g.edges["0", "7"]["delay_s"] == 0.024
    assert g.edges["0", "7"]["length_km"] == 4800.0
    assert {d["capacity_mbps"] for _, _, d in g.edges(data=True)} == {100.0}
    assert g.graph["name"] == "nsfnet"
    assert g.graph["source"].endswith("topologies/nsfnet.json")


def test_line3_and_small() -> None:
    line = load_topology("line3")
    _check_contract(line)
    assert sorted(line.edges) == [("a", "b"), ("b", "c")]
    assert line.edges["b", "c"]["capacity_mbps"] == 50.0
    small = load_topology("small")
    _check_contract(small)
    assert (len(small), small.number_of_edges()) == (5, 6)
    assert sorted(d["length_km"] for _, _, d in small.edges(data=True)) == [
        100.0, 200.0, 300.0, 400.0, 500.0, 600.0
    ]


def test_available_topologies_lists_shipped_files() -> None:
    assert {"nsfnet", "line3", "small"} <= set(available_topologies())


def test_extra_directory_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "mine.json", {"links": [{"a": 1, "b": 2}]})
    monkeypatch.setenv("FEDMST_TOPOLOGY_PATH", f"/nonexistent:{tmp_path}")
    assert "mine" in available_topologies()
    g = load_topology("mine", default_capacity_mbps=10)
    assert g.edges["1", "2"] == {"capacity_mbps": 10.0, "delay_s": 0.0, "length_km": None}


@pytest.mark.parametrize("key", ["sndlib/polska", "topozoo/Abilene"])
def test_topohub(key: str) -> None:
    g = load_topology(key)
    _check_contract(g)
    assert g.graph["source"] == key
    assert {d["capacity_mbps"] for _, _, d in g.edges(data=True)} == {
        TOPOHUB_DEFAULT_CAPACITY_MBPS
    }
    _, _, d = next(iter(g.edges(data=True)))
    assert d["delay_s"] == pytest.approx(d["length_km"] * PROPAGATION_S_PER_KM)


def test_topohub_uses_names_and_default_capacity() -> None:
    g = load_topology("sndlib/polska", default_capacity_mbps=7)
    assert g.has_edge("Gdansk", "Warsaw")
    assert g.edges["Gdansk", "Warsaw"]["capacity_mbps"] == 7.0


def test_topohub_duplicate_names_fall_back_to_ids() -> None:
    g = load_topology("backbone/africa")
    _check_contract(g)
    assert all(n.isdigit() for n in g)


def test_file_format_rules(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t.json",
        {
            "capacity_mbps": 100,
            "links": [
                {"a": 0, "b": 1, "km": 2100},
                {"a": 1, "b": 2, "km": 1200, "capacity_mbps": 50},
                {"a": 2, "b": 3, "delay_ms": 1.5, "km": 10},
            ],
        },
    )
    g = load_topology(str(path))
    _check_contract(g)
    assert g.graph == {"name": "t", "source": str(path)}
    assert g.edges["0", "1"] == {"capacity_mbps": 100.0, "delay_s": 0.0105, "length_km": 2100.0}
    assert g.edges["1", "2"]["capacity_mbps"] == 50.0
    assert g.edges["2", "3"]["delay_s"] == pytest.approx(0.0015)
    assert load_topology(str(path), default_capacity_mbps=1).edges["0", "1"]["capacity_mbps"] == 100


def test_graphml_round_trip(tmp_path: Path) -> None:
    src = nx.Graph(name="gm")
    src.add_edge("x", "y", capacity_mbps=20.0, km=100.0)
    src.add_edge("y", "z", capacity=30, dist=50.0)
    src.add_edge("z", "w", capacity_mbps=40.0, delay_ms=2.0)
    path = tmp_path / "gm.graphml"
    nx.write_graphml(src, path)
    g = load_topology(str(path))
    _check_contract(g)
    assert g.graph["name"] == "gm"
    assert g.edges["x", "y"] == {"capacity_mbps": 20.0, "delay_s": 0.0005, "length_km": 100.0}
    assert g.edges["y", "z"]["capacity_mbps"] == 30.0
    assert g.edges["y", "z"]["length_km"] == 50.0
    assert g.edges["z", "w"]["delay_s"] == pytest.approx(0.002)


def test_graphml_without_capacity_needs_default(tmp_path: Path) -> None:
    path = tmp_path / "nocap.graphml"
    nx.write_graphml(nx.path_graph(["p", "q"]), path)
    _raises(lambda: load_topology(str(path)), path, "link p-q: no capacity")
    assert load_topology(str(path), default_capacity_mbps=5).edges["p", "q"]["capacity_mbps"] == 5


def _write(path: Path, content: object) -> Path:
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def _raises(load: Callable[[], object], path: Path, fault: str) -> None:
    with pytest.raises(TopologyError) as info:
        load()
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert fault in message, message
    assert "\n" not in message


_OK = [{"a": "0", "b": "1"}]

FAULTS = [
    ("{not json", "malformed JSON: "),
    ([1, 2], "top level must be a JSON object"),
    ({"nodes": ["0", "1"]}, "missing 'links'"),
    ({"links": _OK, "capcity_mbps": 5}, "unknown key(s) capcity_mbps"),
    ({"links": [{"a": "0"}], "capacity_mbps": 1}, "links[0]: missing 'b'"),
    ({"links": [{"b": "0"}], "capacity_mbps": 1}, "links[0]: missing 'a'"),
    ({"links": [{"a": "0", "b": "1", "kms": 5}]}, "links[0]: unknown key(s) kms"),
    ({"links": [{"a": [0], "b": "1"}]}, "links[0]: node id [0] is not a string or integer"),
    ({"links": [*_OK, {"a": "1", "b": "1"}], "capacity_mbps": 1}, "link 1-1: self-loop"),
    ({"links": [*_OK, {"a": 1, "b": 0}], "capacity_mbps": 1}, "link 1-0: duplicate link"),
    ({"nodes": ["0", "1"], "links": [*_OK, {"a": "1", "b": "9"}], "capacity_mbps": 1},
     "link 1-9: unknown node '9'"),
    ({"links": _OK}, "link 0-1: no capacity"),
    ({"links": [{"a": "3", "b": "7", "capacity_mbps": -5}]},
     "link 3-7: capacity -5 Mbit/s is not positive"),
    ({"links": [{"a": "3", "b": "7", "capacity_mbps": 0}]},
     "link 3-7: capacity 0 Mbit/s is not positive"),
    ({"links": [{"a": "3", "b": "7", "capacity_mbps": "fast"}]},
     "link 3-7: capacity 'fast' is not a finite number"),
    ({"links": _OK, "capacity_mbps": -1}, "top level: capacity -1 Mbit/s is not positive"),
    ({"links": [{"a": "0", "b": "1", "km": -3}], "capacity_mbps": 1},
     "link 0-1: length -3 km is negative"),
    ({"links": [{"a": "0", "b": "1", "delay_ms": -2}], "capacity_mbps": 1},
     "link 0-1: delay -2 ms is negative"),
    ({"nodes": ["0"], "links": []}, "1 node(s); a topology needs at least 2"),
    ({"links": []}, "0 node(s); a topology needs at least 2"),
    ({"links": [*_OK, {"a": "2", "b": "3"}], "capacity_mbps": 1},
     "disconnected: 2 components; node '2' cannot reach node '0'"),
    ({"nodes": ["0", "1", "x"], "links": _OK, "capacity_mbps": 1},
     "disconnected: 2 components; node 'x' cannot reach node '0'"),
]


@pytest.mark.parametrize(("content", "fault"), FAULTS, ids=[f for _, f in FAULTS])
def test_json_faults(tmp_path: Path, content: object, fault: str) -> None:
    path = _write(tmp_path / "bad.json", content)
    _raises(lambda: load_topology(str(path)), path, fault)


def test_malformed_graphml(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.graphml", "<graphml><graph")
    _raises(lambda: load_topology(str(path)), path, "malformed GraphML: unclosed token")


def test_unsupported_suffix(tmp_path: Path) -> None:
    path = _write(tmp_path / "net.txt", "")
    _raises(lambda: load_topology(str(path)), path, "unsupported file type '.txt'")


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "locked.json", "{}")

    def deny(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", deny)
    _raises(lambda: load_topology(str(path)), path, "cannot read: Permission denied")


def test_unknown_name_lists_shipped() -> None:
    with pytest.raises(TopologyError) as info:
        load_topology("nope/nothing")
    message = str(info.value)
    assert message.startswith("unknown topology 'nope/nothing': not a file, not one of ")
    assert all(name in message for name in ("nsfnet", "line3", "small"))
    assert "sndlib/polska" in message and "\n" not in message


def test_validate_topology_on_foreign_graphs() -> None:
    g = nx.Graph()
    g.add_edge("a", "b", capacity_mbps=10, delay_s=0)
    assert validate_topology(g, "mem").edges["a", "b"] == {
        "capacity_mbps": 10.0, "delay_s": 0.0, "length_km": None
    }
    assert g.graph == {"name": "mem", "source": "mem"}
    with pytest.raises(TopologyError, match=r"^mem: node 0 is not a string$"):
        validate_topology(nx.path_graph(2), "mem")
    with pytest.raises(TopologyError, match=r"^mem: topology must be an undirected graph"):
        validate_topology(nx.DiGraph([("a", "b")]), "mem")
    with pytest.raises(TopologyError, match=r"^mem: link a-b: capacity None is not a finite"):
        validate_topology(nx.Graph([("a", "b")]), "mem")


# spine-leaf fabrics and all-optical nodes (issue 46, item 1) ---------------------------------------
def test_spine_leaf_shape() -> None:
    g = load_topology("spine-leaf:4,8,2")
    _check_contract(g)
    assert (len(g), g.number_of_edges()) == (4 + 8 + 16, 4 * 8 + 16)
    assert optical_nodes(g) == {"s0", "s1", "s2", "s3"}
    assert all(g.nodes[s] == {"optical": True, "slots": 0} for s in optical_nodes(g))
    assert all(set(g[s]) == {f"l{i}" for i in range(8)} for s in optical_nodes(g))
    assert set(g["h7_1"]) == {"l7"} and set(g["l0"]) == {"s0", "s1", "s2", "s3", "h0_0", "h0_1"}
    fabric = {"capacity_mbps": SPINE_LEAF_DEFAULTS["mbps"], "length_km": SPINE_LEAF_DEFAULTS["km"],
              "delay_s": pytest.approx(SPINE_LEAF_DEFAULTS["km"] * PROPAGATION_S_PER_KM)}
    assert g.edges["s3", "l7"] == fabric and g.edges["l3", "h3_0"] == fabric
    assert g.graph["name"] == "spine-leaf:4,8,2"


def test_spine_leaf_without_hosts_and_with_link_options() -> None:
    g = load_topology("spine-leaf:1,2,1,mbps=400,km=10,host-mbps=100,host-km=0")
    assert g.edges["s0", "l1"] == {"capacity_mbps": 400.0, "delay_s": pytest.approx(5e-5), "length_km": 10.0}
    assert g.edges["l1", "h1_0"] == {"capacity_mbps": 100.0, "delay_s": 0.0, "length_km": 0.0}
    bare = load_topology("spine-leaf:2,3")
    assert sorted(bare) == ["l0", "l1", "l2", "s0", "s1"] and bare.number_of_edges() == 6


@pytest.mark.parametrize(("spec", "fault"), [
    ("spine-leaf:0,8", "SPINES 0, LEAVES 8: give at least 1 spine and 2 leaves"),
    ("spine-leaf:2,1", "SPINES 2, LEAVES 1: give at least 1 spine and 2 leaves"),
    ("spine-leaf:a,4", "a, 4 is not 2 or 3 whole numbers"),
    ("spine-leaf:2,4.5", "2, 4.5 is not 2 or 3 whole numbers"),
    ("spine-leaf:2,4,-1", "2, 4, -1 is not 2 or 3 whole numbers"),
    ("spine-leaf:2", "2 is not 2 or 3 whole numbers"),
    ("spine-leaf:2,4,1,1", "2, 4, 1, 1 is not 2 or 3 whole numbers"),
    ("spine-leaf:", "nothing is not 2 or 3 whole numbers"),
    ("spine-leaf:2,4,gbps=1", "unknown key 'gbps'"),
    ("spine-leaf:2,4,mbps=0", "mbps=0 is not a finite positive number"),
    ("spine-leaf:2,4,host-km=-2", "host-km=-2 is not a finite number, 0 or more"),
    ("spine-leaf:2,4,km=far", "km=far is not a number"),
    ("spine-leaf:2,4,mbps=inf", "mbps=inf is not a finite positive number"),
    ("spine-leaf:2,4,mbps=1e400", "mbps=1e400 is not a finite positive number"),
    ("spine-leaf:2,4,host-km=1e400", "host-km=1e400 is not a finite number, 0 or more"),
    ("spine-leaf:2,\u00b2", "2, \u00b2 is not 2 or 3 whole numbers"),  # a Unicode digit int() cannot read
    ("spine-leaf:\u0663,4", "\u0663, 4 is not 2 or 3 whole numbers"),  # Arabic-Indic three
])
def test_a_bad_spine_leaf_spec_is_refused_in_one_line(spec: str, fault: str) -> None:
    _raises(lambda: load_topology(spec), Path(spec), f"{fault}; expected {SPINE_LEAF_FORM}")


def test_the_unknown_topology_error_names_the_spine_leaf_form() -> None:
    with pytest.raises(TopologyError, match=re.escape(f"not a {SPINE_LEAF_FORM} fabric")):
        load_topology("spine-leaf")


def test_json_and_graphml_nodes_can_be_optical(tmp_path: Path) -> None:
    links = [{"a": "a", "b": "x"}, {"a": "x", "b": "b"}]
    spec = {"capacity_mbps": 10, "nodes": ["a", {"id": "x", "optical": True}, {"id": "b", "optical": False}],
            "links": links}
    assert optical_nodes(load_topology(str(_write(tmp_path / "o.json", spec)))) == {"x"}
    src = nx.path_graph(["a", "x", "b"])
    nx.set_edge_attributes(src, 10.0, "capacity_mbps")
    src.nodes["x"]["optical"] = True
    nx.write_graphml(src, tmp_path / "o.graphml")
    assert optical_nodes(load_topology(str(tmp_path / "o.graphml"))) == {"x"}


@pytest.mark.parametrize(("nodes", "fault"), [
    (["a", {"id": "x", "optical": True, "slots": 2}, "b"],
     "node x is all-optical (light passes through it) but declares 2 slot(s): give it none"),
    (["a", {"id": "x", "optical": "yes"}, "b"], "node x: optical 'yes' is not true or false"),
    ([{"id": "a", "optical": True}, "x", {"id": "b", "optical": True}],
     "1 node(s) not optical; a topology needs at least 2 to hold G and a local model"),
])
def test_bad_optical_nodes_are_refused_in_one_line(tmp_path: Path, nodes: list[object], fault: str) -> None:
    path = _write(tmp_path / "o.json", {"capacity_mbps": 10, "nodes": nodes,
                                        "links": [{"a": "a", "b": "x"}, {"a": "x", "b": "b"}]})
    _raises(lambda: load_topology(str(path)), path, fault)
