"""The contract every registered scheduler keeps; a newly registered one is covered automatically."""

from __future__ import annotations

import random
from collections import Counter

import networkx as nx
import pytest
from graphs import random_connected_graph

from fedmst.core.schedulers import LinkState, scheduler_names, schedule
from fedmst.core.plan import PHASES, Plan, check_plan, predicted_link_bytes, predicted_phase_seconds
from fedmst.core.tasks import Task
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
        assert all(t.phase in PHASES for t in plan.transfers)

    def test_each_phase_is_a_tree_rooted_at_g(self, setup: tuple[nx.Graph, Task, Plan]) -> None:
        g, task, plan = setup
        remote = {n for n in task.local_nodes if n != task.global_node}
        for phase in PHASES:
            tree = nx.DiGraph()
            tree.add_node(task.global_node)
            for t in plan.phase(phase):
                tree.add_edge(*((t.src, t.dst) if phase == "broadcast" else (t.dst, t.src)))
            assert nx.is_arborescence(tree)
            assert tree.in_degree(task.global_node) == 0
            assert remote <= set(tree.nodes)

    def test_covers_every_participant(self, setup: tuple[nx.Graph, Task, Plan]) -> None:
        g, task, plan = setup
        for i, node in enumerate(task.local_nodes):
            down = [t for t in plan.phase("broadcast") if i in t.models and t.dst == node]
            up = [t for t in plan.phase("upload") if i in t.models and t.src == node]
            assert (len(down), len(up)) == ((0, 0) if node == task.global_node else (1, 1))
        assert task.terminals <= plan.nodes

    def test_predicts_bytes_exactly_on_links_used(self, setup: tuple[nx.Graph, Task, Plan]) -> None:
        g, task, plan = setup
        for phase in (*PHASES, None):
            data = Counter(hop for t in plan.transfers if phase in (None, t.phase) for hop in t.hops)
            expected = {hop: n * wire_bytes(task.model_bytes) for hop, n in data.items()}
            assert predicted_link_bytes(plan, phase) == expected

    def test_phase_seconds_positive_with_transfers(self, setup: tuple[nx.Graph, Task, Plan]) -> None:
        g, task, plan = setup
        for phase in PHASES:
            for with_delay in (True, False):
                seconds = predicted_phase_seconds(plan, g, phase, chunk_bytes=65_536, with_delay=with_delay)
                assert (seconds > 0) == bool(plan.phase(phase))
