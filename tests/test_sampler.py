"""The counter sampler reads link counters at start, every interval, and at the end of a phase."""

from __future__ import annotations

import threading

from fedmst.run.measure import CounterSampler

INTERVAL_S = 0.02


def test_samples_at_start_every_interval_and_end() -> None:
    reads = 0
    ticked = threading.Event()

    def read() -> dict[tuple[str, str], int]:
        nonlocal reads
        reads += 1
        if reads == 4:  # the start and three ticks
            ticked.set()
        return {("a", "b"): reads}

    sampler = CounterSampler(read, interval_s=INTERVAL_S)
    with sampler.sampling(1, "broadcast"):
        assert ticked.wait(60), "the sampler did not tick while the phase ran"
    with sampler.sampling(1, "upload"):
        pass
    broadcast = [r for r in sampler.rows if r["phase"] == "broadcast"]
    assert len(broadcast) >= 5  # start, at least three ticks, end
    assert [r["bytes"] for r in sampler.rows] == list(range(1, len(sampler.rows) + 1))  # one read per row
    assert broadcast[0]["t_s"] == 0 and all(r["round"] == 1 for r in sampler.rows)
    times = [r["t_s"] for r in sampler.rows]
    assert times == sorted(times)
    # the ticks come an interval apart at least, however slow the host (the end sample may follow at once)
    ticks = times[:len(broadcast) - 1]
    assert all(b - a >= INTERVAL_S - 1e-3 for a, b in zip(ticks, ticks[1:])), ticks
    assert [r["phase"] for r in sampler.rows][-2:] == ["upload", "upload"]


def test_the_listener_hears_every_reading_and_the_last_one_after_the_phases_work() -> None:
    sent = 0
    heard: list[tuple[str, int, bool]] = []
    sampler = CounterSampler(lambda: {("a", "b"): sent}, interval_s=INTERVAL_S)
    sampler.listener = lambda t_s, round_, phase, counters, final: heard.append((phase, counters["a", "b"], final))
    for phase in ("broadcast", "upload"):
        with sampler.sampling(1, phase):
            sent += 100  # the phase's last transfer, done as its block ends
    assert len(heard) == len(sampler.rows)
    assert [h for h in heard if h[2]] == [("broadcast", 100, True), ("upload", 200, True)]
    assert heard[-1] == ("upload", 200, True) and heard[0] == ("broadcast", 0, False)
