"""On a fabric every prediction made before the run is made on the network as the planned circuits
carry it, agents start only where a model can be, and what cannot reach a circuit is refused."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from fedmst.core.contention import capacities
from fedmst.core.optical.circuits import circuit_view, fibre_refusal, planned_view
from fedmst.core.topology import load_topology
from fedmst.errors import FedmstError
from fedmst.net.congestion import EcnMarking, Transport
from fedmst.run.config import RunConfig
from fedmst.run.prepare import Host, resolve

HOST = Host(delay_mode="userspace", netem_available=False)
FABRIC = "spine-leaf:2,4,1"


def fabric(**options: object) -> RunConfig:
    return RunConfig(**{"topology": FABRIC, "rounds": 1, "time_scale": "1", **options})  # type: ignore[arg-type]


def test_a_plan_is_predicted_on_its_circuits() -> None:
    (run,) = resolve(fabric(), ["spff"], HOST)
    graph, lightpaths = run.graph, run.workload.lightpaths
    assert lightpaths and planned_view(graph, lightpaths) is not graph
    assert capacities(planned_view(graph, lightpaths)) == capacities(circuit_view(graph, lightpaths))
    alone = planned_view(graph, lightpaths, "task0")
    assert min(c for _, _, c in alone.edges(data="capacity_mbps")) < 10000.0 / 10
    assert run.profiles[0].broadcast.seconds > 0.1  # 0.0116 s on the plain graph, 0.154 s on its circuits
    plain = load_topology("line3")
    assert planned_view(plain, ()) is plain  # nothing is a fibre: every prediction as before


def test_a_strike_inside_the_broadcast_on_circuits_is_accepted() -> None:
    """Broadcast on the plain graph: 0.0116 s; on its circuits (W=40): 0.154 s."""
    (run,) = resolve(fabric(fail_links=("l2-s1@1+0.05",)), ["spff"], HOST)
    assert run.link_failures
    with pytest.raises(FedmstError, match="predicts round 1's broadcast"):
        resolve(fabric(fail_links=("l2-s1@1+5",)), ["spff"], HOST)


def test_agents_start_only_where_a_model_can_be() -> None:
    (run,) = resolve(fabric(fail_links=("l2-s1@2",), rounds=2), ["spff"], HOST)
    assert not {"s0", "s1"} & set(run.worker_nodes) and "l0" in run.worker_nodes


def test_a_trace_on_a_fibre_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"changes": [{"at_s": 1.0, "a": "l0", "b": "s1", "capacity_mbps": 50}]}))
    with pytest.raises(FedmstError, match=r"^--link-trace .*: link l0-s1 is a fibre whose circuits' classes a "
                                          r"trace cannot change yet$"):
        resolve(fabric(link_trace=str(trace)), ["spff"], HOST)
    trace.write_text(json.dumps({"changes": [{"at_s": 1.0, "a": "h0_0", "b": "l0", "capacity_mbps": 50}]}))
    assert resolve(fabric(link_trace=str(trace)), ["spff"], HOST)


def test_ecn_marking_on_a_fabric_is_refused() -> None:
    marking = replace(HOST, transport=Transport("dctcp", "dctcp", ecn=EcnMarking()))
    with pytest.raises(FedmstError, match=r"^--congestion-control dctcp: ECN marking"):
        resolve(replace(fabric(), congestion_control="dctcp"), ["spff"], marking)
    assert fibre_refusal(load_topology("line3"), ecn="--ecn-k 20p") is None
    assert "--ecn-k 20p: ECN" in str(fibre_refusal(load_topology(FABRIC), ecn="--ecn-k 20p"))
