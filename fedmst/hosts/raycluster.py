"""Joining a Ray cluster, the one way every ``--ray ADDRESS`` does (``sweep``'s points, a run
spread over hosts, ``clean``), and the hosts it offers.

Ray is an optional extra (``pip install -e '.[ray]'``): imported only inside these functions.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Mapping

from fedmst.errors import SET_UP_ALL, FedmstError

SLOT = "fedmst_emulation"
"""The custom resource a Ray node offers once per emulation it can run at a time."""
PROBE_S = 3.0
"""How long :func:`connect` waits for a TCP connection to the cluster's address before it gives up
(Ray itself retries an address where nothing listens for minutes, without a word)."""
def connect(address: str) -> None:
    """Join the Ray cluster at ``address`` (``auto``: the one running on this host), or fail in
    one line saying what is missing (Ray, the cluster, a node offering an emulation slot)."""
    # With RAY_AUTH_MODE unset, Ray's token authentication depends on how a process starts:
    # ray.init("auto") and `ray start --head` turn it on once ~/.ray/auth_token exists, an explicit
    # address and `ray start --address` never do. One rule for every address, that of
    # scripts/ray-local.sh's nodes: the user's RAY_AUTH_MODE, else disabled. Set before Ray is
    # imported, which reads it once.
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    try:
        import ray
    except ImportError:
        raise FedmstError(f"--ray needs Ray: pip install -e '.[ray]' ({SET_UP_ALL} does)") from None
    import logging

    _probe(address)
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise FedmstError(f"--ray {address}: no Ray cluster there ({' '.join(str(exc).split())[:200]}); "
                          "start one with scripts/ray-local.sh start N or `ray start --head`") from None
    if not ray.cluster_resources().get(SLOT, 0):
        ray.shutdown()
        raise FedmstError(f"--ray {address}: no node offers an emulation slot; start each node with "
                          f"--resources '{{\"{SLOT}\": 1}}' (scripts/ray-local.sh does)")


def _probe(address: str) -> None:
    """Fail in one line, within :data:`PROBE_S`, where nothing accepts a TCP connection at a
    ``host:port`` (or ``ray://host:port``) address; ``auto`` is left to Ray, which looks it up."""
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_S):
            pass
    except (OSError, OverflowError) as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise FedmstError(f"--ray {address}: no Ray cluster there (nothing accepts a connection: {reason}); "
                          "start one with scripts/ray-local.sh start N or `ray start --head`") from None


def on_each(cls: type, hosts: Mapping[str, str], *args: Any, **options: Any) -> dict[str, Any]:
    """One Ray actor of ``cls`` per host (address -> Ray node id), pinned to that host's node and
    built as ``cls(host, *args)`` with Ray's actor ``options``, on the cluster this process joined."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(num_cpus=0)(cls)
    return {host: remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                                 **options).remote(host, *args)
            for host, node in hosts.items()}


def cluster_hosts(others: bool = False) -> dict[str, str]:
    """The hosts of the Ray cluster this process joined that can run an emulation: each node's
    address (the host's name in every record) -> its Ray node id, in address order; ``others``: not
    this host (a spread run's coordinator holds no node, and its run id is taken here)."""
    import psutil
    import ray

    here = {a.address for found in psutil.net_if_addrs().values() for a in found} if others else set()
    nodes = {n["NodeManagerAddress"]: n["NodeID"] for n in ray.nodes()
             if n["Alive"] and n["Resources"].get(SLOT) and n["NodeManagerAddress"] not in here}
    return dict(sorted(nodes.items(), key=lambda item: tuple(int(p) if p.isdigit() else p
                                                              for p in item[0].split("."))))
