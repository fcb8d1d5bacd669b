"""Measurement records without a network: an independent clock's windows from the spans the
nodes report, and the span record behind timeline.csv."""

from __future__ import annotations

import pytest

from fedmst.core.plan import Plan
from fedmst.core.span import PhaseSpan
from fedmst.core.tasks import Task
from fedmst.run.measure import ClockRun

TASK = Task("task0", "g", ("a", "b"), model_bytes=100, rounds=2, compute_s=0.0)


def test_an_independent_clocks_windows_come_from_every_nodes_spans() -> None:
    """The broadcast runs from G's start to the last node holding the model, training from the
    first local model's start to the last one's end, the upload from then to G's end; a round
    some node did not finish is not a window."""
    spans = {
        "g": (PhaseSpan("task0", 1, "broadcast", 0.0, 0.5), PhaseSpan("task0", 1, "upload", 2.0, 3.0),
              PhaseSpan("task0", 2, "broadcast", 3.0, 3.4)),
        "a": (PhaseSpan("task0", 1, "broadcast", 0.1, 0.8), PhaseSpan("task0", 1, "train", 0.8, 1.6),
              PhaseSpan("task0", 1, "upload", 1.6, 2.5)),
        "b": (PhaseSpan("task0", 1, "broadcast", 0.2, 1.0), PhaseSpan("task0", 1, "train", 1.0, 2.0),
              PhaseSpan("task0", 1, "upload", 2.0, 2.6), PhaseSpan("task0", 2, "broadcast", 3.1, 3.9)),
    }
    clock = ClockRun(plans=(Plan("mst", TASK, ()),), rounds={"task0": 2}, offsets={"task0": 0.0}, spans=spans)
    assert clock.windows() == [PhaseSpan("task0", 1, "broadcast", 0.0, 1.0),
                               PhaseSpan("task0", 1, "train", 0.8, 2.0),
                               PhaseSpan("task0", 1, "upload", 2.0, 3.0)]
    assert clock.rounds_done == 1
    assert ClockRun(plans=(), rounds={"task0": 2}, offsets={}).rounds_done == 0


def test_span_fields_are_the_timelines_columns() -> None:
    """timeline.csv's columns after ``kind`` are a span's fields, in order."""
    from dataclasses import fields

    from fedmst.run.results import TIMELINE_FIELDS

    assert tuple(f.name for f in fields(PhaseSpan)) == TIMELINE_FIELDS[1:]
    with pytest.raises(AttributeError):
        PhaseSpan("t", 1, "train", 0.0, 1.0).end_s = 2.0  # type: ignore[misc]
