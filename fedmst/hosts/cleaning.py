"""``fedmst clean`` on one host, and on every host of a Ray cluster: a run spread over several
hosts leaves its parts on each of them when it is killed."""

from __future__ import annotations


def clean_here() -> list[str]:
    """What this host's dead runs left (network, processes, containers), removed: one line each."""
    from fedmst.net.cleanup import clean as clean_network
    from fedmst.workers.docker import clean_dead

    done = [line for line in clean_network() if line != "nothing to clean"] + clean_dead()
    return done or ["nothing to clean"]


def clean_everywhere() -> list[str]:
    """:func:`clean_here` on every host of the Ray cluster this process joined that offers an
    emulation slot (a task pinned to each), every line prefixed with the host's address."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from fedmst.hosts.raycluster import cluster_hosts

    task = ray.remote(num_cpus=0, max_retries=0)(clean_here)
    hosts = cluster_hosts()
    found = ray.get([task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
                     for node in hosts.values()])
    return [f"{host}: {line}" for host, lines in zip(hosts, found) for line in lines]
