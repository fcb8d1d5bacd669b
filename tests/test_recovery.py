"""The recovery decisions on their own, without a network: what a phase's outcome asks for."""

from __future__ import annotations

import pytest

from fedmst.core.tasks import Task
from fedmst.errors import EmulationError, FedmstError
from fedmst.protocol import Failed, PhaseDone
from fedmst.run.recovery import Live, Strike, aggregation_weights, assess, late_models
from fedmst.run.stall import Stall

TASK = Task("task0", "g", ("a", "b", "b"), model_bytes=100)


def _live() -> Live:
    return Live(tasks={"task0": TASK}, plans=(), models={"task0": (0, 1, 2)})


def _struck(event: str, *, node: str | None = None, link: tuple[str, str] | None = None) -> Strike:
    strike = Strike(event, 0.0, lambda: 7, node=node, link=link)
    strike.start()
    strike.finish("broadcast")
    return strike


def test_nothing_broke_nothing_to_do() -> None:
    assert assess("broadcast", {"a": PhaseDone({})}, [], _live(), {}, {}).event is None


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
    assert outcome.event is not None and not outcome.redo
    assert outcome.event["event"] == "worker on node a killed 0.00 s into the broadcast, worker on node b died"
    assert outcome.event["cause"] == lost and outcome.event["detected_s"] == {"a": pytest.approx(0.1)}
    assert outcome.event["in_flight_lost_bytes"] == 7
    # dead nodes already known are not reported again
    assert assess("upload", {"g": PhaseDone({})}, [], live, lost, {}).event is None


def test_failed_transfers_under_a_fault_ask_for_the_phase_again() -> None:
    outcome = assess("broadcast", {"a": Failed("RuntimeError: timed out")}, [_struck("link g-a down")], _live(),
                     {}, {})
    assert outcome.redo and outcome.event is not None
    assert outcome.event["aborted"] == {"phase": "broadcast", "failed_nodes": {"a": "RuntimeError: timed out"}}


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
    assert outcome.redo and outcome.event is not None
    assert outcome.event["stall"] == str(stall)
    assert outcome.event["detected_s"] == {"a-r": pytest.approx(2.25)}


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
