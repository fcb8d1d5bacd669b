"""Where a run's agents meet their coordinator and one another: the control server's terms, the
rendezvous of each set of transfers, and the files the coordinator leaves for the agents.

On one host that is a Unix socket and folders of FileStores in the run's scratch folder, which
every namespace sees (:class:`LocalMeeting`); an emulation spread over hosts meets through relays
and one store server instead (:class:`fedmst.hosts.spanned.SpannedMeeting`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class Meeting(Protocol):
    def rendezvous(self, scratch: Path, name: str) -> str:
        """Where a set of transfers named ``name`` meets: an agent spec's ``store_dir``."""

    def control_terms(self) -> dict[str, object]:
        """The keywords the control server is made with (:class:`fedmst.workers.control.ControlServer`)."""

    def relay(self, control: Path, port: int | None, token: str) -> None:
        """Make the control server at ``control`` (and TCP ``port``) reachable to every agent."""

    def unrelay(self, control: Path) -> None:
        """Stop carrying agents to the control server at ``control`` (its session is over)."""

    def spread(self, path: Path) -> None:
        """Hand a file the coordinator wrote in the run's folders (an abort mark) to every agent."""


class LocalMeeting:
    """One host: every agent reaches the run's scratch folder, where the control socket and the
    rendezvous files are."""

    def rendezvous(self, scratch: Path, name: str) -> str:
        (scratch / name).mkdir()
        return str(scratch / name)

    def control_terms(self) -> dict[str, object]:
        return {}

    def relay(self, control: Path, port: int | None, token: str) -> None:
        """Nothing to carry: the agents reach the Unix socket itself."""

    def unrelay(self, control: Path) -> None:
        """Nothing was carried."""

    def spread(self, path: Path) -> None:
        """Nothing to hand on: the agents read the file where it was written."""
