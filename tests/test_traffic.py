"""Background traffic specifications (pure)."""

from __future__ import annotations

import json

import pytest

from fedmst.core.topology import load_topology
from fedmst.core.traffic import BackgroundFlow, flow_path, parse_flow, read_traffic_file
from fedmst.errors import FedmstError

LINE3 = load_topology("line3")


@pytest.mark.parametrize("spec,flow", [
    ("a-c:20mbit", BackgroundFlow("a", "c", 20.0, "udp", 0.0, None)),
    ("a-c:20", BackgroundFlow("a", "c", 20.0, "udp", 0.0, None)),
    ("c-a:500kbit:tcp", BackgroundFlow("c", "a", 0.5, "tcp", 0.0, None)),
    ("b-c:1GBIT:UDP@1.5", BackgroundFlow("b", "c", 1000.0, "udp", 1.5, None)),
    ("a-b:10mbit:udp@2-4", BackgroundFlow("a", "b", 10.0, "udp", 2.0, 4.0)),
])
def test_parse_flow(spec: str, flow: BackgroundFlow) -> None:
    assert parse_flow(spec, LINE3) == flow


@pytest.mark.parametrize("spec,fragment", [
    ("a-c", "give SRC-DST:RATE"),
    ("a-x:10mbit", "'a-x' is not two nodes"),
    ("a-a:10mbit", "the same node a"),
    ("a-c:fast", "rate 'fast'"),
    ("a-c:0mbit", "rate '0mbit'"),
    ("a-c:10mbit:sctp", "protocol 'sctp'"),
    ("a-c:10mbit@x", "'x' is not a number of seconds"),
    ("a-c:10mbit@3-2", "must end after it starts"),
])
def test_bad_flows_are_refused_in_one_line(spec: str, fragment: str) -> None:
    with pytest.raises(FedmstError) as exc:
        parse_flow(spec, LINE3)
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def test_a_flow_between_disconnected_nodes_is_refused() -> None:
    import networkx as nx

    g = nx.Graph()
    g.add_edge("a", "b", delay_s=0.0)
    g.add_node("z")
    with pytest.raises(FedmstError, match="no path from a to z"):
        parse_flow("a-z:1mbit", g)


def test_a_traffic_file_holds_a_schedule(tmp_path) -> None:
    path = tmp_path / "flows.json"
    path.write_text(json.dumps({"flows": [
        {"src": "a", "dst": "c", "rate": "20mbit"},
        {"src": "c", "dst": "b", "rate": "5mbit", "protocol": "tcp", "start_s": 1, "end_s": 3},
    ]}))
    assert read_traffic_file(path, LINE3) == [BackgroundFlow("a", "c", 20.0),
                                              BackgroundFlow("c", "b", 5.0, "tcp", 1.0, 3.0)]


@pytest.mark.parametrize("content,fragment", [
    ("{", "not JSON"),
    ('{"flows": [{"src": "a", "dst": "c"}]}', "flow 0: give an object with src, dst, rate"),
    ('{"flows": [{"src": "a", "dst": "q", "rate": "1mbit"}]}', "node 'q' is not in topology"),
    ('{"flows": [{"src": "a", "dst": "c", "rate": "1mbit", "start_s": "soon"}]}', "numbers of seconds"),
])
def test_a_bad_traffic_file_is_refused(tmp_path, content: str, fragment: str) -> None:
    path = tmp_path / "flows.json"
    path.write_text(content)
    with pytest.raises(FedmstError) as exc:
        read_traffic_file(path, LINE3)
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def test_flows_follow_the_least_delay_path() -> None:
    assert flow_path(load_topology("small"), parse_flow("0-2:1mbit", load_topology("small")))[0] == "0"
    assert flow_path(LINE3, BackgroundFlow("a", "c", 1.0)) == ["a", "b", "c"]
