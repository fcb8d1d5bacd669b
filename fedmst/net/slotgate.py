"""Timeslot gates: a time-sliced (OTS) lightpath sends onto its fibre only inside its slots.

This kernel has neither netem's ``slot`` option nor ``sch_taprio``/``sch_etf``, so no queueing
discipline can open and close a class on a schedule. Netfilter's NFQUEUE target can hand a packet
to a user-space process that gives its verdict later, as the delay lines do
(:mod:`fedmst.net.delayline`): a gate is such a process on the electrical node where an OTS stretch
of fibre begins, fed by the packets that node sends onto the fibre (``mangle`` ``POSTROUTING``,
matched by the lightpath's transfers' source addresses). It holds each lightpath's packets in its
own queue and lets them go only inside that lightpath's slots, no more bytes in a slot than the
wavelength carries before the slot closes: the htb class of the lightpath (its wavelength's rate,
:mod:`fedmst.net.circuits`) then puts them on the fibre inside the slot. Later hops need no gate:
a burst sent in its slot crosses the spines in the same slot, later by the light's delay (and, in
the emulation, by each spine's store-and-forward of one frame).

Packets wait at the electrical node, at most :data:`QUEUE_PACKETS` per lightpath; a packet past
that is dropped and counted (TCP sends it again). A packet of no gated lightpath passes at once.

:class:`Gate` is the pure scheduler, with an explicit clock (unit-tested with a fake one);
:func:`main` (``python -m fedmst.net.slotgate --queue N --table FILE``) binds an NFQUEUE queue of
its network namespace and feeds it through one. The rule has no ``--queue-bypass``: a dead gate
stops its lightpaths rather than letting them send outside their slots.
"""

from __future__ import annotations

import argparse
import collections
import json
import select
import struct
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Deque, Protocol, Sequence

from fedmst.core.wire import ETH_HEADER
from fedmst.net.delayline import Signals, queue_process

QUEUE_PACKETS = 256
"""Packets a gate holds per lightpath, waiting for its slot: a frame's worth of a wavelength at
1,500-byte packets for 10 Gbit/s fibres with 48 wavelengths and 4 ms frames is 70, so this holds
more than three frames' bursts of a lightpath holding every slot."""


@dataclass(frozen=True)
class GatedPath:
    """One lightpath as its gate sees it: its packets' ``sources`` (IPv4 addresses), its ``slots``
    of every frame, and its wavelength's rate on the host's clock in wire bytes per second."""

    sources: tuple[str, ...]
    slots: tuple[int, ...]
    bytes_per_s: float


@dataclass(frozen=True)
class GateTable:
    """What one gate runs: the frame on the host's clock (slot and guard in seconds), when frame 0
    began (wall clock, seconds since the epoch: the captures' clock), and its lightpaths."""

    timeslots: int
    slot_s: float
    guard_s: float
    epoch: float
    paths: tuple[GatedPath, ...]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @staticmethod
    def from_json(text: str) -> GateTable:
        raw = json.loads(text)
        raw["paths"] = tuple(GatedPath(tuple(p["sources"]), tuple(p["slots"]), float(p["bytes_per_s"]))
                             for p in raw["paths"])
        return GateTable(**raw)


class Verdictable(Protocol):
    def accept(self) -> None: ...

    def drop(self) -> None: ...


class _Held:
    """One lightpath's queue and how far its class is booked (when it will have sent what was let go)."""

    def __init__(self, path: GatedPath) -> None:
        self.path = path
        self.queue: Deque[tuple[Verdictable, str, int]] = collections.deque()
        self.booked_until = 0.0
        self.released_bytes = 0
        self.dropped = 0
        self.most_held = 0


