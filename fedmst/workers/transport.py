"""Moving weights over the emulated links: gloo, point to point, chunk by chunk.

Each overlay transfer is its own two-rank gloo process group (rank 0 sends, rank 1 receives)
whose device is bound to the transfer's endpoint address, so its TCP connection follows exactly
the routes installed for that transfer. Rendezvous goes through a FileStore on the shared
filesystem, or, in a run placed on several hosts, the run's store server reached through a Unix
socket (:mod:`fedmst.hosts.store`), so it never crosses an emulated link. Weights travel as raw
float32 tensors; nothing received is unpickled. This is the only module that moves data with
``torch.distributed``.

A transfer moves as chunks, each its own message tagged with its index, so that a relay
(:mod:`fedmst.workers.dataflow`) can forward one chunk while the next is still arriving.

A wait is bounded only by the run's phase timeout: a chunk may take long on a shared link. Deciding
that a transfer has stalled needs the link counters, which only the coordinator sees; when it does,
:func:`abort_connections` wakes every wait of the process.
"""

from __future__ import annotations

import ctypes
import datetime
import os
import signal
import socket
import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import torch
import torch.distributed as dist

from fedmst.protocol import RELAYED_STORE

SENDER, RECEIVER = 0, 1


@dataclass
class Pair:
    """One end of a connection's process group."""

    group: dist.ProcessGroupGloo
    rank: int
    timeout: datetime.timedelta = datetime.timedelta(minutes=5)
    """The longest one chunk may take: a guard against a hang, not a judgement on the link."""

    @property
    def peer(self) -> int:
        return 1 - self.rank


def rendezvous(where: str, name: str) -> dist.Store:
    """The store transfer ``name``'s two ends meet in: a FileStore in folder ``where`` (one host),
    or, where ``where`` is ``socket:PATH#SPACE`` (a run on several hosts, whose agents share no
    folder), the keys ``SPACE/name/`` of the run's store server."""
    if not where.startswith(RELAYED_STORE):
        return dist.FileStore(str(Path(where) / name), 2)
    from fedmst.hosts.store import RemoteStore

    path, _, space = where.removeprefix(RELAYED_STORE).partition("#")
    return RemoteStore(path, prefix=f"{space}/{name}/")


def open_pair(where: str, name: str, *, rank: int, address: str, timeout_s: float, numel: int) -> Pair:
    """Connect this end of a transfer: blocks (up to ``timeout_s``) until the other end has
    opened it too. Once open, each chunk may take up to ``timeout_s`` too.

    The two ends then agree on the tensor they will move: the sender announces its element
    count in a fixed-size message and the receiver checks it against its own, so a mismatch
    (two versions of a model) is an error naming both sizes. gloo itself would abort the whole
    process on the first message of an unexpected size. The two ends meet in transfer ``name``'s
    store at ``where`` (:func:`rendezvous`).
    """
    store = rendezvous(where, name)
    opts = dist.ProcessGroupGloo._Options()
    with _timer_slack(LOOP_TIMER_SLACK_NS):  # the device's event-loop thread inherits it
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname=address)]
    opts._timeout = datetime.timedelta(seconds=timeout_s)
    pair = Pair(dist.ProcessGroupGloo(store, rank, 2, opts), rank, datetime.timedelta(seconds=timeout_s))
    count = torch.tensor([numel], dtype=torch.int64)
    if rank == SENDER:
        pair.group.send([count], RECEIVER, 0).wait()
    else:
        pair.group.recv([count], SENDER, 0).wait()
        if int(count) != numel:
            close_pair(pair)
            raise ShapeMismatch(f"{name}: the sender offers {int(count)} weights, this node expects {numel}")
    return pair


LOOP_TIMER_SLACK_NS = 50_000_000
"""Timer slack of each connection's gloo event loop: the loop waits for socket events, or 10 ms
to look for its own shutdown, and a run keeps hundreds of connections per agent (30 tasks of 15
local models: about 126 an agent, 1,800 loops), whose idle wake-ups alone kept both cores of a
2-core host busy. 50 ms of slack lets the kernel wake an idle loop about 20 times a second
instead of 100; a socket event still wakes it at once. Once every connection is open, the loops
get more (:data:`IDLE_LOOP_SLACK_NS`)."""


@contextmanager
def _timer_slack(ns: int) -> Iterator[None]:
    """Set this thread's timer slack (threads it starts inherit it), then restore it."""
    before = _libc.prctl(_PR_GET_TIMERSLACK, 0, 0, 0, 0)
    _libc.prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(ns), 0, 0, 0)
    try:
        yield
    finally:
        _libc.prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(before), 0, 0, 0)


_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_TIMERSLACK, _PR_GET_TIMERSLACK = 29, 30

