"""The user-space delay line: its scheduling rules with a fake clock, then real packets in Mininet.

The pure tests drive :class:`DelayLine` with explicit times and fake packets, and play the same
scripts through the compiled line's rules (``fedmst-delay replay``), which must decide every
packet as the class does. The integration tests hold real ICMP packets at a receiving host's
ingress (iptables ``raw`` PREROUTING -> NFQUEUE -> ``python -m fedmst.net.delayline``, in Python and
compiled) on topology ``line3`` and measure what ``ping`` sees.
"""

from __future__ import annotations

import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from contextlib import contextmanager
from typing import IO, Any, Iterator

import psutil
import pytest

from fedmst.net.delayline import MAX_AIM_S, DelayLine, aim_after, build, ingress_rule, main, wait_before


class FakePacket:
    """Records the verdict it was given, like netfilterqueue's Packet would give it to the kernel."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.verdict: str | None = None

    def drop(self) -> None:
        assert self.verdict is None, "verdict given twice"
        self.verdict = "drop"

    def accept(self) -> None:
        assert self.verdict is None, "verdict given twice"
        self.verdict = "accept"


# pure -------------------------------------------------------------------------------------------
def test_each_packet_is_due_exactly_delay_after_it_arrived() -> None:
    line = DelayLine(0.010)
    p0, p1 = FakePacket(0), FakePacket(1)
    line.push(p0, now=5.000)
    line.push(p1, now=5.001)
    assert line.next_due() == pytest.approx(5.010, abs=1e-12)
    assert line.release(5.0099999) == []
    assert line.release(5.010) == [p0]
    assert line.next_due() == pytest.approx(5.011, abs=1e-12)
    assert line.release(5.0109999) == []
    assert line.release(5.011) == [p1]
    assert line.next_due() is None and len(line) == 0
    assert (line.received, line.passed, line.lost, line.overflow) == (2, 2, 0, 0)
    assert p0.verdict is None and p1.verdict is None  # accepting is the caller's job


def test_release_returns_everything_due_oldest_first_and_nothing_early() -> None:
    ms = 2.0**-10  # about a millisecond, exact in binary, so due times compare exactly
    line = DelayLine(2 * ms)
    packets = [FakePacket(i) for i in range(10)]
    for i, p in enumerate(packets):
        line.push(p, now=i * ms)
    # step a fake clock in half-"ms" ticks: each packet comes out at the first tick >= its due time
    out: list[tuple[float, int]] = []
    for tick in range(40):
        now = tick * ms / 2
        out += [(now, p.n) for p in line.release(now)]
    assert [n for _, n in out] == list(range(10))
    for now, n in out:
        assert now == n * ms + 2 * ms
    assert line.stats()["release_error_max_s"] == pytest.approx(0.0, abs=1e-12)


def test_jitter_never_reorders_and_stays_within_its_bounds() -> None:
    delay, jitter, gap = 0.010, 0.005, 0.0005  # jitter 10x the gap between packets
    line = DelayLine(delay, jitter_s=jitter, seed=7)
    dues = []
    for i in range(2000):
        now = i * gap
        line.push(FakePacket(i), now)
        due = line._held[-1][0]
        assert due >= now + delay - jitter - 1e-12
        dues.append((now, due))
    assert [d for _, d in dues] == sorted(d for _, d in dues)
    assert all(d <= now + delay + jitter + 1e-12 for now, d in dues)
    spread = [d - now for now, d in dues]
    assert max(spread) - min(spread) > jitter  # the jitter really varied the delay
    released = line.release(1e9)
    assert [p.n for p in released] == list(range(2000))  # order kept


def test_jitter_larger_than_delay_never_makes_negative_delay() -> None:
    line = DelayLine(0.001, jitter_s=0.005, seed=1)
    for i in range(1000):
        line.push(FakePacket(i), now=float(i))
        assert line._held[-1][0] >= float(i)


def test_loss_rate_is_close_to_p_and_reproducible_with_a_seed() -> None:
    def run(seed: int) -> list[int]:
        line = DelayLine(0.001, loss=0.2, capacity=10_000, seed=seed)
        packets = [FakePacket(i) for i in range(10_000)]
        for i, p in enumerate(packets):
            line.push(p, now=i * 1e-4)
        kept = line.release(1e9)
        for p in kept:
            p.accept()
        assert line.lost + line.passed == 10_000 and line.overflow == 0
        assert all(p.verdict == "drop" for p in packets if p not in kept)
        return [p.n for p in packets if p.verdict == "drop"]

    lost = run(seed=42)
    # binomial: sd = sqrt(0.2 * 0.8 / 10000) = 0.004, so +-0.016 is 4 sd
    assert abs(len(lost) / 10_000 - 0.2) <= 0.016
    assert run(seed=42) == lost  # same seed, same packets lost
    assert run(seed=43) != lost


def test_loss_zero_and_one_are_exact() -> None:
    for loss, expect_lost in ((0.0, 0), (1.0, 500)):
        line = DelayLine(0.0, loss=loss, seed=0)
        for i in range(500):
            line.push(FakePacket(i), now=0.0)
        assert line.lost == expect_lost


def test_a_full_line_drops_and_counts_overflow() -> None:
    line = DelayLine(1.0, capacity=3)
    packets = [FakePacket(i) for i in range(5)]
    for p in packets:
        line.push(p, now=0.0)
    assert len(line) == 3 and line.overflow == 2 and line.lost == 0
    assert [p.verdict for p in packets] == [None, None, None, "drop", "drop"]
    assert [p.n for p in line.release(1.0)] == [0, 1, 2]
    line.push(FakePacket(5), now=1.0)  # room again once packets left
    assert len(line) == 1 and line.overflow == 2


def test_a_late_release_is_reported_as_its_error_and_none_is_early() -> None:
    line = DelayLine(0.010)
    line.push(FakePacket(0), now=0.0)
    line.push(FakePacket(1), now=0.001)
    assert line.release(0.0099999) == []  # a link's delay is a floor, never cut short
    assert len(line.release(0.01004)) == 1
    assert len(line.release(0.01102)) == 1
    stats = line.stats()
    assert stats["release_error_mean_s"] == pytest.approx(0.00003)
    assert stats["release_error_max_s"] == pytest.approx(0.00004)


def test_flush_empties_the_line() -> None:
    line = DelayLine(1.0)
    for i in range(4):
        line.push(FakePacket(i), now=0.0)
    assert [p.n for p in line.flush()] == [0, 1, 2, 3] and len(line) == 0 and line.next_due() is None


@pytest.mark.parametrize("kw", [dict(delay_s=-1), dict(delay_s=0, jitter_s=-1), dict(delay_s=0, loss=1.5),
                                dict(delay_s=0, capacity=0), dict(delay_s=float("nan"))])
def test_nonsense_parameters_are_refused(kw: dict) -> None:
    with pytest.raises(ValueError):
        DelayLine(**kw)


def test_ingress_rule() -> None:
    assert ingress_rule("fm1-eth0", 0) == "iptables -t raw -A PREROUTING -i fm1-eth0 -j NFQUEUE --queue-num 0"
    assert "bypass" not in ingress_rule("x", 1)  # a dead delay line must stop packets
    with pytest.raises(ValueError):
        ingress_rule("eth0; reboot", 0)
    with pytest.raises(ValueError):
        ingress_rule("eth0", 70000)


def test_main_refuses_bad_parameters_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--queue", "0", "--delay-ms", "-5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "delay" in err


# the compiled line follows the class ------------------------------------------------------------
def _script(rng: random.Random, steps: int) -> list[tuple]:
    """Pushes (mostly) and releases at rising times, a retune now and then, and the timer's rules
    (aim_after, wait_before) asked of both sides with aims and lateness around their bounds."""
    t, script = 0.0, []
    for _ in range(steps):
        t += rng.expovariate(3000)
        roll = rng.random()
        if roll < 0.70:
            script.append(("push", t))
        elif roll < 0.93:
            script.append(("release", t))
        elif roll < 0.96:
            script.append(("aim", rng.uniform(0, MAX_AIM_S), rng.uniform(-1e-5, 2 * MAX_AIM_S)))
        elif roll < 0.99:
            script.append(("wait", rng.uniform(-1e-4, 3 * MAX_AIM_S), rng.uniform(0, MAX_AIM_S)))
        else:
            script.append(("retune", rng.choice([None, rng.uniform(0, 0.02)]), rng.choice([None, rng.random() / 2])))
    return script


def _by_class(line: DelayLine, script: list[tuple]) -> list[tuple]:
    said: list[tuple] = []
    for step in script:
        if step[0] == "push":
            lost, overflow = line.lost, line.overflow
            line.push(FakePacket(line.received), step[1])
            said.append(("lost",) if line.lost > lost else ("overflow",) if line.overflow > overflow
                        else ("kept", line._last_due))
        elif step[0] == "release":
            out = line.release(step[1])
            said.append(("released", len(out), out[-1].n if out else 0))
        elif step[0] == "aim":
            said.append(("aim", aim_after(*step[1:])))
        elif step[0] == "wait":
            said.append(("wait", wait_before(*step[1:])))
        else:
            line.retune(step[1], step[2])
    return said


def _by_program(program: Path, line_args: list[str], script: list[tuple]) -> tuple[list[tuple], dict]:
    words = {"push": lambda t: f"push {t!r}", "release": lambda t: f"release {t!r}",
             "aim": lambda a, late: f"aim {a!r} {late!r}", "wait": lambda d, a: f"wait {d!r} {a!r}",
             "retune": lambda d, p: f"retune {'-' if d is None else repr(d)} {'-' if p is None else repr(p)}"}
    text = "\n".join(words[step[0]](*step[1:]) for step in script) + "\nstats\n"
    done = subprocess.run([str(program), "replay", *line_args], input=text, capture_output=True, text=True,
                          check=True)
    lines = done.stdout.splitlines()
    start = lines.index("{")
    said = [(w[0], float(w[1])) if w[0] in ("kept", "aim", "wait") else (w[0], *map(int, w[1:]))
            for w in map(str.split, lines[:start])]
    return said, json.loads("\n".join(lines[start:]))


@pytest.mark.parametrize("capacity,delay_s,jitter_s,loss,seed", [
    (4096, 0.010, 0.0, 0.0, 1), (4096, 0.010, 0.002, 0.0, 2), (40, 0.010, 0.004, 0.1, 3),
    (8, 0.002, 0.003, 0.3, 0), (4096, 0.0, 0.0, 0.0, 7), (100, 0.005, 0.001, 0.05, 2**40 + 3)])
def test_the_compiled_line_decides_every_packet_as_the_class_does(
        capacity: int, delay_s: float, jitter_s: float, loss: float, seed: int) -> None:
    """Same seed, same arrivals: the same packets lost or overflowing, the same due time (to the
    last bit) for each kept one, the same packets released by each call, the same statistics."""
    script = _script(random.Random(seed), 5000)  # enough releases for the last check
    line = DelayLine(delay_s, jitter_s, loss, capacity, seed)
    expected = _by_class(line, script)
    said, stats = _by_program(build(), [str(capacity), repr(delay_s), repr(jitter_s), repr(loss), str(seed)], script)
    assert said == expected
    assert stats == {"implementation": "compiled", **line.stats()}
    assert line.passed > 1000 and (line.lost > 0 or not loss) and (line.overflow > 0 or capacity > 40)


# integration ------------------------------------------------------------------------------------
QUEUE = 0  # NFQUEUE numbers are per network namespace: every host can use queue 0


def _addr(emu: object, node: str, intf: str) -> str:
    out = emu.cmd(node, f"ip -4 -o addr show dev {intf}")  # type: ignore[attr-defined]
    return re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", out).group(1)  # type: ignore[union-attr]


def _bound(emu: object, node: str, queue: int) -> bool:
    out = emu.cmd(node, "cat /proc/net/netfilter/nfnetlink_queue 2>/dev/null")  # type: ignore[attr-defined]
    return any(line.split() and line.split()[0] == str(queue) for line in out.splitlines())


IMPLEMENTATIONS = ["python", "compiled"]


def _as(implementation: str) -> list[str]:
    """The delay line's arguments that pick ``implementation``."""
    return ["--compiled", str(build())] if implementation == "compiled" else []


