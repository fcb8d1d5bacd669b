"""Link dynamics: a link's capacity, delay or loss changing at given times during a run.

A trace is a JSON file (``--link-trace``), one object per change, in the topology format's
link keys::

    {"changes": [{"at_s": 2.0, "a": "sl", "b": "sr", "capacity_mbps": 50},
                 {"at_s": 6.0, "a": "sl", "b": "sr", "capacity_mbps": 100, "delay_ms": 5, "loss": 0.01}]}

``at_s`` counts from the first round's start; each change sets what it names on both directions
of link a-b and leaves the rest as it was. :func:`graph_at` gives the network as it stands at a
time, so that predictions of later phases follow the changes.

>>> import networkx as nx
>>> g = nx.Graph()
>>> g.add_edge("a", "b", capacity_mbps=100.0, delay_s=0.001)
>>> changes = (LinkChange(2.0, ("a", "b"), capacity_mbps=50.0),)
>>> [graph_at(g, changes, t).edges["a", "b"]["capacity_mbps"] for t in (1.0, 2.5)]
[100.0, 50.0]
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import networkx as nx

from fedmst.core.jsonfile import read_entries
from fedmst.errors import FedmstError

_KEYS = {"at_s", "a", "b", "capacity_mbps", "delay_ms", "loss"}


@dataclass(frozen=True)
class LinkChange:
    """At ``at_s`` seconds, link ``link`` takes the values given (None: unchanged)."""

    at_s: float
    link: tuple[str, str]
    capacity_mbps: float | None = None
    delay_ms: float | None = None
    loss: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {"at_s": self.at_s, "a": self.link[0], "b": self.link[1],
                **{k: v for k, v in (("capacity_mbps", self.capacity_mbps), ("delay_ms", self.delay_ms),
                                     ("loss", self.loss)) if v is not None}}


def read_link_trace(path: str | Path, graph: nx.Graph) -> tuple[LinkChange, ...]:
    """The changes of a trace file, checked against ``graph`` and sorted by time."""
    where = f"--link-trace {path}"
    changes = read_entries(path, where, "changes")
    return tuple(sorted((_change(where, i, c, graph) for i, c in enumerate(changes)), key=lambda c: c.at_s))


def _change(where: str, i: int, entry: Any, graph: nx.Graph) -> LinkChange:
    label = f"{where}: change {i}"
    if not isinstance(entry, dict) or not {"at_s", "a", "b"} <= set(entry) or set(entry) - _KEYS:
        raise FedmstError(f"{label}: give at_s, a, b and any of capacity_mbps, delay_ms, loss")
    numbers = {k: entry.get(k) for k in ("at_s", "capacity_mbps", "delay_ms", "loss")}
    for key, value in numbers.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise FedmstError(f"{label}: {key} = {value!r} is not a number")
    u, v = str(entry["a"]), str(entry["b"])
    if not graph.has_edge(u, v):
        raise FedmstError(f"{label}: {u}-{v} is not a link of topology {graph.graph.get('name', '?')!r}")
    if not numbers["at_s"] >= 0:
        raise FedmstError(f"{label}: at_s {numbers['at_s']}: give 0 or more seconds")
    if numbers["capacity_mbps"] is not None and not numbers["capacity_mbps"] > 0:
        raise FedmstError(f"{label}: capacity_mbps {numbers['capacity_mbps']}: give a positive capacity")
    if numbers["delay_ms"] is not None and not numbers["delay_ms"] >= 0:
        raise FedmstError(f"{label}: delay_ms {numbers['delay_ms']}: give 0 or more milliseconds")
    if numbers["loss"] is not None and not 0 <= numbers["loss"] < 1:
        raise FedmstError(f"{label}: loss {numbers['loss']}: give a probability in [0, 1)")
    if all(numbers[k] is None for k in ("capacity_mbps", "delay_ms", "loss")):
        raise FedmstError(f"{label}: changes nothing (give capacity_mbps, delay_ms or loss)")
    return LinkChange(float(numbers["at_s"]), (u, v), *(None if numbers[k] is None else float(numbers[k])
                                                        for k in ("capacity_mbps", "delay_ms", "loss")))


def graph_at(graph: nx.Graph, changes: Sequence[LinkChange], t: float) -> nx.Graph:
    """``graph`` with every change made at or before ``t`` applied (``graph`` itself without any)."""
    due = [c for c in changes if c.at_s <= t]
    if not due:
        return graph
    out = graph.copy()
    for c in due:
        attrs = out.edges[c.link]
        if c.capacity_mbps is not None:
            attrs["capacity_mbps"] = c.capacity_mbps
        if c.delay_ms is not None:
            attrs["delay_s"] = c.delay_ms / 1e3
        if c.loss is not None:
            attrs["loss"] = c.loss
    return out


__all__ = ["LinkChange", "graph_at", "read_link_trace"]
