"""The contract every registered scheduler keeps; a newly registered one is covered automatically."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from typing import Collection

import networkx as nx
import pytest
from graphs import random_connected_graph

from fedmst.core.schedulers import LinkState, scheduler_names, schedule
from fedmst.core.plan import (TRANSFER_PHASES, Phase, Plan, Transfer, check_plan, covers, feeders, predicted_link_bytes,
                              predicted_phase_seconds, waits_on)
from fedmst.core.tasks import Task
from fedmst.errors import SchedulerError
from fedmst.core.wire import wire_bytes

SEEDS = range(30)


def case(seed: int) -> tuple[nx.Graph, Task, LinkState]:
    """A random graph (uniform or not), a task with shared nodes and maybe one at G, some load."""
    rng = random.Random(seed)
    g = random_connected_graph(seed, rng.randint(3, 15), rng.uniform(0.05, 0.5), uniform=seed % 2 == 0)
    nodes = sorted(g.nodes)
    local = tuple(rng.choice(nodes) for _ in range(rng.randint(1, 12)))
    model_bytes = rng.choice([3_000, 100_000, 2_000_000])
    task = Task(name=f"t{seed}", global_node=rng.choice(nodes), local_nodes=local, model_bytes=model_bytes)
    hops = [(u, v) for e in g.edges for u, v in (e, e[::-1])]
    loads = [0.0, float(model_bytes), 5.0 * model_bytes]
    state = {hop: rng.choice(loads) for hop in rng.sample(hops, len(hops) // 3)}
    return g, task, state


def atoms_of(plan: Plan) -> list[tuple[int, int]]:
    cuts = sorted({0, plan.task.model_bytes} | {b for t in plan.transfers if t.segment for b in t.segment})
    return list(zip(cuts, cuts[1:]))


def run_phase(plan: Plan, phase: Phase, atoms: list[tuple[int, int]], updates: dict[int, list[float]],
              weights: dict[int, float], old: list[float]) -> dict[str, list[float]]:
    """Execute one phase on one number per atom, in an order that respects every wait, as the
    agents do: a sum adds the source's own weighted updates to its feeders', the global model is
    G's in broadcast, a copy received, or a sum the source completes. Returns, per node, the
    global model it ends the phase with (every atom), where it has all of it."""
    task, transfers = plan.task, plan.phase(phase)
    order = nx.DiGraph()
    order.add_nodes_from(range(len(transfers)))
    order.add_edges_from((transfers.index(w), i) for i, t in enumerate(transfers) for w in waits_on(t, transfers))
    value: dict[int, dict[int, float]] = {}

    def own(node: str, models: Collection[int] | None, a: int) -> float:
        return sum(weights[i] * updates[i][a] for i in task.models_at(node) if models is None or i in models)

    def inside(t: Transfer) -> list[int]:
        return [a for a, atom in enumerate(atoms) if covers(t.segment, atom)]

    for i in nx.topological_sort(order):
        t = transfers[i]
        feeds = [transfers.index(f) for f in feeders(t, transfers)]
        if t.carries == "global" and phase == "broadcast" and not feeds:
            assert t.src == task.global_node
            value[i] = {a: old[a] for a in inside(t)}
        elif t.carries == "global" and any(transfers[f].carries == "global" for f in feeds):
            value[i] = {a: value[feeds[0]][a] for a in inside(t)}
        else:
            models = None if t.carries == "global" else t.models
            value[i] = {a: own(t.src, models, a) + sum(value[f][a] for f in feeds) for a in inside(t)}
    ends = {}
    for node in plan.nodes:
        arriving = [i for i, t in enumerate(transfers) if t.dst == node]
        got = []
        for a in range(len(atoms)):
            copies = [value[i][a] for i in arriving if transfers[i].carries == "global" and a in value[i]]
            if node == task.global_node and phase == "broadcast":
                got.append(old[a])
            elif copies:
                got.append(copies[0])
            else:
                got.append(own(node, None, a) + sum(value[i][a] for i in arriving if a in value[i]))
        ends[node] = got
    return ends


@pytest.mark.parametrize("name", scheduler_names())
@pytest.mark.parametrize("seed", SEEDS)
class TestSchedulerContract:
    @pytest.fixture
    def setup(self, name: str, seed: int) -> tuple[nx.Graph, Task, Plan]:
        g, task, state = case(seed)
        return g, task, schedule(g, task, name, state)

    def test_plan_is_valid_and_labelled(self, name: str, setup: tuple[nx.Graph, Task, Plan]) -> None:
        g, task, plan = setup
        check_plan(plan, g)
        assert plan.scheduler == name and plan.task == task
        assert all(t.phase in TRANSFER_PHASES for t in plan.transfers)

    def test_aggregation_is_exact(self, setup: tuple[nx.Graph, Task, Plan]) -> None:
        """Run the plan on numbers: G ends the upload with every update summed exactly once (with
        its weight), and every local model's node starts the round with the global model."""
        g, task, plan = setup
        rng = random.Random(task.name)
        atoms = atoms_of(plan)
        updates = {i: [rng.random() for _ in atoms] for i in range(task.k)}
        weights = {i: rng.random() for i in range(task.k)}
        new = [sum(weights[i] * updates[i][a] for i in range(task.k)) for a in range(len(atoms))]
        old = [rng.random() for _ in atoms]
        after_upload = run_phase(plan, "upload", atoms, updates, weights, old)
        assert after_upload[task.global_node] == pytest.approx(new)
        after_broadcast = run_phase(plan, "broadcast", atoms, updates, weights, old)
        for node in set(task.local_nodes) - {task.global_node}:
            got = after_broadcast.get(node)
            kept = after_upload.get(node)
            assert got == pytest.approx(old) or (kept is not None and kept == pytest.approx(new)), node

    def test_predicts_bytes_exactly_on_links_used(self, setup: tuple[nx.Graph, Task, Plan]) -> None:
        g, task, plan = setup
        for phase in (*TRANSFER_PHASES, None):
            expected: Counter[tuple[str, str]] = Counter()
            for t in plan.transfers:
                if phase in (None, t.phase):
                    lo, hi = t.segment or (0, task.model_bytes)
                    expected.update({hop: wire_bytes(hi - lo) for hop in t.hops})
            assert predicted_link_bytes(plan, phase) == expected

    def test_phase_seconds_positive_with_transfers(self, setup: tuple[nx.Graph, Task, Plan]) -> None:
        g, task, plan = setup
        for phase in TRANSFER_PHASES:
            for with_delay in (True, False):
                seconds = predicted_phase_seconds(plan, g, phase, chunk_bytes=65_536, with_delay=with_delay)
                assert (seconds > 0) == bool(plan.phase(phase))


