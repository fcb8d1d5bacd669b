"""A job: one FL task that arrives at a cluster at ``submit_s`` and asks for compute.

A job holds one slot per local model and one for its global model G from the moment it is
placed until it ends (:mod:`fedmst.core.cluster.slots`). What a trace leaves out (``None``) takes
the command's option when the job is resolved (:meth:`Job.filled`), as a workload file's tasks do.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fedmst.errors import FedmstError


class JobError(FedmstError):
    """A job trace that cannot be read, or a job no cluster could run."""


@dataclass(frozen=True)
class Job:
    """One job of a trace: ``local_models`` local models training for ``rounds`` rounds, arriving
    ``submit_s`` seconds (the network's) after the trace begins."""

    name: str
    submit_s: float
    local_models: int
    rounds: int | None = None
    model: str | None = None
    dataset: str | None = None
    epochs: int | None = None
    compute_s: float | None = None
    priority: int = 0
    """Larger is more important; read from traces for the policies to come, unused by fifo."""

    @property
    def slots(self) -> int:
        """Slots the job holds while it runs: one per local model and one for G.

        >>> Job("j", 0.0, local_models=3).slots
        4
        """
        return self.local_models + 1

    def filled(self, *, rounds: int, model: str, dataset: str, epochs: int, compute_s: float) -> Job:
        """The job with the command's options where its trace said nothing.

        >>> Job("j", 0.0, 2, rounds=5).filled(rounds=2, model="mlp", dataset="digits", epochs=1, compute_s=0.0).rounds
        5
        """
        return replace(self, rounds=rounds if self.rounds is None else self.rounds,
                       model=self.model or model, dataset=self.dataset or dataset,
                       epochs=epochs if self.epochs is None else self.epochs,
                       compute_s=compute_s if self.compute_s is None else self.compute_s)


__all__ = ["Job", "JobError"]
