"""Topologies: load a network from a file, a shipped name or a topohub key, and check it.

Every loader returns the same plain :class:`networkx.Graph`, so the schedulers and the
emulator never care where a topology came from: node names are ``str``,
``graph.graph["name"]`` and ``graph.graph["source"]`` say what it is and where it came from,
and every edge carries ``capacity_mbps`` (float > 0), ``delay_s`` (float >= 0) and
``length_km`` (float or None).

fedmst's own JSON format::

    {"name": "nsfnet", "description": "...", "capacity_mbps": 100, "nodes": ["0", "1", ...],
     "links": [{"a": "0", "b": "1", "km": 2100},
               {"a": "1", "b": "2", "km": 1200, "capacity_mbps": 50},
               {"a": "2", "b": "3", "delay_ms": 1.5}]}

- ``name`` defaults to the file's stem; ``description`` is free text and ignored.
- A link's ``capacity_mbps`` wins over the top-level ``capacity_mbps``, which wins over the
  ``default_capacity_mbps`` argument; a link with none of the three is an error.
- A link's delay is ``delay_ms`` if given, else ``km`` times :data:`PROPAGATION_S_PER_KM`,
  else 0. ``km`` is kept as ``length_km`` either way.
- ``nodes`` is optional: without it the nodes are those the links name; with it, a link
  naming any other node is an error. Node ids may be JSON strings or integers, or objects
  ``{"id": "0", "slots": 4}`` declaring the node's compute (:mod:`fedmst.core.cluster.slots`:
  slots are what ``fedmst cluster`` places jobs' models on; 0 makes a pure network node), or
  ``{"id": "0", "gpus": 8}``, the same slots said to be GPUs (a GPU cluster as its papers describe it), or
  ``{"id": "0", "optical": true}`` making it all-optical (:func:`optical_nodes`: no compute, so
  declaring slots above 0 on it is an error).
- Unknown keys are errors, so a misspelt ``capacity_mbps`` cannot silently fall back to
  the default.

GraphML files are read with the same rules: edge attributes ``capacity_mbps`` (or
``capacity``), ``km`` (or ``length_km``, ``dist``) and ``delay_ms``, node attributes ``slots``
(or ``gpus``) and ``optical``.

``spine-leaf:SPINES,LEAVES[,HOSTS_PER_LEAF][,KEY=VALUE...]`` builds a spine-leaf fabric
(:func:`spine_leaf`) instead of reading one.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import networkx as nx

from fedmst.errors import TopologyError

PROPAGATION_S_PER_KM = 5e-6
"""Light in fibre covers about 200,000 km/s."""

TOPOHUB_DEFAULT_CAPACITY_MBPS = 100.0
"""topohub graphs carry no capacities; links get this unless ``default_capacity_mbps`` is given."""

SHIPPED_DIR = Path(__file__).resolve().parents[2] / "topologies"
TOPOLOGY_PATH_ENV = "FEDMST_TOPOLOGY_PATH"
"""Colon-separated extra directories of ``NAME.json`` files; they shadow the shipped ones."""

_TOP_KEYS = {"name", "description", "capacity_mbps", "nodes", "links"}
_LINK_KEYS = {"a", "b", "km", "delay_ms", "capacity_mbps"}
_NODE_KEYS = {"id", "slots", "gpus", "optical"}

SPINE_LEAF = "spine-leaf:"
SPINE_LEAF_FORM = "spine-leaf:SPINES,LEAVES[,HOSTS_PER_LEAF][,mbps=M][,km=K][,host-mbps=M][,host-km=K]"
SPINE_LEAF_DEFAULTS = {"mbps": 10_000.0, "km": 2.0}
"""A spine-leaf link's capacity (10 Gbit/s, a data-centre fabric's) and length (2 km, a campus or
metro building's span); a host's link to its leaf takes the same unless ``host-mbps``/``host-km`` say."""


def node_order(node: str) -> tuple[int, int | str]:
    """Sort key for node names: numeric names numerically, then the others alphabetically.

    >>> sorted(["10", "b", "2", "a"], key=node_order)
    ['2', '10', 'a', 'b']
    """
    return (0, int(node)) if node.isdigit() else (1, node)


def link_name(u: str, v: str) -> str:
    """How files and the console name the link between ``u`` and ``v`` (links.csv's ``link``, a
    fibre in summary.json): its ends in node order, joined by ``-``.

    >>> link_name("10", "2"), link_name("s1", "l0")
    ('2-10', 'l0-s1')
    """
    return "-".join(sorted((u, v), key=node_order))


def optical_nodes(graph: nx.Graph) -> frozenset[str]:
    """The nodes light passes through (node attribute ``optical``): all-optical switches that buffer,
    relay, aggregate and compute nothing, so no plan may start, end or sum a transfer there.

    >>> g = nx.Graph(); g.add_edge("l0", "s0"); g.add_edge("s0", "l1"); g.nodes["s0"]["optical"] = True
    >>> sorted(optical_nodes(g))
    ['s0']
    """
    return frozenset(n for n, optical in graph.nodes(data="optical", default=False) if optical)


def available_topologies() -> list[str]:
    """Names ``load_topology`` accepts as bare names (shipped and on FEDMST_TOPOLOGY_PATH)."""
    return sorted(_named_files())


def load_topology(name_or_path: str, *, default_capacity_mbps: float | None = None) -> nx.Graph:
    """Load a file (``.json`` or ``.graphml``), a shipped name, or a topohub key.

    >>> g = load_topology("line3")
    >>> sorted(g.nodes), g.edges["a", "b"]
    (['a', 'b', 'c'], {'capacity_mbps': 50.0, 'delay_s': 0.0005, 'length_km': 100.0})
    """
    path = Path(name_or_path)
    if path.is_file():
        return _load_file(path, default_capacity_mbps)
    named = _named_files()
    if name_or_path in named:
        return _load_file(named[name_or_path], default_capacity_mbps)
    if name_or_path.startswith(SPINE_LEAF):
        return spine_leaf(name_or_path)
    spec = _topohub_spec(name_or_path) if "/" in name_or_path else None
    if spec is not None:
        if default_capacity_mbps is None:
            default_capacity_mbps = TOPOHUB_DEFAULT_CAPACITY_MBPS
        return _from_spec(spec, name_or_path, default_capacity_mbps)
    raise TopologyError(
        f"unknown topology {name_or_path!r}: not a file, not one of "
        f"{', '.join(named) or '(none shipped)'}, not a topohub key (e.g. sndlib/polska), "
        f"not a {SPINE_LEAF_FORM} fabric"
    )


def spine_leaf(spec: str) -> nx.Graph:
    """The fabric ``spec`` names: all-optical spines ``s0..`` (light passes through them; no slots),
    electrical leaves ``l0..``, every spine linked to every leaf, and ``HOSTS_PER_LEAF`` hosts
    ``h<leaf>_<i>`` under each leaf (the underscore keeps ``A-B`` link names unambiguous).

    >>> g = spine_leaf("spine-leaf:2,3,1,km=1")
    >>> len(g), g.number_of_edges(), sorted(optical_nodes(g)), g.edges["s0", "l2"]["delay_s"]
    (8, 9, ['s0', 's1'], 5e-06)
    """
    spines, leaves, hosts, values = _spine_leaf_parts(spec)
    fabric = {"capacity_mbps": values["mbps"], "km": values["km"]}
    host = {"capacity_mbps": values.get("host-mbps", values["mbps"]), "km": values.get("host-km", values["km"])}
    host_names = {leaf: [f"h{leaf}_{i}" for i in range(hosts)] for leaf in range(leaves)}
    links = [{"a": f"s{s}", "b": f"l{leaf}", **fabric} for s in range(spines) for leaf in range(leaves)]
    links += [{"a": f"l{leaf}", "b": h, **host} for leaf, names in host_names.items() for h in names]
    nodes = [*({"id": f"s{s}", "optical": True, "slots": 0} for s in range(spines)),
             *(f"l{leaf}" for leaf in range(leaves)), *(h for names in host_names.values() for h in names)]
    return _from_spec({"name": spec, "nodes": nodes, "links": links}, spec, None)


def _spine_leaf_parts(spec: str) -> tuple[int, int, int, dict[str, float]]:
    """SPINES, LEAVES, HOSTS_PER_LEAF and the link options of a ``spine-leaf:`` spec, each checked."""
    def refuse(fault: str) -> TopologyError:
        return _error(spec, f"{fault}; expected {SPINE_LEAF_FORM}")

    parts = spec[len(SPINE_LEAF):].split(",")
    counts = [p.strip() for p in parts if "=" not in p]
    if not 2 <= len(counts) <= 3 or any(not (c.isascii() and c.isdigit()) for c in counts):
        raise refuse(f"{', '.join(counts) or 'nothing'} is not 2 or 3 whole numbers")
    spines, leaves, hosts = (*map(int, counts), 0)[:3]
    if spines < 1 or leaves < 2:
        raise refuse(f"SPINES {spines}, LEAVES {leaves}: give at least 1 spine and 2 leaves")
    values = dict(SPINE_LEAF_DEFAULTS)
    for part in (p for p in parts if "=" in p):
        key, _, text = (x.strip() for x in part.partition("="))
        if key not in ("mbps", "km", "host-mbps", "host-km"):
            raise refuse(f"unknown key {key!r}")
        try:
            value = float(text)
        except ValueError:
            raise refuse(f"{key}={text} is not a number") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and key.endswith("mbps")):
            noun = "a finite positive number" if key.endswith("mbps") else "a finite number, 0 or more"
            raise refuse(f"{key}={text} is not {noun}")
        values[key] = value
    return spines, leaves, hosts, values


def validate_topology(graph: nx.Graph, source: str) -> nx.Graph:
    """Check ``graph`` is a usable topology and return it with float link parameters.

    Catches what would otherwise surface mid-emulation: links that cannot carry traffic,
    negative delays, and nodes no schedule can reach.
    """
    if graph.is_directed() or graph.is_multigraph():
        raise _error(source, "topology must be an undirected graph without parallel links")
    for node in graph:
        if not isinstance(node, str):
            raise _error(source, f"node {node!r} is not a string")
    if len(graph) < 2:
        raise _error(source, f"{len(graph)} node(s); a topology needs at least 2")
    for a, b, data in graph.edges(data=True):
        where = f"link {a}-{b}"
        if a == b:
            raise _error(source, f"{where}: self-loop")
        data["capacity_mbps"] = _quantity(
            source, where, "capacity", data.get("capacity_mbps"), "Mbit/s", positive=True
        )
        data["delay_s"] = _quantity(source, where, "delay", data.get("delay_s"), "s")
        if data.get("length_km") is not None:
            data["length_km"] = _quantity(source, where, "length", data["length_km"], "km")
        else:
            data["length_km"] = None
    _check_optical(graph, source)
    components = list(nx.connected_components(graph))
    if len(components) > 1:
        first = next(iter(graph))
        stray = next(n for c in components if first not in c for n in sorted(c))
        raise _error(
            source,
            f"disconnected: {len(components)} components; node {stray!r} cannot reach "
            f"node {first!r}",
        )
    graph.graph.setdefault("name", source)
    graph.graph.setdefault("source", source)
    return graph


def _check_optical(graph: nx.Graph, source: str) -> None:
    """Refuse compute on an all-optical node, and a network with too few electrical nodes to hold
    G and a local model apart."""
    optical = optical_nodes(graph)
    for node in sorted(optical, key=node_order):
        if graph.nodes[node].get("slots", 0):
            raise _error(source, f"node {node} is all-optical (light passes through it) but declares "
                                 f"{graph.nodes[node]['slots']} slot(s): give it none")
    if len(graph) - len(optical) < 2:
        raise _error(source, f"{len(graph) - len(optical)} node(s) not optical; a topology needs at least 2 "
                             "to hold G and a local model")


def _error(source: str, fault: object) -> TopologyError:
    """One-line error naming the source; parser messages may span lines."""
    return TopologyError(f"{source}: " + " ".join(str(fault).split("\n")))


def _quantity(
    source: str, where: str, what: str, value: object, unit: str, *, positive: bool = False
) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _error(source, f"{where}: {what} {value!r} is not a finite number")
    if value < 0 or (positive and value == 0):
        problem = "not positive" if positive else "negative"
        raise _error(source, f"{where}: {what} {value:g} {unit} is {problem}")
    return float(value)


def _named_files() -> dict[str, Path]:
    dirs = [Path(d) for d in os.environ.get(TOPOLOGY_PATH_ENV, "").split(":") if d]
    found: dict[str, Path] = {}
    for directory in reversed([*dirs, SHIPPED_DIR]):  # earlier directories win
        found.update((f.stem, f) for f in directory.glob("*.json"))
    return dict(sorted(found.items()))


def _load_file(path: Path, default_capacity_mbps: float | None) -> nx.Graph:
    source = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise _error(source, f"cannot read: {exc.strerror or exc}") from exc
    if path.suffix == ".json":
        try:
            spec = json.loads(raw)
        except ValueError as exc:
            raise _error(source, f"malformed JSON: {exc}") from exc
        if isinstance(spec, dict):
            spec.setdefault("name", path.stem)
    elif path.suffix == ".graphml":
        try:
            g = nx.parse_graphml(raw)
        except (SyntaxError, ValueError, KeyError, nx.NetworkXError) as exc:
            raise _error(source, f"malformed GraphML: {exc}") from exc
        spec = _graphml_spec(g, path.stem)
    else:
        raise _error(source, f"unsupported file type {path.suffix!r} (expected .json or .graphml)")
    return _from_spec(spec, source, default_capacity_mbps)


def _graphml_spec(g: nx.Graph, stem: str) -> dict[str, Any]:
    """Translate GraphML attribute names into the fedmst JSON format."""

    def first(data: dict[str, Any], *keys: str) -> Any:
        return next((data[k] for k in keys if k in data), None)

    links = [
        {
            "a": a,
            "b": b,
            "capacity_mbps": first(data, "capacity_mbps", "capacity"),
            "km": first(data, "km", "length_km", "dist"),
            "delay_ms": data.get("delay_ms"),
        }
        for a, b, data in g.edges(data=True)
    ]
    name = g.graph.get("name") or stem
    nodes = [{"id": n, **{k: g.nodes[n][k] for k in ("slots", "gpus", "optical") if k in g.nodes[n]}} for n in g]
    return {"name": str(name), "nodes": nodes, "links": _drop_none(links)}


def _topohub_spec(key: str) -> dict[str, Any] | None:
    """The fedmst spec of a topohub topology, or None if ``key`` is not one."""
    try:
        import topohub
    except ImportError:
        return None
    try:
        g = nx.node_link_graph(topohub.get(key), edges="edges")
    except KeyError:
        return None
    names = [g.nodes[n].get("name") for n in g]
    unique = all(isinstance(n, str) and n for n in names) and len(set(names)) == len(names)
    label = dict(zip(g, names)) if unique else {n: str(n) for n in g}
    links = [{"a": label[a], "b": label[b], "km": d.get("dist")} for a, b, d in g.edges(data=True)]
    return {"name": key, "nodes": list(label.values()), "links": _drop_none(links)}


def _drop_none(links: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in link.items() if v is not None} for link in links]


def _node_id(source: str, where: str, value: object) -> str:
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return str(value)
    raise _error(source, f"{where}: node id {value!r} is not a string or integer")


def _node(source: str, value: object) -> tuple[str, dict[str, int | bool]]:
    """A ``nodes`` entry: its id, and its ``slots`` (a whole number, 0 or more; or ``gpus``, which
    are its slots and say what they are) and ``optical`` (true or false) where it declares them."""
    if not isinstance(value, dict):
        return _node_id(source, "nodes", value), {}
    if unknown := sorted(set(value) - _NODE_KEYS):
        raise _error(source, f"nodes: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_NODE_KEYS))}")
    if "id" not in value:
        raise _error(source, f"nodes: {value!r} has no 'id'")
    node = _node_id(source, "nodes", value["id"])
    attributes: dict[str, int | bool] = {}
    if "optical" in value:
        if not isinstance(value["optical"], bool):
            raise _error(source, f"node {node}: optical {value['optical']!r} is not true or false")
        attributes["optical"] = value["optical"]
    if "slots" in value and "gpus" in value:
        raise _error(source, f"node {node}: give slots or gpus, not both (gpus are its slots)")
    key = "gpus" if "gpus" in value else "slots"
    if key not in value:
        return node, attributes
    slots = value[key]
    if isinstance(slots, float) and slots.is_integer():
        slots = int(slots)  # GraphML may type it as a double
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 0:
        raise _error(source, f"node {node}: {key} {slots!r} is not a whole number of 0 or more")
    return node, {**attributes, "slots": slots, **({"gpus": slots} if key == "gpus" else {})}


def _from_spec(spec: object, source: str, default_capacity_mbps: float | None) -> nx.Graph:
    """Build and validate a graph from the fedmst JSON format (already parsed)."""
    if not isinstance(spec, dict):
        raise _error(source, "top level must be a JSON object")
    if unknown := sorted(set(spec) - _TOP_KEYS):
        raise _error(
            source,
            f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_TOP_KEYS))}",
        )
    if "links" not in spec:
        raise _error(source, "missing 'links'")
    if not isinstance(spec["links"], list):
        raise _error(source, "'links' must be a list")
    for key in ("name", "description"):
        if not isinstance(spec.get(key, ""), str):
            raise _error(source, f"'{key}' must be a string")
    if "capacity_mbps" in spec:
        default_capacity_mbps = _quantity(
            source, "top level", "capacity", spec["capacity_mbps"], "Mbit/s", positive=True
        )
    graph = nx.Graph(name=spec.get("name", source), source=source)
    nodes = spec.get("nodes")
    if nodes is not None:
        if not isinstance(nodes, list):
            raise _error(source, "'nodes' must be a list")
        graph.add_nodes_from(_node(source, n) for n in nodes)
    for i, link in enumerate(spec["links"]):
        if not isinstance(link, dict):
            raise _error(source, f"links[{i}]: not an object")
        if unknown := sorted(set(link) - _LINK_KEYS):
            raise _error(
                source,
                f"links[{i}]: unknown key(s) {', '.join(unknown)}; "
                f"allowed: {', '.join(sorted(_LINK_KEYS))}",
            )
        for end in ("a", "b"):
            if link.get(end) is None:
                raise _error(source, f"links[{i}]: missing '{end}'")
        a, b = (_node_id(source, f"links[{i}]", link[end]) for end in ("a", "b"))
        where = f"link {a}-{b}"
        for node in (a, b):
            if nodes is not None and node not in graph:
                raise _error(source, f"{where}: unknown node {node!r} (not in 'nodes')")
        if graph.has_edge(a, b):
            raise _error(source, f"{where}: duplicate link")
        capacity = link.get("capacity_mbps", default_capacity_mbps)
        if capacity is None:
            raise _error(
                source,
                f"{where}: no capacity (set capacity_mbps on the link or the file, "
                "or pass default_capacity_mbps)",
            )
        km = link.get("km")
        if km is not None:
            km = _quantity(source, where, "length", km, "km")
        if link.get("delay_ms") is not None:
            delay_s = _quantity(source, where, "delay", link["delay_ms"], "ms") / 1000
        else:
            delay_s = (km or 0.0) * PROPAGATION_S_PER_KM
        graph.add_edge(a, b, capacity_mbps=capacity, delay_s=delay_s, length_km=km)
    return validate_topology(graph, source)