def _start_delay_line(emu: object, node: str, intf: str, tmp: Path, *args: str) -> tuple[object, Path]:
    """Hold ``intf``'s incoming packets in a delay line in ``node``; return (process, stats file)."""
    out = emu.cmd(node, ingress_rule(intf, QUEUE) + " 2>&1; echo rc=$?")  # type: ignore[attr-defined]
    assert out.strip().endswith("rc=0"), out
    stats = tmp / f"{node}-stats.json"
    log: IO[str] = open(tmp / f"{node}-delayline.log", "w")  # noqa: SIM115 - lives as long as the process
    proc = emu.popen(  # type: ignore[attr-defined]
        node, [sys.executable, "-m", "fedmst.net.delayline", "--queue", str(QUEUE), "--stats", str(stats), *args],
        env=dict(os.environ), log_file=log,
    )
    deadline = time.monotonic() + 10
    while not _bound(emu, node, QUEUE):
        assert proc.poll() is None, (tmp / f"{node}-delayline.log").read_text()
        assert time.monotonic() < deadline, "delay line did not bind its queue"
        time.sleep(0.05)
    return proc, stats


def _ping(emu: object, node: str, addr: str, opts: str, *, median: bool = False) -> tuple[int, int, float | None]:
    """(sent, received, RTT in ms) of a ping: the mean, or with ``median`` the median reply, which
    a late wake-up of ping itself on an idle host does not drag up. ``-U``: user-to-user time,
    because ping's default uses the kernel's receive stamp, taken *before* the reply waits in our
    delay line."""
    out = emu.cmd(node, f"ping -U -n {'' if median else '-q'} {opts} {addr}")  # type: ignore[attr-defined]
    m = re.search(r"(\d+) packets transmitted, (\d+) received", out)
    assert m, out
    if median:
        times = [float(t) for t in re.findall(r"time=([\d.]+) ms", out)]
        return int(m.group(1)), int(m.group(2)), statistics.median(times) if times else None
    rtt = re.search(r"= [\d.]+/([\d.]+)/", out)
    return int(m.group(1)), int(m.group(2)), float(rtt.group(1)) if rtt else None


