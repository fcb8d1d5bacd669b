"""A user's own cluster policies written against fedmst.api alone: the newest job first, G on the
last free node, and a preemption that stops the job that has run longest for any job waiting more
than a second."""

from fedmst.api import Evict, Order, Placed, Placement, Preemption


class Newest(Order):
    def order(self, waiting, view):  # type: ignore[no-untyped-def]
        return sorted(waiting, key=lambda j: -j.submit_s)


class LastNodes(Placement):
    def place(self, job, view):  # type: ignore[no-untyped-def]
        slots = [n for n in sorted(view.free, reverse=True) for _ in range(view.free[n])][:job.slots]
        return Placed(slots[0], tuple(slots[1:]), note="last nodes") if len(slots) == job.slots else None


class StopLongest(Preemption):
    def evict(self, job, view):  # type: ignore[no-untyped-def]
        stoppable = [r for name, r in view.running.items() if name not in view.stopping
                     and view.rounds_done.get(name, 0) > r.rounds_before and view.remaining_rounds(r.job) > 1]
        if view.now_s - job.submit_s < 1.0 or not stoppable:
            return None
        longest = min(stoppable, key=lambda r: r.start_s)
        return Evict((longest.job.name,), f"{job.name} waited a second")

    def wake_at(self, waiting, view):  # type: ignore[no-untyped-def]
        return min((j.submit_s + 1.0 for j in waiting if j.submit_s + 1.0 > view.now_s), default=None)


class Across(Placement):
    """Job i: G on h0_i, its one local model on h1_i, so that on a spine-leaf fabric every job
    crosses the fibres from leaf 0 to leaf 1; a job of two local models: G on h0_0, its models on
    h1_0 and h1_1 (two lightpaths over the same fibres)."""

    def place(self, job, view):  # type: ignore[no-untyped-def]
        i = int(job.name[-1])
        placed = Placed("h0_0", ("h1_0", "h1_1")) if job.local_models == 2 else Placed(f"h0_{i}", (f"h1_{i}",))
        return placed if all(view.free.get(n) for n in placed.nodes) else None
