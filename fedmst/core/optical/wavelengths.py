"""The optical layer under the schedulers: W wavelengths per link, lightpaths by first fit.

Pure data, no I/O. Every undirected physical link carries ``W`` wavelengths (or spectrum
slots) with indices ``0..W-1``. A *lightpath* holds one wavelength on every link of one path,
the same index end to end (wavelength continuity, no converters), and serves both directions
of it: a broadcast and the upload that comes back the same way ride one bidirectional lightpath.

First fit, the "FF" of SPFF: a path gets the lowest wavelength index free on every one of its
links; if there is none the request is blocked. Blocking is an outcome to report, not an error.

Which lightpaths a plan needs (:func:`lightpath_paths`) is read off the plan alone, the same
rule for every scheduler: one lightpath per distinct undirected transfer path of the task, on each
of its stretches of *fibre* (the links the spectrum spans). For SPFF that is one per G<->Li path
(local models that share a node share it); for MST one per overlay edge of the tree (its
broadcast and upload transfers are each other's reverse). Lightpaths are never shared between
tasks (no traffic grooming). Where no node is all-optical the spectrum spans every link, so a
stretch is the whole path; on a fabric it spans the links with an all-optical end
(:func:`fedmst.core.optical.circuits.fibres`), and the electrical node between two stretches
regenerates the signal, so continuity holds within a stretch.

Time-sliced wavelengths (OTS): a spectrum may also carry ``ots`` wavelengths (indices ``W..W+ots-1``)
cut into a :class:`~fedmst.core.optical.slots.Frame` of timeslots. An OTS lightpath holds a set of
slots of one of them on every link of its path, the same slot indices end to end (continuity in
time as in wavelength), and many lightpaths share one OTS wavelength in turn. First fit for a slot
takes the lowest OTS wavelength, then the lowest slot, free on every link.

Capacity: a wavelength on link ``u-v`` carries ``capacity_mbps / (W + ots)`` by default (the link's
capacity, which is what the emulation shapes, split into equal wavelengths), or a fixed
``wavelength_mbps`` when given. A lightpath holds that rate times its :attr:`Lightpath.share` (1 for
a circuit, its slots' share of the frame for OTS). Reserved capacity is the sum, over the
wavelength-links held, of what is held; each direction of a held wavelength has it.

>>> import networkx as nx
>>> g = nx.path_graph(["a", "b", "c"])
>>> nx.set_edge_attributes(g, 100.0, "capacity_mbps")
>>> s = Spectrum(g, 2)
>>> s.first_fit(("a", "b", "c"))
0
>>> s.reserve(("a", "b"), 0, ("t0", ("a", "b"))).reserved_mbps
50.0
>>> s.first_fit(("a", "b", "c")), s.reserved_wavelength_links(), s.reserved_capacity_mbps()
(1, 1, 50.0)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Callable, Sequence

import networkx as nx

from fedmst.core.optical.slots import DEFAULT_FRAME, Frame
from fedmst.core.plan import Plan
from fedmst.errors import SchedulerError

Path = tuple[str, ...]
Link = frozenset[str]
"""An undirected physical link ``{u, v}``."""
Owner = tuple[str, Path]
"""Who holds a lightpath: ``(task name, transfer path)``, the path as the task's first transfer on
it runs (a path with several stretches of fibre holds one lightpath on each)."""


def link(u: str, v: str) -> Link:
    return frozenset((u, v))


def _links(path: Sequence[str]) -> tuple[Link, ...]:
    return tuple(link(u, v) for u, v in pairwise(path))


def _show(path: Sequence[str]) -> str:
    return "-".join(path)


@dataclass(frozen=True)
class Lightpath:
    """One wavelength held end to end along ``path`` by task ``task``.

    ``slot_mbps`` is the capacity of that wavelength on each link of the path, in path order;
    ``serves`` the transfer path it carries (the path itself unless it is a stretch of fibre in it);
    ``slots`` the timeslots it holds of every frame where the wavelength is time-sliced (none for a
    circuit), and ``share`` the share of the wavelength's rate they carry.
    """

    task: str
    path: Path
    wavelength: int
    slot_mbps: tuple[float, ...]
    serves: Path = ()
    slots: tuple[int, ...] = ()
    share: float = 1.0

    @property
    def kind(self) -> str:
        """``ocs`` for a circuit, ``ots`` for a time-sliced lightpath."""
        return "ots" if self.slots else "ocs"

    @property
    def held_mbps(self) -> tuple[float, ...]:
        """The rate it holds on each link of its path, on average over a frame."""
        return tuple(mbps * self.share for mbps in self.slot_mbps)

    @property
    def owner(self) -> Owner:
        return (self.task, self.serves or self.path)

    @property
    def wavelength_links(self) -> int:
        return len(self.path) - 1

    @property
    def reserved_mbps(self) -> float:
        """Capacity this lightpath reserves: what it holds summed over its links."""
        return sum(self.held_mbps)


class Spectrum:
    """Which wavelength of which link is held by which lightpath (mutable allocation state)."""

    def __init__(self, graph: nx.Graph, wavelengths: int, *, wavelength_mbps: float | None = None,
                 ots: int = 0, frame: Frame = DEFAULT_FRAME, frame_bytes: int | None = None) -> None:
        for name, n, least in (("wavelengths per link", wavelengths, 0 if ots else 1), ("OTS wavelengths", ots, 0)):
            if isinstance(n, bool) or not isinstance(n, int) or n < least:
                raise SchedulerError(f"{name} must be an integer >= {least}, got {n!r}")
        if wavelength_mbps is not None and not wavelength_mbps > 0:
            raise SchedulerError(f"wavelength capacity must be > 0 Mbit/s, got {wavelength_mbps!r}")
        if ots and frame.problem():
            raise SchedulerError(frame.problem())
        self.graph = graph
        self.wavelengths = wavelengths
        """Circuit (OCS) wavelengths per link: indices ``0..wavelengths-1``."""
        self.ots = ots
        """Time-sliced wavelengths per link: indices ``wavelengths..wavelengths+ots-1``."""
        self.frame = frame
        self.frame_bytes = frame_bytes
        """The packets' size on the wire, whole ones of which a slot carries (None: its open time, as a fluid)."""
        self.wavelength_mbps = wavelength_mbps
        self._held: dict[Link, dict[int, Owner]] = {link(u, v): {} for u, v in graph.edges}
        self._slots: dict[Link, dict[tuple[int, int], Owner]] = {e: {} for e in self._held}
        """Which (OTS wavelength, slot) of each link is held, by whom."""
        self._lightpaths: dict[tuple[Owner, Path], Lightpath] = {}
        """By owner and the stretch it holds."""

    def slot_mbps(self, u: str, v: str) -> float:
        """Capacity of one wavelength on link ``u-v``."""
        if self.wavelength_mbps is not None:
            return float(self.wavelength_mbps)
        return float(self.graph.edges[u, v]["capacity_mbps"]) / (self.wavelengths + self.ots)

    def _check_path(self, path: Sequence[str]) -> tuple[Link, ...]:
        if len(path) < 2:
            raise SchedulerError(f"lightpath {_show(path)} has no link")
        for u, v in pairwise(path):
            if not self.graph.has_edge(u, v):
                raise SchedulerError(f"lightpath {_show(path)} uses missing link {u}-{v}")
        return _links(path)

    def free(self, u: str, v: str) -> tuple[int, ...]:
        """Wavelength indices still free on link ``u-v``, lowest first."""
        held = self._held[link(u, v)]
        return tuple(w for w in range(self.wavelengths) if w not in held)

    def holder(self, u: str, v: str, wavelength: int) -> Owner | None:
        """Owner of ``wavelength`` on link ``u-v``, or None if it is free."""
        return self._held[link(u, v)].get(wavelength)

    def first_fit(self, path: Sequence[str]) -> int | None:
        """Lowest wavelength free on every link of ``path``, or None (the request is blocked)."""
        links = self._check_path(path)
        for w in range(self.wavelengths):
            if all(w not in self._held[e] for e in links):
                return w
        return None

    def first_fit_slot(self, path: Sequence[str], start: int = 0) -> tuple[int, int] | None:
        """Lowest OTS wavelength, then lowest slot (counting on from slot ``start`` round the frame),
        free on every link of ``path``, or None (blocked).

        >>> g = nx.path_graph(["a", "b", "c"]); nx.set_edge_attributes(g, 100.0, "capacity_mbps")
        >>> s = Spectrum(g, 0, ots=1, frame=Frame(timeslots=2))
        >>> s.reserve(("a", "b"), 0, ("t0", ("a", "b")), slots=(0,)).share
        0.45
        >>> s.first_fit_slot(("a", "b", "c")), s.first_fit_slot(("b", "c"))
        ((0, 1), (0, 0))
        """
        links = self._check_path(path)
        for w in range(self.wavelengths, self.wavelengths + self.ots):
            for slot in self._round_frame(start):
                if all((w, slot) not in self._slots[e] for e in links):
                    return w, slot
        return None

    def _round_frame(self, start: int) -> list[int]:
        """The frame's slots counted from ``start``, round to the one before it."""
        n = self.frame.timeslots
        return [(start + i) % n for i in range(n)]

    def lend(self, lp: Lightpath) -> Lightpath | None:
        """One more slot of its own wavelength for time-sliced ``lp``: the first free on every link of
        its path counting on from the slot after its last (so its slots stay one window where they
        can); the lightpath as it now is, or None where no slot is free on all of them.

        >>> g = nx.path_graph(["a", "b", "c"]); nx.set_edge_attributes(g, 100.0, "capacity_mbps")
        >>> s = Spectrum(g, 0, ots=1, frame=Frame(timeslots=3))
        >>> lp = s.reserve(("a", "b", "c"), 0, ("t0", ("a", "b", "c")), slots=(1,))
        >>> _ = s.reserve(("b", "c"), 0, ("t1", ("b", "c")), slots=(2,))
        >>> s.lend(lp).slots, s.lend(s.lightpaths[0])
        ((0, 1), None)
        """
        key = (lp.owner, lp.path)
        if not lp.slots or self._lightpaths.get(key) != lp:
            raise SchedulerError(f"only a time-sliced lightpath the spectrum holds can be lent a slot, not "
                                 f"{lp.task!r}'s on {_show(lp.path)}")
        links = _links(lp.path)
        for slot in self._round_frame(lp.slots[-1] + 1):
            if all((lp.wavelength, slot) not in self._slots[e] for e in links):
                for e in links:
                    self._slots[e][(lp.wavelength, slot)] = lp.owner
                slots = tuple(sorted((*lp.slots, slot)))
                wider = replace(lp, slots=slots, share=self._share(len(slots), lp.slot_mbps))
                self._lightpaths[key] = wider
                return wider
        return None

    def _share(self, slots: int, rates: Sequence[float]) -> float:
        """The share of a wavelength ``slots`` slots of every frame carry on a path of ``rates``."""
        return self.frame.share(slots, mbps=min(rates), frame_bytes=self.frame_bytes)

    def full_links(self, path: Sequence[str], *, ots: bool = False) -> tuple[tuple[str, str], ...]:
        """Links of ``path`` with no wavelength (``ots``: no slot) left, in path order (a blocking reason)."""
        if ots:
            return tuple((u, v) for u, v in pairwise(path)
                         if len(self._slots[link(u, v)]) >= self.ots * self.frame.timeslots)
        return tuple((u, v) for u, v in pairwise(path) if len(self._held[link(u, v)]) >= self.wavelengths)

    def reserve(self, path: Sequence[str], wavelength: int, owner: Owner, *, slots: Sequence[int] = ()) -> Lightpath:
        """Hold ``wavelength`` on every link of ``path`` for ``owner`` (an OTS wavelength: its
        ``slots`` of every frame); it, or they, must be free on all."""
        links = self._check_path(path)
        ots = self.wavelengths <= wavelength < self.wavelengths + self.ots
        if not 0 <= wavelength < self.wavelengths + self.ots:
            raise SchedulerError(f"wavelength {wavelength} out of range 0..{self.wavelengths + self.ots - 1}")
        if ots != bool(slots) or len(set(slots)) != len(slots) or any(
                not 0 <= t < self.frame.timeslots for t in slots):
            raise SchedulerError(f"wavelength {wavelength} on {_show(path)} needs "
                                 + (f"distinct slots in 0..{self.frame.timeslots - 1}" if ots else "no slots")
                                 + f", got {tuple(slots)}")
        if (owner, tuple(path)) in self._lightpaths:
            raise SchedulerError(f"{owner[0]!r} already holds a lightpath on {_show(path)}")
        rates = tuple(self.slot_mbps(u, v) for u, v in pairwise(path))
        share = self._share(len(slots), rates) if ots else 1.0
        if ots and share <= 0:
            raise SchedulerError(f"a timeslot of {self.frame.slot_us:g} µs ({self.frame.guard_us:g} µs guard) at "
                                 f"{min(rates):g} Mbit/s carries no whole packet of {self.frame_bytes} bytes: "
                                 "give a longer --timeslot-us")
        keys = [(wavelength, t) for t in slots] or [wavelength]
        for (u, v), e in zip(pairwise(path), links):
            held = self._slots[e] if ots else self._held[e]
            for key in keys:
                if key in held:
                    other = held[key]
                    what = f"slot {key[1]} of wavelength {wavelength}" if ots else f"wavelength {wavelength}"
                    raise SchedulerError(f"{what} on {u}-{v} is held by {other[0]!r} ({_show(other[1])})")
        for e in links:
            held = self._slots[e] if ots else self._held[e]
            held.update(dict.fromkeys(keys, owner))
        lp = Lightpath(
            task=owner[0],
            path=tuple(path),
            wavelength=wavelength,
            slot_mbps=rates,
            serves=() if tuple(path) == owner[1] else owner[1],
            slots=tuple(sorted(slots)),
            share=share,
        )
        self._lightpaths[(owner, tuple(path))] = lp
        return lp

    def release(self, owner: Owner) -> None:
        """Free every lightpath ``owner`` holds."""
        self._release(lambda o: o == owner)

    def release_task(self, task: str) -> None:
        """Free every lightpath held by ``task``."""
        self._release(lambda o: o[0] == task)

    def _release(self, whose: Callable[[Owner], bool]) -> None:
        """Free, in one pass, every lightpath whose owner ``whose`` picks."""
        for key in [k for k in self._lightpaths if whose(k[0])]:
            lp = self._lightpaths.pop(key)
            for e in _links(lp.path):
                if lp.slots:
                    for t in lp.slots:
                        del self._slots[e][(lp.wavelength, t)]
                else:
                    del self._held[e][lp.wavelength]

    @property
    def lightpaths(self) -> tuple[Lightpath, ...]:
        """Lightpaths held, in the order they were reserved."""
        return tuple(self._lightpaths.values())

    def reserved_wavelength_links(self) -> int:
        """Wavelength-links in use: each circuit's, and each OTS wavelength's where any slot of it is held."""
        return (sum(len(held) for held in self._held.values())
                + sum(len({w for w, _ in held}) for held in self._slots.values()))

    def slot_utilisation(self) -> float:
        """The share of the slots of the OTS wavelengths lit (any slot held) that are held, over the
        links (0 with none held): how full time-slicing packs the wavelengths it lights."""
        lit = sum(len({w for w, _ in held}) for held in self._slots.values())
        return sum(map(len, self._slots.values())) / (lit * self.frame.timeslots) if lit else 0.0

    def reserved_capacity_mbps(self) -> float:
        return sum(lp.reserved_mbps for lp in self._lightpaths.values())


