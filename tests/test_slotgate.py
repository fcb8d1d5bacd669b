"""The timeslot gate's rules, on a fake clock: nothing goes outside its lightpath's slots, no more
than the wavelength sends before the slot closes, and over many frames a lightpath gets its share."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedmst.core.optical.slots import Frame
from fedmst.net.slotgate import Gate, GatedPath, GateTable, rule


class Packet:
    def __init__(self) -> None:
        self.verdict: str | None = None

    def accept(self) -> None:
        self.verdict = "accept"

    def drop(self) -> None:
        self.verdict = "drop"


def _table(slots: tuple[int, ...] = (1,), timeslots: int = 4, rate: float = 1e6) -> GateTable:
    return GateTable(timeslots=timeslots, slot_s=0.01, guard_s=0.001, epoch=1000.0,
                     paths=(GatedPath(("10.0.0.1", "10.0.0.2"), slots, rate),))


def _run(gate: Gate, arrivals: list[tuple[float, int]], until: float) -> list[tuple[float, int]]:
    """Push each (time, size) and release as the gate asks; returns (release time, size) in order."""
    sizes: dict[int, int] = {}
    out: list[tuple[float, int]] = []
    pending = sorted(arrivals)
    now = pending[0][0] if pending else until
    while now < until:
        while pending and pending[0][0] <= now:
            at, size = pending.pop(0)
            p = Packet()
            sizes[id(p)] = size
            assert gate.push(p, "10.0.0.1", size, at) is False
        out += [(now, sizes[id(p)]) for p in gate.release(now)]
        due = gate.next_due(now)
        nxt = min([t for t in (due, pending[0][0] if pending else None) if t is not None], default=until)
        now = max(nxt, now + 1e-9) if nxt <= now else nxt
    return out


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.floats(1000.0, 1000.2), st.integers(60, 1514)), min_size=1, max_size=200),
       st.sets(st.integers(0, 3), min_size=1, max_size=4))
def test_packets_leave_only_in_their_slots_and_drain_before_they_close(arrivals, slots) -> None:
    gate = Gate(_table(tuple(sorted(slots))), capacity=10_000)
    sent = _run(gate, arrivals, until=1001.0)
    assert sum(size for _, size in sent) == sum(size for _, size in arrivals)
    booked = 0.0
    for at, size in sent:
        opens, closes = gate.window(sorted(slots), at)
        assert opens <= at < closes  # released inside an open slot
        booked = max(booked, at) + size / 1e6
        assert booked <= closes + 1e-9  # and the wavelength sends it before the slot closes
        assert (at - 1000.0) % 0.04 // 0.01 in slots


def test_a_backlogged_lightpath_gets_its_share_of_the_wavelength() -> None:
    frame = Frame(timeslots=4, slot_us=10_000.0, guard_us=1_000.0)
    gate = Gate(_table((1,)), capacity=100_000)
    arrivals = [(1000.0, 1500)] * 20_000  # far more than 1 s can carry
    sent = _run(gate, arrivals, until=1001.0)
    got = sum(size for _, size in sent)
    assert got == pytest.approx(1e6 * frame.share(1), rel=0.01)


def test_a_full_queue_drops_and_counts_and_strangers_pass() -> None:
    gate = Gate(_table(), capacity=2)
    packets = [Packet() for _ in range(3)]
    assert [gate.push(p, "10.0.0.2", 100, 1000.0) for p in packets] == [False] * 3
    assert packets[2].verdict == "drop" and gate.stats()[0]["dropped"] == 1
    assert gate.push(Packet(), "10.9.9.9", 100, 1000.0) is True


def test_a_new_table_keeps_what_is_held_for_lightpaths_it_keeps() -> None:
    """The same gate takes the new table (the queue's callback holds it): what it held is queued
    again by the new table, and packets that come later are gated by it, a new source's too."""
    gate = Gate(_table((1,)))
    kept, gone, later = Packet(), Packet(), Packet()
    gate.push(kept, "10.0.0.1", 100, 1000.0)
    gate.push(gone, "10.0.0.2", 100, 1000.0)
    table = GateTable(4, 0.01, 0.001, 1000.0, (GatedPath(("10.0.0.1", "10.0.0.7"), (2,), 1e6),))
    gate.retable(table, 1000.0)
    assert gone.verdict == "accept" and kept.verdict is None
    assert gate.push(later, "10.0.0.7", 100, 1000.0) is False  # held for slot 2, not passed
    assert gate.release(1000.021) == [kept, later]
    assert [row["released_bytes"] for row in gate.stats()] == [0, 200]  # the first table's lightpath, then the new


def test_a_table_survives_its_json() -> None:
    table = _table((0, 3))
    assert GateTable.from_json(table.to_json()) == table


def test_the_rule_feeds_the_queue_with_the_lightpaths_sources_only() -> None:
    assert rule("l0-eth1", ("10.0.0.1",), 1002) == [
        "-A POSTROUTING -o l0-eth1 -s 10.0.0.1/32 -j NFQUEUE --queue-num 1002"]
