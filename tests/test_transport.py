"""Transfers over real gloo pairs on loopback: weights arrive as sent, and a size mismatch is an
error for the receiver, not an abort of its process (which gloo itself would do)."""

from __future__ import annotations

import threading
import time
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
            pair = transport.open_pair(store, rank=rank, address="127.0.0.1", timeout_s=20, numel=numel[rank])
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
    20 s timeout, fails within a moment of ``abort_connections`` and the process lives on."""
    def receive(pair: transport.Pair) -> object:
        threading.Timer(0.5, transport.abort_connections).start()
        started = time.monotonic()
        try:
            return transport.recv_whole(pair, torch.empty(4), chunk_elems=4)
        except RuntimeError as exc:
            return exc, time.monotonic() - started

    got = _both_ends(tmp_path / "t", lambda p: threading.Event().wait(5), receive, numel=(4, 4))
    error, waited = got[1]
    assert "Connection closed" in str(error) and waited < 2
