"""What ran the agents, as ``summary.json``'s ``workers`` records it.

A module of its own, with no imports, so that the backends that describe themselves and the
report that reads the description share one record without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class BackendDescription:
    """A worker backend as a run used it: its ``backend`` name and, for a container backend, the
    ``image`` and each node's resource ``limits``."""

    backend: str
    image: str | None = None
    limits: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``processes`` or ``BACKEND (IMAGE)``, for a table's caption."""
        if self.backend == "process":
            return "processes"
        return f"{self.backend} ({self.image})" if self.image else self.backend

    def to_json(self) -> dict[str, Any]:
        """The ``workers`` object: ``backend`` alone, or with ``image`` and ``limits`` when it has an image."""
        if self.image is None:
            return {"backend": self.backend}
        limits = {n: dict(lim) for n, lim in self.limits.items()}
        return {"backend": self.backend, "image": self.image, "limits": limits}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> BackendDescription:
        return cls(backend=str(obj["backend"]), image=obj.get("image"), limits=obj.get("limits") or {})
