"""Counts in sentences for people: ``1 round`` but ``2 rounds``. No imports, so every layer, the
pure core included, words its counts the same way."""

from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, the noun plural (an ``s`` added) unless ``n`` is 1.

    >>> counted(1, "round"), counted(5, "round"), counted(0, "local model"), counted(1, "link direction")
    ('1 round', '5 rounds', '0 local models', '1 link direction')
    """
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