def _gone(procs: list) -> None:
    """The delay lines were ended by the emulation (fedmst's leftovers check does not know them)."""
    for proc in procs:
        assert proc.poll() is not None
        assert not psutil.pid_exists(proc.pid) or psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.integration
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("delay_ms", [10.0, 2.0])
def test_ping_rtt_is_twice_the_one_way_delay(delay_ms: float, implementation: str, tmp_path: Path,
                                             clean_host: None) -> None:
    """Median RTT through both delay lines against twice the delay plus the stack's own RTT. Not
    below 2 ms: each packet's verdict costs a few tens of microseconds that no delay can hide,
    and on an idle host that alone can exceed the 0.1 ms tolerance of a 1 ms delay (docs/delay-and-loss.md:
    scripts/bench_delay.py measures small delays)."""
    procs = []
    with _line3() as emu:
        b = _addr(emu, "b", emu.interfaces("b")[0])
        _, _, base = _ping(emu, "a", b, "-c 20 -i 0.05", median=True)  # the stack's own RTT, no delay line yet
        assert base is not None
        for node, intf in (("b", emu.interfaces("b")[0]), ("a", emu.interfaces("a")[0])):  # a->b held at b, b->a at a
            procs.append(_start_delay_line(emu, node, intf, tmp_path, "--delay-ms", str(delay_ms),
                                           *_as(implementation))[0])
        sent, got, rtt = _ping(emu, "a", b, "-c 20 -i 0.05", median=True)
    _gone(procs)
    assert sent == got == 20
    assert rtt is not None
    want = 2 * delay_ms
    # and the two delay lines' lateness: a line releases no packet early, so its wake-up latency
    # and its handling of each packet (read, queue, verdict) come on top of the delay: on this
    # 2-core host 0.03-0.10 ms of RTT through compiled lines, 0.13-0.22 ms through Python ones
    tolerance = max(0.05 * want, 0.1) + 0.1
    print(f"delay {delay_ms} ms each way: RTT {rtt:.3f} ms, base {base:.3f} ms, "
          f"configured {want:.3f} ms (+base {want + base:.3f})")
    # netem would add its delay on top of the stack's own RTT too, so compare with want + base
    assert abs(rtt - (want + base)) <= tolerance, (rtt, base)
    for node in ("a", "b"):
        stats = json.loads((tmp_path / f"{node}-stats.json").read_text())  # written on SIGTERM
        assert stats["implementation"] == implementation
        assert stats["passed"] >= 20 and stats["lost"] == stats["overflow"] == 0, stats
        assert stats["kernel_queue_dropped"] == 0 and stats["kernel_user_dropped"] == 0, stats


