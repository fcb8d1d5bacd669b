"""Time-sliced wavelengths (OTS): a wavelength cut into a repeating frame of timeslots.

An OTS wavelength carries a frame of ``timeslots`` slots of ``slot_us`` each, over and over; each
slot opens with a ``guard_us`` guard (the switch reconfigures, nothing is sent) and then carries the
wavelength's full rate for whoever holds it. A transfer that holds ``k`` slots of every frame on
every hop of its lightpath (the same slot indices end to end: a slot on a later hop opens as
many microseconds later as light takes to get there, so a burst sent in its slot meets its slot
at every spine it passes) gets, on average, the wavelength's rate times :meth:`Frame.share`.

Pure data, no I/O: :class:`Frame` is the one place that says how long slots are, what share of a
wavelength ``k`` of them give, when a slot opens on the run's clock, and how slow the host's
clock must run to time them (:meth:`Frame.min_scale`).

>>> f = Frame(timeslots=8, slot_us=500.0, guard_us=50.0)
>>> f.frame_us, f.share(1), f.share(2)
(4000.0, 0.1125, 0.225)
>>> f.min_scale()
10.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

SLOT_FLOOR_US = 5000.0
"""The shortest slot this host times well on its own clock: a delay line's wake-up is late by up to a
few hundred microseconds on a busy 2-core host (docs/time-scale.md), so a slot must be long beside
that lateness for what crosses outside it to stay near 1%."""
GUARD_FLOOR_US = 250.0
"""The shortest guard on the host's clock: a burst's last packet, late by a wake-up, must still land
inside the guard that follows its slot rather than in the next holder's slot."""


@dataclass(frozen=True)
class Frame:
    """An OTS wavelength's frame: ``timeslots`` slots of ``slot_us`` microseconds, each beginning
    with a ``guard_us`` guard in which nothing is sent (the network's microseconds)."""

    timeslots: int = 8
    slot_us: float = 500.0
    guard_us: float = 50.0

    def problem(self) -> str | None:
        """Why these terms make no frame, in one line, or None.

        >>> Frame(timeslots=0).problem()
        '--timeslots must be an integer >= 1, got 0'
        >>> Frame(slot_us=100.0, guard_us=100.0).problem()
        '--guard-us (100) must be below --timeslot-us (100): a slot must carry something'
        """
        if isinstance(self.timeslots, bool) or not isinstance(self.timeslots, int) or self.timeslots < 1:
            return f"--timeslots must be an integer >= 1, got {self.timeslots!r}"
        if not (math.isfinite(self.slot_us) and self.slot_us > 0):
            return f"--timeslot-us must be a finite number > 0, got {self.slot_us:g}"
        if not (math.isfinite(self.guard_us) and self.guard_us >= 0):
            return f"--guard-us must be a finite number >= 0, got {self.guard_us:g}"
        if self.guard_us >= self.slot_us:
            return (f"--guard-us ({self.guard_us:g}) must be below --timeslot-us ({self.slot_us:g}): "
                    "a slot must carry something")
        return None

    @property
    def frame_us(self) -> float:
        return self.timeslots * self.slot_us

    def share(self, slots: int, *, mbps: float | None = None, frame_bytes: int | None = None) -> float:
        """The share of the wavelength's rate that ``slots`` slots of every frame carry on average:
        their open time, or, given the wavelength's ``mbps`` and the packets' ``frame_bytes`` on the
        wire, the whole packets that fit in it (a packet never straddles a slot's end: 7.7 frames'
        worth of a slot carries 7).

        >>> f = Frame(timeslots=8, slot_us=500.0, guard_us=50.0)
        >>> f.share(1), round(f.share(1, mbps=10_000 / 48, frame_bytes=1514), 4)
        (0.1125, 0.1017)
        """
        open_us = self.slot_us - self.guard_us
        if mbps is not None and frame_bytes is not None:
            open_us = math.floor(open_us * mbps / 8 / frame_bytes) * frame_bytes * 8 / mbps
        return slots / self.timeslots * open_us / self.slot_us

    def opens_at(self, slot: int, frame: int = 0, *, delay_s: float = 0.0) -> float:
        """When ``slot`` of the ``frame``-th frame opens (its guard over) on the network's clock,
        frames counted from 0 at the run's first; ``delay_s`` is the light's delay to the hop it is
        on (a later hop's slot opens that much later).

        >>> Frame(timeslots=4, slot_us=1000.0, guard_us=100.0).opens_at(2, frame=1, delay_s=0.01)
        0.0161
        """
        return round((frame * self.frame_us + slot * self.slot_us + self.guard_us) / 1e6 + delay_s, 12)

    def min_scale(self) -> float:
        """The slowest the host's clock may run against the network's for these slots: a slot at
        least :data:`SLOT_FLOOR_US` and a guard at least :data:`GUARD_FLOOR_US` on the host (no floor
        for a frame without guards)."""
        need = SLOT_FLOOR_US / self.slot_us
        if self.guard_us > 0:
            need = max(need, GUARD_FLOOR_US / self.guard_us)
        return need


