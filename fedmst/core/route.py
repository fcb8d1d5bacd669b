"""A transfer's route: its ends and the link directions it crosses, from its node path.

Shared by the plan's :class:`~fedmst.core.plan.Transfer` and the agents' view of one
(:class:`fedmst.protocol.TransferSpec`); no imports, so the protocol stays light.
"""

from __future__ import annotations

LinkDir = tuple[str, str]
"""A link direction ``(u, v)``: bytes sent by u towards v."""


class Along:
    """Ends and hops of something that travels along ``path``.

    >>> class T(Along):
    ...     path = ("a", "b", "c")
    >>> T().src, T().dst, T().hops
    ('a', 'c', (('a', 'b'), ('b', 'c')))
    """

    path: tuple[str, ...]

    @property
    def src(self) -> str:
        return self.path[0]

    @property
    def dst(self) -> str:
        return self.path[-1]

    @property
    def hops(self) -> tuple[LinkDir, ...]:
        return tuple(zip(self.path, self.path[1:]))