def lightpath_paths(plan: Plan) -> tuple[Path, ...]:
    """The paths a plan needs lightpaths on: its distinct transfer paths, a path and its reverse
    counted once, each as its first transfer in plan order runs (broadcast first for the built-ins)."""
    out: list[Path] = []
    seen: set[Path] = set()
    for t in plan.transfers:
        if t.path not in seen and t.path[::-1] not in seen:
            seen.add(t.path)
            out.append(t.path)
    return tuple(out)


def lightpath_stretches(plan: Plan, graph: nx.Graph) -> tuple[tuple[Path, Path], ...]:
    """Every (transfer path, stretch of fibre in it) of ``plan`` that holds a lightpath on the
    spectrum over ``graph``, in :func:`lightpath_paths` order: what a policy must cover."""
    return tuple((path, s) for path in lightpath_paths(plan) for s in stretches(path, graph))


def stretches(path: Path, graph: nx.Graph) -> tuple[Path, ...]:
    """The maximal runs of ``path`` whose every link is in ``graph`` (the spectrum's fibres).

    >>> stretches(("h", "l0", "s", "l1", "h1"), nx.Graph([("l0", "s"), ("s", "l1")]))
    (('l0', 's', 'l1'),)
    """
    out: list[list[str]] = []
    for u, v in pairwise(path):
        if not graph.has_edge(u, v):
            continue
        if out and out[-1][-1] == u:
            out[-1].append(v)
        else:
            out.append([u, v])
    return tuple(map(tuple, out))


