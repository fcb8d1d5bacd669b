"""The Plan module on hand-built plans: validation, byte and latency predictions, aggregation."""

from __future__ import annotations

import networkx as nx
import pytest
from graphs import DELAY_S, graph_from, line

from fedmst.errors import SchedulerError
from fedmst.core.plan import (
    Phase,
    Plan,
    Transfer,
    check_plan,
    predicted_link_bytes,
    predicted_phase_seconds,
)
from fedmst.core.tasks import Task
from fedmst.core.wire import wire_bytes

M = 100_000
W = wire_bytes(M)
LINE = line("a", "b", "c")


def tr(phase: Phase, path: str, *models: int) -> Transfer:
    """Transfer with ``path`` written as a string of one-letter nodes."""
    return Transfer(phase, tuple(path), frozenset(models))


def plan(*transfers: Transfer, local: tuple[str, ...] = ("b", "c"), g: str = "a") -> Plan:
    return Plan("test", Task("t", g, local, M), transfers)


# G=a, L1 at b, L2 at c on a-b-c
RELAY = plan(
    tr("broadcast", "ab", 0, 1), tr("broadcast", "bc", 1), tr("upload", "cb", 1), tr("upload", "ba", 0, 1)
)
STAR = plan(
    tr("broadcast", "ab", 0), tr("broadcast", "abc", 1), tr("upload", "ba", 0), tr("upload", "cba", 1)
)
AT_G = plan(tr("broadcast", "ab", 1), tr("upload", "ba", 1), local=("a", "b"))


TRIANGLE = graph_from([("a", "b"), ("b", "c"), ("a", "c")])


HALF = M // 2
# ring all-reduce of G=a and model 0 on b, written out: reduce-scatter (step 0), all-gather (step 1)
RING = plan(
    Transfer("upload", ("a", "b"), frozenset(), (0, HALF), 0),  # a's (empty) share of segment 0
    Transfer("upload", ("b", "a"), frozenset({0}), (HALF, M), 0),  # b's share of segment 1
    Transfer("upload", ("a", "b"), frozenset({0}), (HALF, M), 1, "global"),  # a finished segment 1
    Transfer("upload", ("b", "a"), frozenset(), (0, HALF), 1, "global"),  # b finished segment 0
    local=("b",),
)


def test_hand_built_ring_all_reduce_passes() -> None:
    check_plan(RING, LINE)
    assert RING.aggregation_nodes == {"a", "b"}
    assert predicted_link_bytes(RING) == {("a", "b"): 2 * wire_bytes(HALF), ("b", "a"): 2 * wire_bytes(HALF)}


def test_ring_missing_any_partial_sum_is_refused() -> None:
    from fedmst.core.schedulers.ring import RingScheduler
    task = Task("t", "a", ("b", "c", "c"), M)
    full = RingScheduler().plan(TRIANGLE, task)
    check_plan(full, TRIANGLE)
    assert len(full.transfers) == 2 * 2 * 3
    for drop in full.transfers:
        cut = Plan("ring", task, tuple(t for t in full.transfers if t is not drop))
        if drop.carries == "sum" and drop.models:
            with pytest.raises(SchedulerError, match="lacking updates"):
                check_plan(cut, TRIANGLE)


def test_ring_steps_are_store_and_forward() -> None:
    # two steps of half a model each over a-b (100 Mbit/s) and b-c (10 Mbit/s): each step serialises
    # its half on its busiest link and fills one chunk; a one-step plan would pipeline them
    g = line("a", "b", "c")
    got = predicted_phase_seconds(RING, g, "upload", chunk_bytes=10 * M, with_delay=False)
    assert got == pytest.approx(2 * (wire_bytes(HALF) * 8 / 100e6 * 2))


@pytest.mark.parametrize("good", [RELAY, STAR, plan(local=("a",)), AT_G, RING])
def test_valid_plans_pass(good: Plan) -> None:
    check_plan(good, LINE)


