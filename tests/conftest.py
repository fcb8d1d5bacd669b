"""Shared fixtures: integration tests prove they leave no namespace, interface or process."""

from __future__ import annotations

import re
import subprocess
from typing import Iterator

import psutil
import pytest

from fedmst.cleanup import OURS, STATE_DIR


def leftovers() -> list[str]:
    """Emulated interfaces in the root namespace, fedmst processes still alive, named network
    namespaces, and clean-up state files of runs that did not finish their teardown."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found = [f"interface {m}" for m in re.findall(r"^\d+: (fm[\w-]+)", links, re.M)]
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if OURS.search(cmdline):
            found.append(f"process {proc.info['pid']}: {cmdline[:80]}")
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    states = sorted(STATE_DIR.glob("*.json")) if STATE_DIR.exists() else []
    return found + [f"netns {n}" for n in netns] + [f"state file {s}" for s in states]


@pytest.fixture
def clean_host() -> Iterator[None]:
    """Fail a test that leaves anything behind (checked even when the test itself fails)."""
    before = leftovers()
    assert not before, f"host not clean before the test: {before}"
    yield
    after = leftovers()
    assert not after, f"left behind: {after}"
