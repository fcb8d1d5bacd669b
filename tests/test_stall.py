"""The stall criterion on its own, without a network: a transfer has stalled only when its sender
has all it must send and a link on its path carried nothing at all for the stall timeout."""

from __future__ import annotations

from fedmst.protocol import TaskSpec, TransferSpec
from fedmst.run.stall import StallWatch


def _task(name: str, transfers: list[tuple[str, tuple[str, ...], tuple[int, ...]]]) -> TaskSpec:
    specs = tuple(TransferSpec(f"{name}-{i:03d}-{phase}", phase, path, models, "10.0.0.1", "10.0.0.2", None, 0,
                               "global" if phase == "broadcast" else "sum", f"{name}-{i:03d}-{phase}", 0)
                  for i, (phase, path, models) in enumerate(transfers))
    return TaskSpec(name, "g", ("a", "b"), 0, (0, 1), specs)


TREE = _task("t", [("broadcast", ("g", "x", "r"), (0, 1)), ("broadcast", ("r", "a"), (0,)),
                   ("broadcast", ("r", "y", "b"), (1,)), ("upload", ("a", "r"), (0,)),
                   ("upload", ("b", "y", "r"), (1,)), ("upload", ("r", "x", "g"), (0, 1))])
"""G on g sends to relay r, which forwards to a and (through y) to b; uploads go back the same way."""
HOPS = [("g", "x"), ("x", "r"), ("r", "a"), ("r", "y"), ("y", "b"), ("a", "r"), ("b", "y"), ("y", "r"), ("x", "g")]


def _watch(phase: str = "broadcast", stall_s: float = 2.0, tasks: tuple[TaskSpec, ...] = (TREE,)) -> StallWatch:
    watch = StallWatch(tasks, phase, stall_s=stall_s, start=0.0)
    watch.observe(0.0, {hop: 0 for hop in HOPS})
    return watch


class Links:
    """Counters that grow on the link directions told to move, read into a watch every 0.5 s."""

    def __init__(self, watch: StallWatch) -> None:
        self.watch, self.now, self.bytes = watch, 0.0, {hop: 0 for hop in HOPS}

    def run(self, seconds: float, moving: set[tuple[str, str]]) -> None:
        for _ in range(int(seconds / 0.5)):
            self.now += 0.5
            for hop in moving:
                self.bytes[hop] += 1500
            self.watch.observe(self.now, self.bytes)


def test_a_slow_transfer_on_busy_links_never_stalls() -> None:
    """Minutes with nothing arrived: as long as every link of the paths moves, nothing stalls."""
    links = Links(_watch())
    links.run(120, {("g", "x"), ("x", "r"), ("r", "a"), ("r", "y"), ("y", "b")})
    assert links.watch.stalled(links.now) is None


def test_a_dead_link_stalls_its_transfer_after_the_timeout_and_names_it() -> None:
    watch = _watch()
    links = Links(watch)
    links.run(1.0, {("g", "x"), ("x", "r")})
    links.run(1.5, {("g", "x")})  # x->r went down 1 s in
    assert watch.stalled(links.now) is None  # idle 1.5 s < 2 s
    links.run(0.5, {("g", "x")})
    stall = watch.stalled(links.now)
    assert stall is not None and (stall.transfer, stall.hop, stall.idle_s, stall.at) == ("t-000-broadcast",
                                                                                      ("x", "r"), 2.0, 3.0)


def test_a_relay_waiting_on_a_slow_upstream_is_not_stalled_its_clock_starts_when_all_arrived() -> None:
    """r's onward transfers stand still while g->r crawls; they are judged only once g->r arrived,
    from that moment on."""
    watch = _watch()
    links = Links(watch)
    links.run(30, {("g", "x"), ("x", "r")})
    assert watch.stalled(links.now) is None
    watch.arrive(["t-000-broadcast"], links.now)
    assert watch.ready_since("t-001-broadcast") == 30.0
    links.run(1.5, {("r", "a")})  # r->a moves, r->y->b does not
    assert watch.stalled(links.now) is None
    links.run(0.5, {("r", "a")})
    stall = watch.stalled(links.now)
    assert stall is not None and stall.transfer == "t-002-broadcast" and stall.hop == ("r", "y")


def test_transfers_that_arrived_are_never_stalled() -> None:
    watch = _watch()
    watch.arrive(["t-000-broadcast", "t-001-broadcast", "t-002-broadcast"], 1.0)
    Links(watch).run(60, set())
    assert watch.pending == [] and watch.stalled(60.0) is None


def test_an_upload_relay_is_ready_once_every_update_it_sums_is_in() -> None:
    watch = _watch("upload")
    assert watch.waits["t-005-upload"] == ["t-003-upload", "t-004-upload"]
    assert watch.ready_since("t-003-upload") == 0.0  # a leaf sends its own update at once
    watch.arrive(["t-003-upload"], 4.0)
    assert watch.ready_since("t-005-upload") is None
    watch.arrive(["t-004-upload"], 7.0)
    assert watch.ready_since("t-005-upload") == 7.0
    Links(watch).run(8.5, {("a", "r"), ("b", "y"), ("y", "r")})
    stall = watch.stalled(8.5)  # r->x->g has been idle since 7.0 only
    assert stall is None
    assert watch.stalled(9.0) is not None


def test_idle_time_counts_from_the_later_of_ready_and_the_last_movement() -> None:
    watch = _watch()
    links = Links(watch)
    links.run(5, {("g", "x"), ("x", "r")})
    links.run(1.5, {("g", "x")})
    assert watch.stalled(links.now) is None  # x->r moved at 5.0: idle 1.5 s
    links.run(0.5, {("g", "x")})
    stall = watch.stalled(links.now)
    assert stall is not None and stall.idle_s == 2.0


def test_tasks_are_watched_apart_a_transfer_of_another_task_feeds_nothing() -> None:
    """Task u's transfer into r for model 0 must not count as a feeder of t's transfers out of r."""
    other = _task("u", [("broadcast", ("g", "x", "r"), (0, 1, 2))])
    watch = _watch(tasks=(TREE, other))
    assert watch.waits["t-001-broadcast"] == ["t-000-broadcast"]
    assert watch.waits["u-000-broadcast"] == []


def test_a_later_step_is_ready_once_the_earlier_steps_at_its_source_are_in() -> None:
    """Store and forward: g's second-round send (step 1) waits for its first (step 0) to arrive,
    though it forwards nothing."""
    specs = (TransferSpec("s-000-broadcast", "broadcast", ("g", "a"), (0,), "10.0.0.1", "10.0.0.2", None, 0, "global",
                          "s-c000", 0),
             TransferSpec("s-001-broadcast", "broadcast", ("g", "b"), (1,), "10.0.0.1", "10.0.0.2", None, 1, "global",
                          "s-c001", 0))
    watch = StallWatch([TaskSpec("s", "g", ("a", "b"), 0, (0, 1), specs)], "broadcast", stall_s=2.0, start=0.0)
    assert watch.waits["s-001-broadcast"] == ["s-000-broadcast"]
    assert watch.ready_since("s-001-broadcast") is None
    watch.arrive(["s-000-broadcast"], 3.0)
    assert watch.ready_since("s-001-broadcast") == 3.0