class Gate:
    """Holds each gated lightpath's packets until its slot is open and the wavelength can send them
    before the slot closes.

    >>> class P:
    ...     def __init__(self): self.verdict = None
    ...     def accept(self): self.verdict = "accept"
    ...     def drop(self): self.verdict = "drop"
    >>> table = GateTable(timeslots=2, slot_s=1.0, guard_s=0.1, epoch=100.0,
    ...                   paths=(GatedPath(("10.0.0.1",), (1,), 1000.0),))
    >>> gate = Gate(table)
    >>> p, q = P(), P()
    >>> gate.push(p, "10.0.0.1", 600, now=100.5), gate.push(q, "10.0.0.9", 600, now=100.5)
    (False, True)
    >>> gate.release(100.5), gate.next_due(100.5)
    ([], 101.1)
    >>> [x is p for x in gate.release(101.1)]  # slot 1 opens at 101.1; 600 bytes take 0.6 s of its 0.9
    [True]
    """

    def __init__(self, table: GateTable, capacity: int = QUEUE_PACKETS) -> None:
        self.capacity = capacity
        self._retired: list[_Held] = []
        """The lightpaths of earlier tables, for their counters."""
        self._take(table)

    def _take(self, table: GateTable) -> None:
        self.table = table
        self._frame_s = table.timeslots * table.slot_s
        self._by_source: dict[str, _Held] = {}
        self._held: list[_Held] = []
        for path in table.paths:
            held = _Held(path)
            self._held.append(held)
            self._by_source.update(dict.fromkeys(path.sources, held))

    def window(self, slots: Sequence[int], now: float) -> tuple[float, float]:
        """The window of ``slots`` open at ``now``, or else the next to open: (opens, closes)."""
        t = self.table
        frame = (now - t.epoch) // self._frame_s
        for n in (frame, frame + 1):
            start = t.epoch + n * self._frame_s
            for k in sorted(slots):
                opens, closes = start + k * t.slot_s + t.guard_s, start + (k + 1) * t.slot_s
                if closes > now:
                    return opens, closes
        raise AssertionError("a lightpath holds at least one slot")

    def push(self, packet: Verdictable, source: str, size: int, now: float) -> bool:
        """Take a packet of ``size`` bytes on the wire from ``source``; True if it passes at once
        (no gated lightpath's), False if it is held or, past :attr:`capacity`, dropped."""
        held = self._by_source.get(source)
        if held is None:
            return True
        if len(held.queue) >= self.capacity:
            packet.drop()
            held.dropped += 1
            return False
        held.queue.append((packet, source, size))
        held.most_held = max(held.most_held, len(held.queue))
        return False

    def release(self, now: float) -> list[Verdictable]:
        """The packets that may go now: each lightpath's, in order, while its slot is open and its
        wavelength can send them before the slot closes."""
        out: list[Verdictable] = []
        while (packet := self.release_one(now)) is not None:
            out.append(packet)
        return out

    def release_one(self, now: float) -> Verdictable | None:
        """The next packet that may go now, or None. A gate that takes its time over a burst asks
        again with the time it is then, so a verdict given late books its packet late, and what no
        longer fits before the slot closes waits for the next one."""
        for held in self._held:
            if not held.queue:
                continue
            opens, closes = self.window(held.path.slots, now)
            if opens > now:
                continue
            packet, _, size = held.queue[0]
            done = max(held.booked_until, now) + size / held.path.bytes_per_s
            if done > closes:
                continue
            held.queue.popleft()
            held.booked_until = done
            held.released_bytes += size
            return packet
        return None

    def next_due(self, now: float) -> float | None:
        """When :meth:`release` may next let something go (None: nothing is held)."""
        due = []
        for held in self._held:
            if not held.queue:
                continue
            opens, closes = self.window(held.path.slots, now)
            size = held.queue[0][2]
            if opens <= now and max(held.booked_until, now) + size / held.path.bytes_per_s <= closes:
                due.append(now)
            else:
                due.append(self.window(held.path.slots, max(now, closes))[0] if opens <= now else opens)
        return min(due, default=None)

    def flush(self) -> list[Verdictable]:
        """Everything still held (to drop when the gate stops)."""
        out = [p for held in self._held for p, _, _ in held.queue]
        for held in self._held:
            held.queue.clear()
        return out

    def retable(self, table: GateTable, now: float) -> None:
        """Gate by ``table`` from now on (a re-plan's lightpaths; a cluster's jobs come and go), the
        packets held so far queued again by their source (one no lightpath of ``table`` sends passes
        at once). The gate itself stays: the queue's callback holds it."""
        old = self._held
        self._retired += old
        self._take(table)
        for held in old:
            for packet, source, size in held.queue:
                if self.push(packet, source, size, now):
                    packet.accept()
            held.queue.clear()

    def stats(self) -> list[dict[str, object]]:
        """Each lightpath's counters, those of earlier tables' included."""
        return [{"sources": list(h.path.sources), "slots": list(h.path.slots), "released_bytes": h.released_bytes,
                 "dropped": h.dropped, "most_held": h.most_held} for h in [*self._retired, *self._held]]


