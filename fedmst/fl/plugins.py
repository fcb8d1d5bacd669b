"""Finding what a user names as ``package.module:attribute``: models and datasets alike.

One function, so that a mistyped module and a missing attribute read the same whether the user
was naming a model or a dataset.
"""

from __future__ import annotations

import importlib
from typing import Any


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line: how a user's own code failing is reported."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def import_object(spec: str, what: str, error: type[Exception]) -> Any:
    """The object ``package.module:attribute`` names; ``error`` (with ``what`` and the spec in its
    message) when the module cannot be imported or lacks the attribute.

    >>> import_object("math:pi", "constant", ValueError)
    3.141592653589793
    >>> import_object("math:tau2", "constant", ValueError)
    Traceback (most recent call last):
    ...
    ValueError: constant 'math:tau2': module 'math' has no attribute 'tau2'
    """
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the spec's fault
        raise error(f"{what} {spec!r}: cannot import module {module_name!r} ({one_line(exc)})") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise error(f"{what} {spec!r}: module {module_name!r} has no attribute {attr!r}") from None
