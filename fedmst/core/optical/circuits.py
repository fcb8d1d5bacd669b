"""Optical circuits (OCS) that carry what they hold: which links are fibres, the spectrum a workload
is admitted on, and the network a plan on circuits is predicted on (who gets which wavelength is
:mod:`fedmst.core.optical.policies`').

A *fibre* is a link with at least one all-optical end (:func:`fibres`; on a spine-leaf fabric,
every spine-leaf link). On a fabric each fibre carries ``--ocs-wavelengths`` W wavelengths, and an
OCS lightpath holds one of them end to end along a stretch of fibres (continuity, first fit,
blocking: :func:`~fedmst.core.optical.wavelengths.admit`) for as long as its task runs, at the
fibre's capacity / W. The data plane gives it exactly that rate (:mod:`fedmst.net.circuits`), the
prediction reads it (:func:`circuit_view`), and its set-up (``--reconfig-ms``) is paid before its
first transfer. Where no node is all-optical nothing is a fibre in this sense: every link keeps
the wavelength accounting it always had, reported beside the run, and the links carry their full
capacity.

A blocked task (a stretch finds no wavelength) is not run, as the accounting always did: it is
reported per task, never an error, and its transfers do not ride the fibres unreserved.

>>> g = nx.Graph()
>>> g.add_edges_from([("l0", "s"), ("s", "l1")], capacity_mbps=100.0)
>>> g.add_edge("h", "l0", capacity_mbps=100.0)
>>> g.nodes["s"]["optical"] = True
>>> sorted(map(sorted, fibres(g)))
[['l0', 's'], ['l1', 's']]
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Iterable, Mapping, Sequence

import networkx as nx

from fedmst.core.optical.slots import DEFAULT_FRAME, Frame
from fedmst.core.optical.wavelengths import Lightpath, Link, Spectrum, link
from fedmst.core.wire import ETH_HEADER
from fedmst.core.topology import link_name, node_order, optical_nodes


def fibres(graph: nx.Graph) -> frozenset[Link]:
    """The links with an all-optical end: empty where no node is all-optical."""
    optical = optical_nodes(graph)
    return frozenset(link(u, v) for u, v in graph.edges if u in optical or v in optical)


def spectrum_for(graph: nx.Graph, wavelengths: int, wavelength_mbps: float | None = None, *, ots: int = 0,
                 frame: Frame = DEFAULT_FRAME, mtu: int | None = None) -> Spectrum:
    """The wavelengths a workload is admitted on: every fibre's on a fabric (``wavelengths`` circuit
    and ``ots`` time-sliced ones, whose slots carry whole packets of ``mtu``), every link's elsewhere
    (circuits only: time slices need a fabric)."""
    held = fibres(graph)
    if not held:
        return Spectrum(graph, wavelengths, wavelength_mbps=wavelength_mbps)
    return Spectrum(graph.edge_subgraph(tuple(e) for e in held), wavelengths, wavelength_mbps=wavelength_mbps,
                    ots=ots, frame=frame, frame_bytes=None if mtu is None else mtu + ETH_HEADER)


def circuit_view(graph: nx.Graph, circuits: tuple[Lightpath, ...]) -> nx.Graph:
    """``graph`` as transfers on ``circuits`` see it: every fibre they hold as fast as the
    wavelengths held on it together (a transfer on its own circuit then goes at its wavelength's
    rate); ``graph`` itself where nothing is a fibre.

    >>> g = nx.path_graph(["l0", "s", "l1"]); g.nodes["s"]["optical"] = True
    >>> nx.set_edge_attributes(g, 100.0, "capacity_mbps")
    >>> lp = Lightpath("t", ("l0", "s", "l1"), 0, (25.0, 25.0))
    >>> circuit_view(g, (lp,)).edges["l0", "s"]["capacity_mbps"]
    25.0
    """
    held = fibres(graph)
    if not held:
        return graph
    rate: dict[Link, float] = {}
    for lp in circuits:
        for (u, v), mbps in zip(zip(lp.path, lp.path[1:]), lp.held_mbps):
            rate[link(u, v)] = rate.get(link(u, v), 0.0) + mbps
    view = graph.copy()
    for e, mbps in rate.items():
        u, v = tuple(e)
        view.edges[u, v]["capacity_mbps"] = mbps
    return view


def planned_view(graph: nx.Graph, lightpaths: Sequence[Lightpath], task: str | None = None) -> nx.Graph:
    """``graph`` as a plan's circuits carry it, for every prediction made before the run (the
    plans' profiles, cassini's offsets, fault strike checks, the time scale, the independent
    clock's timeline): :func:`circuit_view` of the ``lightpaths`` the plan holds, or of ``task``'s
    only (its transfers alone on its own wavelengths); ``graph`` itself where nothing is a fibre."""
    return circuit_view(graph, tuple(lp for lp in lightpaths if task is None or lp.task == task))


def fibre_refusal(graph: nx.Graph, *, trace: str | None = None, changed: Sequence[tuple[str, str]] = (),
                  ecn: str | None = None) -> str | None:
    """Why a run on ``graph`` cannot do what it asks of its fibres, in one line, or None: a
    ``--link-trace`` (file ``trace``) changing a fibre (``changed``: the links it changes), whose
    circuits' classes a trace does not reach, or ECN marking (``ecn``: what asked for it), whose
    markers are compiled for a fibre's full capacity while its circuits drain at capacity / W."""
    held = fibres(graph)
    if not held:
        return None
    for u, v in changed:
        if link(u, v) in held:
            return (f"--link-trace {trace}: link {u}-{v} is a fibre whose circuits' classes a trace cannot "
                    "change yet")
    if ecn:
        return (f"{ecn}: ECN marking is compiled for a fibre's full capacity while its circuits drain at "
                "capacity / --ocs-wavelengths, so no circuit would be marked; leave ECN off on a fabric")
    return None


