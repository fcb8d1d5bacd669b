"""One node's part in one phase of any plan: receive, sum, forward, chunk by chunk.

Every transfer that starts or ends at the node gets a thread. A receiving thread posts every
chunk's receive at once and marks each chunk as it lands. A sending thread first waits for every
transfer of an earlier step at the node to complete (store and forward between steps), then builds
each chunk from what :func:`fedmst.core.plan.feeders` names (a copy of the global model received,
G's own model, or the node's own weighted updates plus the sums that arrive) as soon as those
chunks are in, and sends it: a relay forwards chunk i while chunk i + 1 is still arriving.

Chunks lie on one grid over the whole flat model (``chunk_elems`` wide, cut at segment ends), so a
segment's chunk i is inside chunk i of any segment that covers it. Transfers of different steps
may share a connection; the n-th transfer on one sends chunk i with the tag n * (chunks per model)
+ i, so both ends tell them apart. The phase ends with what the node holds of the global model: a copy it
received, or the sum it completed from every update (see :func:`fedmst.core.plan.check_plan`).
Where updates travel each on its own transfer (a strategy that is not decomposable), a relay's
sum of one update is a plain forward, and G ends the upload with every update by local model.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Collection, Mapping, Sequence

import torch

from fedmst.core.plan import feeders, waits_on
from fedmst.protocol import TransferSpec
from fedmst.workers import transport


class PhaseFailed(RuntimeError):
    """Another transfer of the phase at this node failed, so this one cannot go on."""


@dataclass
class _End:
    """One transfer at this node: its elements, its chunks, and when each is in (or out)."""

    spec: TransferSpec
    lo: int
    hi: int
    chunks: list[tuple[int, slice]]
    buf: torch.Tensor
    """What arrives (a receiver), or the sums it sends (a sender with feeders to add); else empty."""
    ready: dict[int, threading.Event]
    """Chunk index -> set once that chunk has arrived (a receiver)."""
    done: threading.Event = field(default_factory=threading.Event)

    def view(self, part: slice) -> torch.Tensor:
        return self.buf[part.start - self.lo:part.stop - self.lo]

    def view_when(self, j: int, part: slice, wait: Callable[[threading.Event], None]) -> torch.Tensor:
        """Elements ``part`` of chunk ``j``, once that chunk has arrived."""
        wait(self.ready[j])
        return self.view(part)


@dataclass
class PhaseInputs:
    """What a node brings to a phase of one task."""

    node: str
    global_node: str
    transfers: Sequence[TransferSpec]
    """The task's transfers that start or end at this node."""
    pairs: Mapping[str, transport.Pair]
    """Connection key -> this node's end of it."""
    numel: int
    chunk_elems: int
    model: torch.Tensor | None
    """G's flat model (at G's node, in broadcast)."""
    own: Callable[[Collection[int] | None], torch.Tensor]
    """The weighted sum of this node's trained updates among the given models (None: all)."""
    hosted: frozenset[int]
    """The active local models on this node."""
    everyone: frozenset[int]
    """Every active local model of the task."""
    each: bool = False
    """Its updates travel each on its own transfer (:func:`fedmst.core.plan.forward_each`): G ends
    the upload with every one of them, not their sum."""


Held = torch.Tensor | dict[int, torch.Tensor] | None
"""What a node ends a phase with: the global model (or the sum of every update), each update by
local model (G, when they travel each on its own), or None (not all of it)."""


def run_phase(phase: str, inp: PhaseInputs, arrived: Callable[[str], None]) -> Held:
    """Play this node's part in ``phase``; return what it ends the phase with (:data:`Held`):
    None where it has not all of it (a relay in a tree's upload). ``arrived`` is told the key of
    every transfer whose last chunk is in."""
    return _Phase(phase, inp, arrived).run()


