"""What fedmst compiles on the host that runs it (BPF objects, the delay line), cached by content.

Built on the host rather than shipped because each build depends on that host: the BPF objects
on its kernel's types, the delay line on its libnetfilter_queue. Keyed by a digest of everything
that goes into a build, so a second run builds nothing and a changed source builds afresh.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Callable

CACHE_ROOT = Path(os.environ.get("FEDMST_CACHE_DIR", "/var/cache/fedmst"))


def digest(*parts: bytes) -> str:
    """A short digest of ``parts`` (each hashed apart, so their boundaries count).

    >>> digest(b"ab", b"c") == digest(b"a", b"bc")
    False
    """
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:20]


def cached(path: Path, make: Callable[[Path], None]) -> Path:
    """``path``, made by ``make(temporary)`` and renamed into place if not there yet (two runs
    building it at once each write their own and the last rename wins, unharmed)."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        make(Path(tmp))
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path