@pytest.mark.parametrize("name", scheduler_names())
@pytest.mark.parametrize("seed", SEEDS[:10])
def test_a_task_whose_updates_must_reach_g_whole_gets_each_forwarded_once(name: str, seed: int) -> None:
    """For a strategy that is not decomposable (a median at G), every scheduler's plan carries each
    update on its own: G ends the upload with every update exactly once (run on numbers), each
    link direction carries one model per update crossing it where the summed plan carried one per
    transfer, and the broadcast is the summed plan's. A plan that hands the global model on in
    its upload (a ring's all-gather) cannot, and is refused in one line."""
    g, task, state = case(seed)
    summed = schedule(g, task, name, state)
    whole = replace(task, sums_in_path=False)
    if any(t.phase == "upload" and t.carries == "global" for t in summed.transfers):
        with pytest.raises(SchedulerError, match=rf"^{name} cannot carry each update to G whole: .* sums by "):
            schedule(g, whole, name, state)
        return
    plan = schedule(g, whole, name, state)
    assert plan.phase("broadcast") == summed.phase("broadcast")
    assert all(len(t.models) == 1 for t in plan.phase("upload"))
    rng = random.Random(seed)
    atoms = atoms_of(plan)
    updates = {i: [rng.random() for _ in atoms] for i in range(task.k)}
    weights = {i: 1.0 for i in range(task.k)}
    got = run_phase(plan, "upload", atoms, updates, weights, [0.0] * len(atoms))[task.global_node]
    assert got == pytest.approx([sum(updates[i][a] for i in range(task.k)) for a in range(len(atoms))])
    crossing: Counter[tuple[str, str]] = Counter()
    for t in summed.phase("upload"):
        lo, hi = t.segment or (0, task.model_bytes)
        crossing.update({hop: len(t.models) * wire_bytes(hi - lo) for hop in t.hops})
    assert predicted_link_bytes(plan, "upload") == +crossing