CircuitPlan = tuple[int, tuple[Lightpath, ...]]
"""One plan's circuits and the round from which they hold (the first plan's from round 1, a re-plan's
from the round of the first transfer phase that ran on them)."""

OPTICAL_FIELDS = ("task", "transfer", "path", "kind", "wavelength", "timeslots", "reserved_mbps", "measured_mbps",
                  "setup_ms", "from_round", "blocked")
"""optical.csv's columns: one row per lightpath of each plan (``timeslots``: the slots of every frame a
time-sliced one holds, ``;``-separated; ``measured_mbps``: :func:`measured_rates`, blank where it
cannot be told), and one per blocked task (its reason in ``blocked``)."""


def measured_rates(lightpaths: Sequence[Lightpath], samples: Sequence[Mapping[str, object]]) -> dict[Lightpath, float]:
    """Each lightpath's measured rate (Mbit/s, the network's), where it enters the fibre in a
    direction no other of ``lightpaths`` takes: the mean, over the intervals of ``samples``
    (samples.csv's rows: cumulative bytes per link direction, every 0.1 s of a phase) in which it
    sent all along (bytes in the intervals before and after too), of its rate; intervals under a
    tenth of what it holds are its ACKs, not its transfers. A lightpath whose transfers are too
    short for three intervals, or that shares its entries, gets none.

    >>> lp = Lightpath("t", ("l0", "s", "l1"), 0, (20.0, 20.0))
    >>> rows = [{"t_s": i / 10, "round": 1, "phase": "broadcast", "src": "l0", "dst": "s", "bytes": b}
    ...         for i, b in enumerate([0, 250_000, 500_000, 750_000, 1_000_000, 1_000_000])]
    >>> measured_rates([lp], rows)[lp]
    20.0
    """
    entries: dict[tuple[str, str], list[Lightpath]] = {}
    for lp in lightpaths:
        for entry in ((lp.path[0], lp.path[1]), (lp.path[-1], lp.path[-2])):
            entries.setdefault(entry, []).append(lp)
    series: dict[tuple[str, str, object, object], list[tuple[float, int]]] = {}
    for row in samples:
        hop = (str(row["src"]), str(row["dst"]))
        if len(entries.get(hop, ())) == 1:
            series.setdefault((*hop, row["round"], row["phase"]), []).append((float(row["t_s"]), int(row["bytes"])))
    found: dict[Lightpath, list[float]] = {}
    for (u, v, _, _), points in series.items():
        (lp,) = entries[(u, v)]
        least = 0.1 * min(lp.held_mbps)
        rates = [(b1 - b0) * 8 / (t1 - t0) / 1e6 for (t0, b0), (t1, b1) in zip(points, points[1:]) if t1 > t0]
        found.setdefault(lp, []).extend(r for before, r, after in zip(rates, rates[1:], rates[2:])
                                        if min(before, r, after) > least)
    return {lp: round(sum(rs) / len(rs), 3) for lp, rs in found.items() if rs}


