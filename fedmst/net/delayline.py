"""Link delay, jitter and loss in user space, for kernels without ``sch_netem``.

Why this exists: the kernel of the machines fedmst runs on has no ``sch_netem``, so ``tc netem``
cannot delay or drop packets. Netfilter's NFQUEUE target can hand every packet of a chain to a
user-space process, which gives the verdict later: holding each packet until its due time and
only then accepting it is a delay line.

Where packets are held matters. Holding them on the sending host's own egress makes TCP Small
Queues see the bytes as still queued in the host and throttle the flow; holding them at the
*receiving* host's ingress (``raw`` table, ``PREROUTING``) delays them exactly as a long wire
would. So :func:`ingress_rule` (and :func:`ingress_rules`, the same for several interfaces) is the
only rule this module offers.

The module has three parts:

* :class:`DelayLine`, a pure scheduler with no I/O and an explicit clock, so its rules (order
  kept, exact due times, seeded loss, bounded memory) are unit-tested with a fake clock: the
  specification both processes follow;
* ``delayline.c``, the same rules compiled (the same random numbers, so a seeded run drops the same
  packets), reading packets many to a system call and accepting those due together with one
  verdict: a few microseconds a packet where this Python process spends 15-42. :func:`build`
  compiles it on this host, cached by content;
* :func:`main`, the process (``python -m fedmst.net.delayline --queue N --delay-ms D ...``) that binds
  an NFQUEUE queue of its network namespace and feeds it through a :class:`DelayLine`, or, given
  ``--compiled PATH``, checks the same arguments and becomes the compiled line. The Python line
  stays for a host that cannot build the compiled one.

The rule has no ``--queue-bypass``: if the delay line dies, packets stop instead of silently
passing undelayed, so a broken emulation cannot pass for a working one.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Deque, Protocol, Sequence

from fedmst.net.buildcache import CACHE_ROOT, cached, digest

DEFAULT_CAPACITY = 4096
"""Packets one delay line may hold. 50 Mbit/s x 100 ms of 1500-byte frames is ~420 packets, and
the notes measured ~1.9 Gbit/s through 10 ms (~1,600 packets in flight), so 4,096 covers the links
fedmst emulates while bounding memory (a held packet costs the kernel one skb, ~2.3 kB)."""
KERNEL_QUEUE_SLACK = 1024
"""Extra room in the kernel's queue beyond ``capacity``, so that a full line is counted as
``overflow`` here rather than dropped unseen by the kernel while we are a little behind."""


AIM_GAIN_LATER = 0.1
AIM_GAIN_EARLIER = 0.3
"""How far one timer wake-up moves a line's aim towards its lateness: a wake-up comes late by
the host's latency (on an idle virtual machine often 0.1-0.3 ms), so a line aims its timer that
much before the due time. Moving down faster than up keeps the aim low in lateness's spread:
most wake-ups still land after the due time, and those before it wait out the rest
(:func:`wait_before`)."""

FIRST_AIM_S = 50e-6
"""A line's aim before its first timer wake-up: a busy host's wake-up latency (an idle one's is
longer, and is learned)."""

MAX_AIM_S = 0.0005
"""The aim never exceeds this, and one late wake-up counts as no later: an outlier moves the aim
no further than this one would."""

MAX_POLL_S = 25e-6
"""A wake-up that finds the next packet due within this polls for it; one that finds it due later
sleeps again, to the due time itself. Polling costs CPU for as long as it lasts, a wake-up about
25 µs on this virtual machine; so packets due closer together than the aim never keep a line
polling between them."""


def aim_after(aim: float, late: float) -> float:
    """The next aim, after a timer wake-up that came ``late`` seconds after it was asked for.

    >>> round(aim_after(50e-6, 0.003) * 1e6, 3), round(aim_after(50e-6, 0.0) * 1e6, 3)
    (95.0, 35.0)
    """
    late = min(max(late, 0.0), MAX_AIM_S)
    return aim + (late - aim) * (AIM_GAIN_LATER if late >= aim else AIM_GAIN_EARLIER)


class Verdictable(Protocol):
    """What the delay line needs of a packet: netfilterqueue's ``Packet`` or a test's fake."""

    def drop(self) -> None: ...


class DelayLine:
    """A FIFO that releases each packet ``delay_s`` (+ jitter) after it was pushed, never reordered.

    Rules, each for a reason:

    * Loss is decided first, with a seeded RNG: the i-th packet pushed is lost or not whatever the
      buffer holds, so a run with the same seed and traffic drops the same packets.
    * A kept packet is due at ``max(previous_due, now + delay + jitter)``, jitter uniform in
      ``[-jitter_s, +jitter_s]`` (and the sum never below 0). Taking the max keeps the order, as a
      wire does: jitter then stretches gaps but never makes a later packet overtake an earlier
      one, which TCP would see as loss.
    * At most ``capacity`` packets are held; a packet arriving at a full line is dropped and
      counted as ``overflow``, so memory (ours and the kernel's) stays bounded.

    Dropped packets get ``packet.drop()`` at once; due packets are *returned* by :meth:`release`,
    and giving them their verdict (``accept()``) is the caller's job.

    >>> class P:
    ...     def __init__(self, n): self.n, self.dropped = n, False
    ...     def drop(self): self.dropped = True
    >>> line = DelayLine(0.010)
    >>> line.push(P(1), now=0.0); line.push(P(2), now=0.004)
    >>> line.next_due()
    0.01
    >>> [p.n for p in line.release(0.0099)], [p.n for p in line.release(0.010)]
    ([], [1])
    >>> [p.n for p in line.release(1.0)], line.passed, line.next_due()
    ([2], 2, None)
    """

    def __init__(
        self,
        delay_s: float,
        jitter_s: float = 0.0,
        loss: float = 0.0,
        capacity: int = DEFAULT_CAPACITY,
        seed: int | None = None,
    ) -> None:
        if not delay_s >= 0:
            raise ValueError(f"delay must be >= 0 s, got {delay_s}")
        if not jitter_s >= 0:
            raise ValueError(f"jitter must be >= 0 s, got {jitter_s}")
        if not 0 <= loss <= 1:
            raise ValueError(f"loss must be a probability in [0, 1], got {loss}")
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1 packet, got {capacity}")
        self.delay_s = float(delay_s)
        self.jitter_s = float(jitter_s)
        self.loss = float(loss)
        self.capacity = int(capacity)
        self._rng = random.Random(seed)
        self._held: Deque[tuple[float, Verdictable]] = collections.deque()
        self._last_due = float("-inf")
        self.received = 0
        self.passed = 0
        self.lost = 0
        self.overflow = 0
        self.error_sum_s = 0.0
        self.error_max_s = 0.0

    def __len__(self) -> int:
        """Packets held now."""
        return len(self._held)

    def push(self, packet: Verdictable, now: float) -> None:
        """Take ``packet``, arrived at ``now``: drop it (loss, overflow) or hold it until due."""
        self.received += 1
        if self.loss and self._rng.random() < self.loss:
            self.lost += 1
            packet.drop()
            return
        if len(self._held) >= self.capacity:
            self.overflow += 1
            packet.drop()
            return
        wait = self.delay_s
        if self.jitter_s:
            wait = max(0.0, wait + self._rng.uniform(-self.jitter_s, self.jitter_s))
        due = max(self._last_due, now + wait)
        self._last_due = due
        self._held.append((due, packet))

    def retune(self, delay_s: float | None = None, loss: float | None = None) -> None:
        """Change the delay or loss of packets pushed from now on (a link trace); packets held keep
        their due time, and a shorter delay never lets a new packet overtake them."""
        if delay_s is not None:
            if not delay_s >= 0:
                raise ValueError(f"delay must be >= 0 s, got {delay_s}")
            self.delay_s = float(delay_s)
        if loss is not None:
            if not 0 <= loss <= 1:
                raise ValueError(f"loss must be a probability in [0, 1], got {loss}")
            self.loss = float(loss)

    def next_due(self) -> float | None:
        """When the oldest held packet is due, or ``None`` when nothing is held."""
        return self._held[0][0] if self._held else None

    def release(self, now: float) -> list[Verdictable]:
        """Remove and return, oldest first, every packet due at or before ``now``.

        Never earlier, as on a wire and as netem: a link's delay is a floor, which TCP's minimum
        RTT and delay-based congestion control read. The error ``now - due`` of every packet (how
        late the caller came) is summed, its maximum kept: the delay line's own timing error,
        reported rather than assumed away.
        """
        out = []
        held = self._held
        while held and held[0][0] <= now:
            due, packet = held.popleft()
            out.append(packet)
            error = now - due
            self.error_sum_s += error
            if error > self.error_max_s:
                self.error_max_s = error
        self.passed += len(out)
        return out

    def flush(self) -> list[Verdictable]:
        """Remove and return every held packet, due or not (the process is stopping)."""
        out = [p for _, p in self._held]
        self._held.clear()
        return out

    def stats(self) -> dict[str, object]:
        return {
            "delay_s": self.delay_s,
            "jitter_s": self.jitter_s,
            "loss": self.loss,
            "capacity": self.capacity,
            "received": self.received,
            "passed": self.passed,
            "lost": self.lost,
            "overflow": self.overflow,
            "held": len(self._held),
            "release_error_mean_s": self.error_sum_s / self.passed if self.passed else 0.0,
            "release_error_max_s": self.error_max_s,
        }


def ingress_rule(interface: str, queue: int) -> str:
    """The iptables command that sends every IPv4 packet arriving on ``interface`` to ``queue``.

    Run it inside the *receiving* host's namespace (see the module docstring for why ingress).
    No ``--queue-bypass``: with no delay line bound to the queue, the kernel drops the packets.

    >>> ingress_rule("fmabc1-eth0", 3)
    'iptables -t raw -A PREROUTING -i fmabc1-eth0 -j NFQUEUE --queue-num 3'
    """
    return f"iptables -t raw {_rule(interface, queue)}"


def ingress_rules(queues: Sequence[tuple[str, int]]) -> str:
    """The same rules for several (interface, queue) pairs of one host, as ``iptables-restore
    --noflush`` input: one process installs them all.

    >>> print(ingress_rules([("fmabc1-eth0", 0), ("fmabc1-eth1", 1)]))
    *raw
    -A PREROUTING -i fmabc1-eth0 -j NFQUEUE --queue-num 0
    -A PREROUTING -i fmabc1-eth1 -j NFQUEUE --queue-num 1
    COMMIT
    <BLANKLINE>
    """
    return "\n".join(["*raw", *(_rule(i, q) for i, q in queues), "COMMIT", ""])


def _rule(interface: str, queue: int) -> str:
    if not interface or any(c.isspace() for c in interface):
        raise ValueError(f"bad interface name {interface!r}")
    if not 0 <= int(queue) <= 65535:
        raise ValueError(f"NFQUEUE numbers are 0..65535, got {queue}")
    return f"-A PREROUTING -i {interface} -j NFQUEUE --queue-num {int(queue)}"


# the compiled line -------------------------------------------------------------------------------
SOURCE = Path(__file__).with_suffix(".c")
PROGRAM = "fedmst-delay"
"""The compiled line's file name, and so its process name: a fork server's ``fedmst-`` + kind."""
BUILD = ("gcc", "-O2", "-Wall", "-Wextra")
RULES = tuple(f"-D{name}={value!r}" for name, value in (
    ("AIM_GAIN_LATER", AIM_GAIN_LATER), ("AIM_GAIN_EARLIER", AIM_GAIN_EARLIER), ("FIRST_AIM_S", FIRST_AIM_S),
    ("MAX_AIM_S", MAX_AIM_S), ("MAX_POLL_S", MAX_POLL_S)))
"""The timer's rules, declared above, given to the compiled line as it is built."""
LIBRARIES = ("-lnetfilter_queue", "-lnfnetlink", "-lm")
HEADER = Path("/usr/include/libnetfilter_queue/libnetfilter_queue.h")
INSTALL = "apt-get install gcc libnetfilter-queue-dev (scripts/setup.sh does)"


class BuildError(RuntimeError):
    """Why this host cannot build the compiled line (one line)."""


def build() -> Path:
    """``delayline.c`` compiled for this host, cached by content under ``FEDMST_CACHE_DIR``; raises
    :class:`BuildError` saying why not (no compiler, no libnetfilter_queue headers, a compile error)."""
    if shutil.which(BUILD[0]) is None or not HEADER.exists():
        raise BuildError(f"no {BUILD[0]} or libnetfilter_queue headers: {INSTALL}")

    def make(into: Path) -> None:
        done = subprocess.run([*BUILD, *RULES, "-o", str(into), str(SOURCE), *LIBRARIES], capture_output=True,
                              text=True)
        if done.returncode != 0:
            said = [line for line in done.stderr.splitlines() if "error" in line] or ["gcc failed"]
            raise BuildError(f"{SOURCE.name} does not build: {said[0].strip()}")
        into.chmod(0o755)
    key = digest(SOURCE.read_bytes(), " ".join(BUILD + RULES + LIBRARIES).encode())
    return cached(CACHE_ROOT / "delayline" / key / PROGRAM, make)


CHOICE_ENV = "FEDMST_DELAY_LINE"
"""Set to ``python`` to run the Python line where the compiled one would run (a benchmark's
before-and-after, or a suspected fault in the compiled line)."""


def choose() -> tuple[Path | None, str]:
    """The compiled line to run (None: the Python one), and which runs: ``compiled``, or ``python (why)``."""
    if os.environ.get(CHOICE_ENV) == "python":
        return None, f"python ({CHOICE_ENV}=python)"
    try:
        return build(), "compiled"
    except BuildError as exc:
        return None, f"python ({exc})"


@dataclass(frozen=True)
class LineSpec:
    """One delay line: its queue, its rules' settings and its files; what :func:`main`'s options
    and the compiled line's fields both say."""

    queue: int
    delay_s: float
    jitter_s: float = 0.0
    loss: float = 0.0
    capacity: int = DEFAULT_CAPACITY
    seed: int = 0
    stats: Path | None = None
    """Where it writes its counters when it stops (JSON)."""
    control: Path | None = None
    """Where a change of delay or loss is written (whole, by a rename) before a SIGUSR1."""

    def options(self) -> list[str]:
        """:func:`main`'s options for this line (ms, as a person would type them)."""
        files = [("--stats", self.stats), ("--control", self.control)]
        return ["--queue", str(self.queue), "--capacity", str(self.capacity), "--delay-ms", repr(self.delay_s * 1e3),
                "--jitter-ms", repr(self.jitter_s * 1e3), "--loss", repr(self.loss), "--seed", str(self.seed),
                *(word for option, path in files if path is not None for word in (option, str(path)))]

    def fields(self, netns: str = "-") -> list[str]:
        """The compiled line's fields for this line, in namespace ``netns`` (a ``/proc/PID/ns/net``
        path; ``-``: its own): numbers as Python holds them (``repr`` round-trips), so both lines
        compute the same due times."""
        return [netns, str(self.queue), str(self.capacity + KERNEL_QUEUE_SLACK), str(self.capacity),
                repr(self.delay_s), repr(self.jitter_s), repr(float(self.loss)), str(abs(self.seed)),
                str(self.stats or "-"), str(self.control or "-")]


def running_kind() -> str:
    """``compiled`` or ``python``: which line a run here would run (:func:`choose`)."""
    return "python" if choose()[0] is None else "compiled"


def compiled_command(program: Path, lines: Sequence[tuple[str, LineSpec]]) -> list[str]:
    """:func:`run_compiled`'s arguments: one compiled process serving every (namespace, line)."""
    return [str(program), *(word for netns, spec in lines for word in spec.fields(netns))]


def run_compiled(args: Sequence[str]) -> int:
    """Become the compiled line (``args``: :func:`compiled_command`'s), dying with our parent."""
    die_with_parent()  # kept across exec
    try:
        os.execv(args[0], [PROGRAM, "serve", *args[1:]])
    except OSError as exc:
        print(f"fedmst.net.delayline: cannot run {args[0]}: {exc}", file=sys.stderr)
    return 1


# the process -------------------------------------------------------------------------------------
def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m fedmst.net.delayline",
        description="Delay, jitter and drop the packets of one NFQUEUE queue (user-space netem).",
    )
    p.add_argument("--queue", type=int, required=True, help="NFQUEUE number to bind (0..65535)")
    p.add_argument("--delay-ms", type=float, required=True, help="one-way delay added to every packet")
    p.add_argument("--jitter-ms", type=float, default=0.0, help="uniform jitter +- this, order kept")
    p.add_argument("--loss", type=float, default=0.0, help="probability of dropping each packet")
    p.add_argument("--capacity", type=int, default=DEFAULT_CAPACITY, help="most packets held at once")
    p.add_argument("--seed", type=int, default=None, help="seed of the loss/jitter RNG")
    p.add_argument("--stats", type=Path, default=None, help="write the counters here as JSON on exit")
    p.add_argument("--control", type=Path, default=None,
                   help='on SIGUSR1, read {"delay_ms": D, "loss": P} (either optional) from this file and apply it')
    p.add_argument("--compiled", type=Path, default=None,
                   help=f"run the line as this build of {SOURCE.name} ({__name__}.build() makes it)")
    return p.parse_args(argv)


