"""Transfers over real gloo pairs on loopback: weights arrive as sent, and a size mismatch is an
error for the receiver, not an abort of its process (which gloo itself would do)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

import torch

from fedmst.workers import transport


def _both_ends(store: Path, sender: Callable[[transport.Pair], object], receiver: Callable[[transport.Pair], object],
               numel: tuple[int, int]) -> dict[int, object]:
    """Open one transfer on 127.0.0.1 from two threads and run each end's part; return what each
    end returned or raised."""
    results: dict[int, object] = {}

    def end(rank: int, part: Callable[[transport.Pair], object]) -> None:
        try:
            pair = transport.open_pair(str(store.parent), store.name, rank=rank, address="127.0.0.1", timeout_s=20,
                                       numel=numel[rank])
            results[rank] = part(pair)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            results[rank] = exc

    threads = [threading.Thread(target=end, args=(r, p)) for r, p in enumerate((sender, receiver))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


def test_weights_arrive_as_sent_chunk_by_chunk(tmp_path: Path) -> None:
    sent = torch.arange(10, dtype=torch.float32)
    got = _both_ends(
        tmp_path / "t",
        lambda p: transport.send_whole(p, sent.clone(), chunk_elems=3),
        lambda p: transport.recv_whole(p, torch.empty(10), chunk_elems=3),
        numel=(10, 10),
    )
    assert torch.equal(got[1], sent)


def test_a_size_mismatch_is_an_error_naming_both_sizes(tmp_path: Path) -> None:
    got = _both_ends(tmp_path / "task0-000-broadcast", lambda p: "sent", lambda p: "never", numel=(5, 4))
    assert isinstance(got[1], transport.ShapeMismatch)
    assert "task0-000-broadcast" in str(got[1]) and "offers 5 weights" in str(got[1]) and "expects 4" in str(got[1])



def test_aborting_the_connections_wakes_a_blocked_wait(tmp_path: Path) -> None:
    """The sender never sends (as behind a dead link): the receiver's wait, bounded only by the
    20 s timeout, fails with "connection closed" once ``abort_connections`` shut its socket (not with
    gloo's timeout error), and the process lives on."""
    shut: list[int] = []
    received = threading.Event()

    def receive(pair: transport.Pair) -> object:
        abort = threading.Timer(0.2, lambda: shut.append(transport.abort_connections()))
        abort.start()
        try:
            return transport.recv_whole(pair, torch.empty(4), chunk_elems=4)
        except RuntimeError as exc:
            return exc
        finally:
            abort.join()
            received.set()  # only now may the sender's end close

    got = _both_ends(tmp_path / "t", lambda p: received.wait(30), receive, numel=(4, 4))
    assert "Connection closed" in str(got[1]) and "Timed out" not in str(got[1])
    assert shut and shut[0] >= 1  # the abort shut the pair's sockets: nothing else closed them


def test_idle_loops_slow_only_the_connections_loops_where_closing_can_wake_them(tmp_path: Path) -> None:
    """Once a connection is open, its two event loops (one an end) get the idle slack, and no
    other thread does, but only where the process handles WAKE_SIGNAL; closed and dropped while
    their loops are woken, the connections' loops end."""
    import gc
    import signal

    pairs = _both_ends(tmp_path / "t", lambda p: p, lambda p: p, numel=(4, 4))
    before = signal.getsignal(transport.WAKE_SIGNAL)
    try:
        assert transport.idle_loops() == 0  # nothing could wake them: left as they were
        assert transport.enable_loop_wakes()
        assert transport.idle_loops() >= 2  # and any connection of an earlier test still open
        idle = transport._loop_threads((transport.IDLE_LOOP_SLACK_NS,))
        assert not set(idle) & {t.native_id for t in threading.enumerate()}  # gloo's threads, not Python's
        transport.close_all([pairs])  # type: ignore[list-item]
        gc.collect()
    finally:
        signal.signal(transport.WAKE_SIGNAL, before)
    assert len(set(idle) - set(transport._loop_threads((transport.IDLE_LOOP_SLACK_NS,)))) >= 2