IDLE_LOOP_SLACK_NS = 500_000_000
"""The loops' timer slack once every connection is open (:func:`idle_loops`): 2 wake-ups a second
where :data:`LOOP_TIMER_SLACK_NS` gives 20. A timer wake-up costs a core of this virtual machine
some 25 µs, so 20 a second in each of 1,800 loops took most of a core, which a slowed run's long
phases paid throughout (the agents' CPU per transfer at the poster's point grew with the time
scale). A socket event still wakes a loop at once. Closing a connection waits for its loop's next
turn (gloo's ``Loop::unregisterDescriptor`` and ``Loop::shutdown``), which :func:`waking_loops`
brings at once with :data:`WAKE_SIGNAL`: without it, each waited up to this long."""
WAKE_SIGNAL = signal.SIGURG
"""Sent to the loops' threads while connections close: their ``epoll_wait`` returns (EINTR) and
the loop turns. Its default action is to ignore it, which interrupts nothing, so the process
handles it (:func:`enable_loop_wakes`); nothing else here sends or uses it."""


def enable_loop_wakes() -> bool:
    """Handle :data:`WAKE_SIGNAL` (by doing nothing), so that it wakes a loop: only the main thread
    can, so an agent calls this first thing. Returns whether it could (not in another thread)."""
    try:
        signal.signal(WAKE_SIGNAL, lambda *_: None)
    except ValueError:  # not the main thread
        return False
    return True


def _loop_threads(slacks: tuple[int, ...]) -> list[int]:
    """The thread ids of this process whose timer slack is one of ``slacks``: the connections'
    event loops, which :func:`open_pair` starts with :data:`LOOP_TIMER_SLACK_NS`."""
    found = []
    for task in Path("/proc/self/task").iterdir():
        try:
            if int(_slack_file(int(task.name)).read_text()) in slacks:
                found.append(int(task.name))
        except (OSError, ValueError):  # a thread that ended meanwhile
            continue
    return found


def _slack_file(tid: int) -> Path:
    """Thread ``tid``'s timer slack: /proc/TID/timerslack_ns (not under /proc/self/task/TID)."""
    return Path("/proc") / str(tid) / "timerslack_ns"


def idle_loops() -> int:
    """Give every connection's event loop :data:`IDLE_LOOP_SLACK_NS` of timer slack, once none is
    being opened, where closing them can wake them (:func:`enable_loop_wakes`; else a close would
    wait up to that long). Returns how many; none where the host does not let this process set its
    threads' slack (a container without CAP_SYS_NICE), which only costs CPU."""
    if signal.getsignal(WAKE_SIGNAL) in (signal.SIG_DFL, signal.SIG_IGN, None):
        return 0
    changed = 0
    for tid in _loop_threads((LOOP_TIMER_SLACK_NS,)):
        try:
            _slack_file(tid).write_text(str(IDLE_LOOP_SLACK_NS))
            changed += 1
        except OSError:  # ended meanwhile, or no permission
            continue
    return changed


def close_all(pair_maps: Iterable[dict[str, Pair]]) -> None:
    """Close every connection of these maps and empty them, waking the loops meanwhile: dropping
    a connection waits for its loop's next turn (:func:`waking_loops`)."""
    with waking_loops():
        for pairs in pair_maps:
            for pair in pairs.values():
                close_pair(pair)
            pairs.clear()


@contextmanager
def waking_loops(every_s: float = 0.005) -> Iterator[None]:
    """Wake every connection's event loop each ``every_s`` while the block runs: closing and
    dropping connections there (a re-plan replaces them) waits for each one's
    loop's next turn, up to :data:`IDLE_LOOP_SLACK_NS` (12 connections dropped took 7.0-7.9 s
    without the wakes, 0.3 s with them)."""
    done, pid = threading.Event(), os.getpid()
    loops = _loop_threads((LOOP_TIMER_SLACK_NS, IDLE_LOOP_SLACK_NS))

    def wake() -> None:
        while not done.wait(every_s):
            for tid in loops:  # one that has ended: ESRCH, nothing sent
                _libc.tgkill(pid, tid, WAKE_SIGNAL)

    waker = threading.Thread(target=wake, name="fedmst-wake-loops", daemon=True)
    waker.start()
    try:
        yield
    finally:
        done.set()
        waker.join()


class ShapeMismatch(RuntimeError):
    """The two ends of a transfer disagree on the size of the weights."""


def close_pair(pair: Pair) -> None:
    """Close this end of a transfer's connection (its plan was replaced, or it failed)."""
    try:
        pair.group.shutdown()
    except RuntimeError:  # a pair whose transfer failed may already be half closed
        pass


def _tcp_connections() -> Iterator[socket.socket]:
    """A duplicate of every TCP socket of this process that is not listening (gloo's connections:
    an agent has no other, its control channel is a Unix socket), closed again after use; gloo's
    own descriptors stay open."""
    for name in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=os.dup(int(name)))
        except OSError:  # closed meanwhile, or not ours to duplicate
            continue
        try:
            if (sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM
                    and not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)):
                yield sock
        finally:
            sock.close()


def connection_at(address: str) -> socket.socket | None:
    """A duplicate of this process's TCP connection whose own end is ``address`` (a transfer's
    endpoint address is its connection's alone), for the caller to keep and close; None if none."""
    for sock in _tcp_connections():
        try:
            if sock.family == socket.AF_INET and sock.getsockname()[0] == address:
                return socket.socket(fileno=os.dup(sock.fileno()))
        except OSError:  # not connected (any more)
            continue
    return None


