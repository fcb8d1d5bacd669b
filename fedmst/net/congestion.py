"""TCP congestion controls of a run: the kernel's own, fedmst's in BPF, or a user's BPF one.

This kernel ships reno, cubic and bbr and loads no modules, but a TCP congestion control written
in BPF (``struct_ops`` ``tcp_congestion_ops``) is real kernel TCP: once registered it is offered
in every namespace and selected per route as cubic is. fedmst's own (``fedmst/net/cc/``: DCTCP
from RFC 8257, MLTCP over Reno from its paper) and a user's ``.bpf.c`` are compiled with clang
against a ``vmlinux.h`` generated from the running kernel's BTF (never shipped), cached by
content; a ``.bpf.o`` is taken as built.

Algorithm names are global to the host, so each run registers its algorithm under its own name,
``fm`` + run id + ``_`` + label (``fmabc_dctcp``, at most 15 characters: letters, digits and
``_``, as the kernel allows), by rewriting the name in
a copy of the object, and unregisters it at teardown; ``fedmst clean`` unregisters one a killed
run left (:func:`leftovers`). A namespace's default ``net.ipv4.tcp_congestion_control`` is never
set to one: the kernel refuses it, and the refusal leaks a reference that keeps the algorithm
registered until reboot. ECN-marking links for algorithms that ask for ECN are
:mod:`fedmst.net.ecn`'s.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from fedmst.errors import SET_UP_ALL, EmulationError
from fedmst.net.buildcache import CACHE_ROOT, cached, digest

KERNEL_CONGESTION_CONTROLS = ("cubic", "bbr", "reno")
"""What Linux ships built in here; ``cubic`` is Linux's default. A host's own default can be
another (the development machine's is bbr), and since every transfer of a phase is short and the
flows share links, it changes what a phase measures: fedmst sets the run's per route instead."""
SOURCES = Path(__file__).with_name("cc")
"""fedmst's BPF programs: the congestion controls, their shared header, the ECN marker."""
USER_SUFFIXES = (".bpf.c", ".bpf.o")
TCP_CONG_NEEDS_ECN = 0x2
"""``tcp_congestion_ops.flags``: the algorithm negotiates ECN (and wants marking links)."""
NAME_LIMIT = 15
"""TCP_CA_NAME_MAX less its terminating zero."""
CACHE_DIR = CACHE_ROOT / "bpf"
"""Compiled objects and ``vmlinux.h``, by content: a second run builds nothing."""
INSTALL = f"apt-get install clang libbpf-dev bpftool ({SET_UP_ALL} does)"
AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
"""The congestion controls the kernel offers (the same in every namespace)."""


@dataclass(frozen=True)
class Knob:
    """One ``--cc-arg NAME=VALUE`` of a fedmst algorithm: compiled in as ``-D DEFINE=round(value x scale)``."""

    define: str
    default: float
    low: float
    high: float
    what: str
    scale: int = 1000

    def compiled(self, value: float) -> int:
        return round(value * self.scale)


@dataclass(frozen=True)
class BpfAlgorithm:
    """One of fedmst's congestion controls in BPF: its source in ``fedmst/net/cc/`` and knobs."""

    source: str
    about: str
    knobs: Mapping[str, Knob] = field(default_factory=dict)


MLTCP_KNOBS = {
    "slope": Knob("MLTCP_SLOPE", 1.75, 0, 8, "F(bytes_ratio) = slope x bytes_ratio + intercept"),
    "intercept": Knob("MLTCP_INTERCEPT", 0.25, 0.01, 4, "F at an iteration's first byte"),
    "slow_start": Knob("MLTCP_IN_SLOW_START", 1, 0, 1, "1: F scales slow start's growth too; 0: only "
                       "congestion avoidance's, as in the paper", scale=1),
}
BPF_CONGESTION_CONTROLS: Mapping[str, BpfAlgorithm] = {
    "dctcp": BpfAlgorithm("dctcp.bpf.c", "DCTCP (RFC 8257): cuts its window by the fraction of ECN marks", {
        "g_shift": Knob("DCTCP_G_SHIFT", 4, 1, 10, "alpha's gain is 1/2^g_shift", scale=1)}),
    "mltcp": BpfAlgorithm("mltcp.bpf.c", "MLTCP over Reno: window growth x F(bytes ratio)", MLTCP_KNOBS),
    "mltcp-cubic": BpfAlgorithm("mltcp_cubic.bpf.c", "MLTCP over CUBIC (RFC 9438, no HyStart)", MLTCP_KNOBS),
}
CONGESTION_CONTROLS = KERNEL_CONGESTION_CONTROLS + tuple(BPF_CONGESTION_CONTROLS)
"""The names ``--congestion-control`` takes; a ``PATH.bpf.c`` or ``PATH.bpf.o`` is a user's own."""


def is_user_algorithm(value: str) -> bool:
    """Whether ``--congestion-control`` names a user's BPF file.

    >>> is_user_algorithm("my/reno.bpf.c"), is_user_algorithm("cubic")
    (True, False)
    """
    return value.endswith(USER_SUFFIXES)


def congestion_control_ok(value: str) -> bool:
    """A name fedmst knows, or a user's ``.bpf.c``/``.bpf.o`` (whether it builds is checked on the host)."""
    return value in CONGESTION_CONTROLS or is_user_algorithm(value)


def knobs_of(algorithm: str) -> Mapping[str, Knob]:
    """The knobs ``--cc-arg`` sets for ``algorithm``: those its :data:`BPF_CONGESTION_CONTROLS` entry
    declares; none for the kernel's own and for a user's file."""
    return BPF_CONGESTION_CONTROLS[algorithm].knobs if algorithm in BPF_CONGESTION_CONTROLS else {}


def no_knobs(algorithm: str) -> str:
    """Why ``--cc-arg`` does not apply to ``algorithm``, naming the algorithms it applies to.

    >>> no_knobs("cubic")
    'cubic has no knobs (those with knobs: dctcp, mltcp, mltcp-cubic)'
    >>> print(no_knobs("my_reno.bpf.c"))  # doctest: +NORMALIZE_WHITESPACE
    my_reno.bpf.c is your own algorithm, run as you wrote it: --cc-arg sets nothing in it (change its
    constants in its source); the algorithms with knobs are fedmst's dctcp, mltcp, mltcp-cubic
    """
    having = ", ".join(name for name, algo in BPF_CONGESTION_CONTROLS.items() if algo.knobs)
    if is_user_algorithm(algorithm):
        return (f"{algorithm} is your own algorithm, run as you wrote it: --cc-arg sets nothing in it (change its "
                f"constants in its source); the algorithms with knobs are fedmst's {having}")
    return f"{algorithm} has no knobs (those with knobs: {having})"


def knob_values(algorithm: str, args: Sequence[str]) -> dict[str, float]:
    """``--cc-arg`` values over ``algorithm``'s defaults, each checked against its range.

    >>> knob_values("mltcp", ["slope=2"])
    {'slope': 2.0, 'intercept': 0.25, 'slow_start': 1}
    >>> knob_values("mltcp", ["slope=-1"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    fedmst.errors.EmulationError: --cc-arg slope=-1: mltcp's slope is from 0 to 8 (F(bytes_ratio) = ...)
    """
    knobs = knobs_of(algorithm)
    values = {name: knob.default for name, knob in knobs.items()}
    for arg in args:
        name, _, text = arg.partition("=")
        name = name.strip()
        if name not in knobs:
            offered = ", ".join(knobs) or "none"
            raise EmulationError(f"--cc-arg {arg}: {algorithm} has no knob {name!r} (its knobs: {offered})")
        knob, value = knobs[name], float(text)
        if not knob.low <= value <= knob.high or (knob.scale == 1 and not value.is_integer()):
            kind = "a whole number" if knob.scale == 1 else ""
            raise EmulationError(f"--cc-arg {arg}: {algorithm}'s {name} is {kind + ' ' if kind else ''}from "
                                 f"{knob.low:g} to {knob.high:g} ({knob.what})")
        values[name] = value
    return values


# building ------------------------------------------------------------------------------------
def require_toolchain(why: str) -> None:
    """Refuse, in one line, a host that cannot build and register BPF programs."""
    if not Path("/sys/kernel/btf/vmlinux").exists():
        raise EmulationError(f"{why} needs BPF with BTF: this kernel has no /sys/kernel/btf/vmlinux "
                             "(CONFIG_DEBUG_INFO_BTF)")
    missing = [tool for tool in ("clang", "bpftool") if shutil.which(tool) is None]
    if missing:
        raise EmulationError(f"{why} needs BPF tools this host lacks ({', '.join(missing)}): {INSTALL}")
    if not Path("/usr/include/bpf/bpf_helpers.h").exists():
        raise EmulationError(f"{why} needs libbpf's headers (/usr/include/bpf/bpf_helpers.h): {INSTALL}")


def vmlinux_header() -> Path:
    """``vmlinux.h`` of the running kernel, from its BTF (every kernel type, for CO-RE programs)."""
    btf = Path("/sys/kernel/btf/vmlinux").read_bytes()

    def dump(into: Path) -> None:
        with into.open("w") as out:
            subprocess.run(["bpftool", "btf", "dump", "file", "/sys/kernel/btf/vmlinux", "format", "c"],
                           stdout=out, stderr=subprocess.PIPE, check=True)
    return cached(CACHE_DIR / f"vmlinux-{digest(btf)}.h", dump)


def compile_bpf(source: Path, defines: Mapping[str, int] = {}, shown: str | None = None) -> Path:
    """``source`` compiled for BPF with ``defines``, cached by content; a compiler error is one
    line (its first error, named ``shown``)."""
    header = vmlinux_header()
    includes = sorted(SOURCES.glob("*.h"))
    flags = [f"-D{name}={value}" for name, value in sorted(defines.items())]
    key = digest(source.read_bytes(), header.name.encode(), " ".join(flags).encode(),
                  *(h.read_bytes() for h in includes))

    def build(into: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="fedmst-build-") as tmp:
            shutil.copy(header, Path(tmp) / "vmlinux.h")
            done = subprocess.run(
                ["clang", "-O2", "-g", "-target", "bpf", "-D__TARGET_ARCH_x86", *flags, "-I", tmp, "-I", str(SOURCES),
                 "-c", str(source), "-o", str(into)], capture_output=True, text=True)
        if done.returncode != 0:
            lines = done.stderr.splitlines()
            errors = [line for line in lines if "error:" in line] or lines[-1:] or ["clang failed"]
            raise EmulationError(f"{shown or source}: does not compile: {errors[0].strip()}")
    return cached(CACHE_DIR / f"{source.name.split('.')[0]}-{key}.bpf.o", build)


# the object's tcp_congestion_ops ----------------------------------------------------------------
@dataclass(frozen=True)
class CongestionObject:
    """A BPF object holding one ``tcp_congestion_ops``: where its name lies in the file, and its flags."""

    path: Path
    name: str
    name_offset: int
    """File offset of ``tcp_congestion_ops.name`` (16 bytes) in the ``.struct_ops`` section."""
    flags: int
    maps: tuple[str, ...] = ()
    """The names of the maps it declares."""

    @property
    def needs_ecn(self) -> bool:
        return bool(self.flags & TCP_CONG_NEEDS_ECN)

    def renamed(self, name: str, into: Path) -> Path:
        """A copy of the object whose algorithm registers as ``name``."""
        if not 0 < len(name) <= NAME_LIMIT:
            raise EmulationError(f"congestion control name {name!r}: give 1 to {NAME_LIMIT} characters")
        data = bytearray(self.path.read_bytes())
        data[self.name_offset:self.name_offset + 16] = name.encode().ljust(16, b"\0")
        into.write_bytes(bytes(data))
        return into


def _sections(data: bytes) -> dict[str, tuple[int, int]]:
    """An ELF64 little-endian file's sections: name -> (file offset, size)."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise EmulationError("not a 64-bit little-endian ELF object")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]

    def name(at: int) -> str:
        return data[names_at + at:data.index(b"\0", names_at + at)].decode()
    return {name(h[0]): (h[4], h[5]) for h in headers}


def inspect(path: Path, shown: str | None = None) -> CongestionObject:
    """The ``tcp_congestion_ops`` of a BPF object, from its BTF (member offsets) and its
    ``.struct_ops`` section (their values); refused in one line where there is none, or more."""
    what = shown or str(path)
    data = path.read_bytes()
    try:
        sections = _sections(data)
    except (EmulationError, struct.error, ValueError) as exc:
        raise EmulationError(f"{what}: not a BPF object ({exc})") from None
    if ".struct_ops.link" in sections:
        raise EmulationError(f"{what}: SEC(\".struct_ops.link\") needs a newer libbpf than this host's; "
                             "use SEC(\".struct_ops\")")
    dumped = subprocess.run(["bpftool", "-j", "btf", "dump", "file", str(path)], capture_output=True, text=True)
    if ".struct_ops" not in sections or dumped.returncode != 0:
        raise EmulationError(f"{what}: no tcp_congestion_ops in it (declare one in SEC(\".struct_ops\"))")
    types = {t["id"]: t for t in json.loads(dumped.stdout)["types"]}
    datasec = next((t for t in types.values() if t["kind"] == "DATASEC" and t["name"] == ".struct_ops"), None)
    variables = datasec["vars"] if datasec else []
    found = [(v, types[types[v["type_id"]]["type_id"]]) for v in variables]
    ops = [(v, t) for v, t in found if t.get("name") == "tcp_congestion_ops"]
    if len(ops) != 1 or len(found) != 1:
        raise EmulationError(f"{what}: give exactly one tcp_congestion_ops in SEC(\".struct_ops\") "
                             f"(found {len(ops)} among {len(found)} struct_ops)")
    var, ops_type = ops[0]
    members = {m["name"]: m["bits_offset"] // 8 for m in ops_type["members"]}
    at = sections[".struct_ops"][0] + var["offset"]
    name = data[at + members["name"]:at + members["name"] + 16].split(b"\0", 1)[0].decode(errors="replace")
    flags, = struct.unpack_from("<I", data, at + members["flags"])
    maps = next((t for t in types.values() if t["kind"] == "DATASEC" and t["name"] == ".maps"), {"vars": []})
    return CongestionObject(path, name, at + members["name"], flags,
                            tuple(types[v["type_id"]]["name"] for v in maps["vars"]))


# registering ----------------------------------------------------------------------------------
def kernel_name(run_id: str, label: str) -> str:
    """The name a run registers its algorithm under: ``fm`` + run id + ``_`` + label, cut to 15.

    >>> kernel_name("abc", "dctcp"), kernel_name("abc", "my_very_long_reno")
    ('fmabc_dctcp', 'fmabc_my_very_l')
    """
    return f"fm{run_id}_{label}"[:NAME_LIMIT]


_OURS = re.compile(r"^fm([a-z]{3})_")
"""A run's registered algorithm: group 1 its run id."""


def _bpftool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bpftool", *args], capture_output=True, text=True)


def _struct_ops(*args: str) -> list[tuple[int, dict, dict]]:
    """``bpftool struct_ops dump``: each tcp_congestion_ops as (its map id, its fields, its common
    part: ``state`` and ``refcnt``). bpftool prints each as two JSON values, its map's info then its
    data (in a list, or one after the other for one id)."""
    shown = _bpftool("-j", "struct_ops", "dump", *args)
    values, text, at = [], shown.stdout.strip(), 0
    decoder = json.JSONDecoder()
    while shown.returncode == 0 and at < len(text):
        value, at = decoder.raw_decode(text, at)
        values.extend(value if isinstance(value, list) else [value])
        while at < len(text) and (text[at].isspace() or text[at] == ","):
            at += 1
    found = []
    for info, ops in zip(values, values[1:]):
        if "bpf_map_info" in info and "bpf_struct_ops_tcp_congestion_ops" in ops:
            value = ops["bpf_struct_ops_tcp_congestion_ops"]
            found.append((info["bpf_map_info"]["id"], value["data"], value.get("common", {})))
    return found


def program_maps(program: int) -> list[int]:
    """The ids of the maps BPF program ``program`` uses (none if it is gone)."""
    shown = _bpftool("-j", "prog", "show", "id", str(program))
    return json.loads(shown.stdout).get("map_ids", []) if shown.returncode == 0 else []


FREEING = "BPF_STRUCT_OPS_STATE_TOBEFREE"
"""The state of an algorithm already unregistered that sockets still hold: the kernel frees it when
the last of them closes (nothing to unregister)."""


def registered() -> dict[str, tuple[int, str, int]]:
    """Every BPF congestion control on this host: name -> its struct_ops map id, its state
    (:data:`FREEING` once unregistered) and its reference count (one its own, one a socket using it)."""
    return {str(data["name"]): (map_id, str(common.get("state", "")),
                                int(common.get("refcnt", {}).get("refs", {}).get("counter", 0)))
            for map_id, data, common in _struct_ops()}


@dataclass(frozen=True)
class Registration:
    """A congestion control registered by this run, until :meth:`unregister`."""

    name: str
    struct_ops_id: int

    def maps(self) -> dict[str, int]:
        """The algorithm's own maps (name -> id), found through its programs."""
        programs = {int(m.group(1)) for _, data, _ in _struct_ops("id", str(self.struct_ops_id))
                    for v in data.values() if isinstance(v, str) for m in [re.search(r"prog_id:(\d+)", v)] if m}
        maps: dict[str, int] = {}
        for map_id in (map_id for prog in programs for map_id in program_maps(prog)):
            info = _bpftool("-j", "map", "show", "id", str(map_id))
            if info.returncode == 0:
                maps[json.loads(info.stdout)["name"]] = map_id
        return maps

    def unregister(self) -> None:
        _bpftool("struct_ops", "unregister", "id", str(self.struct_ops_id))


def register(obj: CongestionObject, name: str) -> Registration:
    """Register the algorithm of ``obj`` as ``name``, refused in one line if that name is taken."""
    if name in AVAILABLE.read_text().split():
        raise EmulationError(f"congestion control {name} is registered already (`fedmst clean` removes a dead run's)")
    with tempfile.TemporaryDirectory(prefix="fedmst-build-") as tmp:
        done = _bpftool("struct_ops", "register", str(obj.renamed(name, Path(tmp) / "cc.bpf.o")))
    found = re.search(r"Registered tcp_congestion_ops \S+ id (\d+)", done.stdout + done.stderr)
    if done.returncode != 0 or found is None:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()] or ["no reason given"]
        raise EmulationError(f"{obj.path.name}: the kernel refused the algorithm: {lines[-1]}")
    return Registration(name, int(found.group(1)))


