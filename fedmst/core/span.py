"""A phase span: when one phase of one round of one task ran (or is predicted to run).

One record for the agents' reports (:class:`fedmst.protocol.RoundsDone`), the predicted timeline
(:func:`fedmst.core.contention.simulate`) and the measured one; no imports, so the protocol stays light.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PhaseSpan:
    """One phase of one round of one task (as a node ran it, or as the task did), in seconds
    from the run's common start."""

    task: str
    round: int
    phase: str
    start_s: float
    end_s: float