def die_with_parent() -> None:
    """Ask the kernel for SIGTERM when our parent (the emulation) dies, even by SIGKILL.

    A delay line outliving its run would keep that host's network namespace alive, and fedmst's
    clean-up does not know this process, so it must not survive its starter.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        parent = os.getppid()
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the request took effect
            os.kill(os.getpid(), signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def queue_process(prog: str, queue: int, take: Callable[[Any], None], mode: str,
                  **bind: int) -> tuple[Any, Signals] | None:
    """A user-space NFQUEUE process's start (a delay line's, a timeslot gate's): dying with its
    parent, its signals caught, its timers tight, and ``queue`` of its network namespace bound to
    ``take`` in netfilterqueue's copy ``mode`` (``bind``: the rest of ``NetfilterQueue.bind``'s
    options). Returns the bound queue and the signals, or None where netfilterqueue is missing or
    the queue cannot be bound, said on stderr as ``prog``."""
    try:
        import netfilterqueue
    except ImportError as exc:
        print(f"{prog}: netfilterqueue missing ({exc}); pip install NetfilterQueue", file=sys.stderr)
        return None
    die_with_parent()
    signals = Signals()
    tighten_timers()
    try:
        nfq = netfilterqueue.NetfilterQueue()
        nfq.bind(queue, take, mode=getattr(netfilterqueue, mode), **bind)
    except (OSError, RuntimeError) as exc:
        print(f"{prog}: cannot bind NFQUEUE {queue} ({exc}); need root, and no other process may hold that "
              "queue in this network namespace", file=sys.stderr)
        return None
    return nfq, signals


def tighten_timers() -> None:
    """Timer slack of 1 ns instead of 50 us: select() timeouts are our release times."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        pass


