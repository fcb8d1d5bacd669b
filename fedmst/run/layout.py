"""Where each scheduler's run lives inside a compare (or sweep) folder.

One rule shared by the code that writes these folders and the views that read them back, so a
scheduler given as ``package.module:Class`` lands in, and is found in, the same folder.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


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
