"""The one shape of fedmst's JSON input files: an object holding one list of entries.

Workload files (``{"tasks": [...]}``), background traffic (``{"flows": [...]}``) and link traces
(``{"changes": [...]}``) are read here, so that a missing file, a file that is not JSON and one of
the wrong shape are refused the same way, in one line naming the option and the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedmst.errors import FedmstError


def read_entries(path: str | Path, where: str, key: str, error: type[FedmstError] = FedmstError) -> list[Any]:
    """The list under ``key`` of the JSON object in ``path``; ``where`` (e.g. ``--workload FILE``)
    starts every error message, raised as ``error``."""
    try:
        raw = json.loads(Path(path).read_text())
    except OSError as exc:
        raise error(f"{where}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise error(f"{where}: not JSON: {exc}") from None
    if not isinstance(raw, dict) or set(raw) != {key} or not isinstance(raw[key], list):
        raise error(f'{where}: expected {{"{key}": [...]}}')
    return raw[key]


__all__ = ["read_entries"]
