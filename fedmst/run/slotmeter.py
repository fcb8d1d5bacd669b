"""Time-sliced lightpaths checked against their slots, by captures nobody can argue with.

While the rounds run, ``tcpdump`` captures the frames sent on every link direction a time-sliced
(OTS) lightpath crosses (headers only, in the run's scratch folder); afterwards each frame is put
in the slot of its direction's frame in which it started (:func:`fedmst.core.optical.slots.occupancy`)
and ``timeslots.csv`` says, per OTS wavelength, link direction, slot and transfer, the bytes sent
inside the transfer's own open slots and the bytes sent outside them (in a guard, or in a slot
it does not hold). ``timeslot_table.json`` is the slot table as it ran: for every OTS link
direction, which transfer holds which slot, when that direction's frame 0 began on the run's
clock and how much later than where the lightpath enters the fibre its slots open there (the
light's delay), so that a capture taken anywhere can be checked against it.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import asdict, dataclass
from itertools import pairwise
from pathlib import Path
from typing import Callable, Mapping, Sequence

from fedmst.core.optical.slots import Frame, occupancy, over_time
from fedmst.core.optical.wavelengths import Lightpath
from fedmst.core.route import LinkDir
from fedmst.core.timescale import TimeScale
from fedmst.net.capture import Captures, records
from fedmst.run.results import write_csv, write_json

TIMESLOT_FIELDS = ("wavelength", "link", "slot", "task", "transfer", "bytes", "outside_bytes")
"""timeslots.csv's columns: one row per slot a transfer holds on a link direction, and one per slot
it does not hold but sent in (``bytes`` 0); ``outside_bytes`` is what it sent in that slot's guard
or, for a slot it does not hold, in that slot."""
OVER_TIME_FIELDS = ("link", "wavelength", "slot", "task", "transfer", "t_s", "bytes")
"""slot_occupancy.csv's columns: the bytes a transfer sent in one slot of its direction's frames
within :data:`BIN_S` from ``t_s`` (the network's seconds after that direction's frame 0), guards
included: what ``fedmst plot --slots`` draws."""
BIN_S = 0.1
"""slot_occupancy.csv's time bins, the network's seconds: samples.csv's interval."""
SNAPLEN = 64
"""Bytes kept of each captured frame: Ethernet and the IPv4 header are all the meter reads."""


@dataclass(frozen=True)
class SlotHop:
    """One link direction a time-sliced lightpath crosses, and how much later (the network's
    seconds: the light's delay) its slots open there than where that direction enters the fibre."""

    hop: LinkDir
    lightpath: Lightpath
    after_s: float


def slot_hops(lightpaths: Sequence[Lightpath], delay_s: Callable[[str, str], float]) -> list[SlotHop]:
    """Every link direction of every time-sliced lightpath, either way along its path; ``delay_s``
    is the light's delay on a link as the emulation gives it (the network's seconds: none on a link
    that runs without a delay line, whose packets cross as fast as the kernel forwards them).

    >>> lp = Lightpath("t", ("l0", "s", "l1"), 8, (10.0, 10.0), slots=(2,), share=0.1)
    >>> [(h.hop, h.after_s) for h in slot_hops([lp], lambda u, v: 0.001)]
    [(('l0', 's'), 0.0), (('s', 'l1'), 0.001), (('l1', 's'), 0.0), (('s', 'l0'), 0.001)]
    """
    out: list[SlotHop] = []
    for lp in lightpaths:
        if not lp.slots:
            continue
        for path in (lp.path, lp.path[::-1]):
            after = 0.0
            for u, v in pairwise(path):
                out.append(SlotHop((u, v), lp, after))
                after += delay_s(u, v)
    return out


def _transfer(lp: Lightpath) -> str:
    return "-".join(lp.owner[1])


def slot_table(hops: Sequence[SlotHop], frame: Frame, frame0_s: float) -> dict[str, object]:
    """timeslot_table.json: the frame, when frame 0 began where each lightpath enters the fibre
    (``frame0_s``, the network's seconds after the run's first round began) and, per link direction,
    who holds which slot and how much later the slots open there."""
    directions: dict[str, list[dict[str, object]]] = {}
    for h in hops:
        directions.setdefault(f"{h.hop[0]}->{h.hop[1]}", []).extend(
            {"slot": k, "wavelength": h.lightpath.wavelength, "task": h.lightpath.task,
             "transfer": _transfer(h.lightpath), "opens_after_s": h.after_s} for k in h.lightpath.slots)
    return {"frame": asdict(frame), "frame0_s": frame0_s, "link_directions": directions}


def slot_rows(hops: Sequence[SlotHop], frame: Frame, sent: Callable[[SlotHop], list[tuple[float, int]]],
              ) -> list[dict[str, object]]:
    """timeslots.csv's rows (:data:`TIMESLOT_FIELDS`): ``sent(hop)`` gives what the hop's lightpath
    sent on its direction, as (the network's seconds after that direction's frame 0, bytes)."""
    rows = []
    for h in hops:
        lp = h.lightpath
        by_slot = {k: (0, 0) for k in lp.slots} | occupancy(frame, sent(h), lp.slots)
        rows += [{"wavelength": lp.wavelength, "link": f"{h.hop[0]}->{h.hop[1]}", "slot": k, "task": lp.task,
                  "transfer": _transfer(lp), "bytes": inside, "outside_bytes": outside}
                 for k, (inside, outside) in sorted(by_slot.items())]
    return rows