def wire_size(head: bytes) -> tuple[str, int]:
    """An IPv4 packet's source address and its size on the wire (Ethernet header included), from
    its first 20 bytes.

    >>> wire_size(bytes.fromhex("45000054000040004001") + b"\\0\\0" + bytes([10, 0, 0, 1, 10, 0, 0, 2]))
    ('10.0.0.1', 98)
    """
    (length,) = struct.unpack_from("!H", head, 2)
    return ".".join(map(str, head[12:16])), length + ETH_HEADER


def rule(interface: str, sources: Sequence[str], queue: int) -> list[str]:
    """The ``iptables-restore`` lines (table ``mangle``) that feed queue ``queue`` with the packets
    from ``sources`` leaving by ``interface``."""
    return [f"-A POSTROUTING -o {interface} -s {addr}/32 -j NFQUEUE --queue-num {queue}" for addr in sources]


def _serve(gate: Gate, nfq: object, signals: Signals, table: Path) -> None:
    """Let packets go as their slots open until asked to stop; on SIGUSR1 take the table again from
    ``table`` (a re-plan's lightpaths, a cluster's jobs), the packets held so far re-queued by it,
    in the same gate: the queue's callback pushes into it."""
    fd = nfq.get_fd()  # type: ignore[attr-defined]
    while not signals.stop:
        due = gate.next_due(time.time())
        wait = None if due is None else max(0.0, due - time.time())
        # select(), not epoll: its timeout has microsecond, not millisecond, resolution
        readable, _, _ = select.select([fd, signals.wake_r], [], [], wait)
        if fd in readable:
            nfq.run(block=False)  # type: ignore[attr-defined]
        if signals.wake_r in readable:
            signals.drain()
        if signals.retune:
            signals.retune = False
            gate.retable(GateTable.from_json(table.read_text()), time.time())
        while (packet := gate.release_one(time.time())) is not None:
            packet.accept()  # type: ignore[attr-defined]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fedmst.net.slotgate",
                                description="Let the packets of one NFQUEUE queue go only in their lightpaths' "
                                            "timeslots.")
    p.add_argument("--queue", type=int, required=True)
    p.add_argument("--table", type=Path, required=True, help="the gate's GateTable as JSON; read again on SIGUSR1")
    p.add_argument("--stats", type=Path, default=None, help="write the gate's counters here as JSON on exit")
    args = p.parse_args(argv)
    gate = Gate(GateTable.from_json(args.table.read_text()))

    def take(packet: object) -> None:
        source, size = wire_size(packet.get_payload())  # type: ignore[attr-defined]
        if gate.push(packet, source, size, time.time()):  # type: ignore[arg-type]
            packet.accept()  # type: ignore[attr-defined]

    # the first 20 bytes (the IPv4 header) cross to user space: the source and the length
    started = queue_process("fedmst.net.slotgate", args.queue, take, "COPY_PACKET", max_len=QUEUE_PACKETS * 64,
                            range=20)
    if started is None:
        return 1
    nfq, signals = started
    try:
        _serve(gate, nfq, signals, args.table)
    finally:
        for packet in gate.flush():  # dropped, not passed: stopping must never send outside a slot
            packet.drop()  # type: ignore[attr-defined]
        nfq.unbind()
        if args.stats is not None:
            args.stats.write_text(json.dumps(gate.stats(), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