def leftovers(live: set[str]) -> list[str]:
    """Unregister every algorithm a run that is no longer ``live`` registered; one line each."""
    if shutil.which("bpftool") is None:
        return []
    done = []
    for name, (map_id, state, refs) in registered().items():
        owner = _OURS.match(name)
        if owner is None or owner.group(1) in live:
            continue
        if state == FREEING:  # unregistered by its run; sockets of its dead namespaces still hold it
            done.append(f"run {owner.group(1)}: TCP congestion control {name} was unregistered; the kernel frees it "
                        f"once the last of its {max(refs - 1, 1)} socket(s) in the run's dead namespaces closes "
                        "(nothing to remove)")
            continue
        Registration(name, map_id).unregister()
        done.append(f"run {owner.group(1)}: unregistered TCP congestion control {name}")
    return done


def dump_map(map_id: int) -> list[dict]:
    """A map's entries as bpftool formats them (key and value by their BTF types)."""
    shown = _bpftool("-j", "map", "dump", "id", str(map_id))
    return json.loads(shown.stdout) if shown.returncode == 0 else []


# a run's transport ------------------------------------------------------------------------------
ECN_FLOOR_PACKETS = 20
"""The least automatic marking threshold, in full frames: DCTCP's K at 1 Gbit/s (its paper)."""


