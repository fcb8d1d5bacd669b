"""The host agent: one host's share of an emulation placed on several, built where it runs.

A coordinator starts one :class:`HostAgent` per host as a Ray actor pinned to that host's node
(:func:`start_host_agents`); each claims the run's id on its host, builds the nodes placed there
with a tunnel end for each link to another host (:class:`fedmst.net.emulation.Emulation` with a
:class:`fedmst.net.tunnels.HostShare`), and answers the coordinator's calls about them. Whatever
it made goes when it closes, or, where it was killed, with ``fedmst clean`` on its host.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import networkx as nx

from fedmst.hosts.relay import ControlRelay, HostPaths, Mirror, Relay
from fedmst.net.cleanup import RunState
from fedmst.net.emulation import Emulation
from fedmst.net.processes import Process
from fedmst.net.routes import Flow
from fedmst.net.tunnels import HostShare
from fedmst.protocol import Files


FILES_PER_CALL = 48 * 1024
"""Bytes of files one :meth:`HostAgent.files` call returns at most: base64 makes them 64 KB, under
Ray's 100 KB for a value returned inline."""


class HostAgent:
    """This host's share of run ``run_id``: ``build`` it, drive it, ``close`` it. The run's folders
    (the coordinator's scratch folder and run folder) each get a folder of their own here, under the
    run's scratch folder, which :meth:`relay` mirrors back."""

    def __init__(self, host: str, run_id: str) -> None:
        self.host = host
        self._run = RunState(run_id)
        self._emulation: Emulation | None = None
        self._paths = HostPaths({})
        self._mirror: Mirror | None = None
        self._store: Relay | None = None
        self._controls: dict[str, ControlRelay] = {}
        """Each session's control relay, by the coordinator's control socket."""
        self._procs: dict[int, Process] = {}
        self.built_s = 0.0

    def folders(self, coordinator: Sequence[str], offset_s: float) -> dict[str, str]:
        """Give each of the coordinator's folders one here (the first is its scratch folder, which the
        coordinator reads while the run goes); this host's clock is ``offset_s`` ahead of the
        coordinator's. Returns coordinator folder -> this host's."""
        mine = {there: str(self._run.scratch / f"folder{i}") for i, there in enumerate(coordinator)}
        for folder in mine.values():
            Path(folder).mkdir()
        self._paths = HostPaths(mine, offset_s)
        self._mirror = Mirror(self._paths, next(iter(mine.values())))
        return mine

    def relay_store(self, store: str, target: tuple[str, int]) -> None:
        """Carry this host's agents' connections to the run's rendezvous store (the coordinator's Unix
        socket ``store``, here in this host's folders) to its TCP ``target``: one relay for the run."""
        self._store = Relay(Path(self._paths.to_host(store)), target)

    def relay(self, control: str, target: tuple[str, int], token: str) -> None:
        """Carry one session's agents to its control server: the coordinator's socket ``control``, here in
        this host's folders, to its TCP ``target``."""
        here = Path(self._paths.to_host(control))
        here.parent.mkdir(parents=True, exist_ok=True)
        assert self._mirror is not None, "folders first"
        self._controls[control] = ControlRelay(here, target, self._paths, self._mirror, host=self.host, token=token)

    def unrelay(self, control: str) -> None:
        """Stop carrying the session whose control socket is ``control`` (its server closed)."""
        relay = self._controls.pop(control, None)
        if relay is not None:
            relay.close()

    def put(self, path: str, text: str) -> None:
        """Write a file of the coordinator's (an agent's spec, an abort mark) here, its paths made this host's."""
        here = Path(self._paths.to_host(path))
        here.parent.mkdir(parents=True, exist_ok=True)
        if self._mirror is not None:
            self._mirror.ignored.add(str(here))
        draft = here.with_name(f".{here.name}.tmp")  # whole or not at all: an agent may be reading the last one
        draft.write_text(json.dumps(self._paths.to_host(json.loads(text))) if path.endswith(".json") else text)
        draft.replace(here)

    def spawn(self, node: str, target: str, args: Sequence[str], env: Mapping[str, str], log: str, name: str) -> int:
        """Start ``target`` in ``node``'s host as :meth:`Emulation.spawn` does, its paths made this host's."""
        here = Path(self._paths.to_host(log))
        here.parent.mkdir(parents=True, exist_ok=True)
        proc = self.emulation.spawn(node, target, [self._paths.to_host(a) for a in args], env=env, log=here,
                                    name=name)
        self._procs[proc.pid] = proc
        return proc.pid

    def poll(self, pid: int) -> int | None:
        return self._procs[pid].poll()

    def wait(self, pid: int, timeout: float | None) -> int:
        return self._procs[pid].wait(timeout)

    def signal(self, pid: int, signum: int) -> None:
        self._procs[pid].send_signal(signum)

    def files(self) -> Files | None:
        """What this host's agents wrote, in every folder, that the coordinator has not been sent yet (a
        dead agent's log, the run's saved models), :data:`FILES_PER_CALL` bytes at most: a reply that
        small travels in Ray's reply itself (a larger one goes through the object stores, which hung
        between a coordinator outside the cluster and a node on another host)."""
        return self._mirror.changes("end", everywhere=True, limit=FILES_PER_CALL) if self._mirror else None

    def check(self) -> None:
        self.emulation.check()

    def cpu_seconds(self) -> dict[str, float]:
        return self.emulation.cpu_seconds()

    def emulated(self) -> dict[str, object]:
        return self.emulation.emulated()

    def build(self, graph: nx.Graph, share: HostShare, options: Mapping[str, Any]) -> list[str]:
        """Build the nodes ``share`` places here (``options``: :class:`Emulation`'s keywords);
        returns their names."""
        started = time.monotonic()
        emulation = Emulation(graph, share=share, run=self._run, **options)
        self._emulation = emulation.__enter__()
        self.built_s = time.monotonic() - started
        return emulation.here

    def build_seconds(self) -> float:
        """How long :meth:`build` took: this host's share of the network's set-up."""
        return self.built_s

    @property
    def emulation(self) -> Emulation:
        if self._emulation is None:
            raise RuntimeError(f"host {self.host}: nothing built yet")
        return self._emulation

    def install_flows(self, paths: Mapping[str, Sequence[str]], background: bool = False) -> dict[str, Flow]:
        return self.emulation.install_flows(paths, background=background)

    def meter(self, reading: str) -> Any:
        """One of this share's :class:`~fedmst.net.meters.LinkMeters` readings, by name."""
        return getattr(self.emulation.meters, reading)()

    def cmd(self, node: str, command: str) -> str:
        return self.emulation.cmd(node, command)

    def clock(self) -> float:
        """This host's monotonic clock, which its agents time their phases on (:mod:`fedmst.hosts.clock`)."""
        return time.monotonic()

    def close(self) -> dict[str, dict[str, object]]:
        """Take the share down and give the run's id back on this host; returns what its delay lines
        counted (:attr:`Emulation.delay_stats`). Safe to call twice."""
        stats: dict[str, dict[str, object]] = {}
        try:
            for relay in [*self._controls.values(), *([self._store] if self._store else [])]:
                relay.close()
        finally:
            self._controls.clear()
            self._store = None
            try:
                if self._emulation is not None:
                    self._emulation.close()
                    stats = self._emulation.delay_stats
            finally:
                self._emulation = None
                self._run.remove()
        return stats


def start_host_agents(run_id: str, hosts: Mapping[str, str]) -> dict[str, Any]:
    """One :class:`HostAgent` actor per host (name -> Ray node id), each pinned to its node, on the
    cluster this process joined (:func:`fedmst.hosts.raycluster.connect`)."""
    from fedmst.hosts.raycluster import on_each

    return on_each(HostAgent, hosts, run_id, max_concurrency=4)