def abort_connections() -> int:
    """Shut down every connected TCP socket of this process: each gloo wait on them fails at
    once ("connection closed"), and so do the peers' (they read the end of the stream), where
    neither ``ProcessGroupGloo.abort()`` nor ``shutdown()`` wakes a wait that is blocked. Listening
    sockets are left alone: gloo aborts the process when its listener fails. Returns how many it shut.
    """
    shut = 0
    for sock in _tcp_connections():
        try:
            sock.shutdown(socket.SHUT_RDWR)
            shut += 1
        except OSError:  # not connected (yet, or any more)
            pass
    return shut


def slow_start_after_idle() -> bool:
    """Whether this network namespace's TCP restarts an idle connection from its initial window."""
    return Path("/proc/sys/net/ipv4/tcp_slow_start_after_idle").read_text().strip() != "0"


def congestion_controls() -> dict[str, int]:
    """This process's TCP connections by the congestion control the kernel runs for each: the
    run sets it on the routes (``--congestion-control``), and this is the check that it took."""
    found: Counter[str] = Counter()
    for sock in _tcp_connections():
        name = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
        found[name.split(b"\0", 1)[0].decode()] += 1
    return dict(found)


_DONE_TAG = 1 << 30
"""The tag of the receiver's reply that ends :func:`warm` (beyond any chunk's index)."""


def warm(pair: Pair, numel: int, chunk_elems: int) -> None:
    """Move ``numel`` zeros from sender to receiver in chunks, then a one-element reply back: the
    connection is set up and has carried data, and that data is acknowledged before either end
    returns, so no ACK of it falls into round 1."""
    zeros, done = torch.zeros(numel), torch.zeros(1)
    if pair.rank == SENDER:
        send_whole(pair, zeros, chunk_elems)
        wait(pair.group.recv([done], pair.peer, _DONE_TAG), pair)
    else:
        recv_whole(pair, zeros, chunk_elems)
        wait(pair.group.send([done], pair.peer, _DONE_TAG), pair)


def grid(lo: int, hi: int, chunk_elems: int) -> list[tuple[int, slice]]:
    """(index, elements) of every chunk of ``[lo, hi)`` on the grid of ``chunk_elems`` laid over
    the whole model: a segment's chunk i lies inside chunk i of any segment that covers it.

    >>> grid(3, 9, 4)
    [(0, slice(3, 4, None)), (1, slice(4, 8, None)), (2, slice(8, 9, None))]
    >>> grid(0, 5, 2)
    [(0, slice(0, 2, None)), (1, slice(2, 4, None)), (2, slice(4, 5, None))]
    """
    return [(j, slice(max(lo, j * chunk_elems), min(hi, (j + 1) * chunk_elems)))
            for j in range(lo // chunk_elems, (hi - 1) // chunk_elems + 1)]


def send_whole(pair: Pair, tensor: torch.Tensor, chunk_elems: int) -> None:
    """Send all of ``tensor`` in chunks (tags 0, 1, ...) and wait until gloo has taken them."""
    works = [post_send(pair, tensor[part], i) for i, part in grid(0, tensor.numel(), chunk_elems)]
    for work in works:
        wait(work, pair)


def recv_whole(pair: Pair, into: torch.Tensor, chunk_elems: int) -> torch.Tensor:
    """Fill ``into`` from what :func:`send_whole` sends. Every receive is posted up front: gloo lets
    a sender write a message only once the receiver has announced the matching receive, so posting
    them one by one would cost a round trip per chunk on long links."""
    works = [post_recv(pair, into[part], i) for i, part in grid(0, into.numel(), chunk_elems)]
    for work in works:
        wait(work, pair)
    return into


def post_recv(pair: Pair, into: torch.Tensor, tag: int) -> dist.Work:
    """Post the receive of one chunk from the pair's other end into ``into``."""
    return pair.group.recv([into], pair.peer, tag)


def post_send(pair: Pair, chunk: torch.Tensor, tag: int) -> dist.Work:
    """Post the send of one chunk to the pair's other end."""
    return pair.group.send([chunk], pair.peer, tag)


def wait(work: dist.Work, pair: Pair | None) -> None:
    """Wait for one chunk, at most the pair's timeout."""
    assert pair is not None
    work.wait(pair.timeout)


def bare_transfer(args: list[str]) -> int:
    """One end of a bare transfer, the data plane's baseline (``scripts/bench_dataplane.py``):
    ``args`` are the rank (0 sends), the FileStore path both ends share, this end's address, the
    bytes and the chunk size. It moves that many zeros in chunks and a one-element reply back,
    as a warm-up does, over one connection: what an agent's transfer costs without the agent."""
    rank, store, address, nbytes, chunk_bytes = int(args[0]), Path(args[1]), args[2], int(args[3]), int(args[4])
    pair = open_pair(str(store.parent), store.name, rank=rank, address=address, timeout_s=60, numel=nbytes // 4)
    warm(pair, nbytes // 4, chunk_bytes // 4)
    close_pair(pair)
    return 0