def where(frame: Frame, t: float) -> tuple[int, bool]:
    """Which slot of its frame the network time ``t`` (seconds after frame 0 began where it is
    measured) falls in, and whether in that slot's guard.

    >>> f = Frame(timeslots=4, slot_us=1000.0, guard_us=100.0)
    >>> where(f, 0.00205), where(f, 0.00215), where(f, 0.00405)
    ((2, True), (2, False), (0, True))
    """
    into = (t * 1e6) % frame.frame_us
    slot = min(int(into // frame.slot_us), frame.timeslots - 1)
    return slot, into - slot * frame.slot_us < frame.guard_us


def occupancy(frame: Frame, packets: Iterable[tuple[float, int]], slots: Sequence[int]) -> dict[int, tuple[int, int]]:
    """What a lightpath holding ``slots`` sent on one link direction, by the slot each of its
    ``packets`` (network time after that direction's frame 0 began, bytes) started in: per slot,
    the bytes inside its own open slots, and the bytes *outside* them (in a guard, or in a slot it
    does not hold).

    >>> f = Frame(timeslots=4, slot_us=1000.0, guard_us=100.0)
    >>> occupancy(f, [(0.0012, 1500), (0.0015, 1500), (0.00105, 100), (0.0031, 60)], (1,))
    {1: (3000, 100), 3: (0, 60)}
    """
    held = set(slots)
    out: dict[int, list[int]] = {}
    for t, size in packets:
        slot, guard = where(frame, t)
        row = out.setdefault(slot, [0, 0])
        row[0 if slot in held and not guard else 1] += size
    return {slot: (inside, outside) for slot, (inside, outside) in sorted(out.items())}


def over_time(frame: Frame, packets: Iterable[tuple[float, int]], bin_s: float) -> dict[tuple[int, int], int]:
    """What ``packets`` (network time after frame 0 began where they are measured, bytes) put in
    each slot over time: bytes per (time bin of ``bin_s`` seconds, slot), guards counted in their
    slot: the slot grid ``fedmst plot --slots`` draws.

    >>> over_time(Frame(timeslots=4, slot_us=1000.0, guard_us=100.0), [(0.0012, 1500), (0.0051, 60)], 0.004)
    {(0, 1): 1500, (1, 1): 60}
    """
    out: dict[tuple[int, int], int] = {}
    for t, size in packets:
        key = (int(t // bin_s), where(frame, t)[0])
        out[key] = out.get(key, 0) + size
    return dict(sorted(out.items()))


DEFAULT_FRAME = Frame()
"""The frame when none is given: 8 slots of 500 µs with 50 µs guards (OpenOptics' Mininet back end
runs millisecond slices; this is its scale, halved)."""

__all__ = ["DEFAULT_FRAME", "GUARD_FLOOR_US", "SLOT_FLOOR_US", "Frame", "occupancy", "over_time", "where"]