@pytest.mark.parametrize(
    ("bad", "graph", "why"),
    [
        (plan(tr("broadcast", "ac", 0), tr("upload", "ca", 0), local=("c",)), LINE, "missing link a-c"),
        (plan(tr("broadcast", "ab", 0), tr("upload", "ba", 0)), LINE, "model 1's node c does not receive bytes 0"),
        (plan(tr("broadcast", "ab", 0, 1), tr("broadcast", "bc", 1), tr("upload", "ba", 0)), LINE,
         "G's node a ends the upload with bytes 0..100000 of the global model lacking updates \\[1\\]"),
        (
            plan(tr("broadcast", "ab", 0), tr("upload", "bc", 0), tr("upload", "cb", 0), local=("b",)),
            LINE,
            "wait on each other in a cycle",
        ),
        (plan(tr("broadcast", "ab", 0), tr("upload", "ba", 0), local=("a",)), LINE,
         "upload transfer b-a \\(step 0\\): its sum is wrong, lacking updates \\[0\\]"),
        # b sums its own update into a transfer that c's sum, which already holds it, feeds
        (plan(tr("broadcast", "ab", 0, 1), tr("broadcast", "bc", 1), tr("upload", "cb", 0, 1),
              tr("upload", "ba", 0, 1)), LINE,
         "upload transfer c-b \\(step 0\\): its sum is wrong, lacking updates \\[0\\]"),
        (plan(tr("broadcast", "ab", 0, 1), tr("broadcast", "bc", 1), tr("upload", "cb", 1), tr("upload", "ba", 1),
              tr("upload", "ba", 0, 1)), LINE, "counting \\[1\\] more than once"),
        (plan(tr("broadcast", "bc", 1), tr("broadcast", "ab", 0), tr("upload", "cba", 1), tr("upload", "ba", 0)),
         LINE, "broadcast transfer b-c \\(step 0\\) leaves b, which has not received the global model"),
        (plan(tr("broadcast", "a", 0), local=("b",)), LINE, "has no hop"),
        (plan(tr("broadcast", "aba", 0), local=("b",)), LINE, "visits a node twice"),
        (plan(tr("broadcast", "ab", 0), tr("broadcast", "bc"), tr("upload", "ba", 0), local=("b",)), LINE,
         "serves no local model"),
        (plan(tr("broadcast", "ab", 3), local=("b",)), LINE, "serves unknown local models \\[3\\]"),
        (plan(Transfer("broadcast", ("a", "b"), frozenset({0}), carries="sum"), tr("upload", "ba", 0), local=("b",)),
         LINE, "a broadcast carries the global model"),
        (plan(Transfer("broadcast", ("a", "b"), frozenset({0}), segment=(2, 10)), local=("b",)), LINE,
         "segment \\(2, 10\\) is not a range of whole float32 weights"),
        (plan(Transfer("broadcast", ("a", "b"), frozenset({0}), segment=(0, 4 * M)), local=("b",)), LINE,
         "is not a range of whole float32 weights"),
        # half of the model reaches b: the other half is missing
        (plan(Transfer("broadcast", ("a", "b"), frozenset({0}), segment=(0, M // 2)), tr("upload", "ba", 0),
              local=("b", "a")), LINE, "model 0's node b does not receive bytes 50000..100000"),
        # an upload that hands the global model on from a node that never completed the sum
        (plan(tr("broadcast", "ab", 0, 1), tr("broadcast", "bc", 1),
              Transfer("upload", ("b", "a"), frozenset({0}), carries="global")), LINE,
         "upload transfer b-a \\(step 0\\): the global model it completes is wrong, lacking updates \\[1\\]"),
    ],
)
def test_check_plan_rejects(bad: Plan, graph: nx.Graph, why: str) -> None:
    with pytest.raises(SchedulerError, match=why):
        check_plan(bad, graph)


def test_predicted_link_bytes() -> None:
    down = {("a", "b"): W, ("b", "c"): W}
    assert predicted_link_bytes(RELAY, "broadcast") == down
    assert predicted_link_bytes(RELAY, "upload") == {(v, u): b for (u, v), b in down.items()}
    assert predicted_link_bytes(STAR) == {
        ("a", "b"): 2 * W,
        ("b", "a"): 2 * W,
        ("b", "c"): W,
        ("c", "b"): W,
    }


class TestPhaseSeconds:
    """a-b at 100 Mbit/s, b-c at 10 Mbit/s, 0.5 ms each; chunks of 16 KiB (12 segments)."""

    g = line("a", "b", "c")
    g.edges["b", "c"]["capacity_mbps"] = 10.0
    chunk = 16_384 + 12 * 66
    fill_ab, fill_bc = chunk * 8 / 100e6, chunk * 8 / 10e6

    @pytest.mark.parametrize("phase", ["broadcast", "upload"])
    def test_relay_fills_pipeline_over_both_transfers(self, phase: Phase) -> None:
        # busiest direction: the full model over the 10 Mbit/s link
        busiest = W * 8 / 10e6
        fill = self.fill_ab + self.fill_bc
        for with_delay, delay in ((True, 2 * DELAY_S), (False, 0.0)):
            got = predicted_phase_seconds(RELAY, self.g, phase, chunk_bytes=16_384, with_delay=with_delay)
            assert got == pytest.approx(busiest + fill + delay)

    def test_star_serialises_both_models_on_shared_link(self) -> None:
        # a->b carries two models at 100 Mbit/s (0.0167 s), b->c one at 10 Mbit/s (0.0837 s)
        got = predicted_phase_seconds(STAR, self.g, "broadcast", chunk_bytes=16_384, with_delay=True)
        assert got == pytest.approx(W * 8 / 10e6 + self.fill_ab + self.fill_bc + 2 * DELAY_S)

    def test_chunk_larger_than_model_fills_with_whole_model(self) -> None:
        got = predicted_phase_seconds(RELAY, self.g, "upload", chunk_bytes=10 * M, with_delay=False)
        assert got == pytest.approx(W * 8 / 10e6 + W * 8 / 100e6 + W * 8 / 10e6)

    def test_no_transfers_take_no_time(self) -> None:
        idle = plan(local=("a",))
        assert predicted_phase_seconds(idle, self.g, "broadcast", chunk_bytes=16_384, with_delay=True) == 0.0


def test_aggregation_nodes() -> None:
    assert RELAY.aggregation_nodes == {"a", "b"}
    assert STAR.aggregation_nodes == {"a"}
    # one upload carrying two models hosted on b: b sums them
    shared = plan(tr("broadcast", "ab", 0, 1), tr("upload", "ba", 0, 1), local=("b", "b"))
    assert shared.aggregation_nodes == {"a", "b"}
    # a relay forwarding one model while carrying none of its own does not aggregate
    forward = plan(
        tr("broadcast", "ab", 0),
        tr("broadcast", "bc", 0),
        tr("upload", "cb", 0),
        tr("upload", "ba", 0),
        local=("c",),
    )
    assert forward.aggregation_nodes == {"a"}
    assert RELAY.nodes == {"a", "b", "c"}
