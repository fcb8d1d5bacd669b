"""A run's options, each declared once: the one schema the command line, config files and checks share.

:class:`RunConfig` is what the user asked for (it is written to ``config.json`` and can be read
back with ``--config``, so a run folder can be run again exactly). Each field carries its
:class:`Option` (flags, help, choices, check) in its metadata; ``fedmst``'s click options, the
reading of a TOML file or ``config.json`` (:func:`read_config_file`) and :func:`validate` are
all derived from it. This module loads neither torch nor networkx, so ``fedmst --help`` starts
at once; :mod:`fedmst.run.prepare` turns a checked config into runs.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import Field, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Sequence, get_type_hints

from fedmst.core.optical.slots import Frame
from fedmst.core.tasks import DEFAULT_DATASET, DEFAULT_MODEL
from fedmst.core.wire import DEFAULT_MTU
from fedmst.errors import FedmstError
from fedmst.fl.devices import device_ok
from fedmst.net.queues import QUEUES
from fedmst.net.congestion import (BPF_CONGESTION_CONTROLS, CONGESTION_CONTROLS, KERNEL_CONGESTION_CONTROLS,
                                  congestion_control_ok, ecn_k_ok)
from fedmst.workers import DEFAULT_IMAGE

OPTIMIZERS = ("sgd", "momentum", "adam")
"""Local optimizers, implemented by :class:`fedmst.fl.training.LocalOptimizer` (no torch here)."""
ORDERS = ("fifo", "sjf-contention")
"""How tasks are admitted: as listed, or :func:`fedmst.core.ordering.shortest_jobs_first`."""

Check = tuple[Callable[[Any], bool], str]
"""A value's test and, when it fails, what to give instead."""