class _Phase:
    """The transfers of one phase at one node, with what their threads share: each transfer's
    end, the failure flag that stops the others, and the node's own sums, made once."""

    def __init__(self, phase: str, inp: PhaseInputs, arrived: Callable[[str], None]) -> None:
        self.phase, self.inp, self.arrived = phase, inp, arrived
        self.mine = [t for t in inp.transfers if t.phase == phase]
        stride = -(-inp.numel // inp.chunk_elems)
        shared = [t.connection for t in inp.transfers]
        self.tag = {t.key: stride * shared[:i].count(t.connection) for i, t in enumerate(inp.transfers)}
        self.ends = {t.key: self._end_of(t) for t in self.mine}
        self.failed = threading.Event()
        self.sums: dict[frozenset[int] | None, torch.Tensor] = {}
        self.summing = threading.Lock()

    def run(self) -> Held:
        node = self.inp.node
        if any(t.src == node and waits_on(t, self.mine) for t in self.mine):
            run_all([partial(self._guarded, self._receive if t.dst == node else self._send, self.ends[t.key])
                     for t in self.mine])
        else:
            self._post_all()
        arriving = [self.ends[t.key] for t in self.mine if t.dst == node]
        if self.inp.each and self.phase == "upload":
            return _each_held(self.inp, arriving, self._own) if node == self.inp.global_node else None
        return _held(self.phase, self.inp, arriving, self._own)

    def _end_of(self, t: TransferSpec) -> _End:
        lo, hi = span(t, self.inp.numel)
        chunks = transport.grid(lo, hi, self.inp.chunk_elems)
        return _End(t, lo, hi, chunks, torch.empty(hi - lo if t.dst == self.inp.node else 0),
                    {j: threading.Event() for j, _ in chunks})

    def _own(self, models: Collection[int] | None) -> torch.Tensor:
        """This node's weighted updates among ``models``, summed once however many transfers send
        them (a ring member sends its own in every reduce-scatter step)."""
        key = None if models is None else frozenset(models)
        with self.summing:
            if key not in self.sums:
                self.sums[key] = self.inp.own(models)
            return self.sums[key]

    def _wait(self, event: threading.Event) -> None:
        """Block until ``event``, without polling: a failure sets every event (``_guarded``), so
        a transfer waiting on one that will never come wakes at once and sees why."""
        event.wait()
        if self.failed.is_set():
            raise PhaseFailed("another transfer of this phase failed at this node")

    def _receive(self, end: _End) -> None:
        pair, first = self.inp.pairs[end.spec.connection], self.tag[end.spec.key]
        works = [(j, transport.post_recv(pair, end.view(part), first + j)) for j, part in end.chunks]
        for j, work in works:
            transport.wait(work, pair)
            end.ready[j].set()
        self.arrived(end.spec.key)
        end.done.set()

    def _send(self, end: _End) -> None:
        t = end.spec
        for other in self.mine:
            if other.step < t.step and t.src in (other.src, other.dst):
                self._wait(self.ends[other.key].done)
        feeds = [self.ends[f.key] for f in feeders(t, self.mine)]
        # what it sends: a copy of the global model received, G's model, or sums (its own updates,
        # plus the sums that feed it; all of them where it completes the global model)
        copy = next((f for f in feeds if f.spec.carries == "global"), None) if t.carries == "global" else None
        base = None if copy is not None else self._held_here(t)
        if copy is None and self.phase == "upload" and feeds:
            end.buf = torch.empty(end.hi - end.lo)
        pair, first, sends = self.inp.pairs[t.connection], self.tag[t.key], []
        for j, part in end.chunks:
            if copy is not None:
                chunk = copy.view_when(j, part, self._wait)
            elif not feeds:
                chunk = base[part]
            else:
                chunk = end.view(part)
                torch.add(base[part], feeds[0].view_when(j, part, self._wait), out=chunk)
                for f in feeds[1:]:
                    chunk.add_(f.view_when(j, part, self._wait))
            sends.append(transport.post_send(pair, chunk, first + j))
        for work in sends:
            transport.wait(work, pair)
        end.done.set()

    def _held_here(self, t: TransferSpec) -> torch.Tensor:
        """What ``t`` starts from at its source, before any sum that feeds it: G's model in a
        broadcast, else this node's own updates among ``t``'s models (all of them where it carries
        the global model)."""
        if self.phase == "broadcast":
            assert self.inp.model is not None, f"{t.key}: only G's node starts a broadcast"
            return self.inp.model
        return self._own(None if t.carries == "global" else t.models)

    def _post_all(self) -> None:
        """Post every chunk of every transfer at once from this thread, then wait for them: where
        nothing this node sends waits on another transfer (a star, a tree's root and leaves), a
        thread per transfer end is not needed, and at the poster's scale cost more CPU than the
        move of a 19 KB model. If a wait fails, the posted buffers are kept: gloo may still write
        into one that was receiving."""
        node, posted = self.inp.node, []
        for t in self.mine:
            end, pair, first = self.ends[t.key], self.inp.pairs[t.connection], self.tag[t.key]
            if t.dst == node:
                works = [transport.post_recv(pair, end.view(part), first + j) for j, part in end.chunks]
            else:
                base = self._held_here(t)
                works = [transport.post_send(pair, base[part], first + j) for j, part in end.chunks]
            posted.append((end, pair, works))
        try:
            for end, pair, works in posted:
                for work in works:
                    transport.wait(work, pair)
                if end.spec.dst == node:
                    self.arrived(end.spec.key)
                end.done.set()
        except BaseException:
            _abandoned.append(posted)
            raise

    def _guarded(self, fn: Callable[[_End], None], end: _End) -> None:
        try:
            fn(end)
        except BaseException:
            self.failed.set()
            for other in self.ends.values():
                other.done.set()
                for ready in other.ready.values():
                    ready.set()
            raise


_abandoned: list[object] = []
"""What a failed phase had posted, kept alive: a receive gloo has not given up on may still land."""
MAX_THREADS = 4096
"""Threads one agent may run at once: every transfer end of every task at the node blocks one
(30 tasks of 15 local models put a few hundred on a node)."""
_pools: dict[int, ThreadPoolExecutor] = {}


def _pool() -> ThreadPoolExecutor:
    """This process's threads, kept from phase to phase: starting a thread for every transfer end
    of every phase took more CPU than moving a small model. One per process id, because a forked
    agent inherits the pool object but none of its threads."""
    pid = os.getpid()
    if pid not in _pools:
        _pools[pid] = ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="fedmst-transfer")
    return _pools[pid]