@pytest.mark.integration
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_loss_on_one_direction(implementation: str, tmp_path: Path, clean_host: None) -> None:
    with _line3() as emu:
        b = _addr(emu, "b", emu.interfaces("b")[0])
        proc, stats_file = _start_delay_line(emu, "b", emu.interfaces("b")[0], tmp_path,
                                             "--delay-ms", "1", "--loss", "0.2", "--seed", "1", *_as(implementation))
        sent, got, _ = _ping(emu, "a", b, "-c 500 -i 0.005 -W 1")
    _gone([proc])
    stats = json.loads(stats_file.read_text())
    rate = 1 - got / sent
    print(f"loss 0.2 configured: ping lost {sent - got}/{sent} = {rate:.3f}; delay line {stats}")
    # binomial sd over 500 packets is sqrt(0.2*0.8/500) = 0.018, so 0.05 is 2.8 sd (and the seed
    # makes the run repeatable: only the echo requests cross that queue)
    assert sent == 500 and abs(rate - 0.2) <= 0.05
    # every packet ping missed was dropped by the delay line on purpose, and no other one
    assert stats["received"] == 500 and stats["lost"] == sent - got and stats["overflow"] == 0


@pytest.mark.integration
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_a_dead_delay_line_stops_packets_instead_of_passing_them(implementation: str, tmp_path: Path,
                                                                  clean_host: None) -> None:
    with _line3() as emu:
        b = _addr(emu, "b", emu.interfaces("b")[0])
        proc, _ = _start_delay_line(emu, "b", emu.interfaces("b")[0], tmp_path, "--delay-ms", "1", *_as(implementation))
        assert _ping(emu, "a", b, "-c 5 -i 0.05 -W 1")[1] == 5
        # a second delay line cannot take the same queue: one line on stderr, exit status 1
        log = tmp_path / "second.log"
        with open(log, "w") as f:
            second = emu.popen("b", [sys.executable, "-m", "fedmst.net.delayline", "--queue", str(QUEUE),
                                     "--delay-ms", "1", *_as(implementation)], env=dict(os.environ), log_file=f)
            assert second.wait(timeout=30) == 1
        text = log.read_text()
        assert text.count("\n") == 1 and "cannot bind NFQUEUE 0" in text, text
        proc.kill()  # the delay line this test started, by PID
        proc.wait(timeout=10)
        sent, got, _ = _ping(emu, "a", b, "-c 5 -i 0.05 -W 1")
        assert (sent, got) == (5, 0), "packets passed with no delay line"
        # it was the orphaned rule that stopped them: without it the link works again
        emu.cmd("b", "iptables -t raw -F PREROUTING")
        assert _ping(emu, "a", b, "-c 5 -i 0.05 -W 1")[1] == 5
    _gone([proc, second])


@contextmanager
def _line3() -> Iterator[Any]:
    """line3 (a-b-c, 50 Mbit/s) without netem; link a-b is interface 0 of a and of b."""
    from fedmst.net.emulation import Emulation
    from fedmst.core.topology import load_topology

    with Emulation(load_topology("line3"), delay_mode="off") as emu:
        assert emu.interfaces("a")[0] == f"fm{emu.run_id}0-eth0" and emu.interfaces("b")[0] == f"fm{emu.run_id}1-eth0"
        yield emu