@dataclass(frozen=True)
class EcnMarking:
    """Marking CE at every link sender above K: ``k_bytes`` as given, or (None) each link's own
    from RFC 8257's guideline K = C x RTT / 7, RTT the network's longest least-delay round trip,
    and at least :data:`ECN_FLOOR_PACKETS` frames. In a slowed run C and RTT scale inversely, so
    K in bytes is the network's."""

    k_bytes: int | None = None

    def k_for(self, capacity_mbps: float, rtt_s: float, mtu: int) -> int:
        """K of a link of ``capacity_mbps``.

        >>> EcnMarking().k_for(100, 0.08, 1500), EcnMarking().k_for(100, 0.001, 1500), EcnMarking(9000).k_for(1, 1, 1)
        (142857, 30280, 9000)
        """
        if self.k_bytes is not None:
            return self.k_bytes
        return max(ECN_FLOOR_PACKETS * (mtu + 14), round(capacity_mbps * 1e6 / 8 * rtt_s / 7))

    def shown(self) -> int | str:
        return "auto" if self.k_bytes is None else self.k_bytes


@dataclass(frozen=True)
class Transport:
    """The congestion control a run asked for, as built for this host: what the emulation
    registers (``obj``, None for the kernel's own) and selects on every flow's routes, and how
    its links mark ECN (None: they do not)."""

    asked: str
    label: str
    obj: CongestionObject | None = None
    knobs: Mapping[str, float] = field(default_factory=dict)
    ecn: EcnMarking | None = None

    def kernel_name(self, run_id: str) -> str:
        """The algorithm's name in the kernel for run ``run_id``."""
        return self.asked if self.obj is None else kernel_name(run_id, self.label)

    @property
    def told_bytes(self) -> bool:
        """Whether the agents tell it each connection's bytes (it declares ``iteration_bytes``)."""
        return self.obj is not None and ITERATION_BYTES in self.obj.maps


