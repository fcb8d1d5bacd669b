"""Background traffic: flows that are not the FL tasks' weights but share their links.

A flow is given as ``SRC-DST:RATE[:tcp|udp][@START[-END]]`` (``--traffic``, repeatable): a
source and destination node, a rate (``20mbit``, ``500kbit``, ``1gbit``; a bare number is Mbit/s),
the protocol (UDP by default: a constant bit rate that does not back off; TCP backs off like the
weights do, paced to at most RATE) and the seconds, counted from the first round's start, during
which it runs (the whole run by default). ``--traffic-file`` holds the same as JSON, one object
per flow, for schedules and traces (:func:`read_traffic_file`). Flows follow the least-delay path.

>>> import networkx as nx
>>> g = nx.path_graph(["a", "b", "c"])
>>> parse_flow("a-c:20mbit:udp", g)
BackgroundFlow(src='a', dst='c', mbps=20.0, protocol='udp', start_s=0.0, end_s=None)
>>> parse_flow("c-a:1.5gbit:tcp@2-5", g)
BackgroundFlow(src='c', dst='a', mbps=1500.0, protocol='tcp', start_s=2.0, end_s=5.0)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx

from fedmst.core.jsonfile import read_entries
from fedmst.core.route import least_delay_paths
from fedmst.errors import FedmstError

PROTOCOLS = ("udp", "tcp")
_UNITS = {"bit": 1e-6, "kbit": 1e-3, "mbit": 1.0, "gbit": 1e3}
_RATE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmg]?bit)?$", re.IGNORECASE)


@dataclass(frozen=True)
class BackgroundFlow:
    """One background flow: ``mbps`` from ``src`` to ``dst`` over ``protocol`` between ``start_s``
    and ``end_s`` (None: until the run ends), in seconds from the first round's start."""

    src: str
    dst: str
    mbps: float
    protocol: str = "udp"
    start_s: float = 0.0
    end_s: float | None = None

    @property
    def label(self) -> str:
        until = "" if self.end_s is None else f"-{self.end_s:g}"
        return f"{self.src}-{self.dst}:{self.mbps:g}mbit:{self.protocol}@{self.start_s:g}{until}"


def parse_flow(spec: str, graph: nx.Graph) -> BackgroundFlow:
    """A ``--traffic`` value, checked against ``graph`` (see the module's docstring)."""
    usage = "give SRC-DST:RATE[:tcp|udp][@START[-END]], e.g. a-c:20mbit:udp@1-5"
    label = f"--traffic {spec}"
    body, at, when = spec.partition("@")
    parts = body.split(":")
    if len(parts) not in (2, 3):
        raise FedmstError(f"{label}: {usage}")
    ends, rate = parts[0], parts[1]
    protocol = parts[2].lower() if len(parts) == 3 else "udp"
    pairs = [(ends[:i], ends[i + 1:]) for i, ch in enumerate(ends) if ch == "-"]
    found = [(u, v) for u, v in pairs if u in graph and v in graph]
    if not found:
        raise FedmstError(f"{label}: {ends!r} is not two nodes SRC-DST of topology "
                          f"{graph.graph.get('name', '?')!r}")
    start, dash, end = when.partition("-")
    return _checked(label, graph, found[0][0], found[0][1], _mbps(label, rate), protocol,
                    _seconds(label, start) if at else 0.0, _seconds(label, end) if dash else None)


def read_traffic_file(path: str | Path, graph: nx.Graph) -> list[BackgroundFlow]:
    """Flows from a JSON file: ``{"flows": [{"src": "a", "dst": "c", "rate": "20mbit",
    "protocol": "udp", "start_s": 0, "end_s": 5}, ...]}`` (``protocol``, ``start_s`` and ``end_s``
    optional). A trace is many such flows, one per interval of constant rate."""
    where = f"--traffic-file {path}"
    out = []
    keys = {"src", "dst", "rate", "protocol", "start_s", "end_s"}
    for i, entry in enumerate(read_entries(path, where, "flows")):
        label = f"{where}: flow {i}"
        if not isinstance(entry, dict) or not {"src", "dst", "rate"} <= set(entry) or set(entry) - keys:
            raise FedmstError(f"{label}: give an object with src, dst, rate and optionally protocol, start_s, end_s")
        start, end = entry.get("start_s", 0.0), entry.get("end_s")
        for value in (start, end):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise FedmstError(f"{label}: start_s/end_s must be numbers of seconds")
        src, dst = str(entry["src"]), str(entry["dst"])
        for node in (src, dst):
            if node not in graph:
                raise FedmstError(f"{label}: node {node!r} is not in topology {graph.graph.get('name', '?')!r}")
        out.append(_checked(label, graph, src, dst, _mbps(label, str(entry["rate"])),
                            str(entry.get("protocol", "udp")).lower(), float(start),
                            None if end is None else float(end)))
    return out


def _checked(label: str, graph: nx.Graph, src: str, dst: str, mbps: float, protocol: str, start_s: float,
             end_s: float | None) -> BackgroundFlow:
    if protocol not in PROTOCOLS:
        raise FedmstError(f"{label}: protocol {protocol!r}: choose udp or tcp")
    if src == dst:
        raise FedmstError(f"{label}: source and destination are the same node {src}")
    if not nx.has_path(graph, src, dst):
        raise FedmstError(f"{label}: no path from {src} to {dst}")
    if end_s is not None and end_s <= start_s:
        raise FedmstError(f"{label}: the flow must end after it starts ({start_s:g} s), not at {end_s:g} s")
    return BackgroundFlow(src, dst, mbps, protocol, start_s, end_s)


def _mbps(label: str, rate: str) -> float:
    m = _RATE.match(rate.strip())
    if not m or float(m.group(1)) <= 0:
        raise FedmstError(f"{label}: rate {rate!r}: give a positive rate such as 20mbit, 500kbit or 1gbit")
    return float(m.group(1)) * _UNITS[(m.group(2) or "mbit").lower()]


def _seconds(label: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise FedmstError(f"{label}: {text!r} is not a number of seconds (0 or more)")
    return value


def flow_path(graph: nx.Graph, flow: BackgroundFlow) -> list[str]:
    """The least-delay path a flow follows (fewer hops among equal delays, as the schedulers' routes)."""
    return least_delay_paths(graph, flow.src)[flow.dst]


def as_json(flows: list[BackgroundFlow]) -> list[dict[str, Any]]:
    return [{"flow": f.label, "src": f.src, "dst": f.dst, "mbps": f.mbps, "protocol": f.protocol,
             "start_s": f.start_s, "end_s": f.end_s} for f in flows]


__all__ = ["BackgroundFlow", "PROTOCOLS", "flow_path", "parse_flow", "read_traffic_file"]
