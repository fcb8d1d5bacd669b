"""Where each scheduler's run lives inside a compare (or sweep) folder, and the records those
folders keep.

One rule shared by the code that writes these folders and the views that read them back, so a
scheduler given as ``package.module:Class`` lands in, and is found in, the same folder.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
COMPARISON = "comparison.json"
"""A compare's record: how it ended, every scheduler's summary and their ratios to the baseline."""
SWEEP_RECORD = "sweep.json"
"""How a sweep ended: ``status`` (as a run's), and ``points_done`` of its ``points``."""


def run_folder_name(scheduler: str) -> str:
    """The run folder's name for ``scheduler``: every character outside ``[A-Za-z0-9._-]`` becomes ``_``,
    so a module path makes one plain folder name, never a path or a name the shell must quote.

    >>> run_folder_name("mst")
    'mst'
    >>> run_folder_name("mypkg.mod:MySched")
    'mypkg.mod_MySched'
    >>> run_folder_name("a/b c")
    'a_b_c'
    """
    return _UNSAFE.sub("_", scheduler)
