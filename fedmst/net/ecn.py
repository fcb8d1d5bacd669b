"""ECN marking at every link sender, for kernels without an ECN-marking qdisc (no red, no fq_codel).

Each link direction's sending interface gets a tc ``clsact`` egress BPF program
(``fedmst/net/cc/ecn_mark.bpf.c``) in front of its htb class: a virtual queue draining at the
link's (time-scaled) rate marks CE on ECN-capable packets that find more than K bytes queued, as
DCTCP's switches mark. The program is compiled once per distinct (rate, K) and counts what it saw,
which :func:`read` collects per link direction for ``ecn.csv``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from fedmst.net.congestion import SOURCES, compile_bpf, dump_map, program_maps

MARKER = SOURCES / "ecn_mark.bpf.c"


def longest_round_trip_s(graph: nx.Graph) -> float:
    """Twice the longest least-delay path between two nodes: the round trip K must cover.

    >>> longest_round_trip_s(nx.Graph([("a", "b", {"delay_s": 0.01}), ("b", "c", {"delay_s": 0.02})]))
    0.06
    """
    lengths = nx.all_pairs_dijkstra_path_length(graph, weight="delay_s")
    return 2 * max((max(d.values()) for _, d in lengths), default=0.0)


def marker(capacity_mbps: float, k_bytes: int) -> Path:
    """The marking program of a link of ``capacity_mbps`` (as emulated) and threshold ``k_bytes``."""
    return compile_bpf(MARKER, {"LINK_BYTES_PER_S": max(1, round(capacity_mbps * 1e6 / 8)), "ECN_K_BYTES": k_bytes})


def tc_commands(interface: str, program: Path) -> list[str]:
    """``tc -batch`` lines that put ``program`` on ``interface``'s egress, ahead of its qdisc."""
    return [f"qdisc add dev {interface} clsact",
            f"filter add dev {interface} egress bpf direct-action obj {program} sec tc"]


@dataclass(frozen=True)
class MarkCounts:
    """What one link direction's marker saw over the run."""

    packets: int
    """Packets offered to the link."""
    over_k: int
    """Of those, the ones that found the virtual queue above K (ECN-capable or not)."""
    marked: int
    """Of those, the ones marked CE (the ECN-capable ones)."""
    peak_backlog_bytes: int
    """The longest the virtual queue grew."""



def program_id(filters_json: str) -> int | None:
    """The BPF program id of an interface's egress filter, from ``tc -j filter show``.

    >>> program_id('[{"kind":"bpf"},{"kind":"bpf","options":{"prog":{"id":126,"name":"ecn_mark"}}}]')
    126
    >>> program_id('[]') is None
    True
    """
    for entry in json.loads(filters_json or "[]"):
        prog = entry.get("options", {}).get("prog", {})
        if prog.get("name") == "ecn_mark":
            return int(prog["id"])
    return None


def queue_map(program: int) -> int | None:
    """The id of the virtual queue's map of the marker whose program id is ``program`` (None if it is gone)."""
    map_ids = program_maps(program)
    return map_ids[0] if map_ids else None


def read(program: int) -> MarkCounts | None:
    """The counters of the marker whose program id is ``program`` (None if it is gone)."""
    map_id = queue_map(program)
    for entry in dump_map(map_id) if map_id is not None else []:
        value = entry.get("formatted", {}).get("value", {})
        if "marked" in value:
            return MarkCounts(value["packets"], value["over_k"], value["marked"], value["peak_backlog"])
    return None
