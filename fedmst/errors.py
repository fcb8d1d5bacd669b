"""One exception family, so the CLI can turn any of them into a one-line error.

Every message names the input at fault (a file, a node, a model) and what is wrong with it.
"""


SET_UP_ALL = "scripts/setup.sh --all"
"""What installs the tools and extras only some options need (tcpdump, clang and bpftool, Ray,
Flower): every error that finds one missing names it."""


class FedmstError(Exception):
    """Base of every error fedmst raises on purpose."""


class TopologyError(FedmstError):
    """A topology file or graph is malformed, disconnected, or has bad link parameters."""


class TaskError(FedmstError):
    """A task cannot be placed: unknown node, too many local models for the data, ..."""


class SchedulerError(FedmstError):
    """Unknown scheduler, or a scheduler produced an invalid plan."""


class ModelError(FedmstError):
    """Unknown model name, or a model factory that fails or returns a non-module."""


class DatasetError(FedmstError):
    """Unknown dataset name, or a dataset factory that fails or returns malformed tensors."""


class ClientError(FedmstError):
    """A Flower client (``--client``) that cannot be loaded, fails, or returns malformed weights."""


class EmulationError(FedmstError):
    """The emulated network or one of its agents failed."""


class WorkerDied(EmulationError):
    """The agent on ``node`` died: fatal, unless the round can go on with the other workers."""

    def __init__(self, node: str, message: str) -> None:
        super().__init__(message)
        self.node = node