def optical_rows(plans: Sequence[CircuitPlan], blocked: tuple[tuple[str, str], ...],
                 setup_ms: float, measured: Mapping[Lightpath, float] | None = None) -> list[dict[str, object]]:
    """optical.csv's rows (:data:`OPTICAL_FIELDS`): every plan's circuits; ``reserved_mbps`` is the
    wavelength's rate on its narrowest fibre, in the network's terms, ``measured_mbps`` what
    ``measured`` says of it, and a circuit the plan before already held costs no set-up
    (``setup_ms`` 0)."""
    rows: list[dict[str, object]] = []
    before: frozenset[Lightpath] = frozenset()
    for from_round, circuits in plans:
        rows += [{"task": lp.task, "transfer": "-".join(lp.owner[1]), "path": "-".join(lp.path),
                  "kind": lp.kind, "wavelength": lp.wavelength,
                  "timeslots": ";".join(map(str, lp.slots)), "reserved_mbps": min(lp.held_mbps),
                  "measured_mbps": (measured or {}).get(lp, ""),
                  "setup_ms": 0.0 if lp in before else setup_ms, "from_round": from_round, "blocked": ""}
                 for lp in circuits]
        before = frozenset(circuits)
    rows += [dict.fromkeys(OPTICAL_FIELDS, "") | {"task": name, "from_round": 1, "blocked": reason}
             for name, reason in blocked]
    return rows


def wavelengths_held(lightpaths: Iterable[Lightpath]) -> dict[str, int]:
    """How many wavelengths ``lightpaths`` hold on each fibre (``u-v``, ends in node order; a
    time-sliced wavelength counts once however many share it).

    >>> wavelengths_held([Lightpath("t", ("l0", "s", "l1"), 0, (1.0, 1.0)), Lightpath("u", ("l0", "s"), 2, (1.0,))])
    {'l0-s': 2, 'l1-s': 1}
    """
    held: dict[str, set[int]] = {}
    for lp in lightpaths:
        for u, v in zip(lp.path, lp.path[1:]):
            held.setdefault(link_name(u, v), set()).add(lp.wavelength)
    return {name: len(wavelengths) for name, wavelengths in held.items()}


def optical_summary(graph: nx.Graph, plans: Sequence[CircuitPlan], blocking_ratio: float, *, policy: str,
                    wavelengths: int, reconfig_ms: float, ots: int = 0, frame: Frame = DEFAULT_FRAME,
                    slots_outside: float | None = None) -> dict[str, object]:
    """summary.json's ``optical``: the all-optical nodes, the policy and its terms, how many circuit
    ``plans`` the run held and how many lightpaths (``circuits``) it set up over them (one kept from
    one plan to the next counts once), the most wavelengths held at once on each fibre (``u-v``, ends
    sorted; a time-sliced wavelength counts once however many share it), the share of tasks
    blocked, the share of the slots of the OTS wavelengths lit on each fibre that are held (mean
    over the plans), and
    the share of the time-sliced lightpaths' bytes sent outside their slots (``slots_outside``,
    from timeslots.csv; None where none ran)."""
    used: dict[str, int] = {}
    set_up = 0
    utilisation: list[float] = []
    before: frozenset[Lightpath] = frozenset()
    for _, circuits in plans:
        held = wavelengths_held(circuits)
        used = {name: max(used.get(name, 0), held.get(name, 0)) for name in used.keys() | held.keys()}
        sliced = {(link_name(u, v), lp.wavelength) for lp in circuits if lp.slots for u, v in zip(lp.path, lp.path[1:])}
        slots = sum(len(lp.slots) * lp.wavelength_links for lp in circuits)
        if sliced:
            utilisation.append(slots / (len(sliced) * frame.timeslots))
        set_up += len(set(circuits) - before)
        before = frozenset(circuits)
    return {"optical_nodes": sorted(optical_nodes(graph), key=node_order), "policy": policy,
            "ocs_wavelengths": wavelengths, "ots_wavelengths": ots, "frame": asdict(frame),
            "reconfig_ms": reconfig_ms, "plans": len(plans), "circuits": set_up,
            "wavelengths_used": dict(sorted(used.items())), "blocking_ratio": blocking_ratio,
            "slot_utilisation": sum(utilisation) / len(utilisation) if utilisation else 0.0,
            "slots_outside_share": slots_outside}


__all__ = ["OPTICAL_FIELDS", "CircuitPlan", "circuit_view", "fibre_refusal", "fibres", "measured_rates",
           "optical_rows", "optical_summary", "planned_view", "spectrum_for", "wavelengths_held"]