def ecn_marking(text: str | None, mtu: int) -> EcnMarking | None:
    """``--ecn-k``: ``auto``, ``BYTES``, or ``Np`` for N full frames of ``mtu`` (Ethernet header in).

    >>> ecn_marking("30000", 1500), ecn_marking("20p", 1500), ecn_marking("auto", 1500), ecn_marking(None, 1500)
    (EcnMarking(k_bytes=30000), EcnMarking(k_bytes=30280), EcnMarking(k_bytes=None), None)
    """
    if text is None:
        return None
    if text == "auto":
        return EcnMarking()
    return EcnMarking(int(text[:-1]) * (mtu + 14) if text.endswith("p") else int(text))


def ecn_k_ok(text: str) -> bool:
    """``--ecn-k``: ``auto``, or a positive number of bytes, or of packets followed by ``p``.

    >>> ecn_k_ok("20p"), ecn_k_ok("30000"), ecn_k_ok("auto"), ecn_k_ok("0"), ecn_k_ok("-3p")
    (True, True, True, False, False)
    """
    digits = text[:-1] if text.endswith("p") else text
    return text == "auto" or (digits.isdigit() and int(digits) > 0)


def prepare_transport(asked: str, cc_args: Sequence[str] = (), ecn_k: str | None = None,
                      mtu: int = 1500) -> Transport:
    """``--congestion-control`` made ready on this host before any network: fedmst's algorithms
    and a user's ``.bpf.c`` compiled (a ``.bpf.o`` inspected), the kernel's checked loaded; ECN
    marking (``--ecn-k``, or ``auto`` where the algorithm negotiates ECN). Bad input is refused
    in one line."""
    if cc_args and not knobs_of(asked):
        raise EmulationError(f"--cc-arg: {no_knobs(asked)}")
    ecn = ecn_marking(ecn_k, mtu)
    if ecn is not None:
        require_toolchain(f"--ecn-k {ecn_k}")
    if asked in KERNEL_CONGESTION_CONTROLS:
        available = AVAILABLE.read_text().split()
        if asked not in available:
            raise EmulationError(f"--congestion-control {asked}: this kernel offers {', '.join(available)} "
                                 f"(load it with: modprobe tcp_{asked})")
        return Transport(asked, asked, ecn=ecn)
    if not congestion_control_ok(asked):
        raise EmulationError(f"--congestion-control {asked}: choose one of {', '.join(CONGESTION_CONTROLS)}, "
                             f"or give your own as PATH.bpf.c or PATH.bpf.o")
    require_toolchain(f"--congestion-control {asked}")
    if asked in BPF_CONGESTION_CONTROLS:
        algorithm = BPF_CONGESTION_CONTROLS[asked]
        knobs = knob_values(asked, cc_args)
        defines = {algorithm.knobs[n].define: algorithm.knobs[n].compiled(v) for n, v in knobs.items()}
        obj = inspect(compile_bpf(SOURCES / algorithm.source, defines), asked)
        label = asked.replace("-", "_")
    else:
        path = Path(asked)
        if not path.is_file():
            raise EmulationError(f"--congestion-control {asked}: no such file")
        built = compile_bpf(path, shown=asked) if asked.endswith(".bpf.c") else path
        obj, knobs = inspect(built, asked), {}
        label = re.sub(r"[^A-Za-z0-9_]", "_", path.name.split(".")[0])
    return Transport(asked, label, obj, knobs, ecn or (EcnMarking() if obj.needs_ecn else None))