def time_rows(hops: Sequence[SlotHop], frame: Frame, sent: Callable[[SlotHop], list[tuple[float, int]]],
              ) -> list[dict[str, object]]:
    """slot_occupancy.csv's rows (:data:`OVER_TIME_FIELDS`), from what ``sent(hop)`` gives as for
    :func:`slot_rows`."""
    return [{"link": f"{h.hop[0]}->{h.hop[1]}", "wavelength": h.lightpath.wavelength, "slot": slot,
             "task": h.lightpath.task, "transfer": _transfer(h.lightpath), "t_s": round(b * BIN_S, 6), "bytes": size}
            for h in hops for (b, slot), size in over_time(frame, sent(h), BIN_S).items()]


def _sources(head: bytes) -> str:
    """An Ethernet frame's IPv4 source address ('' for anything else)."""
    return ".".join(map(str, head[26:30])) if len(head) >= 30 and head[12:14] == b"\x08\x00" else ""


class SlotMeter:
    """Captures of the directions time-sliced lightpaths cross, while the rounds run (use as ``with``):
    those of the lightpaths held when it starts, and those a re-plan's lightpaths take when they are
    :meth:`add`-ed (each batch of new directions starts its own tcpdumps, listening before the
    re-planned phase begins). ``delay_s(u, v)`` is a link's light delay as the emulation gives it
    (the network's seconds), ``frame`` in the network's microseconds."""

    def __init__(self, emu: object, frame: Frame, scratch: Path, *, run_id: str, scale: TimeScale,
                 delay_s: Callable[[str, str], float]) -> None:
        self.emu, self.frame, self.scratch, self.run_id, self.scale = emu, frame, scratch, run_id, scale
        self.delay_s = delay_s
        self.hops: list[SlotHop] = []
        self._captures: list[Captures] = []
        self._stack = ExitStack()

    def __enter__(self) -> SlotMeter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def add(self, lightpaths: Sequence[Lightpath]) -> None:
        """Meter ``lightpaths`` too: their directions not captured yet start being captured now."""
        new = [h for h in slot_hops(lightpaths, self.delay_s) if h not in self.hops]
        captured = {hop for c in self._captures for hop in c.hops}
        directions = [hop for hop in dict.fromkeys(h.hop for h in new) if hop not in captured]
        self.hops += new
        if directions:
            batch = f"slots-{len(self._captures)}"
            captures = Captures(self.emu, directions, self.scratch / batch, snaplen=SNAPLEN,  # type: ignore[arg-type]
                                log_dir=self.scratch / f"{batch}-logs", run_id=self.run_id)
            self._stack.enter_context(captures)
            self._captures.append(captures)

    def rows(self, epoch: float, sources: Mapping[str, Lightpath]) -> tuple[list[dict[str, object]],
                                                                         list[dict[str, object]]]:
        """timeslots.csv's and slot_occupancy.csv's rows, once the captures stopped: ``epoch`` is
        when the gates' frame 0 began (wall clock), ``sources`` the lightpath each address sends on."""
        files = {(f.src, f.dst): c.folder / f.file for c in self._captures for f in c.files}

        def sent(h: SlotHop) -> list[tuple[float, int]]:
            path = files.get(h.hop)
            if path is None:
                return []
            return [(self.scale.network_s(t - epoch) - h.after_s, size) for t, size, head in records(path)
                    if sources.get(_sources(head)) == h.lightpath]

        packets = {h: sent(h) for h in self.hops}
        return slot_rows(self.hops, self.frame, packets.__getitem__), time_rows(self.hops, self.frame,
                                                                                 packets.__getitem__)


def write_slot_files(out: Path, rows: list[dict[str, object]], table: dict[str, object],
                     over: list[dict[str, object]]) -> float:
    """timeslots.csv, timeslot_table.json and slot_occupancy.csv (``over``) in the run's folder
    ``out``; returns the share of the bytes counted that were sent outside their slots (0 with none
    counted)."""
    write_csv(out / "timeslots.csv", TIMESLOT_FIELDS, rows)
    write_csv(out / "slot_occupancy.csv", OVER_TIME_FIELDS, over)
    write_json(out / "timeslot_table.json", table)
    counted = sum(int(r["bytes"]) + int(r["outside_bytes"]) for r in rows)
    return sum(int(r["outside_bytes"]) for r in rows) / counted if counted else 0.0


__all__ = ["BIN_S", "OVER_TIME_FIELDS", "TIMESLOT_FIELDS", "SlotHop", "SlotMeter", "slot_hops", "slot_rows",
           "slot_table", "time_rows", "write_slot_files"]
