"""Moving weights over the emulated links: gloo, point to point, chunk by chunk.

Each overlay transfer is its own two-rank gloo process group (rank 0 sends, rank 1 receives)
whose device is bound to the transfer's endpoint address, so its TCP connection follows exactly
the routes installed for that transfer. Rendezvous goes through a FileStore on the shared
filesystem, so it never crosses an emulated link. Weights travel as raw float32 tensors; nothing
received is unpickled. This is the only module that touches ``torch.distributed``.

Relays are pipelined: a chunk is forwarded (or summed and forwarded) as soon as it lands, while
the next one is already being received.

A wait is bounded only by the run's phase timeout: a chunk may take long on a shared link. Deciding
that a transfer has stalled needs the link counters, which only the coordinator sees; when it does,
:func:`abort_connections` wakes every wait of the process.
"""

from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.distributed as dist

SENDER, RECEIVER = 0, 1


@dataclass
class Pair:
    """One end of a transfer's process group."""

    group: dist.ProcessGroupGloo
    rank: int
    name: str
    """The transfer's key (its rendezvous file's name)."""
    timeout: datetime.timedelta = datetime.timedelta(minutes=5)
    """The longest one chunk may take: a guard against a hang, not a judgement on the link."""

    @property
    def peer(self) -> int:
        return 1 - self.rank


def open_pair(store_file: Path, *, rank: int, address: str, timeout_s: float, numel: int) -> Pair:
    """Connect this end of a transfer: blocks (up to ``timeout_s``) until the other end has
    opened it too. Once open, each chunk may take up to ``timeout_s`` too.

    The two ends then agree on the tensor they will move: the sender announces its element
    count in a fixed-size message and the receiver checks it against its own, so a mismatch
    (two versions of a model) is an error naming both sizes. gloo itself would abort the whole
    process on the first message of an unexpected size.
    """
    store = dist.FileStore(str(store_file), 2)
    opts = dist.ProcessGroupGloo._Options()
    opts._devices = [dist.ProcessGroupGloo.create_device(hostname=address)]
    opts._timeout = datetime.timedelta(seconds=timeout_s)
    pair = Pair(dist.ProcessGroupGloo(store, rank, 2, opts), rank, store_file.name,
                datetime.timedelta(seconds=timeout_s))
    count = torch.tensor([numel], dtype=torch.int64)
    if rank == SENDER:
        pair.group.send([count], RECEIVER, 0).wait()
    else:
        pair.group.recv([count], SENDER, 0).wait()
        if int(count) != numel:
            close_pair(pair)
            raise ShapeMismatch(f"{store_file.name}: the sender offers {int(count)} weights, this node expects {numel}")
    return pair


class ShapeMismatch(RuntimeError):
    """The two ends of a transfer disagree on the size of the weights."""


def close_pair(pair: Pair) -> None:
    """Close this end of a transfer's connection (its plan was replaced, or it failed)."""
    try:
        pair.group.shutdown()
    except RuntimeError:  # a pair whose transfer failed may already be half closed
        pass


def abort_connections() -> int:
    """Shut down every connected TCP socket of this process: each gloo wait on them fails at
    once ("connection closed"), and so do the peers' (they read the end of the stream), where
    neither ``ProcessGroupGloo.abort()`` nor ``shutdown()`` wakes a wait that is blocked. Listening
    sockets are left alone: gloo aborts the process when its listener fails. An agent has no
    other TCP connections (its control channel is a Unix socket). Returns how many it shut.
    """
    shut = 0
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
                sock.shutdown(socket.SHUT_RDWR)
                shut += 1
        except OSError:  # not connected (yet, or any more)
            pass
        finally:
            sock.close()  # the duplicate only: gloo's descriptor stays open
    return shut


_DONE_TAG = 1 << 30
"""The tag of the receiver's reply that ends :func:`warm` (beyond any chunk's index)."""


def warm(pair: Pair, numel: int, chunk_elems: int) -> None:
    """Move ``numel`` zeros from sender to receiver in chunks, then a one-element reply back: the
    connection has then carried a model's worth, as a deployment's would after earlier rounds, and
    its data is acknowledged before either end returns, so no ACK of it falls into round 1."""
    zeros, done = torch.zeros(numel), torch.zeros(1)
    if pair.rank == SENDER:
        relay(zeros, source=None, sinks=[pair], chunk_elems=chunk_elems)
        _wait(pair.group.recv([done], pair.peer, _DONE_TAG), pair)
    else:
        relay(zeros, source=pair, sinks=[], chunk_elems=chunk_elems)
        _wait(pair.group.send([done], pair.peer, _DONE_TAG), pair)


def chunks(numel: int, chunk_elems: int) -> list[slice]:
    """Contiguous slices covering ``numel`` elements, ``chunk_elems`` at a time.

    >>> chunks(5, 2)
    [slice(0, 2, None), slice(2, 4, None), slice(4, 5, None)]
    """
    return [slice(s, min(s + chunk_elems, numel)) for s in range(0, numel, chunk_elems)]


def relay(
    buf: torch.Tensor,
    *,
    source: Pair | None,
    sinks: Sequence[Pair],
    chunk_elems: int,
    received: Callable[[Pair], None] | None = None,
) -> torch.Tensor:
    """Broadcast step at one node: fill ``buf`` from ``source`` (or use it as it is when there is
    no source) and forward every chunk to each sink as soon as it is complete. ``received`` is
    told once the source's last chunk is in.

    Every receive is posted up front: gloo lets a sender write a message only once the receiver
    has announced the matching receive, so posting them one by one would cost a round trip per
    chunk on long links.
    """
    parts = chunks(buf.numel(), chunk_elems)
    recvs = _recv_all(source, buf, parts)
    sends = []
    for i, part in enumerate(parts):
        if recvs:
            _wait(recvs[i], source)
            if i == len(parts) - 1 and received is not None:
                received(source)
        sends += [(s.group.send([buf[part]], s.peer, i), s) for s in sinks]
    for work, sink in sends:
        _wait(work, sink)
    return buf


def aggregate(
    acc: torch.Tensor,
    *,
    sources: Sequence[Pair],
    sink: Pair | None,
    chunk_elems: int,
    received: Callable[[Pair], None] | None = None,
) -> torch.Tensor:
    """Upload step at one node: add every source's tensor into ``acc`` chunk by chunk and forward
    each summed chunk to ``sink`` at once (in-path partial aggregation: one tensor goes up).
    ``received`` is told of each source once its last chunk is in."""
    parts = chunks(acc.numel(), chunk_elems)
    bufs = [torch.empty_like(acc) for _ in sources]
    recvs = [_recv_all(src, b, parts) for src, b in zip(sources, bufs)]
    sends = []
    for i, part in enumerate(parts):
        for works, b, src in zip(recvs, bufs, sources):
            _wait(works[i], src)
            acc[part] += b[part]
            if i == len(parts) - 1 and received is not None:
                received(src)
        if sink is not None:
            sends.append(sink.group.send([acc[part]], sink.peer, i))
    for work in sends:
        _wait(work, sink)
    return acc


def _wait(work: dist.Work, pair: Pair | None) -> None:
    """Wait for one chunk, at most the pair's timeout."""
    assert pair is not None
    work.wait(pair.timeout)


def _recv_all(src: Pair | None, buf: torch.Tensor, parts: list[slice]) -> list[dist.Work]:
    """Post a receive for every chunk of ``buf`` from ``src`` at once (none without a source)."""
    if src is None:
        return []
    return [src.group.recv([buf[part]], src.peer, i) for i, part in enumerate(parts)]
