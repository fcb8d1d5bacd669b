"""One emulation placed on several hosts of a Ray cluster, driven as one.

:class:`SpannedEmulation` answers what a run asks of an :class:`~fedmst.net.emulation.Emulation`
(build, routes, agents, counters, checks, teardown) by asking the host agents that hold the nodes
concerned (:mod:`fedmst.hosts.agent`). The coordinator holds no node: it serves the run's control
and rendezvous on the hosts' network, which each host's relays carry its agents to, and gets back
what they write. Options a spanned run cannot honour yet are refused before anything is built
(:data:`fedmst.run.config.SPANNED_NOT_YET`, :func:`fedmst.run.prepare.resolve`).
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

import networkx as nx

from fedmst.core.plan import LinkDir
from fedmst.core.topology import link_name
from fedmst.core.wire import DEFAULT_MTU
from fedmst.errors import EmulationError, FedmstError
from fedmst.hosts.agent import start_host_agents
from fedmst.hosts.clock import ClockOffset, measure
from fedmst.hosts.store import StoreServer
from fedmst.net.cleanup import RunState
from fedmst.net.routes import Flow
from fedmst.net.tcp import RunTcp
from fedmst.net.tunnels import HostShare, underlay
from fedmst.protocol import RELAYED_STORE
from fedmst.workers.control import write_files


class SpannedEmulation:
    """``graph`` on the hosts of ``hosts`` (address -> Ray node id) as ``placement`` (node ->
    host) says; ``options`` are :class:`~fedmst.net.emulation.Emulation`'s keywords for every host's
    share; ``folders`` the coordinator's folders the agents write into (its scratch, the run
    folder), each mirrored on every host; ``predicted`` what the placement predicted (summary.json).
    Use as ``with SpannedEmulation(...) as emu:``."""

    def __init__(self, graph: nx.Graph, *, hosts: Mapping[str, str], placement: Mapping[str, str],
                 run: RunState, folders: Sequence[Path], options: Mapping[str, Any],
                 predicted: Mapping[str, object] | None = None) -> None:
        self.graph = graph
        self.hosts, self.placement = dict(hosts), dict(placement)
        self.predicted = dict(predicted or {})
        self._run, self._options = run, dict(options)
        self.folders = [f.resolve() for f in folders]
        self._folders = [str(f) for f in self.folders]
        self.tcp = RunTcp(None, graph, int(options.get("mtu", DEFAULT_MTU)))
        """What a one-host run's TCP counts (ECN marks, MLTCP's maps): nothing here, those do not span yet."""
        self.delay_stats: dict[str, dict[str, object]] = {}
        self.overhead: dict[str, int] = {}
        """The bytes each tunnel end's encapsulation added on the hosts' network, read as the run closed."""
        self.tunnelled: dict[str, int] = {}
        """The bytes each direction of a link across hosts carried (Ethernet frames, as the run closed)."""
        self.set_up_s: dict[str, float] = {}
        """How long each host took to build its share (its host agent's build)."""
        self.offsets: dict[str, ClockOffset] = {}
        """Each host's clock against this process's (:mod:`fedmst.hosts.clock`)."""
        self.address = underlay(next(iter(hosts))).local_ip
        """This process's address on the hosts' network, where the relays reach it."""
        self.meters = SpannedMeters(self)
        self.meeting = SpannedMeeting(self)
        self._agents: dict[str, Any] = {}
        self.store: StoreServer | None = None
        """The run's rendezvous store, served here to every host's agents."""
        self._emulated: dict[str, object] = {}
        self._lock = threading.Lock()
        self._handed: dict[tuple[str, str], str] = {}
        """What each host was last handed of each coordinator file (host, path): the same file is not sent again."""

    @property
    def run_id(self) -> str:
        return self._run.id

    def crosses(self, u: str, v: str) -> bool:
        """Whether link u-v runs between two hosts (a tunnel)."""
        return self.placement[u] != self.placement[v]

    def holder(self, node: str) -> Any:
        """The host agent of the host ``node`` runs on."""
        return self._agents[self.placement[node]]

    def ask(self, calls: Mapping[str, Any]) -> dict[str, Any]:
        """Wait for one Ray call per host (host -> its object ref); a host lost is one line naming it."""
        import ray

        out = {}
        for host, ref in calls.items():
            try:
                out[host] = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.NodeDiedError) as exc:
                raise EmulationError(f"host {host} was lost: {' '.join(str(exc).split())[:160]}") from None
            except ray.exceptions.RayTaskError as exc:
                raise exc.as_instanceof_cause() from None
        return out

    def each(self, method: str, *args: Any) -> dict[str, Any]:
        """Call ``method`` of every host agent with ``args``; host -> what it returned."""
        return self.ask({h: getattr(a, method).remote(*args) for h, a in self._agents.items()})

    # life cycle -----------------------------------------------------------------------------
    def __enter__(self) -> "SpannedEmulation":
        try:
            self._agents = start_host_agents(self._run.id, self.hosts)
            import ray

            self.offsets = {h: measure(lambda a=a: ray.get(a.clock.remote())) for h, a in self._agents.items()}
            for host, agent in self._agents.items():
                self.ask({host: agent.folders.remote(self._folders, self.offsets[host].offset_s)})
            addresses = {h: h for h in self.hosts}
            self.ask({h: a.build.remote(self.graph, HostShare(h, self.placement, addresses), self._options)
                      for h, a in self._agents.items()})
            self.set_up_s = self.each("build_seconds")
            self.store = StoreServer(Path(self._folders[0]) / "store.sock", tcp=(self.address, 0))
            self.each("relay_store", str(self.store.path), (self.address, self.store.port))
            self._emulated = next(iter(self.each("emulated").values()))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Take every host's share down (what its agents wrote last comes back first). Safe to call twice."""
        import ray

        try:
            self.overhead = self.meters.tunnel_overhead()
            counted = self.meters.counters()
            self.tunnelled = {f"{u}->{v}": n for (u, v), n in counted.items() if self.crosses(u, v)}
        except (EmulationError, ray.exceptions.RayError):
            pass  # a host lost, or nothing built: no overhead to read
        try:
            for host, agent in self._agents.items():
                try:
                    self.sync(host)
                except (FedmstError, OSError, ray.exceptions.RayError):
                    pass  # what is left there stays on that host: `fedmst clean --ray` removes it
                try:
                    self.delay_stats.update(ray.get(agent.close.remote()))
                except ray.exceptions.RayError:
                    pass
                finally:
                    ray.kill(agent)
        finally:
            self._agents = {}
            if self.store is not None:
                self.store.close()
                self.store = None

    def sync(self, host: str) -> None:
        """Bring back now what ``host``'s agents wrote that this host has not got (a dead agent's log,
        the run folder's files at the end), a part at a time."""
        while (files := self.ask({host: self._agents[host].files.remote()})[host]) is not None:
            write_files(files, self.folders)

    def emulated(self) -> dict[str, object]:
        """summary.json's ``emulated``: the first host's terms (every host's are the same) and the spread's."""
        return {**self._emulated, **self.spread()}

    def spread(self) -> dict[str, object]:
        """Each host's nodes, clock offset and set-up time, the links across hosts, the placement's prediction and
        the tunnels' bytes and overhead on the hosts' network."""
        cut = sorted(link_name(u, v) for u, v in self.graph.edges if self.crosses(u, v))
        return {"hosts": {h: sorted(n for n, p in self.placement.items() if p == h) for h in self.hosts},
                "clock_offsets": {h: {"offset_s": o.offset_s, "error_s": o.error_s} for h, o in self.offsets.items()},
                "set_up_s": {h: round(s, 3) for h, s in self.set_up_s.items()},
                "links_across_hosts": cut, "placement": self.predicted, "tunnel_bytes": sum(self.tunnelled.values()),
                "tunnel_overhead_bytes": sum(self.overhead.values()),
                "tunnel_overhead_by_end": dict(sorted(self.overhead.items()))}

    # routes, processes, checks --------------------------------------------------------------
    def install_flows(self, paths: Mapping[str, Sequence[str]], *, background: bool = False) -> dict[str, Flow]:
        if background:
            raise EmulationError("background traffic cannot span hosts yet")
        with self._lock:  # every host hands out the same addresses for the same calls, in the same order
            flows = list(self.each("install_flows", dict(paths)).values())
        if any(f != flows[0] for f in flows):
            raise EmulationError("the hosts routed the flows with different addresses")
        return flows[0]

    def spawn(self, node: str | None, target: str, args: Sequence[str], *, env: Mapping[str, str], log: Path,
              name: str, warm: bool = True) -> "RemoteProcess":
        """Start ``target`` in ``node``'s host, on the host that runs it; files of the run's folders it
        is handed (an agent's spec) go there first."""
        if node is None:
            raise EmulationError("a process outside every host cannot span hosts")
        agent, host = self.holder(node), self.placement[node]
        for arg in args:
            if any(arg.startswith(f + "/") for f in self._folders) and Path(arg).is_file():
                text = Path(arg).read_text()
                if self._handed.get((host, arg)) != text:  # one spec file serves every agent of a session
                    self.ask({host: agent.put.remote(arg, text)})
                    self._handed[(host, arg)] = text
        pid = self.ask({host: agent.spawn.remote(node, target, list(args), dict(env), str(log), name)})[host]
        return RemoteProcess(self, node, pid)

    def track(self, proc: Any) -> Any:
        raise EmulationError("worker containers cannot span hosts yet: use --workers processes")

    def check(self) -> None:
        self.each("check")

    def cpu_seconds(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for seconds in self.each("cpu_seconds").values():
            for kind, s in seconds.items():
                total[kind] = total.get(kind, 0.0) + s
        return total


class SpannedMeeting:
    """Where a spanned run's agents meet: relays on every host to the control server and to the
    run's store here, and copies on every host of the files the coordinator leaves them."""

    def __init__(self, emu: SpannedEmulation) -> None:
        self._emu = emu

    def rendezvous(self, scratch: Path, name: str) -> str:
        assert self._emu.store is not None
        return f"{RELAYED_STORE}{self._emu.store.path}#{name}"

    def control_terms(self) -> dict[str, object]:
        """A TCP listener on the hosts' network, and the run's folders, which the relays mirror."""
        return {"tcp": (self._emu.address, 0), "mirrored": self._emu.folders}

    def relay(self, control: Path, port: int | None, token: str) -> None:
        assert port is not None
        self._emu.each("relay", str(control), (self._emu.address, port), token)

    def unrelay(self, control: Path) -> None:
        try:
            self._emu.each("unrelay", str(control))
        except EmulationError:
            pass  # a host lost: what it relayed went with it, and the run says so in its own line

    def spread(self, path: Path) -> None:
        self._emu.each("put", str(path), path.read_text())


class RemoteProcess:
    """A process a host agent started, seen from the coordinator (what a run's agents need of one)."""

    def __init__(self, emu: SpannedEmulation, node: str, pid: int) -> None:
        self._emu, self._node, self.pid = emu, node, pid
        self.returncode: int | None = None

    def _call(self, method: str, *args: Any) -> Any:
        host = self._emu.placement[self._node]
        return self._emu.ask({host: getattr(self._emu.holder(self._node), method).remote(*args)})[host]

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._call("poll", self.pid)
            if self.returncode is not None:  # its last words, for the line that reports its death
                self._emu.sync(self._emu.placement[self._node])
        return self.returncode

    def send_signal(self, signum: int) -> None:
        self._call("signal", self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = int(self._call("wait", self.pid, timeout))
        return self.returncode


class SpannedMeters:
    """The link counters of every host's share, put together (each link direction is counted on
    the host of its measuring end)."""

    def __init__(self, emu: SpannedEmulation) -> None:
        self._emu = emu

    def _merged(self, reading: str) -> Any:
        return self._emu.each("meter", reading).values()

    def counters(self) -> dict[LinkDir, int]:
        return {hop: n for part in self._merged("counters") for hop, n in part.items()}

    def counters_and_background(self) -> tuple[dict[LinkDir, int], dict[LinkDir, int]]:
        counted = self.counters()
        return counted, {hop: 0 for hop in counted}

    def queue_drops(self) -> dict[LinkDir, int]:
        return {hop: n for part in self._merged("queue_drops") for hop, n in part.items()}

    def tcp_retransmits(self) -> int:
        return sum(self._merged("tcp_retransmits"))

    def tunnel_overhead(self) -> dict[str, int]:
        return {f"{host}:{intf}": n for host, part in self._emu.each("meter", "tunnel_overhead").items()
                for intf, n in part.items()}
