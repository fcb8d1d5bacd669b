"""Admission order (pure): fifo as listed, sjf-contention shortest job first counting contention."""

from __future__ import annotations

import networkx as nx
import pytest

from fedmst.core.ordering import job_seconds, shortest_jobs_first
from fedmst.core.schedulers import schedule
from fedmst.core.tasks import Task

M = 10_000_000


def line() -> nx.Graph:
    g = nx.path_graph(["a", "b", "c", "d"])
    nx.set_edge_attributes(g, 100.0, "capacity_mbps")
    nx.set_edge_attributes(g, 0.001, "delay_s")
    return g


def names(tasks: list[Task]) -> list[str]:
    return [t.name for t in tasks]


def order(tasks: list[Task], how: str) -> list[str]:
    if how == "fifo":
        return names(tasks)
    return names(shortest_jobs_first(line(), tasks, "mst", chunk_bytes=262144, with_delay=True))


def test_fifo_keeps_the_listed_order() -> None:
    tasks = [Task("z", "a", ("d",), M, rounds=9), Task("y", "a", ("b",), M, rounds=1)]
    assert order(tasks, "fifo") == ["z", "y"]


def test_sjf_bco_admits_the_shortest_job_first() -> None:
    tasks = [Task("long", "a", ("d",), M, rounds=5), Task("mid", "a", ("c",), M, rounds=2),
             Task("short", "a", ("b",), M, rounds=1)]
    assert order(tasks, "sjf-contention") == ["short", "mid", "long"]


def test_sjf_bco_puts_a_job_behind_one_of_its_size_that_contends_with_nothing() -> None:
    x, y, z = (Task("x", "a", ("b",), M, rounds=2), Task("y", "a", ("b",), M, rounds=2),
               Task("z", "c", ("d",), M, rounds=2))
    assert order([x, y, z], "sjf-contention") == ["x", "z", "y"]
    assert order([x, y, z], "fifo") == ["x", "y", "z"]


def test_contention_lengthens_a_job_by_the_load_on_its_busiest_link() -> None:
    g = line()
    x, y = Task("x", "a", ("b",), M, rounds=1), Task("y", "a", ("b",), M, rounds=1)
    px, py = schedule(g, x, "mst"), schedule(g, y, "mst")
    alone = job_seconds(py, [], g, chunk_bytes=262144, with_delay=True)
    shared = job_seconds(py, [px], g, chunk_bytes=262144, with_delay=True)
    assert shared - alone == pytest.approx(2 * M * 8 / 100e6, rel=0.05)  # x's broadcast and upload to wait out


def test_an_unknown_order_is_refused_by_the_option_schema() -> None:
    from fedmst.errors import FedmstError
    from fedmst.run.config import RunConfig, validate

    with pytest.raises(FedmstError, match="--order lifo: choose one of fifo, sjf-contention"):
        validate(RunConfig(order="lifo"))
