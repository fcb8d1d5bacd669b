"""Client selection's pure half: who takes part in a round, and what the re-plan sees (no network)."""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations

import pytest

from fedmst.core.faults import NOT_SELECTED, remaining_tasks
from fedmst.core.plan import predicted_link_bytes
from fedmst.core.schedulers import schedule
from fedmst.core.selection import Selection, SelectionContext, SelectionError, participants, reduced, select
from fedmst.core.tasks import Task, place_task
from fedmst.core.topology import load_topology
from fedmst.errors import FedmstError
from fedmst.run.config import RunConfig, validate

NSFNET = load_topology("nsfnet")
TASK = place_task(NSFNET, name="task0", local_models=8, model_bytes=4_500_000, seed=1)


def _context(count: int, round_: int = 1, scheduler: str = "mst") -> SelectionContext:
    return SelectionContext(TASK, tuple(range(TASK.k)), count, round_, seed=1,
                            plan=lambda models: schedule(NSFNET, reduced(TASK, models), scheduler))


def _bytes(models: tuple[int, ...], scheduler: str = "mst") -> int:
    return sum(predicted_link_bytes(schedule(NSFNET, reduced(TASK, models), scheduler)).values())


def test_random_is_a_seeded_sample_that_changes_from_round_to_round() -> None:
    picks = [select("random", _context(4, r)) for r in range(1, 11)]
    assert all(len(set(p)) == 4 and set(p) <= set(range(8)) for p in picks)
    assert picks == [select("random", _context(4, r, scheduler="spff")) for r in range(1, 11)]  # any scheduler
    assert len(set(picks)) > 5
    assert select("random", _context(8)) == tuple(range(8))  # all of them: nothing to choose


def test_network_picks_the_models_the_scheduler_serves_with_few_link_bytes() -> None:
    """Greedy, so not always the cheapest set: on NSFNET with MST, with all eight in the pool,
    within 10% of the cheapest of every set of four, and no dearer than any random set (cheaper
    than their mean)."""
    chosen = select("network", replace(_context(4), pool=8))
    assert len(chosen) == 4
    cheapest = min(_bytes(c) for c in combinations(range(8), 4))
    assert _bytes(chosen) <= 1.1 * cheapest
    sampled = [_bytes(select("random", _context(4, r))) for r in range(1, 11)]
    assert _bytes(chosen) <= min(sampled) and _bytes(chosen) < sum(sampled) / len(sampled)


class Twice(Selection):
    """A user's selection with a bug: it picks one model twice."""

    def select(self, context: SelectionContext) -> list[int]:
        return [0, 0, 1]


def test_a_selection_that_picks_wrongly_is_one_line() -> None:
    with pytest.raises(SelectionError, match=r"^--selection test_selection:Twice picked \[0, 0, 1\] for task0 in "
                                             r"round 1: give 3 distinct of "):
        select("test_selection:Twice", _context(3))
    with pytest.raises(SelectionError, match=r"^unknown selection 'best'"):
        select("best", _context(3))


def test_counts_and_fractions_are_checked_before_anything_runs() -> None:
    assert participants("0.5", 16) == 8
    for bad in ("0", "1.5", "x", "-2"):
        with pytest.raises(FedmstError, match=r"^--clients-per-round .*: give a count of 1 or more, or a fraction"):
            validate(RunConfig(clients_per_round=bad))
    with pytest.raises(FedmstError, match=r"--clients-per-round: not supported with --clock independent"):
        validate(RunConfig(clients_per_round="2", clock="independent"))


def test_a_selection_or_pool_that_would_do_nothing_is_refused_before_any_network() -> None:
    """Without --clients-per-round every model takes part, so a selection or a pool chooses nothing;
    random draws no pool; a pool smaller than the round's participants cannot hold them."""
    for given, fragment in (({"selection": "loss"}, "--selection loss"),
                            ({"selection_pool": 6}, "--selection-pool 6"),
                            ({"selection": "network", "selection_pool": 6},
                             "--selection network and --selection-pool 6")):
        with pytest.raises(FedmstError, match=rf"^{fragment}: without --clients-per-round M every local model takes "
                                              r"part in every round, so none is chosen; give --clients-per-round too$"):
            validate(RunConfig(**given))
    with pytest.raises(FedmstError, match=r"^--selection-pool 6: --selection random draws no pool"):
        validate(RunConfig(clients_per_round="4", selection_pool=6))
    validate(RunConfig(clients_per_round="4", selection="loss", selection_pool=4))
    validate(RunConfig(clients_per_round="4"))

    from fedmst.run.prepare import Host, resolve

    host = Host(delay_mode="userspace", netem_available=False)
    pooled = RunConfig(topology="nsfnet", local_models=8, clients_per_round="0.5", selection="loss", time_scale="1")
    with pytest.raises(SelectionError, match=r"^--selection-pool 3: the pool is drawn before the round's 4 "
                                             r"participants are picked from it \(--clients-per-round 0.5\), so give 4"):
        resolve(replace(pooled, selection_pool=3), ["mst"], host)
    assert resolve(replace(pooled, selection_pool=4), ["mst"], host)[0].config.selection_pool == 4


def test_models_left_out_sit_the_round_out_and_say_why() -> None:
    task = Task("t", "0", ("1", "2", "3"), 1_000)
    (rt,) = remaining_tasks(NSFNET, [task], selected={"t": (0, 2)})
    assert rt.models == (0, 2) and rt.task.local_nodes == ("1", "3") and rt.dropped == {1: NOT_SELECTED}


def test_loss_takes_the_highest_last_losses_of_its_pool_and_tries_the_untrained_first() -> None:
    """Power-of-choice: a seeded pool (here all eight), then the M whose last reported loss is
    highest; one that has never trained counts highest. With the default pool (1.5 M), the pool
    and so the pick change from round to round."""
    losses = {i: 0.1 * i for i in range(8)}
    assert select("loss", replace(_context(4), losses=losses, pool=8)) == (4, 5, 6, 7)
    assert select("loss", replace(_context(4), losses={i: 0.1 * i for i in range(8) if i != 2}, pool=8)) == (2, 5, 6, 7)
    picks = {select("loss", replace(_context(4, r), losses=losses)) for r in range(1, 11)}
    assert len(picks) > 1 and all(len(p) == 4 for p in picks)  # a pool of six, seeded per round


def test_network_turns_over_its_pool_yet_costs_no_more_than_random_on_average() -> None:
    """Two of eight a round: a fresh pool of three each round, so the participants change, and the
    cheapest two of the pool cost at most what random pairs do, on average."""
    picks = [select("network", _context(2, r)) for r in range(1, 21)]
    assert len(set(picks)) > 3 and len(set().union(*picks)) >= 5
    network = sum(_bytes(p) for p in picks) / len(picks)
    sampled = sum(_bytes(select("random", _context(2, r))) for r in range(1, 21)) / 20
    assert network <= sampled
