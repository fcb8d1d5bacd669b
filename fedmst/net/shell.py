"""Mininet hosts and the shells that configure them: the only module that imports mininet.

Every host is a bash in its own network namespace (or in a worker container's). Configuration
goes through files, one ``ip``/``tc -batch`` or script per host, never one command per line:
the host's terminal cuts a command line at 4,095 characters, and hundreds of small commands
took seconds. A host's shell serves one command at a time, so each has a lock.
"""

from __future__ import annotations

import logging
import subprocess
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Collection, Iterable, Iterator, Sequence

from fedmst.core.wire import ETH_HEADER
from fedmst.errors import EmulationError

_HARMLESS_TC = ("quantum of class", "Consider r2q change")
_END = "@@fedmst-end@@"
_OFFLOADS = ("tcp-segmentation-offload", "generic-segmentation-offload", "generic-receive-offload")
"""What ``ethtool -K IF tso off gso off gro off`` switches off, as ``ethtool -k`` names it."""
SLOW_START_AFTER_IDLE = False
"""Whether a connection idle for a retransmission timeout starts again from TCP's initial window
(Linux's default: yes). Not in fedmst's hosts: every round idles each connection through the
training, so with it every phase of a 4.5 MB model slow-starts again and MST's relayed phases took
1.9 times their prediction (cubic, NSFNET, 8 local models); and whether a phase restarts would
hang on the training time against the timeout, which a slowed run cannot keep in proportion.
Collective-communication hosts commonly switch it off too."""
_SETUP = ("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1"
          " net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0"
          f" net.ipv4.tcp_slow_start_after_idle={int(SLOW_START_AFTER_IDLE)}"
          "; ip link set lo up")
"""Before any interface exists: no IPv6 chatter on the measured links, forward packets, and TCP
keeps its window across idle periods (per namespace, so the host's own setting is untouched)."""


class HostShell:
    """One node's Mininet host: its shell, serialised, and the batched commands run in it."""

    def __init__(self, node: str, host: object, scratch: Path) -> None:
        self.node = node
        self.host = host
        self.scratch = scratch
        """Where its command files go: the run's scratch folder, which a dead run's clean-up removes."""
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        """The shell's PID, whose namespace is the node's."""
        return int(self.host.pid)  # type: ignore[attr-defined]

    def cmd(self, command: str) -> str:
        """Run a shell command inside the host and return its output."""
        with self._lock:
            return str(self.host.cmd(command))  # type: ignore[attr-defined]

    def on_file(self, lines: Iterable[str], command: str) -> str:
        """Write ``lines`` to a file and run ``command`` (``{}`` standing for the file's path)
        inside the host; return its output. A file, because the host's terminal cuts a command
        line at 4,095 characters, and so that one process reads every line."""
        with tempfile.NamedTemporaryFile("w", prefix=f"{self.node}-", dir=self.scratch) as lines_file:
            lines_file.write("\n".join(lines) + "\n")
            lines_file.flush()
            return self.cmd(command.format(lines_file.name))

    def script(self, lines: Iterable[str]) -> str:
        """Run ``lines`` as one shell script inside the host and return its output."""
        return self.on_file(lines, "sh {}")

    def batch(self, tool: str, lines: Iterable[str]) -> None:
        """Run ``tool -batch`` with ``lines`` inside the host: one process for them all."""
        out = self.on_file(lines, f"{tool} -batch {{}} 2>&1; echo rc=$?").strip()
        if not out.endswith("rc=0"):
            errors = [line for line in out.splitlines()[:-1]
                      if line.strip() and not any(h in line for h in _HARMLESS_TC)]
            raise EmulationError(f"configuring node {self.node} failed ({tool}): {(errors or out.splitlines())[0]}")

    def iptables_restore(self, lines: Sequence[str], what: str) -> None:
        """Add ``lines`` (``iptables-restore`` input) to the host's rules, keeping those there."""
        out = self.on_file(lines, "iptables-restore --noflush {} 2>&1; echo rc=$?").strip()
        if not out.endswith("rc=0"):
            raise EmulationError(f"{what} failed: {first_line(out)}")

    def offloads_off(self, intfs: Sequence[str]) -> None:
        """Switch off segmentation offloads and check they are off: with one still on, the
        counters would count super-frames, not the frames that crossed the link."""
        out = self.script([f"ethtool -K {i} tso off gso off gro off 2>&1 >/dev/null; echo rc=$?; "
                           f"ethtool -k {i} 2>&1; echo {_END}" for i in intfs])
        reports = out.split(_END)
        if len(reports) != len(intfs) + 1:
            raise EmulationError(f"switching off segmentation offloads on node {self.node} failed: {first_line(out)}")
        for intf, report in zip(intfs, reports):
            reason = offload_failure(report.lstrip("\r\n"))
            if reason:
                raise EmulationError(f"switching off segmentation offloads on node {self.node}, interface {intf}, "
                                     f"failed: {reason}")

    def tx_counts(self) -> dict[str, tuple[int, int]]:
        """Bytes and frames each interface of the host has sent so far, in one read."""
        out = {}
        for line in Path(f"/proc/{self.pid}/net/dev").read_text().splitlines()[2:]:
            name, _, fields = line.partition(":")
            counts = fields.split()
            out[name.strip()] = (int(counts[8]), int(counts[9]))
        return out

    def tx_bytes(self, headless: Collection[str] = ()) -> dict[str, int]:
        """Bytes each interface of the host has sent so far, as Ethernet frames: ``headless``
        interfaces (VXLAN devices) count from the IP header on, so their frames' headers are added."""
        return {intf: n + (ETH_HEADER * frames if intf in headless else 0)
                for intf, (n, frames) in self.tx_counts().items()}

    def tcp_retransmits(self) -> int:
        """TCP segments the host has retransmitted so far (its namespace's /proc/net/snmp)."""
        tcp = [line.split()[1:] for line in Path(f"/proc/{self.pid}/net/snmp").read_text().splitlines()
               if line.startswith("Tcp:")]
        return int(dict(zip(tcp[0], tcp[1]))["RetransSegs"])

    def prepare(self) -> None:
        """What every host gets before its first interface."""
        self.cmd(_SETUP)

    def stop(self, intfs: Sequence[str] = ()) -> None:
        """End the host's shell, the last process in its namespace: with it go the namespace and
        its veth ends (and so both ends of each link), without one ``ip link del`` per interface.
        ``intfs`` are deleted first: a container's namespace outlives the shell. Never raises.

        The namespace's TCP sockets are ended first (``ss -K``): the processes that held them are
        gone, but a socket whose FIN was still unacknowledged when the links went would linger,
        orphaned in the dying namespace, for minutes of retransmissions, and hold the run's BPF
        congestion control in the kernel (``BPF_STRUCT_OPS_STATE_TOBEFREE``) all that time."""
        try:
            self.cmd("ss -K -tan >/dev/null 2>&1")
            if intfs:
                self.script([f"ip link del dev {i}" for i in intfs])
            self.host.terminate()  # type: ignore[attr-defined]
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - teardown must finish; report what failed
            logging.getLogger(__name__).warning("stopping host %s failed: %s", self.host, exc)
        shell = getattr(self.host, "shell", None)  # wait for it: no zombie or namespace outlives the run
        if shell is not None and shell.poll() is None:
            shell.kill()
            shell.wait()


