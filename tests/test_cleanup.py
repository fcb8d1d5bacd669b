"""``fedmst clean`` puts Ray's address file back once scripts/ray-local.sh's cluster is gone: what it
held before the script started, or nothing; never while something listens at the address it names,
nor where it names another cluster (pure: temporary files, a local port)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from fedmst.net.cleanup import restore_ray_address


def _closed_port() -> str:
    """A local port where nothing listens (bound once, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


@pytest.mark.parametrize("before, after", [
    ("198.51.100.7:6379", "198.51.100.7:6379"),  # the user's cluster, kept by the script's start
    (None, None),  # nothing then
    ("127.0.0.1:{port}", None),  # a stopped cluster of the script then too (a killed one's leftover)
])
def test_the_file_naming_the_stopped_cluster_gets_back_what_it_held(
        tmp_path: Path, before: str | None, after: str | None) -> None:
    port = _closed_port()
    address, saved = tmp_path / "ray_current_cluster", tmp_path / "saved"
    address.write_text(f"127.0.0.1:{port}")
    if before is not None:
        saved.write_text(before.format(port=port))
    (line,) = restore_ray_address(address, saved, port)
    assert (address.read_text() if address.exists() else None) == after, line
    assert not saved.exists()


def test_the_file_is_left_alone_while_the_cluster_listens_or_where_it_names_another(tmp_path: Path) -> None:
    address, saved = tmp_path / "ray_current_cluster", tmp_path / "saved"
    saved.write_text("198.51.100.7:6379")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = str(server.getsockname()[1])
        address.write_text(f"127.0.0.1:{port}")
        assert restore_ray_address(address, saved, port) == []
    address.write_text(f"127.0.0.1:{_closed_port()}")
    assert restore_ray_address(address, saved, port) == []
    assert restore_ray_address(tmp_path / "absent", saved, port) == []
    assert saved.read_text() == "198.51.100.7:6379"
