"""The ``fedmst`` command: run, compare, sweep, links, plot, clean.

Every :class:`FedmstError` becomes one line on stderr and exit code 1 (a usage error from the
option parser one line and exit code 2); Ctrl-C and SIGTERM tear the emulation down (the ``with``
blocks do it) and exit with 130. Imports are lazy: ``fedmst --help``, ``links`` and ``clean``
never load torch.
"""

from __future__ import annotations

import atexit
import gc
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click
from rich.console import Console

from fedmst.errors import FedmstError

if TYPE_CHECKING:
    from rich.table import Table

    from fedmst.run.config import RunConfig

DEFAULT_MODEL, DEFAULT_DATASET, DEFAULT_IMAGE = "mlp-large", "digits", "fedmst-worker"
"""Option defaults; fedmst.run.config checks they are its own (tests/test_cli.py)."""
DELAY_MODES = ("auto", "netem", "userspace", "off")
OPTIMIZERS = ("sgd", "momentum", "adam")
CLOCKS, INTERLEAVES, LINK_STATES = ("lockstep", "independent"), ("none", "cassini"), ("planned", "measured")
ORDERS, QUEUES = ("fifo", "sjf-bco"), ("fifo", "fair")


console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


class _Group(click.Group):
    """Turns the option parser's usage errors into one ``fedmst: error:`` line (exit 2)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().main(*args, standalone_mode=False, **kwargs)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("fedmst: interrupted", err=True)
            sys.exit(130)
        except click.ClickException as exc:
            click.echo(f"fedmst: error: {' '.join(exc.format_message().split())}", err=True)
            sys.exit(exc.exit_code)


def _options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options of one run, shared by ``run`` and ``compare``; ranges are checked by
    :func:`fedmst.run.config.validate`, so a config file's values are checked the same way."""
    opts = [
        click.option("--topology", default="nsfnet", show_default=True,
                     help="A file in topologies/, a .json/.graphml path, or a topohub key such as sndlib/polska."),
        click.option("--local-models", "-k", type=int, default=4, show_default=True,
                     help="Number of local models of the task."),
        click.option("--tasks", type=int, default=1, show_default=True,
                     help="Concurrent FL tasks sharing the network, each placed by seed."),
        click.option("--wavelengths", type=int, default=40, show_default=True,
                     help="Wavelengths per link of the optical layer (first fit; a task that finds none is blocked)."),
        click.option("--rounds", "-r", type=int, default=2, show_default=True),
        click.option("--model", default=DEFAULT_MODEL, show_default=True,
                     help="A registered model name or package.module:factory."),
        click.option("--dataset", default=DEFAULT_DATASET, show_default=True,
                     help="A built-in dataset (digits) or package.module:factory returning "
                          "(x_train, y_train, x_test, y_test) tensors."),
        click.option("--seed", type=int, default=1, show_default=True,
                     help="Seeds task placement, data split and model initialisation (0 or more)."),
        click.option("--global-node", default=None, help="Node of the global model (default: seeded)."),
        click.option("--local-nodes", default=None,
                     help="Comma-separated nodes of the local models (default: seeded)."),
        click.option("--epochs", type=int, default=5, show_default=True,
                     help="Local training epochs per round."),
        click.option("--lr", type=float, default=0.1, show_default=True, help="Local learning rate."),
        click.option("--batch-size", type=int, default=32, show_default=True, help="Local minibatch size."),
        click.option("--optimizer", type=click.Choice(OPTIMIZERS), default="momentum", show_default=True,
                     help="Local optimizer (momentum: SGD with momentum 0.9); its state starts afresh each round."),
        click.option("--target-accuracy", type=float, default=0.8, show_default=True,
                     help="Report the wall-clock time of the rounds until the global model first reaches this."),
        click.option("--chunk-kb", type=int, default=256, show_default=True,
                     help="Relays forward weights in chunks of this size (pipelining)."),
        click.option("--mtu", type=int, default=1500, show_default=True,
                     help="MTU of every emulated link, 576 to 9000 (jumbo frames cut per-packet CPU cost)."),
        click.option("--delay-mode", type=click.Choice(DELAY_MODES), default="auto", show_default=True,
                     help="How link propagation delay is applied: netem where the kernel has it (auto), "
                          "fedmst's NFQUEUE delay line, or not at all."),
        click.option("--queue", type=click.Choice(QUEUES), default="fifo", show_default=True,
                     help="How each link's sender queues: one FIFO (Mininet's), or fair: one queue per transfer, "
                          "served in turn, as the contention prediction assumes."),
        click.option("--loss", type=float, default=0.0, show_default=True,
                     help="Packet loss probability on every link direction (needs a delay mode other than off)."),
        click.option("--jitter-ms", type=float, default=0.0, show_default=True,
                     help="Uniform delay jitter (+-) on every link direction; packet order is kept."),
        click.option("--save-models", is_flag=True,
                     help="Write trained local and aggregated global weights to OUT/models."),
        click.option("--fail-link", "fail_links", multiple=True, metavar="A-B@ROUND[+S][-R2]",
                     help="Take link A-B down at the start of ROUND (A-B@ROUND+S: S seconds into its broadcast, "
                          "under the transfers; A-B@ROUND-R2: up again at round R2); the scheduler re-plans "
                          "around it. Repeatable."),
        click.option("--kill-worker", "kill_workers", multiple=True, metavar="NODE@ROUND[+S]",
                     help="Kill NODE's worker during ROUND's training (NODE@ROUND+S: S seconds into its "
                          "broadcast); the round finishes with the surviving local models. Repeatable."),
        click.option("--stall-timeout", "stall_s", type=float, default=10.0, show_default=True,
                     help="A transfer under way whose path has a link that carried nothing at all for this long "
                          "has stalled (a dead link): the phase is aborted. A slow, shared link is never stalled."),
        click.option("--slow-node", "slow_nodes", multiple=True, metavar="NODE:FACTOR",
                     help="NODE's worker trains FACTOR times slower (a straggler). Repeatable."),
        click.option("--deadline", "deadline_s", type=float, default=None, metavar="SECONDS",
                     help="Per-round training deadline: updates of local models not trained by then are dropped "
                          "(weights renormalised over the others) and recorded."),
        click.option("--workload", default=None, metavar="FILE",
                     help='Place the tasks from a JSON file: {"tasks": [{"name", "global_node", "local_nodes", '
                          'and optionally "model", "dataset", "rounds", "compute_s", "start_s"}]} (README, '
                          '"Contention over time").'),
        click.option("--clock", type=click.Choice(CLOCKS), default="lockstep", show_default=True,
                     help="lockstep: every task's phases start together; independent: each task runs its rounds "
                          "back to back from its own start."),
        click.option("--compute-s", type=float, default=0.0, show_default=True, metavar="SECONDS",
                     help="Each local model's training lasts at least this long (it trains, then waits), standing "
                          "for compute on real accelerators."),
        click.option("--interleave", type=click.Choice(INTERLEAVES), default="none", show_default=True,
                     help="cassini: shift the tasks' starts so their communication interleaves on shared links "
                          "(with --clock independent)."),
        click.option("--traffic", multiple=True, metavar="SRC-DST:RATE[:tcp|udp][@START[-END]]",
                     help="A background flow (e.g. a-c:20mbit:udp@1-5: from 1 s to 5 s after the first round "
                          "starts), on the least-delay path, counted apart from the weights. Repeatable."),
        click.option("--order", type=click.Choice(ORDERS), default="fifo", show_default=True,
                     help="The order tasks are admitted and scheduled in (each sees the links the earlier ones "
                          "planned; wavelengths go first come, first served): as listed, or sjf-bco, the shortest "
                          "job first counting its contention with the tasks admitted before it."),
        click.option("--link-state", type=click.Choice(LINK_STATES), default="planned", show_default=True,
                     help="measured: schedulers also weigh each link by the background traffic measured on it in "
                          "the last round, and the tasks are re-planned between rounds when that changes a plan."),
        click.option("--link-trace", default=None, metavar="FILE",
                     help='Change links live during the run: {"changes": [{"at_s", "a", "b", and any of '
                          '"capacity_mbps", "delay_ms", "loss"}]}, at_s from the first round\'s start.'),
        click.option("--traffic-file", default=None, metavar="FILE",
                     help='Background flows from JSON: {"flows": [{"src", "dst", "rate", "protocol", "start_s", '
                          '"end_s"}]}.'),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return _worker_options(fn)


def _worker_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option("--workers", default="process", show_default=True, metavar="BACKEND",
                     help="Run each compute node's agent as a process in its host (process), in a Docker "
                          "container whose network namespace gets the emulated links (docker), or with a "
                          "registered backend or package.module:Class."),
        click.option("--image", default=DEFAULT_IMAGE, show_default=True,
                     help="Worker image for --workers docker (build it from the repository's Dockerfile)."),
        click.option("--cpus", multiple=True, metavar="[NODE=]CPUS",
                     help="CPU limit of every worker container, or NODE=CPUS for one node; repeatable."),
        click.option("--memory", multiple=True, metavar="[NODE=]SIZE",
                     help="Memory limit of every worker container (e.g. 1g), or NODE=SIZE for one node; repeatable."),
        click.option("--config", "config_file", type=click.Path(path_type=Path), default=None, metavar="FILE",
                     help="Take options from a TOML file or an earlier run's config.json (re-run it exactly); "
                          "options given on the command line win."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


_FIELD = {"chunk_kb": "chunk_bytes"}
"""Command-line parameters whose RunConfig field has another name."""


def _config(ctx: click.Context, kw: dict[str, Any]) -> tuple[RunConfig, dict[str, Any]]:
    """The run configuration from the defaults, then ``--config FILE``, then what the command line
    gives explicitly; and the command's other options (e.g. ``schedulers``) merged the same way."""
    from dataclasses import fields

    from fedmst.run.config import RunConfig, read_config_file

    path = kw.pop("config_file", None)
    names = {f.name for f in fields(RunConfig)}
    values: dict[str, Any] = {}
    for param, value in kw.items():
        if param == "local_nodes" and value is not None:
            value = tuple(n.strip() for n in value.split(","))
        elif param == "chunk_kb":
            value *= 1024
        elif isinstance(value, list):
            value = tuple(value)
        values[_FIELD.get(param, param)] = value
    if path is not None:
        from_file = read_config_file(path, extra_keys=tuple(k for k in kw if k not in names and k not in _FIELD))
        if path.suffix == ".json":  # an earlier run's config.json: re-running it must not overwrite it
            from_file.pop("out", None)
        explicit = {_FIELD.get(p, p) for p in ctx.params
                    if ctx.get_parameter_source(p) in (click.core.ParameterSource.COMMANDLINE,
                                                       click.core.ParameterSource.ENVIRONMENT)}
        values.update({k: v for k, v in from_file.items() if k not in explicit})
    config = RunConfig(**{k: v for k, v in values.items() if k in names})
    return config, {k: v for k, v in values.items() if k not in names}


def _report(line: str) -> None:
    console.print(line, markup=False)


def _started() -> float:
    """When this command's process began, on the monotonic clock (imports included): its start
    time in /proc is in clock ticks since boot (psutil's create_time is only as exact as btime's
    whole seconds)."""
    ticks = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    return time.monotonic() - age


def _guard(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` turning fedmst errors into one line and signals into a clean exit.

    SIGINT is handled even when the parent ignored it (a background job of a non-interactive
    shell inherits SIGINT ignored): Ctrl-C must always tear the emulation down.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        return fn()
    except FedmstError as exc:
        # one line whatever the message or terminal width: no wrapping, no markup parsing
        message = " ".join(str(exc).splitlines())
        err_console.print(f"fedmst: error: {message}", markup=False, soft_wrap=True)
        sys.exit(1)
    except KeyboardInterrupt:
        err_console.print("fedmst: interrupted; the emulated network was torn down")
        sys.exit(130)


def _schedulers(value: str) -> list[str]:
    return [s.strip() for s in str(value).split(",") if s.strip()]


@click.group(cls=_Group)
def main() -> None:
    """fedmst: federated learning over emulated links, MST trees with in-path aggregation vs SPFF."""
    # at exit, the interpreter's last collections would walk every object torch made: 0.7 s of a
    # run's fixed cost on this host. Frozen objects are skipped (cycles among them are not
    # collected: nothing of fedmst's needs a finaliser at exit).
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)


@main.command()
@click.option("--scheduler", default="mst", show_default=True,
              help="spff, mst, mst-latency, steiner-opt, hier, ring, binomial, a registered scheduler, or "
                   "package.module:Class.")
@click.option("--out", default="runs/run", show_default=True, help="Run folder to write.")
@_options
@click.pass_context
def run(ctx: click.Context, **kw: Any) -> None:
    """Run one FL task for real in Mininet with one scheduler."""
    def go() -> Any:
        from fedmst.run.config import resolve
        from fedmst.run.engine import run as run_

        config, _ = _config(ctx, kw)
        return config, run_(resolve(config)[0], report=_report, command_started=_started())

    config, summary = _guard(go)
    from fedmst.run.report import summary_table

    console.print(summary_table({config.scheduler: summary}))
    console.print(f"results in {config.out}/")


@main.command()
@click.option("--schedulers", default="spff,mst", show_default=True,
              help="Comma-separated schedulers to run on identical tasks, the first being the baseline: "
                   "registered names or package.module:Class.")
@click.option("--out", default="runs/compare", show_default=True,
              help="Folder for one run folder per scheduler and comparison.json.")
@_options
@click.pass_context
def compare(ctx: click.Context, **kw: Any) -> None:
    """Run the same tasks with every scheduler and compare them side by side."""
    def go() -> Any:
        from fedmst.run.experiments import compare as compare_

        config, extra = _config(ctx, kw)
        return config, compare_(config, _schedulers(extra["schedulers"]), Path(config.out), report=_report,
                                command_started=_started())

    config, summaries = _guard(go)
    from fedmst.run.report import summary_table

    console.print(summary_table(summaries, ratios_to_first=True))
    console.print(f"results in {config.out}/ (one folder per scheduler, comparison.json)")


def _int_list(_ctx: object, _param: object, value: str) -> list[int]:
    """Parse ``2,4,8`` or a range ``2-15:2`` (start-stop:step, stop included)."""
    try:
        out: list[int] = []
        for part in value.split(","):
            if "-" in part:
                span, _, step = part.partition(":")
                lo, hi = (int(x) for x in span.split("-"))
                out += list(range(lo, hi + 1, int(step or 1)))
            else:
                out.append(int(part))
    except ValueError:
        raise click.BadParameter(f"{value!r}: give numbers like 2,4,8 or a range like 2-14:2") from None
    if not out or min(out) < 1:
        raise click.BadParameter(f"{value!r}: give positive numbers")
    return out


SWEEP_STALL_S = 60.0
"""A sweep's stall timeout unless one is given: it injects no faults, and with 30 tasks of 14 or
more local models on a 2-core host a relay can wait more than 10 s for the CPU while its links
stand idle; only a dead link (a bug) is left to find."""


@main.command()
@click.option("--out", default="runs/sweep", show_default=True, help="Folder for every run, sweep.csv and the figures.")
@click.option("--schedulers", default="spff,mst", show_default=True,
              help="Comma-separated schedulers: registered names or package.module:Class.")
@click.option("--local-models", "ks", default="2,4,6,8,10,12,14,15", show_default=True,
              callback=_int_list, help="Local-model counts to sweep (list or range a-b:step).")
@click.option("--seeds", default="1,2", show_default=True, callback=_int_list, help="Seeds to repeat every point with.")
@click.option("--tasks", type=int, default=30, show_default=True)
@click.option("--wavelengths", type=int, default=120, show_default=True,
              help="Enough that SPFF blocks no task of the default sweep (with 40 it blocks 17 of 30 at 15 "
                   "local models); blocking is reported either way.")
@click.option("--rounds", "-r", type=int, default=1, show_default=True)
@click.option("--model", default="mlp", show_default=True,
              help="Small by default: 30 tasks x 15 local models must fit a 2-core host.")
@click.option("--models", "--model-sizes", "models", default=None,
              help="Comma-separated models (e.g. mlp,mlp-large,mlp-xl: 19 KB, 4.5 MB, 45 MB) to run every point "
                   "with, instead of --model; with several, the sweep also maps where each schedule wins.")
@click.option("--topology", default="nsfnet", show_default=True)
@click.option("--delay-mode", type=click.Choice(DELAY_MODES), default="auto", show_default=True)
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
              help="Run the points as tasks of the Ray cluster at ADDRESS (host:port, or auto for the one on this "
                   "host), one per emulation slot its nodes offer (scripts/ray-local.sh start N makes one here).")
@_worker_options
@click.pass_context
def sweep(ctx: click.Context, ks: list[int], seeds: list[int], **kw: Any) -> None:
    """Reproduce the poster's Figure 3: every scheduler, many concurrent tasks, for real, with figures;
    over several models, a map of where each schedule wins. (Stall timeout 60 s unless given.)"""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    from fedmst.run.experiments import points, sweep as sweep_

    config, extra = _guard(lambda: _config(ctx, kw))
    if ctx.get_parameter_source("stall_s") == click.core.ParameterSource.DEFAULT:
        from dataclasses import replace

        from fedmst.run.config import RunConfig

        if config.stall_s == RunConfig.stall_s:  # nor did --config FILE set it
            config = replace(config, stall_s=SWEEP_STALL_S)
    schedulers = _schedulers(extra["schedulers"])
    models = [m.strip() for m in (extra["models"] or config.model).split(",") if m.strip()]
    folder = Path(config.out)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("left"), TimeRemainingColumn())
    with Progress(*columns, console=console) as bar:
        total = len(points(ks, seeds, schedulers, models))
        job = bar.add_task("checking inputs" if extra["ray_address"] is None else "all points", total=total)
        nodes: dict[str, Any] = {}

        class Shown:
            """The bar: the point running (without Ray), or the points done on each Ray node."""

            def started(self, point: str) -> None:
                bar.update(job, description=point)

            def finished(self, point: str, node: str) -> None:
                bar.advance(job)
                if node:
                    if node not in nodes:
                        nodes[node] = bar.add_task(f"  ray node {node}", total=None)
                    bar.advance(nodes[node])

        rows = _guard(lambda: sweep_(config, ks, seeds, folder, Shown(), schedulers, models, extra["ray_address"]))
    _draw_sweep(rows, folder)


def _draw_sweep(rows: list[dict[str, Any]], folder: Path) -> None:
    """A sweep's figures: Figure 3's pair, one per model, and with several models the regime map."""
    from fedmst.views.plots import plot_sweep

    models = list(dict.fromkeys(r["model"] for r in rows))
    if len(models) == 1:
        latency, bandwidth = plot_sweep(rows, folder)
        console.print(f"sweep.csv, {latency.name} and {bandwidth.name} in {folder}/")
        return
    from fedmst.run.experiments import regime_map
    from fedmst.run.report import regime_table
    from fedmst.run.results import write_json
    from fedmst.views.plots import plot_regime_map

    for model in models:
        plot_sweep([r for r in rows if r["model"] == model], folder, suffix=f"-{model}")
    regime = regime_map(rows)
    write_json(folder / "regime.json", regime)
    console.print(regime_table(regime))
    figure = plot_regime_map(regime, folder / "regime_map.png")
    console.print(f"sweep.csv, regime.json, {figure.name} and each model's latency and bandwidth figures in {folder}/")


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--sort", default="measured", show_default=True,
              help="measured, predicted, error, utilisation, peak or link (compare folders: measured = largest "
                   "difference, a scheduler's name = its bytes, ratio or link).")
@click.option("--round", "round_", type=click.IntRange(min=1), default=None,
              help="Only this round (default: all rounds summed); in a compare folder, round N of every run.")
@click.option("--against", default=None, metavar="NAME",
              help="Compare folders: the scheduler the others are measured against (default: the baseline, "
                   "the compare's first).")
def links(run_dir: Path, sort: str, round_: int | None, against: str | None) -> None:
    """Per-link traffic of a run folder, or of every scheduler of a compare folder against one of them."""
    from fedmst.views.links import diff_table, is_compare_dir, link_table, render, scheduler_label

    def table() -> Table:
        if is_compare_dir(run_dir):
            rows = diff_table(run_dir, sort=sort, against=against, round_=round_)
            labels = [scheduler_label(n) for n in rows[0]["ratio"]] if rows else []
            vs = " - ".join([", ".join(labels), scheduler_label(rows[0]["against"])] if labels else ["measured"])
            when = f", round {round_}" if round_ is not None else ""
            return render(rows, title=f"{run_dir}: {vs} per link direction{when}")
        if against is not None:
            raise FedmstError(f"--against compares the runs of a compare folder; {run_dir} is not one")
        return render(link_table(run_dir, sort=sort, round_=round_), title=f"{run_dir}: links")

    console.print(_guard(table))


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None, help="PNG to write (default RUN_DIR/links.png).")
@click.option("--task", default=None, help="Task whose trees are overlaid (default: the first of the plan).")
@click.option("--link", default=None, help="Instead: one link's utilisation over time, e.g. --link 10-11.")
@click.option("--accuracy", is_flag=True,
              help="Instead: accuracy against round and against wall-clock time, every scheduler of a compare folder.")
@click.option("--timeline", is_flag=True,
              help="Instead: each task's phases against time (measured, and predicted beneath), with the "
                   "links' utilisation below.")
def plot(run_dir: Path, out: Path | None, task: str | None, link: str | None, accuracy: bool, timeline: bool) -> None:
    """Draw the topology with each link coloured by the bytes it carried and the task's broadcast and
    upload trees overlaid; a compare folder gets one panel per scheduler, side by side; a sweep folder
    gets its figures drawn again from its sweep.csv."""
    from fedmst.views.plots import plot_accuracy, plot_link_utilisation, plot_run, plot_timeline

    if (link is not None) + accuracy + timeline > 1:
        raise click.UsageError("give one of --link, --accuracy and --timeline")
    if timeline:
        console.print(f"wrote {_guard(lambda: plot_timeline(run_dir, out))}")
    elif (run_dir / "sweep.csv").is_file() and link is None and not accuracy:
        from fedmst.run.experiments import read_sweep

        _draw_sweep(_guard(lambda: read_sweep(run_dir / "sweep.csv")), run_dir)
    elif accuracy:
        console.print(f"wrote {_guard(lambda: plot_accuracy(run_dir, out))}")
    elif link is not None:
        console.print(f"wrote {_guard(lambda: plot_link_utilisation(run_dir, link, out))}")
    else:
        console.print(f"wrote {_guard(lambda: plot_run(run_dir, out, task=task))}")


@main.command()
def clean() -> None:
    """Remove every namespace, interface, process and container that crashed fedmst runs left behind,
    naming the run each belonged to; a live run's are left alone."""
    def both() -> list[str]:
        from fedmst.net.cleanup import clean as clean_network
        from fedmst.workers.docker import clean_dead

        done = [line for line in clean_network() if line != "nothing to clean"] + clean_dead()
        return done or ["nothing to clean"]

    for line in _guard(both):
        console.print(line)
