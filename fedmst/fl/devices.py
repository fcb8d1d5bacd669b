"""Where local models train: ``--device auto|cpu|cuda[:N]``.

``cpu`` trains each local model in its agent's process, as fedmst always has. ``cuda`` trains them
on one GPU of the host through one trainer process (:mod:`fedmst.workers.gputrainer`): a CUDA
context costs some hundreds of MB of GPU memory, so one per agent would not scale to a host of
dozens of local models; the trainer holds one, the dataset once, and one model at a time.
``auto`` is ``cuda:0`` where torch sees a GPU, else ``cpu``.
"""

from __future__ import annotations

import re
from pathlib import Path

from fedmst.errors import FedmstError

DRIVER = "/proc/driver/nvidia"
"""What NVIDIA's kernel driver makes: without it, no GPU can be used."""


def device_ok(value: str) -> bool:
    """Whether ``value`` is written as ``--device`` takes it.

    >>> [device_ok(v) for v in ("auto", "cpu", "cuda", "cuda:1", "cuda:x", "gpu")]
    [True, True, True, True, False, False]
    """
    return value in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d+", value) is not None


def resolve_device(asked: str) -> str:
    """``cpu`` or ``cuda:N`` for ``--device asked`` on this host; a GPU it lacks is refused in one line."""
    if asked == "cpu" or (asked == "auto" and not Path(DRIVER).exists()):  # no driver: no need to load torch
        return "cpu"
    if not Path(DRIVER).exists():
        raise FedmstError(f"--device {asked}: this host has no CUDA device: no NVIDIA driver ({DRIVER} is missing); "
                          "use --device cpu")
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if asked == "auto":
        return "cuda:0" if count else "cpu"
    index = int(asked.partition(":")[2] or 0)
    if count == 0:
        why = (f"torch {torch.__version__} is built without CUDA (scripts/setup.sh --vision installs PyPI's build, "
               "which has it)" if torch.version.cuda is None else "torch finds no NVIDIA GPU or driver")
        raise FedmstError(f"--device {asked}: this host has no CUDA device: {why}; use --device cpu")
    if index >= count:
        raise FedmstError(f"--device {asked}: this host has {count} GPU{'s' if count > 1 else ''} "
                          f"(cuda:0{f' to cuda:{count - 1}' if count > 1 else ''})")
    return f"cuda:{index}"