def run_all(fns: Sequence[Callable[[], None]]) -> None:
    """Run blocking streams (transfers, tasks) at once; re-raise the first failure's cause, not
    the :class:`PhaseFailed` it led to in the others. One stream runs in the calling thread."""
    if len(fns) == 1:
        fns[0]()
        return
    futures = [_pool().submit(fn) for fn in fns]
    errors = [e for e in (f.exception() for f in futures) if e is not None]
    if errors:
        raise next((e for e in errors if not isinstance(e, PhaseFailed)), errors[0])


def _held(phase: str, inp: PhaseInputs, arriving: list[_End],
          own: Callable[[Collection[int] | None], torch.Tensor]) -> torch.Tensor | None:
    """The global model this node has at the end of ``phase``, or None where it lacks part of it."""
    if phase == "broadcast" and inp.node == inp.global_node:
        return inp.model
    cuts = sorted({0, inp.numel} | {b for end in arriving for b in (end.lo, end.hi)})
    out = torch.empty(inp.numel)
    for lo, hi in zip(cuts, cuts[1:]):
        atom = slice(lo, hi)
        inside = [end for end in arriving if end.lo <= lo and hi <= end.hi]
        copies = [end for end in inside if end.spec.carries == "global"]
        if copies:
            out[atom] = copies[0].view(atom)
            continue
        if phase == "broadcast":
            return None
        models = set(inp.hosted)
        for end in inside:
            models |= set(end.spec.models)
        if models != inp.everyone or sum(len(end.spec.models) for end in inside) + len(inp.hosted) != len(models):
            return None
        out[atom] = own(None)[atom]
        for end in inside:
            out[atom] += end.view(atom)
    return out


def _each_held(inp: PhaseInputs, arriving: list[_End],
               own: Callable[[Collection[int] | None], torch.Tensor]) -> dict[int, torch.Tensor]:
    """At G, after an upload whose updates travel each on its own: every local model's update,
    from the node's own or from the transfers that brought it (pieced together by segment)."""
    held = {i: own({i}) for i in inp.hosted}
    for end in arriving:
        (i,) = end.spec.models
        held.setdefault(i, torch.empty(inp.numel))[end.lo:end.hi] = end.buf
    missing = sorted(inp.everyone - held.keys())
    if missing:
        raise RuntimeError(f"G's node ended the upload without the updates of local models {missing}")
    return held


def bytes_sent(node: str, transfers: Sequence[TransferSpec], numel: int) -> int:
    """The bytes of weights ``node`` sends a round over ``transfers`` (one connection's)."""
    return sum(4 * (hi - lo) for t in transfers if t.src == node for lo, hi in [span(t, numel)])


def span(t: TransferSpec, numel: int) -> tuple[int, int]:
    """The elements a transfer carries (its byte segment, in float32 weights)."""
    if t.segment is None:
        return 0, numel
    lo, hi = t.segment
    return lo // 4, hi // 4