@dataclass(frozen=True)
class Option:
    """How one :class:`RunConfig` field is given on the command line and checked.

    ``unit`` scales the command line's number to the field's (``--chunk-kb`` sets bytes);
    ``comma`` takes a comma-separated list; ``was`` is the option's old flag, refused with a pointer
    to the new one (an old ``config.json``'s key is read as the new option).
    """

    flags: tuple[str, ...] = ()
    help: str | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    check: Check | None = None
    unit: int = 1
    comma: bool = False
    was: str | None = None

    def label(self, name: str) -> str:
        """How a message names the option: its long flag, or the field (an option of files only)."""
        return next((f for f in self.flags if f.startswith("--")), name)

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` (not None), or None."""
        if self.choices is not None and value not in self.choices:
            return f"choose one of {', '.join(self.choices)}"
        if self.check is not None and not self.check[0](value):
            return self.check[1]
        return None

    def shown(self, value: Any) -> str:
        """``value`` as the user gave it (a repeatable or comma option's items as they were typed,
        not a Python tuple).

        >>> Option().shown(("slope",)), Option(comma=True).shown(("a", "b")), Option(unit=1024).shown(65536)
        ('slope', 'a,b', '64')
        """
        if isinstance(value, tuple):
            return ("," if self.comma else " ").join(map(str, value))
        if isinstance(value, float):
            return f"{value:g}"
        return str(value // self.unit if isinstance(value, int) and not isinstance(value, bool) else value)


def option(default: Any, *flags: str, **how: Any) -> Any:
    """A :class:`RunConfig` field with default ``default`` and its :class:`Option`."""
    return field(default=default, metadata={"option": Option(flags, **how)})


def _count_or_fraction(value: str) -> bool:
    """A whole number of 1 or more, or a fraction in (0, 1) written with a point."""
    try:
        number = float(value)
    except ValueError:
        return False
    return 0 < number < 1 if "." in value else number >= 1 and number.is_integer()


def _knob_ok(value: str) -> bool:
    """``KNOB=NUMBER``."""
    name, sep, number = value.partition("=")
    try:
        float(number)
    except ValueError:
        return False
    return bool(sep and name.strip())


def _scale_ok(value: str) -> bool:
    """``auto``, or a factor from 1 to 1000."""
    if value == "auto":
        return True
    try:
        return 1 <= float(value) <= 1000
    except ValueError:
        return False


def _at_least(least: int, noun: str = "a number") -> Check:
    return (lambda v: v >= least, f"give {noun} of {least} or more")


@dataclass(frozen=True)
class RunConfig:
    """Every option of a run, as given; written to ``config.json``."""

    topology: str = option(
        "nsfnet", "--topology",
        help="A file in topologies/, a .json/.graphml path, a topohub key such as sndlib/polska, or a "
             "fabric spine-leaf:SPINES,LEAVES[,HOSTS_PER_LEAF] (docs/topologies.md).")
    scheduler: str = option(
        "mst", "--scheduler",
        help="spff, mst, mst-latency, steiner-opt, hier, ring, binomial, a registered scheduler, or "
             "package.module:Class.")
    local_models: int = option(4, "--local-models", "-k", help="Number of local models of the task.",
                               check=_at_least(1))
    tasks: int = option(1, "--tasks", help="Concurrent FL tasks sharing the network, each placed by seed.",
                        check=_at_least(1))
    ocs_wavelengths: int = option(
        40, "--ocs-wavelengths", check=_at_least(0), was="--wavelengths",
        help="Circuit (OCS) wavelengths per fibre, or per link where no node is all-optical (first fit; a task "
             "that finds none is blocked and not run). On a fabric each wavelength carries the fibre's capacity / "
             "(OCS + OTS wavelengths).")
    ots_wavelengths: int = option(
        8, "--ots-wavelengths", check=_at_least(0),
        help="Time-sliced (OTS) wavelengths per fibre on a fabric: lightpaths share one in turn, each sending only "
             "in its timeslots of every frame (ignored where no node is all-optical).")
    timeslots: int = option(8, "--timeslots", check=_at_least(1), help="Timeslots per frame of an OTS wavelength.")
    timeslot_us: float = option(
        500.0, "--timeslot-us", check=(lambda v: math.isfinite(v) and v > 0, "give a finite number of µs above 0"),
        help="Length of one timeslot in the network's µs, its guard included.")
    guard_us: float = option(
        50.0, "--guard-us", check=(lambda v: math.isfinite(v) and v >= 0, "give a finite number of µs, 0 or more"),
        help="Guard at the start of every timeslot (the switch reconfigures; nothing is sent), below --timeslot-us.")
    reconfig_ms: float = option(
        1.2, "--reconfig-ms",
        check=(lambda v: math.isfinite(v) and v >= 0, "give a finite number of ms, 0 or more"),
        help="Set-up time of new optical circuits on a fabric, paid before the first transfer phase that holds "
             "them (round 1's broadcast, and after a re-plan) (default: the median reconfiguration of a MEMS "
             "optical circuit switch).")
    optical: str = option(
        "ocs", "--optical", metavar="POLICY",  # OCSPolicy.name: a literal, the CLI loads no graphs (tested equal)
        help="Who gets which wavelength on a fabric: ocs (every lightpath a circuit), ots (one timeslot each), "
             "size (circuits above 10 MB), joint (fedmst's, docs/topologies.md), a registered policy, or "
             "package.module:Class.")
    """The optical policy (:mod:`fedmst.core.optical.policies`): looked up when the run is prepared."""
    rounds: int = option(2, "--rounds", "-r", check=_at_least(1))
    model: str = option(DEFAULT_MODEL, "--model",
                        help="A registered model name, package.module:factory, or torchvision:NAME (any of "
                             "torchvision's classification models, e.g. torchvision:resnet18; fedmst[vision]).")
    dataset: str = option(DEFAULT_DATASET, "--dataset",
                          help="A built-in dataset (digits), package.module:factory returning (x_train, y_train, "
                               "x_test, y_test) tensors, leaf:femnist:ROOT, leaf:shakespeare:ROOT, imagefolder:ROOT, "
                               "torchvision:NAME:ROOT (e.g. torchvision:CIFAR10:ROOT; fedmst[vision]), "
                               "or PATH.npz / PATH.pt (docs/datasets.md).")
    device: str = option(
        "auto", "--device", metavar="auto|cpu|cuda[:N]", check=(device_ok, "give auto, cpu, cuda or cuda:N"),
        help="Where the local models train: in each agent on the CPU (cpu), or on this host's GPU through one "
             "trainer for all its agents (cuda, cuda:N); auto: cuda:0 where torch sees a GPU (docs/devices.md).")
    """Resolved against the host by :func:`fedmst.fl.devices.resolve_device` (:func:`fedmst.run.prepare.check_host`)."""
    host_trainer: bool = option(
        False, "--host-trainer",
        help="Train every local model of this host in one trainer process, one at a time, even on the CPU (on a GPU "
             "always so): one model in training per host, each model's time its own (docs/devices.md).")
    download: bool = option(False, "--download",
                            help="Fetch a torchvision:NAME:ROOT dataset into ROOT before the run (nothing is "
                                 "downloaded otherwise).")
    seed: int = option(1, "--seed", check=_at_least(0, "a seed"),
                       help="Seeds task placement, data split and model initialisation (0 or more).")
    out: str = option("runs/latest")
    """The run folder (each command declares its own ``--out``)."""
    global_node: str | None = option(None, "--global-node", help="Node of the global model (default: seeded).")
    local_nodes: tuple[str, ...] | None = option(
        None, "--local-nodes", comma=True, help="Comma-separated nodes of the local models (default: seeded).")
    epochs: int = option(5, "--epochs", help="Local training epochs per round.", check=_at_least(1))
    batch_size: int = option(32, "--batch-size", help="Local minibatch size.", check=_at_least(1))
    lr: float = option(0.1, "--lr", help="Local learning rate.",
                       check=(lambda v: v > 0, "give a positive learning rate"))
    optimizer: str = option(
        "momentum", "--optimizer", choices=OPTIMIZERS,
        help="Local optimizer (momentum: SGD with momentum 0.9); its state starts afresh each round.")
    """Local training: chosen with scripts/bench_learning.py (docs/architecture.md, "Learning")."""
    client: str = option(
        "", "--client", metavar="package.module:client_fn",
        check=(lambda v: not v or ":" in v, "give package.module:client_fn"),
        help="Train the local models with a Flower client instead of --model/--dataset: the client_fn a "
             "Flower ClientApp is built from, called as Flower's simulation calls it (needs fedmst[flower]).")
    run_config: tuple[str, ...] = option(
        (), "--run-config", metavar="KEY=VALUE", check=(lambda v: all("=" in a for a in v), "give KEY=VALUE"),
        help="An entry of the Flower client's Context.run_config (a TOML value: 2, 0.1, true, \"text\"); "
             "repeatable.")
    strategy: str = option(
        "fedavg", "--strategy", metavar="NAME|package.module:Class",
        help="Server strategy: how G turns the round's updates into the next global model: fedavg, "
             "fedprox, fedavgm, fedadam, fedyogi, fedadagrad (Flower's defaults); fedmedian, fedtrimmedavg, "
             "krum (robust: every update reaches G whole); or your own (docs/strategies.md).")
    strategy_args: tuple[str, ...] = option(
        (), "--strategy-arg", metavar="KNOB=VALUE", check=(lambda v: all(_knob_ok(a) for a in v), "give KNOB=NUMBER"),
        help="Set one of the strategy's knobs, e.g. eta=0.01 or proximal_mu=0.1; repeatable.")
    pcap: str | None = option(
        None, "--pcap", metavar="LINKS|all",
        help="Capture these links (comma-separated as links.csv names them, both directions each; or all) "
             "from round 1 to the last round into DIR/pcap/SRC-DST.pcap, one file per direction (needs tcpdump).")
    pcap_snaplen: int = option(
        128, "--pcap-snaplen", metavar="BYTES", check=_at_least(0, "a byte count"),
        help="Bytes kept of each captured frame (headers only by default; 0 keeps whole frames).")
    target_accuracy: float = option(
        0.8, "--target-accuracy", check=(lambda v: 0 < v <= 1, "give an accuracy in (0, 1]"),
        help="Report the time and link bytes of the rounds until the global model first reaches this.")
    partition: str = option(
        "dirichlet:0.5", "--partition", metavar="NAME[:ARG]",
        help="How each task's training samples are split among its local models: dirichlet:ALPHA (each class in "
             "Dirichlet shares), iid, classes:N (N classes each), quantity:ALPHA (sizes skewed), natural (LEAF's "
             "users, grouped); docs/datasets.md.")
    """The data split (:mod:`fedmst.fl.partitions`), checked with the dataset when the run is prepared."""
    chunk_bytes: int = option(256 * 1024, "--chunk-kb", unit=1024, check=_at_least(1),
                              help="Relays forward weights in chunks of this size (pipelining).")
    mtu: int = option(DEFAULT_MTU, "--mtu", check=(lambda v: 576 <= v <= 9000, "give an MTU between 576 and 9000"),
                      help="MTU of every emulated link, 576 to 9000 (jumbo frames cut per-packet CPU cost).")
    delay_mode: str = option(
        "auto", "--delay-mode", choices=("auto", "netem", "userspace", "off"),
        help="How link propagation delay is applied: netem where the kernel has it (auto), "
             "fedmst's NFQUEUE delay line, or not at all.")
    queue: str = option(
        "fifo", "--queue", choices=QUEUES,
        help="How each link's sender queues: one FIFO (Mininet's), or fair: one queue per transfer, "
             "served in turn, as the contention prediction assumes.")
    """How each link direction's sender queues: one FIFO, or ``fair``: one queue per transfer
    served in turn (:mod:`fedmst.net.queues`)."""
    congestion_control: str = option(
        "cubic", "--congestion-control", metavar="NAME|PATH.bpf.c|PATH.bpf.o",
        check=(congestion_control_ok, f"choose one of {', '.join(CONGESTION_CONTROLS)}, or give PATH.bpf.c or "
                                      "PATH.bpf.o"),
        help="TCP congestion control of every transfer and background TCP flow, whatever this host's default: "
             f"the kernel's {', '.join(KERNEL_CONGESTION_CONTROLS)} (cubic is Linux's default); fedmst's own in BPF, "
             f"{', '.join(BPF_CONGESTION_CONTROLS)}; or your own tcp_congestion_ops in BPF (docs/transports.md).")
    """Set on every flow's routes (:mod:`fedmst.net.routes`): a host's default may differ. A BPF
    one is built and registered for the run (:mod:`fedmst.net.congestion`)."""
    cc_args: tuple[str, ...] = option(
        (), "--cc-arg", metavar="KNOB=VALUE", check=(lambda v: all(_knob_ok(a) for a in v), "give KNOB=NUMBER"),
        help="Set one of the congestion control's knobs ("
             + "; ".join(f"{name}: {', '.join(a.knobs)}" for name, a in BPF_CONGESTION_CONTROLS.items())
             + "); repeatable.")
    ecn_k: str | None = option(
        None, "--ecn-k", metavar="BYTES|Np|auto",
        check=(ecn_k_ok, "give auto, or a positive number of bytes, or of packets as Np"),
        help="Mark ECN on every link sender whose queue holds more than this (bytes, or N full packets as Np; auto: "
             "each link's capacity x the longest round trip / 7, at least 20 packets). Default: auto where the "
             "congestion control negotiates ECN (dctcp), no marking otherwise.")
    loss: float = option(0.0, "--loss", check=(lambda v: 0 <= v < 1, "give a probability in [0, 1)"),
                         help="Packet loss probability on every link direction (needs a delay mode other than off).")
    jitter_ms: float = option(0.0, "--jitter-ms", check=(lambda v: v >= 0, "give 0 or more milliseconds"),
                              help="Uniform delay jitter (+-) on every link direction; packet order is kept.")
    time_scale: str = option(
        "auto", "--time-scale", metavar="N|auto", check=(_scale_ok, "give a factor from 1 to 1000, or auto"),
        help="Run the emulation N times slower than the network it stands for: capacities / N; delays, "
             "timeouts, background flows, link traces and compute x N; every time reported is the "
             "network's (docs/time-scale.md). auto: the smallest power of two at which this host keeps "
             "up with the plans (1 where it does); 1: real time, whatever the host.")
    """Virtual time (:class:`fedmst.core.timescale.TimeScale`): the figures a host with enough
    cores would measure, at N times the wall-clock; ``auto`` is decided from the plans
    (:func:`fedmst.run.prepare.resolve`). ``auto`` by default: where it picks too small a factor
    the run still flags its CPU-bound phases, as a run in real time would, so it never reads the
    host's figures where real time would read the network's."""
    phase_timeout_s: float = option(300.0)
    save_models: bool = option(False, "--save-models",
                               help="Write trained local and aggregated global weights to OUT/models.")
    workers: str = option(
        "process", "--workers", metavar="BACKEND",
        help="Run each compute node's agent as a process in its host (process), in a Docker "
             "container whose network namespace gets the emulated links (docker), or with a "
             "registered backend or package.module:Class.")
    """A backend of :mod:`fedmst.workers.backends`, which knows their names: checked when the run
    is prepared (:func:`fedmst.run.prepare.resolve`), since the backends' code imports the agents'."""
    image: str = option(DEFAULT_IMAGE, "--image",
                        help="Worker image for --workers docker (build it from the repository's Dockerfile).")
    cpus: tuple[str, ...] = option((), "--cpus", metavar="[NODE=]CPUS",
                                   help="CPU limit of every worker container, or NODE=CPUS for one node; repeatable.")
    memory: tuple[str, ...] = option(
        (), "--memory", metavar="[NODE=]SIZE",
        help="Memory limit of every worker container (e.g. 1g), or NODE=SIZE for one node; repeatable.")
    ray: str | None = option(
        None, "--ray", metavar="ADDRESS",
        help="Spread the emulation over hosts of the Ray cluster at ADDRESS (host:port, or auto for the one on "
             "this host) that offer an emulation slot, placed to cut the fewest predicted bytes; this host "
             "coordinates and holds no node (scripts/ray-local.sh start N --namespaces makes such hosts here).")
    """One emulation on several hosts (docs/multi-host.md; :mod:`fedmst.hosts`); None: on this host."""
    hosts: int = option(2, "--hosts", metavar="N", check=(lambda v: v >= 1, "give 1 or more hosts"),
                        help="With --ray: how many of the cluster's hosts the emulation spans.")
    pin: str | None = option(
        None, "--pin", metavar="FILE",
        help="With --ray: put these nodes on these hosts, whatever the placement would choose; FILE has a "
             "NODE,HOST line each (HOST: a host's address as the run prints it; # starts a comment).")
    """Nodes pinned to hosts (:func:`fedmst.core.placement.parse_pins`); the rest are placed."""
    fail_links: tuple[str, ...] = option(
        (), "--fail-link", metavar="A-B@ROUND[+S][-R2]",
        help="Take link A-B down at the start of ROUND (A-B@ROUND+S: S seconds into its broadcast, "
             "under the transfers; A-B@ROUND-R2: up again at round R2); the scheduler re-plans "
             "around it. Repeatable.")
    kill_workers: tuple[str, ...] = option(
        (), "--kill-worker", metavar="NODE@ROUND[+S]",
        help="Kill NODE's worker during ROUND's training (NODE@ROUND+S: S seconds into its "
             "broadcast); the round finishes with the surviving local models. Repeatable.")
    slow_nodes: tuple[str, ...] = option(
        (), "--slow-node", metavar="NODE:FACTOR",
        help="NODE's worker trains FACTOR times slower (a straggler). Repeatable.")
    deadline_s: float | None = option(
        None, "--deadline", metavar="SECONDS", check=(lambda v: v > 0, "give a positive number of seconds"),
        help="Per-round training deadline: updates of local models not trained by then are dropped "
             "(weights renormalised over the others) and recorded.")
    stall_s: float = option(
        10.0, "--stall-timeout", check=(lambda v: v >= 0.1, "give at least 0.1 seconds"),
        help="A transfer under way whose path has a link that carried nothing at all for this long "
             "has stalled (a dead link): the phase is aborted. A slow, shared link is never stalled.")
    workload: str | None = option(
        None, "--workload", metavar="FILE",
        help='Place the tasks from a JSON file: {"tasks": [{"name", "global_node", "local_nodes", '
             'and optionally "model", "dataset", "rounds", "compute_s", "start_s"}]} '
             '(docs/contention.md).')
    """A workload file (:func:`fedmst.core.workload.read_workload`) placing the tasks instead of the seed."""
    clock: str = option(
        "lockstep", "--clock", choices=("lockstep", "independent"),
        help="lockstep: every task's phases start together; independent: each task runs its rounds "
             "back to back from its own start.")
    """``lockstep``: every task's phase starts together; ``independent``: each task runs its rounds
    back to back from its own start offset."""
    compute_s: float = option(
        0.0, "--compute-s", metavar="SECONDS", check=(lambda v: v >= 0, "give 0 or more seconds"),
        help="Each local model's training lasts at least this long (it trains, then waits), standing "
             "for compute on real accelerators.")
    """Each local model's training lasts at least this long (a task in the workload file may say otherwise)."""
    interleave: str = option(
        "none", "--interleave", choices=("none", "cassini"),
        help="cassini: shift the tasks' starts so their communication interleaves on shared links "
             "(with --clock independent).")
    traffic: tuple[str, ...] = option(
        (), "--traffic", metavar="SRC-DST:RATE[:tcp|udp][@START[-END]]",
        help="A background flow (e.g. a-c:20mbit:udp@1-5: from 1 s to 5 s after the first round "
             "starts), on the least-delay path, counted apart from the weights. Repeatable.")
    """Background flows (:mod:`fedmst.core.traffic`)."""
    traffic_file: str | None = option(
        None, "--traffic-file", metavar="FILE",
        help='Background flows from JSON: {"flows": [{"src", "dst", "rate", "protocol", "start_s", "end_s"}]}.')
    link_trace: str | None = option(
        None, "--link-trace", metavar="FILE",
        help='Change links live during the run: {"changes": [{"at_s", "a", "b", and any of '
             '"capacity_mbps", "delay_ms", "loss"}]}, at_s from the first round\'s start.')
    """Links' capacity, delay or loss changing during the run (:mod:`fedmst.core.linktrace`)."""
    order: str = option(
        "fifo", "--order", choices=ORDERS,
        help="The order tasks are admitted and scheduled in (each sees the links the earlier ones "
             "planned; wavelengths go first come, first served): as listed, or sjf-contention, the shortest "
             "job first counting its contention with the tasks admitted before it.")
    link_state: str = option(
        "planned", "--link-state", choices=("planned", "measured"),
        help="measured: schedulers also weigh each link by the background traffic measured on it in "
             "the last round, and the tasks are re-planned between rounds when that changes a plan.")
    """What the schedulers see as a link's load: the bytes earlier tasks planned on it, or with
    ``measured`` also the background traffic measured on it in the last round (re-planned then)."""
    clients_per_round: str | None = option(
        None, "--clients-per-round", metavar="M|FRACTION",
        check=(_count_or_fraction, "give a count of 1 or more, or a fraction in (0, 1)"),
        help="Local models taking part in each round (default: all), chosen by --selection; the tasks are "
             "re-planned whenever the set changes, and what that costs is measured (faults.json).")
    selection: str = option(
        "random", "--selection", metavar="random|loss|network|package.module:Class",
        help="How a round's participants are chosen: random (FedAvg's seeded sample), loss "
             "(power-of-choice: of a seeded pool, the M with the highest last local loss), network (of a "
             "seeded pool, the M the scheduler serves with the fewest link bytes), or your own Selection class.")
    selection_pool: int | None = option(
        None, "--selection-pool", metavar="D", check=_at_least(1),
        help="Candidates a pool-based selection (loss, network) draws each round before it picks M "
             "(power-of-choice's d; default 1.5 M, at most every local model).")
    """Client selection (:mod:`fedmst.core.selection`)."""
    slots: int = option(
        1, "--slots", metavar="N", check=_at_least(0, "a slot count"),
        help="fedmst cluster: compute slots of every node that declares none in the topology (0: a pure network "
             "node); a running job holds one per local model and one for its G.")
    """A node's compute for the cluster (:mod:`fedmst.core.cluster.slots`)."""
    jobs: str | None = option(
        None, "--jobs", metavar="FILE|poisson:RATE,N|philly:FILE|helios:FILE",
        help="fedmst cluster: the jobs and when they arrive: a .csv or .jsonl file (job, submit_s, local_models, "
             "rounds; optionally model, dataset, epochs, compute_s, priority), N jobs of a Poisson process of RATE "
             "a minute, or a Philly or Helios trace (docs/cluster.md).")
    time_compress: float = option(  # checked where it is used (fedmst.core.cluster.traces.read_jobs)
        1.0, "--time-compress", metavar="F",
        help="fedmst cluster: divide a job file's submission times, and a Philly or Helios trace's times and "
             "durations, by F, so a day of trace fits a run (a round stands for one second of compressed trace).")
    mode: str = option(
        "emulate", "--mode", choices=("emulate", "simulate"),
        help="fedmst cluster: run every job for real in the emulation, or on the fluid model of concurrent "
             "transfers (no root, no network; thousands of jobs).")
    placement: str = option(
        "random", "--placement", metavar="NAME|package.module:Class",
        help="fedmst cluster: where a job's G and local models go among the free slots: random (seeded), pack "
             "(first fit), spread, sjf-bco, delay, network or cassini (docs/cluster.md).")
    job_order: str = option(
        "fifo", "--order", metavar="NAME|package.module:Class",
        help="fedmst cluster: the order waiting jobs are tried in: fifo (first come, first served; a later job "
             "that fits may start while an earlier one waits), sjf, smallest, srtf or las (docs/cluster.md).")
    preempt: str = option(
        "none", "--preempt", metavar="NAME|package.module:Class",
        help="fedmst cluster: which running jobs a waiting job may stop, at their next round boundary (they resume "
             "later from that round's global model): none, las or network (docs/cluster.md).")
    """The cluster's policy points (:mod:`fedmst.core.cluster.policies`); ``job_order`` is the cluster's
    ``--order`` (``run``'s orders the tasks it admits)."""

    @property
    def frame(self) -> Frame:
        """An OTS wavelength's frame, from ``--timeslots``, ``--timeslot-us`` and ``--guard-us``."""
        return Frame(self.timeslots, self.timeslot_us, self.guard_us)

    @property
    def trains(self) -> str:
        """What trains the local models, as reports name it: the model, or ``flower:`` and the client."""
        return f"flower:{self.client}" if self.client else self.model


CLUSTER_ONLY = ("slots", "jobs", "time_compress", "mode", "placement", "job_order", "preempt")
"""The options only ``fedmst cluster`` takes (``run`` and ``compare`` run no cluster)."""

SWEEP = {"ocs_wavelengths": {"default": 120,
                         "help": "Enough that SPFF blocks no task of the default sweep (with 40 it blocks 17 of 30 "
                                 "at 15 local models); blocking is reported either way."},
         "rounds": {"default": 1},
         "model": {"default": "mlp", "help": "Small by default: 30 tasks x 15 local models must fit a 2-core host."},
         "topology": {"help": None},
         "delay_mode": {"help": None},
         "stall_s": {"default": 60.0},
         "hosts": {"default": 1,
                   "help": "With --ray: how many hosts each point spans. 1: the points run side by side, each on one "
                           "host that offers an emulation slot; 2 or more: each point spread over that many hosts, "
                           "one point at a time (docs/multi-host.md)."}}
"""What ``fedmst sweep`` changes of the options it shares with ``run``. Its stall timeout: it
injects no faults, and with 30 tasks of 14 or more local models on a 2-core host a relay can wait
more than 10 s for the CPU while its links stand idle; only a dead link (a bug) is left to find."""


def options() -> dict[str, tuple[Field[Any], Option]]:
    """Every field's :class:`Option`, by field name, in :class:`RunConfig`'s order."""
    return {f.name: (f, f.metadata["option"]) for f in fields(RunConfig)}


def changed(config: RunConfig, names: Sequence[str]) -> list[str]:
    """The options among ``names`` (fields) whose value in ``config`` is not their declared default,
    as the command line names them.

    >>> changed(RunConfig(reconfig_ms=20.0), ("optical", "reconfig_ms"))
    ['--reconfig-ms']
    """
    declared = options()
    return [declared[n][1].label(n) for n in names if getattr(config, n) != declared[n][0].default]


def split_list(value: str, option_name: str) -> tuple[str, ...]:
    """``a,b,c`` as its items, refusing an empty one (``a,,b``, a trailing comma) in one line.

    >>> split_list(" spff, mst", "--schedulers")
    ('spff', 'mst')
    """
    items = tuple(item.strip() for item in str(value).split(","))
    if not all(items):
        raise FedmstError(f"{option_name} {value!r}: an empty item in the list; give names separated by single commas")
    return items


def validate(config: RunConfig) -> None:
    """Refuse, in one line naming the option, values no run can use (whether they came from the
    command line or a config file): each field's own check, then the options that exclude others."""
    for name, (_, opt) in options().items():
        value = getattr(config, name)
        problem = None if value is None else opt.problem(value)
        if problem is not None:
            raise FedmstError(f"{opt.label(name)} {opt.shown(value)}: {problem}")
    _check_together(config)


def _check_together(config: RunConfig) -> None:
    """The options that make no sense together."""
    if config.ocs_wavelengths + config.ots_wavelengths < 1:
        raise FedmstError("--ocs-wavelengths 0 with --ots-wavelengths 0: a fibre needs at least one wavelength")
    if config.frame.problem():
        raise FedmstError(config.frame.problem())
    from fedmst.fl.partitions import parse_partition

    parse_partition(config.partition)
    if config.delay_mode == "off" and (config.loss or config.jitter_ms):
        given = [o for o, v in (("--loss", config.loss), ("--jitter-ms", config.jitter_ms)) if v]
        raise FedmstError(f"{' and '.join(given)} need{'s' if len(given) == 1 else ''} a delay mechanism: "
                          "--delay-mode off applies neither; use --delay-mode auto, netem or userspace")
    if config.tasks > 1 and (config.global_node is not None or config.local_nodes is not None):
        raise FedmstError("--global-node/--local-nodes place one task: leave them out with --tasks N")
    if config.workload is not None and (config.tasks > 1 or config.global_node is not None
                                        or config.local_nodes is not None):
        raise FedmstError("--workload places the tasks: leave out --tasks, --global-node and --local-nodes")
    if config.client:
        if config.download:
            raise FedmstError("--download fetches a torchvision --dataset; a Flower client (--client) reads its own "
                              "data")
        if config.clock == "independent":
            raise FedmstError("--client: a Flower client reports its examples (its update's weight) with each fit, "
                              "which the independent clock fixes before round 1; use --clock lockstep")
        if config.workers == "docker":
            raise FedmstError("--client runs in process workers: the worker image has neither flwr nor your client's "
                              "module; leave out --workers docker")
        given = [o for o, v, d in (("--model", config.model, DEFAULT_MODEL), ("--dataset", config.dataset,
                                                                              DEFAULT_DATASET)) if v != d]
        if given:
            raise FedmstError(f"--client brings its own model and data: leave out {' and '.join(given)}")
    if config.mode == "simulate":
        default = options()["congestion_control"][0].default
        given = [o for o, v in (("--congestion-control", config.congestion_control != default),
                                ("--cc-arg", config.cc_args), ("--ecn-k", config.ecn_k)) if v]
        if given:
            raise FedmstError(f"{', '.join(given)}: the fluid model of --mode simulate runs no TCP; use --mode emulate")
        if config.ray is not None:
            raise FedmstError(f"--ray {config.ray}: --mode simulate builds no network to spread over hosts; "
                              "use --mode emulate")
    if config.interleave != "none" and config.clock != "independent":
        raise FedmstError(f"--interleave {config.interleave} shifts tasks on their own clocks: add --clock independent")
    _check_selection(config)
    _check_spanned(config)
    if config.clock == "independent":
        given = [o for o, v in (("--fail-link", config.fail_links), ("--kill-worker", config.kill_workers),
                                ("--deadline", config.deadline_s), ("--clients-per-round", config.clients_per_round),
                                ("--link-state measured", config.link_state == "measured")) if v]
        if given:
            raise FedmstError(f"{', '.join(given)}: not supported with --clock independent yet (faults, deadlines "
                              "and re-plans happen between lockstep phases); use --clock lockstep")


SPANNED_NOT_YET = (("--workers docker", lambda c: c.workers == "docker"), ("--pcap", lambda c: c.pcap),
                   ("--traffic", lambda c: c.traffic), ("--traffic-file", lambda c: c.traffic_file),
                   ("--link-trace", lambda c: c.link_trace), ("--fail-link", lambda c: c.fail_links),
                   ("--kill-worker", lambda c: c.kill_workers), ("--cc-arg", lambda c: c.cc_args),
                   ("--ecn-k", lambda c: c.ecn_k),
                   ("--preempt", lambda c: c.preempt != options()["preempt"][0].default),
                   ("--congestion-control",
                    lambda c: c.congestion_control != options()["congestion_control"][0].default))
"""The options a run spread over hosts refuses, for now: what their data planes need is on one host
(a preempted job's checkpoint stays on the host its G ran on)."""


def _check_spanned(config: RunConfig) -> None:
    """``--hosts`` needs ``--ray``; and what cannot span hosts yet is refused, by name."""
    if config.ray is None:
        if config.hosts not in (1, options()["hosts"][0].default):  # one host is where a run without --ray runs
            raise FedmstError(f"--hosts {config.hosts}: spreading an emulation over hosts needs --ray ADDRESS")
        if config.pin is not None:
            raise FedmstError(f"--pin {config.pin}: pinning nodes to hosts needs --ray ADDRESS")
        return
    given = [flag for flag, asked in SPANNED_NOT_YET if asked(config)]
    if given:
        raise FedmstError(f"{', '.join(given)}: cannot span hosts yet; leave {'it' if len(given) == 1 else 'them'} "
                          "out with --ray, or run on one host")


def _check_selection(config: RunConfig) -> None:
    """A selection, or its pool, needs ``--clients-per-round`` (without it every local model takes
    part, so nothing is chosen); random draws no pool."""
    default = options()["selection"][0].default
    if config.clients_per_round is None:
        given = [f"{o} {v}" for o, v, asked in (("--selection", config.selection, config.selection != default),
                                                ("--selection-pool", config.selection_pool,
                                                 config.selection_pool is not None)) if asked]
        if given:
            raise FedmstError(f"{' and '.join(given)}: without --clients-per-round M every local model takes part in "
                              "every round, so none is chosen; give --clients-per-round too")
    elif config.selection == default and config.selection_pool is not None:
        raise FedmstError(f"--selection-pool {config.selection_pool}: --selection {default} draws no pool (its "
                          "sample is the round's participants); the pool is for loss, network or your own selection")


def read_config_file(path: Path, extra_keys: Sequence[str] = ()) -> dict[str, Any]:
    """Options from a TOML file or an earlier run's ``config.json``, by :class:`RunConfig` field
    name (``local-models`` and ``local_models`` alike), checked against the field types;
    ``extra_keys`` names options of the command that are not run options (e.g. ``schedulers``).

    An unknown key is refused, naming it, so a misspelt option cannot silently do nothing.
    """
    try:
        text = Path(path).read_text()
        raw = json.loads(text) if Path(path).suffix == ".json" else tomllib.loads(text)
    except OSError as exc:
        raise FedmstError(f"--config {path}: cannot read it ({exc.strerror or exc})") from None
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise FedmstError(f"--config {path}: malformed: {' '.join(str(exc).split())}") from None
    if not isinstance(raw, dict):
        raise FedmstError(f"--config {path}: expected a table of options")
    hints = get_type_hints(RunConfig)
    renamed = {o.was.lstrip("-").replace("-", "_"): n for n, (_, o) in options().items() if o.was}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        name = renamed.get(name, name)
        if name == "alpha" and isinstance(value, (int, float)):  # a run from before --partition
            name, value = "partition", f"dirichlet:{value:g}"
        if name in extra_keys:
            out[name] = value
            continue
        if name not in hints:
            raise FedmstError(f"--config {path}: unknown option {key!r}")
        out[name] = _typed(path, key, value, hints[name])
    return out


def _typed(path: Path, key: str, value: Any, hint: Any) -> Any:
    """``value`` as the field's type (lists become tuples, ints may stand for floats)."""
    text = str(hint)
    if value is None and "None" in text:
        return None
    if "tuple" in text:
        if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int)) for v in value):
            return tuple(str(v) for v in value)
    elif hint is bool or text == "bool":
        if isinstance(value, bool):
            return value
    elif "float" in text:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif "int" in text:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    name = getattr(hint, "__name__", None) or text.replace("typing.", "")
    raise FedmstError(f"--config {path}: option {key!r} = {value!r} is not of type {name}")


__all__ = ["CLUSTER_ONLY", "OPTIMIZERS", "ORDERS", "SWEEP", "Option", "RunConfig", "options", "read_config_file",
           "split_list", "validate"]
