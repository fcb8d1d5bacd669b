"""Sweep points as Ray tasks: independent runs spread over the hosts of a Ray cluster.

Why Ray: a sweep's points are independent runs, the natural unit to spread over machines, and Ray
already schedules tasks over a cluster, retries a task whose node dies, and lets each host say
what it offers. A host offers one unit of the custom resource :data:`SLOT` when it can run an
emulation (root, Mininet, the README's setup done), so each node runs one point at a time; two
runs on one host would be isolated (:mod:`fedmst.net.cleanup`) but would share its CPUs.

A point is planned once, by the command (so bad input fails before anything runs), and runs on
its node into a scratch folder whose files come back to the command's ``sweep`` folder: the nodes
need not share a file system. The node decides the delay mechanism for its own kernel.

Ray is an optional extra (``pip install -e '.[ray]'``): imported only here, only with ``--ray``.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Hashable, Mapping

from fedmst.errors import FedmstError
from fedmst.hosts.raycluster import SLOT
from fedmst.net.cleanup import point_prefix
from fedmst.run.prepare import ResolvedRun
from fedmst.run.report import Summary

RETRIES = 3
"""Times a point is run again when its node dies (Ray moves it to a node that lives)."""
SLOT_CHECK_S = 10.0
"""While no point comes back, how often the sweep checks that some node still offers a slot
(Ray would wait for one forever)."""


@dataclass(frozen=True)
class Finished:
    """One point run on a Ray node: where, its summary (None where it failed, with ``error``
    saying why in one line), and its run folder's files, which come back either way."""

    node: str
    """The first 8 hex digits of the Ray node's id."""
    summary: Summary | None
    files: Mapping[str, bytes]
    """Path inside the run folder -> content."""
    error: str | None = None


def run_points(resolved: Mapping[Hashable, ResolvedRun], finished: Callable[[Hashable, Finished], None]) -> None:
    """Run every point on the cluster :func:`fedmst.hosts.raycluster.connect` joined, at most one per slot, calling
    ``finished`` as each comes back (in the order they finish), a failed one too (its run folder
    is worth reading). Whatever ``finished`` raises stops the sweep, as does a point Ray gives up
    on, or a cluster left without any emulation slot (its nodes gone): the points not started are
    cancelled, those running are interrupted and torn down."""
    import ray

    remote = ray.remote(num_cpus=0, resources={SLOT: 1}, max_retries=RETRIES)(_run_point)
    pending = {remote.remote(run): key for key, run in resolved.items()}
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=SLOT_CHECK_S)
            if not ready:
                if not ray.cluster_resources().get(SLOT, 0):
                    raise FedmstError(f"no Ray node offers an emulation slot any more (the nodes that did are "
                                      f"gone): {len(pending)} point(s) not run")
                continue
            (ref,) = ready
            key = pending.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause if isinstance(exc.cause, BaseException) else exc
                raise FedmstError(f"point {key}: {' '.join(str(cause).split())}") from None
            except ray.exceptions.RayError as exc:
                raise FedmstError(f"point {key}: Ray gave up on it ({type(exc).__name__}: "
                                  f"{' '.join(str(exc).split())[:200]})") from None
            finished(key, result)
    finally:
        for ref in pending:  # not started: dropped; running: KeyboardInterrupt, which the run tears down
            ray.cancel(ref)
        if pending:
            ray.wait(list(pending), num_returns=len(pending), timeout=120)
        ray.shutdown()


def _run_point(run: ResolvedRun) -> Finished:
    """On the Ray node: check this host, run the point into a scratch folder, send its files back."""
    import ray

    from fedmst.run.prepare import check_host
    from fedmst.run.engine import run as run_here

    node = ray.get_runtime_context().get_node_id()[:8]
    summary, error = None, None
    with tempfile.TemporaryDirectory(prefix=point_prefix()) as scratch:
        folder = Path(scratch) / "run"
        try:
            host = check_host(run.config)  # this node cannot emulate: said like any failed point
            run = replace(run, delay_mode=host.delay_mode, netem_available=host.netem_available,
                          transport=host.transport)
            summary = run_here(replace(run, config=replace(run.config, out=str(folder))), report=lambda _: None)
        except FedmstError as exc:  # bad luck or this host's fault, not a bug: its folder says more
            error = str(exc).replace(str(folder), "the run folder")  # this scratch is gone: the folder is sent back
        files = {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
    return Finished(node=node, summary=summary, files=files, error=error)


def unpack(files: Mapping[str, bytes], folder: Path) -> None:
    """Write a point's files into its run folder here."""
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
