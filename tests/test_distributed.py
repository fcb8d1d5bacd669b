"""``--ray`` at an address where no cluster answers fails in one line, without waiting on Ray
(which retries such an address for minutes without a word). Needs Ray installed, no cluster."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fedmst.errors import FedmstError
from fedmst.hosts import raycluster as distributed

pytest.importorskip("ray")


def _closed_port() -> int:
    """A local port where nothing listens (bound once, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("form", ["127.0.0.1:{}", "ray://127.0.0.1:{}", "localhost:{}"])
def test_an_address_where_nothing_listens_is_refused_before_ray_is_asked(
        form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    def never(*_: object, **__: object) -> None:
        raise AssertionError("ray.init was called for an address where nothing listens")

    monkeypatch.setattr(ray, "init", never)
    address = form.format(_closed_port())
    with pytest.raises(FedmstError) as error:
        distributed.connect(address)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"--ray {address}: no Ray cluster there")
    assert "ray-local.sh start" in message


def test_a_listening_address_is_handed_to_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    asked: list[str] = []

    def init(address: str, **_: object) -> None:
        asked.append(address)
        raise ConnectionError("not a Ray cluster")

    monkeypatch.setattr(ray, "init", init)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        with pytest.raises(FedmstError, match="no Ray cluster there .*not a Ray cluster"):
            distributed.connect(address)
    assert asked == [address]


@pytest.mark.parametrize("users", [None, "token", "disabled"])
def test_the_driver_joins_with_the_user_s_ray_auth_mode_else_none(
        users: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray turns token authentication on for ``auto`` where ~/.ray/auth_token exists but not for an
    explicit address: the driver sets RAY_AUTH_MODE (as scripts/ray-local.sh does for its nodes)
    unless the user did."""
    import ray

    seen: list[str | None] = []

    def init(address: str, **_: object) -> None:
        seen.append(os.environ.get("RAY_AUTH_MODE"))
        raise ConnectionError("not a Ray cluster")

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setenv("RAY_AUTH_MODE", users or "")
    if users is None:
        monkeypatch.delenv("RAY_AUTH_MODE")  # set first, so that the test's end removes what connect sets
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with pytest.raises(FedmstError):
            distributed.connect(f"127.0.0.1:{server.getsockname()[1]}")
    assert seen == [users or "disabled"]


def test_clean_at_an_address_without_a_cluster_stops_in_one_line_before_cleaning() -> None:
    """``fedmst clean --ray ADDRESS`` where nothing listens: exit 1, one line, nothing cleaned here either."""
    address = f"127.0.0.1:{_closed_port()}"
    proc = subprocess.run([str(Path(sys.executable).with_name("fedmst")), "clean", "--ray", address],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stdout == "", (proc.stdout, proc.stderr)
    assert proc.stderr.strip().splitlines() == [f"fedmst: error: --ray {address}: no Ray cluster there (nothing "
                                                "accepts a connection: Connection refused); start one with "
                                                "scripts/ray-local.sh start N or `ray start --head`"]
