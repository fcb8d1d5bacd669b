"""The counter sampler reads link counters at start, every interval, and at the end of a phase."""

from __future__ import annotations

import time

from fedmst.run.measure import CounterSampler


def test_samples_at_start_every_interval_and_end() -> None:
    reads = iter(range(1000))
    sampler = CounterSampler(lambda: {("a", "b"): next(reads)}, interval_s=0.02)
    with sampler.sampling(1, "broadcast"):
        time.sleep(0.11)
    with sampler.sampling(1, "upload"):
        pass
    broadcast = [r for r in sampler.rows if r["phase"] == "broadcast"]
    assert 4 <= len(broadcast) <= 8  # start, ~5 ticks, end
    assert [r["bytes"] for r in sampler.rows] == sorted(r["bytes"] for r in sampler.rows)
    assert broadcast[0]["t_s"] == 0 and all(r["round"] == 1 for r in sampler.rows)
    times = [r["t_s"] for r in sampler.rows]
    assert times == sorted(times)
    assert [r["phase"] for r in sampler.rows][-2:] == ["upload", "upload"]