def start_host(node: str, name: str, netns_pid: int | None, scratch: Path) -> HostShell:
    """A Mininet host named ``name`` for ``node``, in a new network namespace or, given
    ``netns_pid``, in that process's, set up to forward packets; its command files go in ``scratch``."""
    from mininet.node import Host

    class _ContainerHost(Host):  # type: ignore[misc]
        """A host whose shell joins a running container's network namespace instead of
        creating one, so the veth ends made for the shell's PID land in the container."""

        def __init__(self, name: str, netns_pid: int, **params: object) -> None:
            self.netns_pid = netns_pid
            super().__init__(name, **params)

        def _popen(self, cmd: list[str], **params: object) -> subprocess.Popen:
            if self.shell is None and cmd[:2] == ["mnexec", "-cdn"]:
                cmd = ["mnexec", "-cd", "nsenter", f"--net=/proc/{self.netns_pid}/ns/net", *cmd[2:]]
            return super()._popen(cmd, **params)

    host = Host(name) if netns_pid is None else _ContainerHost(name, netns_pid=netns_pid)
    return HostShell(node, host, scratch)


def raise_limits() -> None:
    """What Mininet() did first: 16 MB TCP buffers, a longer backlog, more open files."""
    from mininet.util import fixLimits

    fixLimits()


def coordinator_batch(argv: Sequence[str], lines: Sequence[str], what: str) -> None:
    """Run a ``-batch -`` command in the coordinator's namespace with ``lines`` on its stdin."""
    done = subprocess.run(argv, input="\n".join(lines) + "\n", capture_output=True, text=True)
    if done.returncode != 0:
        said = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        where = next((f" ({line})" for line in said[1:] if line.startswith("Command failed")), "")
        raise EmulationError(f"{what} failed: {(said or ['(no output)'])[0]}{where}")


def offload_failure(out: str) -> str | None:
    """Why the offloads are not all off, from ``ethtool -K ...; echo rc=$?; ethtool -k``; None if they are.

    >>> offload_failure("netlink error: Operation not permitted\\nrc=1\\n")
    'netlink error: Operation not permitted'
    >>> print(offload_failure("rc=0\\ntcp-segmentation-offload: on\\ngeneric-segmentation-offload: off\\n"))
    tcp-segmentation-offload is still on
    """
    errors, _, features = out.partition("rc=")
    code, _, features = features.partition("\n")
    if code.strip() != "0":
        return first_line(errors) if errors.strip() else f"ethtool exited with code {code.strip() or '?'}"
    state = dict(line.split(":", 1) for line in features.splitlines() if ":" in line)
    for feature in _OFFLOADS:
        value = state.get(feature, "").split()
        if not value:
            return f"ethtool -k does not list {feature}: {first_line(features)}"
        if value[0] != "off":
            return f"{feature} is still {value[0]}"
    return None


def first_line(text: str) -> str:
    """The first line of ``text`` that says something."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "(no output)")


class _MininetLog(logging.Handler):
    """Keeps what Mininet logs as an error: its only word on why it calls ``exit(1)``."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def reason(self) -> str:
        """All messages as one line, without Mininet's ``***`` markers."""
        words = " ".join(" ".join(self.messages).replace("***", " ").split())
        return words.removeprefix("Error: ").strip()


@contextmanager
def mininet_exits() -> Iterator[None]:
    """Turn Mininet giving up (``exit(1)``, i.e. SystemExit) into one EmulationError with the
    reason it logged; its console output stays silent."""
    from mininet.log import lg

    lg.setLogLevel("critical")  # Mininet's console handler: silent
    lg.setLevel(logging.ERROR)  # ... while its errors still reach ours
    getattr(lg, "_cache", {}).clear()  # lg is not in logging's registry, so setLevel leaves its cache stale
    handler = _MininetLog()
    lg.addHandler(handler)
    try:
        yield
    except SystemExit as exc:
        raise EmulationError(f"Mininet gave up: {handler.reason() or f'it called exit({exc.code})'}") from None
    finally:
        lg.removeHandler(handler)