ITERATION_BYTES = "iteration_bytes"
"""The socket-storage map through which agents tell an algorithm each connection's bytes per
iteration (:mod:`fedmst.workers.iteration_bytes`)."""
MLTCP_BINS = 10
"""Tenths of bytes_ratio that mltcp's ``mltcp_stats`` counts in (``MLTCP_BINS`` in mltcp.bpf.c)."""


@dataclass(frozen=True)
class AggressivenessBin:
    """What mltcp applied over one tenth of bytes_ratio, summed over every CPU and connection."""

    bytes_ratio: float
    """The tenth's lower end."""
    acked_packets: int
    mean_aggressiveness: float | None
    """F averaged over the packets acknowledged (None where none were)."""
    window_growth_packets: int


def aggressiveness(entries: Sequence[Mapping]) -> list[AggressivenessBin]:
    """``mltcp_stats`` (a per-CPU array, as :func:`dump_map` reads it) summed over CPUs, one bin a tenth.

    >>> cpu = {"cpu": 0, "value": {"acked": 10, "aggressiveness": 12500, "grown": 1}}
    >>> aggressiveness([{"formatted": {"key": 3, "values": [cpu, cpu]}}])[3]
    AggressivenessBin(bytes_ratio=0.3, acked_packets=20, mean_aggressiveness=1.25, window_growth_packets=2)
    """
    sums = {b: [0, 0, 0] for b in range(MLTCP_BINS)}
    for entry in entries:
        formatted = entry.get("formatted", {})
        for cpu in formatted.get("values", []):
            value = cpu["value"]
            for i, name in enumerate(("acked", "aggressiveness", "grown")):
                sums[formatted["key"]][i] += value[name]
    return [AggressivenessBin(b / MLTCP_BINS, acked, round(f / acked / 1000, 4) if acked else None, grown)
            for b, (acked, f, grown) in sums.items()]