def _enable_rx_timestamps() -> object:
    """A socket asking for receive timestamps, which makes the kernel stamp every received packet.

    NFQUEUE passes that stamp on; without any such socket (e.g. a plain iperf3 flow) packets
    arrive unstamped and their delay would start only when this process reads them.
    """
    import socket

    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_TIMESTAMP", 29), 1)
        return sock
    except OSError:
        return None


def _kernel_queue_stats(queue: int) -> dict[str, int]:
    """The kernel's own counters for ``queue`` in this namespace (drops we never saw)."""
    try:
        for line in Path("/proc/net/netfilter/nfnetlink_queue").read_text().splitlines():
            f = line.split()
            if f and int(f[0]) == queue:
                return {"kernel_queue_dropped": int(f[5]), "kernel_user_dropped": int(f[6])}
    except (OSError, ValueError, IndexError):
        pass
    return {}


def write_control(path: Path, delay_s: float | None, loss: float | None) -> None:
    """Ask a line to change its delay or loss (None: keep it) through its control file, before
    its SIGUSR1: written whole, by a rename, since a compiled process serving several lines reads
    every line's file on each signal."""
    _write_json(path, {"delay_ms": None if delay_s is None else delay_s * 1e3, "loss": loss})


def _write_json(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


class Signals:
    """SIGTERM/SIGINT ask the loop to stop, SIGUSR1 to re-read the control file. The handlers
    only set a flag; the wake-up pipe makes the blocked select() return at once."""

    def __init__(self) -> None:
        self.stop = self.retune = False
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        if signum == signal.SIGUSR1:
            self.retune = True
        else:
            self.stop = True

    def drain(self) -> None:
        """Empty the wake-up pipe once select() has seen it."""
        try:
            os.read(self.wake_r, 512)
        except BlockingIOError:
            pass


class _StampedPush:
    """Starts each packet's delay when it reached the interface (the kernel's receive stamp,
    wall clock), not when we got round to reading it: our wake-up latency is not link delay."""

    def __init__(self, line: DelayLine) -> None:
        self.push, self.lag_sum, self.stamped = line.push, 0.0, 0

    def __call__(self, packet: Verdictable) -> None:
        stamp = packet.get_timestamp()  # type: ignore[attr-defined]
        # in whole nanoseconds: a wall clock in float seconds is coarser than the microsecond
        # stamp's; and the stamp's end, as it is truncated to the microsecond
        behind = (time.time_ns() - (round(stamp * 1e6) + 1) * 1000) * 1e-9 if stamp > 0 else 0.0
        now = time.monotonic()  # read after the wall clock: the gap between them only delays more
        if 0.0 < behind < 1.0:  # a stamp from a stepped wall clock is not believed
            now -= behind
            self.lag_sum += behind
            self.stamped += 1
        self.push(packet, now)  # the Packet object stays valid for a verdict after we return


def wait_before(due_in: float, aim: float) -> float:
    """How long a line sleeps (0: polls) when its next packet is due in ``due_in`` seconds: until
    ``aim`` before the due time, as a wake-up comes about that late; within it, to the due time
    itself, unless that is close enough to poll for (:data:`MAX_POLL_S`).

    >>> [round(wait_before(d, 100e-6) * 1e6, 3) for d in (300e-6, 60e-6, 20e-6, -5e-6)]
    [200.0, 60.0, 0.0, 0.0]
    """
    if due_in > aim:
        return due_in - aim
    return due_in if due_in > MAX_POLL_S else 0.0


def _serve(line: DelayLine, nfq: object, signals: Signals, control: Path | None) -> None:
    """Read packets and release each when due, never earlier, until asked to stop."""
    clock = time.monotonic
    fd = nfq.get_fd()  # type: ignore[attr-defined]
    aim = FIRST_AIM_S  # how early a timer is aimed; learned from then on (aim_after)
    while not signals.stop:
        due = line.next_due()
        timeout = None if due is None else wait_before(due - clock(), aim)
        asked = clock()
        # select(), not epoll: its timeout has microsecond, not millisecond, resolution
        readable, _, _ = select.select([fd, signals.wake_r], [], [], timeout)
        if not readable and timeout:
            aim = aim_after(aim, clock() - asked - timeout)
        if fd in readable:
            nfq.run(block=False)  # type: ignore[attr-defined]
        for packet in line.release(clock()):
            packet.accept()  # type: ignore[attr-defined]
        if signals.wake_r in readable:
            signals.drain()
        if signals.retune and control is not None:
            signals.retune = False
            change = json.loads(control.read_text())
            line.retune(None if change.get("delay_ms") is None else change["delay_ms"] / 1e3, change.get("loss"))


def _finish(line: DelayLine, queue: int, pushed: _StampedPush) -> dict[str, object]:
    """Drop what is still held and return the line's statistics. Held packets are dropped, not
    passed early: stopping must never look like "no delay"."""
    flushed = line.flush()
    for packet in flushed:
        try:
            packet.drop()
        except RuntimeError:
            pass
    return {"queue": queue, "implementation": "python", **line.stats(), "dropped_at_exit": len(flushed),
            "read_lag_mean_s": pushed.lag_sum / pushed.stamped if pushed.stamped else None,
            "stamped": pushed.stamped, **_kernel_queue_stats(queue)}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    try:
        line = DelayLine(
            args.delay_ms / 1e3, args.jitter_ms / 1e3, args.loss, args.capacity, args.seed
        )
    except ValueError as exc:
        print(f"fedmst.net.delayline: {exc}", file=sys.stderr)
        return 2
    if args.compiled is not None:
        seed = random.getrandbits(64) if args.seed is None else args.seed
        if abs(seed) >= 2**64:
            print(f"fedmst.net.delayline: the compiled line takes seeds below 2**64, got {seed}", file=sys.stderr)
            return 2
        spec = LineSpec(args.queue, args.delay_ms / 1e3, args.jitter_ms / 1e3, args.loss, args.capacity, seed,
                        args.stats, args.control)
        return run_compiled(compiled_command(args.compiled, [("-", spec)]))
    stamps = _enable_rx_timestamps()  # noqa: F841 - kept open: the kernel stamps while it lives
    pushed = _StampedPush(line)
    # COPY_META: only metadata crosses to user space, never payload; packets stay in the kernel
    started = queue_process("fedmst.net.delayline", args.queue, pushed, "COPY_META",
                            max_len=args.capacity + KERNEL_QUEUE_SLACK)
    if started is None:
        return 1
    nfq, signals = started
    rc = 0
    try:
        _serve(line, nfq, signals, args.control)
    except Exception as exc:  # noqa: BLE001 - report it, still write the counters
        print(f"fedmst.net.delayline: stopped by error: {exc!r}", file=sys.stderr)
        rc = 1
    finally:
        stats = _finish(line, args.queue, pushed)
        nfq.unbind()
        if args.stats is not None:
            _write_json(args.stats, stats)
    return rc


if __name__ == "__main__":
    sys.exit(main())