def admit(spectrum: Spectrum, plan: Plan, time_sliced: Callable[[Path], bool] = lambda path: False, *,
          either: bool = False, first_slot: Callable[[Path], int] = lambda path: 0) -> str | None:
    """Give every path of ``plan`` a lightpath by first fit, in :func:`lightpath_paths` order: a
    circuit, or one timeslot of an OTS wavelength (the first free from slot ``first_slot(path)``
    on) where ``time_sliced(path)`` says so; with ``either``, the other kind where that kind is full.

    Returns None when the task is admitted. When some path finds no wavelength (or slot) the task
    is blocked: the lightpaths it already got are released, and the reason is returned.

    >>> from fedmst.core.plan import Transfer
    >>> from fedmst.core.tasks import Task
    >>> g = nx.path_graph(["a", "b", "c"]); nx.set_edge_attributes(g, 100.0, "capacity_mbps")
    >>> plan = Plan("x", Task("t", "a", ("c",), 1000), (Transfer("broadcast", ("a", "b", "c"), frozenset({0})),))
    >>> s = Spectrum(g, 0, ots=1, frame=Frame(timeslots=1))
    >>> admit(s, plan, lambda path: True), s.lightpaths[0].slots
    (None, (0,))
    >>> admit(s, Plan("x", Task("u", "a", ("c",), 1000), plan.transfers), lambda path: True)
    'no timeslot free on every link of path a-b-c (1 OTS wavelengths of 1 slots; links full: a-b, b-c)'
    """
    task = plan.task.name
    for serves, path in lightpath_stretches(plan, spectrum.graph):
        first = time_sliced(serves)
        other = either and bool(spectrum.wavelengths if first else spectrum.ots)
        kinds = (first, not first)[:1 + other]
        for ots in kinds:
            got = spectrum.first_fit_slot(path, first_slot(serves)) if ots else spectrum.first_fit(path)
            if got is not None:
                break
        if got is None:
            spectrum.release_task(task)
            return "; ".join(_full(spectrum, path, ots) for ots in kinds)
        if ots:
            spectrum.reserve(path, got[0], (task, serves), slots=(got[1],))
        else:
            spectrum.reserve(path, got, (task, serves))
    return None


def _full(spectrum: Spectrum, path: Path, ots: bool) -> str:
    """Why ``path`` finds no wavelength (``ots``: no timeslot) on ``spectrum``, in words."""
    full = spectrum.full_links(path, ots=ots)
    why = (f"links full: {', '.join(f'{u}-{v}' for u, v in full)}" if full
           else f"a {'slot' if ots else 'wavelength'} is free on each link but none on all (continuity)")
    if ots:
        return (f"no timeslot free on every link of path {_show(path)} ({spectrum.ots} OTS wavelengths of "
                f"{spectrum.frame.timeslots} slots; {why})")
    return f"no wavelength free on every link of path {_show(path)} (W={spectrum.wavelengths}; {why})"


__all__ = ["Lightpath", "Link", "Owner", "Spectrum", "admit", "lightpath_paths", "lightpath_stretches", "link",
           "stretches"]
