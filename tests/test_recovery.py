"""The recovery decisions on their own, without a network: what a phase's outcome asks for."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fedmst.core.tasks import Task
from fedmst.errors import EmulationError, FedmstError
from fedmst.protocol import Failed, PhaseDone
from fedmst.run.recovery import (Aborted, Fault, FaultEvent, Live, Strike, aggregation_weights, assess, late_models,
                                 write_faults)
from fedmst.run.stall import Stall

TASK = Task("task0", "g", ("a", "b", "b"), model_bytes=100)


def _live() -> Live:
    return Live(tasks={"task0": TASK}, plans=(), models={"task0": (0, 1, 2)})


def _struck(event: str, *, node: str | None = None, link: tuple[str, str] | None = None) -> Strike:
    strike = Strike(event, 0.0, lambda: 7, node=node, link=link)
    strike.start()
    strike.finish("broadcast")
    return strike


def test_a_strike_whose_phase_ends_first_strikes_at_its_end_and_says_so() -> None:
    """``+99`` into a phase over at once: the fault strikes as the phase ends, and the event (on the
    console and in faults.json) says it came at the end, not 99 s in; one on time says nothing more."""
    late = Strike("link a-b down", 99.0, lambda: 0, link=("a", "b"))
    late.start()
    late.finish("broadcast")
    assert late.at_end and late.at_s is not None and late.at_s < 1
    assert late.description == (f"link a-b down {late.at_s:.2f} s into the broadcast, at its end: it was over "
                                "before the 99 s asked")
    on_time = Strike("link a-b down", 0.01, lambda: 0, link=("a", "b"))
    on_time.start()
    time.sleep(0.2)
    on_time.finish("broadcast")
    assert not on_time.at_end and on_time.description.endswith("s into the broadcast")


def test_nothing_broke_nothing_to_do() -> None:
    assert assess("broadcast", {"a": PhaseDone({})}, [], _live(), {}, {}).fault is None


def test_a_failure_without_a_fault_ends_the_run() -> None:
    replies = {"a": PhaseDone({}), "b": Failed("RuntimeError: [/src/gloo/pair.cc:1] Connection reset")}
    with pytest.raises(EmulationError, match="agent on node b failed in upload: RuntimeError: Connection reset"):
        assess("upload", replies, [], _live(), {}, {})


def test_two_workers_dead_together_are_one_event_and_one_replan() -> None:
    live = _live()
    lost = {"a": "agent on node a exited with code -9", "b": "agent on node b exited with code -9"}
    strikes = [_struck("worker on node a killed", node="a")]
    outcome = assess("train", {"g": PhaseDone({})}, strikes, live, lost, {"a": strikes[0].when + 0.1, "b": 5.0})
    assert live.dead == {"a", "b"}
    assert outcome.fault is not None and not outcome.redo
    assert outcome.fault.event == "worker on node a killed 0.00 s into the broadcast, worker on node b died"
    assert outcome.fault.cause == lost and outcome.fault.detected_s == {"a": pytest.approx(0.1)}
    assert outcome.fault.in_flight_lost_bytes == 7
    # dead nodes already known are not reported again
    assert assess("upload", {"g": PhaseDone({})}, [], live, lost, {}).fault is None


def test_failed_transfers_under_a_fault_ask_for_the_phase_again() -> None:
    outcome = assess("broadcast", {"a": Failed("RuntimeError: timed out")}, [_struck("link g-a down")], _live(),
                     {}, {})
    assert outcome.redo and outcome.fault is not None
    assert outcome.fault.aborted == Aborted("broadcast", {"a": "RuntimeError: timed out"})


def test_a_stall_without_a_fault_ends_the_run_naming_the_link() -> None:
    stall = Stall("task0-001-broadcast", ("r", "a"), 10.2, at=0.0)
    replies = {"a": Failed("PhaseAborted: " + str(stall))}
    with pytest.raises(EmulationError, match=r"broadcast: transfer task0-001-broadcast stalled: link r->a on its "
                                             r"path carried nothing for 10.2 s, and no fault was injected there"):
        assess("broadcast", replies, [], _live(), {}, {}, stall)


def test_a_stall_over_a_failed_link_says_how_soon_it_was_found() -> None:
    strike = _struck("link a-r down", link=("a", "r"))
    stall = Stall("task0-001-broadcast", ("r", "a"), 2.0, at=strike.when + 2.25)
    outcome = assess("broadcast", {"a": Failed("PhaseAborted: " + str(stall))}, [strike], _live(), {}, {}, stall)
    assert outcome.redo and outcome.fault is not None
    assert outcome.fault.stall == str(stall)
    assert outcome.fault.detected_s == {"a-r": pytest.approx(2.25)}


def test_aggregation_weights_renormalise_over_the_models_that_count() -> None:
    live = _live()
    samples = {"task0": {0: 10, 1: 30, 2: 60}}
    assert aggregation_weights(live, samples, {}, 1) == {"task0": {0: 0.1, 1: 0.3, 2: 0.6}}
    assert aggregation_weights(live, samples, {"task0": [2]}, 1) == {"task0": {0: 0.25, 1: 0.75}}
    live.models["task0"] = (1,)
    assert aggregation_weights(live, samples, {}, 2) == {"task0": {1: 1.0}}
    with pytest.raises(FedmstError, match="every local model of task0 missed the deadline"):
        aggregation_weights(live, samples, {"task0": [1]}, 2)


def test_late_models_gathered_from_every_agent() -> None:
    from fedmst.protocol import Trained

    replies = {"a": Trained({}, {}, {"task0": (0,)}), "b": Trained({}, {}, {"task0": (2, 1)}), "g": PhaseDone({})}
    assert late_models(replies) == {"task0": [0, 1, 2]}


def _replanned(fault: Fault) -> FaultEvent:
    return FaultEvent(fault, round=2, before_phase="upload", scheduling_s=0.1, routes_s=0.2, reconnect_s=0.3,
                      replan_s=0.6, setup_link_bytes=9, dropped={"task0": {"1": "node 3 died"}},
                      tasks=({"task": "task0"},))


def test_faults_json_keeps_its_keys_in_order_and_leaves_unknowns_out(tmp_path: Path) -> None:
    """faults.json is user-facing: a fault's keys, then the re-planning's; what a fault did not
    have (a stall, an aborted attempt, a cause for a link taken down between rounds) is absent."""
    struck = Fault("link a-b down 0.50 s into the broadcast", 7, cause={}, detected_s={"a-b": 1.5}, stall="stalled",
                   aborted=Aborted("broadcast", {"c": "PhaseAborted"}, link_bytes=1000))
    between = Fault("link a-b up again", 0)
    write_faults(tmp_path / "faults.json", [_replanned(struck), _replanned(between)])
    first, second = json.loads((tmp_path / "faults.json").read_text())
    tail = ["round", "before_phase", "scheduling_s", "routes_s", "reconnect_s", "replan_s", "setup_link_bytes",
            "dropped", "tasks"]
    assert list(first) == ["event", "in_flight_lost_bytes", "cause", "detected_s", "stall", "aborted", *tail]
    assert first["aborted"] == {"phase": "broadcast", "failed_nodes": {"c": "PhaseAborted"}, "link_bytes": 1000}
    assert list(second) == ["event", "in_flight_lost_bytes", *tail] and second["tasks"] == [{"task": "task0"}]
    unfinished = Fault("x", 0, aborted=Aborted("upload", {"c": "gone"}))
    aborted = _replanned(unfinished).to_json()["aborted"]
    assert aborted == {"phase": "upload", "failed_nodes": {"c": "gone"}}
