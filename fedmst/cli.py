"""The ``fedmst`` command: run, compare, sweep, links, plot, clean.

Every :class:`FedmstError` becomes one line on stderr and exit code 1 (a usage error from the
option parser one line and exit code 2); Ctrl-C and SIGTERM tear the emulation down (the ``with``
blocks do it) and exit with 130. Imports are lazy: ``fedmst --help``, ``links`` and ``clean``
never load torch.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

import click
from rich.console import Console

from fedmst.errors import FedmstError
from fedmst.net.congestion import CONGESTION_CONTROLS
from fedmst.run.config import SWEEP, RunConfig, options, read_config_file, split_list, validate
from fedmst.run.layout import COMPARISON
from fedmst.wording import counted

if TYPE_CHECKING:
    from fedmst.run.folders import OutputFolder


console = Console(highlight=False, markup=False, emoji=False)
err_console = Console(stderr=True, highlight=False, markup=False, emoji=False)
"""Everything fedmst prints quotes what the user gave literally: no markup (``[red]``) or emoji code
(``:abc:``) in a path, trace or name may change it, in lines, tables and progress bars alike."""


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


def _schema_options(*names: str, changed: Mapping[str, Mapping[str, Any]] | None = None) -> Callable[..., Any]:
    """The click options of these :class:`RunConfig` fields, in this order, built from their
    declarations (``changed``: a command's own defaults and help, e.g. :data:`SWEEP`); ranges are
    checked by :func:`fedmst.run.config.validate`, so a config file's values are checked the same way."""
    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in reversed(names):
            fn = _click_option(name, (changed or {}).get(name, {}))(fn)
        return fn
    return add


def _click_option(name: str, changed: Mapping[str, Any]) -> Callable[..., Any]:
    """Field ``name``'s click option, its parameter named as the field."""
    field, opt = options()[name]
    how: dict[str, Any] = {"help": changed.get("help", opt.help), "metavar": opt.metavar}
    default = changed.get("default", field.default)
    if field.type == "bool":
        how["is_flag"] = True
    elif field.type.startswith("tuple") and not opt.comma:
        how["multiple"] = True
    else:
        how["default"] = default // opt.unit if isinstance(default, int) else default
        how["show_default"] = default is not None
        how["type"] = {"int": int, "float": float}.get(field.type.partition(" ")[0])
        if isinstance(opt.choices, tuple):
            how["type"] = click.Choice(opt.choices)
    new = click.option(*opt.flags, name, **how)
    if opt.was is None:
        return new

    def refuse(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is not None:
            raise click.UsageError(f"{opt.was} is now {opt.label(name)}: give {opt.label(name)} {value}")

    old = click.option(opt.was, hidden=True, expose_value=False, callback=refuse)
    return lambda fn: old(new(fn))


RUN_OPTIONS = ("topology", "local_models", "tasks", "ocs_wavelengths", "ots_wavelengths", "timeslots", "timeslot_us",
               "guard_us", "reconfig_ms", "optical", "rounds", "model",
               "dataset", "download", "partition", "device", "host_trainer", "client", "run_config", "seed",
               "global_node", "local_nodes", "epochs", "lr",
               "batch_size", "optimizer",
               "strategy", "strategy_args", "target_accuracy", "pcap", "pcap_snaplen", "chunk_bytes", "mtu",
               "delay_mode", "queue", "congestion_control", "cc_args", "ecn_k", "loss", "jitter_ms", "time_scale",
               "save_models",
               "fail_links", "kill_workers", "stall_s", "slow_nodes", "deadline_s", "workload", "clock", "compute_s",
               "interleave", "traffic", "order", "link_state", "clients_per_round", "selection", "selection_pool",
               "link_trace", "traffic_file")
"""The run options of ``run`` and ``compare``, in the order ``--help`` lists them."""
WORKER_OPTIONS = ("workers", "image", "cpus", "memory")
HOST_OPTIONS = ("ray", "hosts", "pin")
"""Where ``run``, ``compare`` and ``cluster --mode emulate`` spread one emulation over several hosts."""
COMPARED = "spff,mst"
"""The schedulers ``compare`` and ``sweep`` run unless told otherwise: the baseline first."""

_config_file = click.option(
    "--config", "config_file", type=click.Path(path_type=Path), default=None, metavar="FILE",
    help="Take options from a TOML file or an earlier run's config.json (re-run it exactly); "
         "options given on the command line win.")


def _options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options of one run, shared by ``run`` and ``compare`` (``--help`` lists the workers' first)."""
    return _schema_options(*WORKER_OPTIONS, *HOST_OPTIONS)(_config_file(_schema_options(*RUN_OPTIONS)(fn)))


def _config(ctx: click.Context, kw: dict[str, Any], changed: Mapping[str, Mapping[str, Any]] | None = None,
            own: Mapping[str, str] = {}, refused: Mapping[str, str] = {}) -> tuple[RunConfig, dict[str, Any]]:
    """The run configuration from the defaults (the command's ``changed`` ones first), then
    ``--config FILE``, then what the command line gives explicitly; and the command's other options
    (e.g. ``schedulers``) merged the same way. ``own``: keys a file may give that the command takes
    itself, not as run options (a sweep's ``local_models`` and ``seeds`` lists), by the name of the
    command's parameter, into ``extra`` where the command line did not give them; ``refused``: run
    options the command replaces, each with what to give instead (nothing in a file is ignored)."""
    path = kw.pop("config_file", None)
    schema = options()
    values = {name: how["default"] for name, how in (changed or {}).items() if "default" in how}
    for param, value in kw.items():
        if param in schema and value is not None:
            opt = schema[param][1]
            if opt.comma:
                value = split_list(value, opt.label(param))
            elif isinstance(value, (list, tuple)):
                value = tuple(value)
            elif opt.unit != 1:
                value *= opt.unit
        values[param] = value
    own_values: dict[str, Any] = {}
    if path is not None:
        from_file = read_config_file(path, extra_keys=(*(k for k in kw if k not in schema), *own))
        if path.suffix == ".json":  # an earlier run's config.json: re-running it must not overwrite it
            from_file.pop("out", None)
        for key, instead in refused.items():
            if key in from_file:
                raise FedmstError(f"--config {path}: {key!r} is not an option of this command; {instead}")
        explicit = {p for p in ctx.params
                    if ctx.get_parameter_source(p) in (click.core.ParameterSource.COMMANDLINE,
                                                       click.core.ParameterSource.ENVIRONMENT)}
        own_values = {key: from_file.pop(key) for key in own if key in from_file}
        own_values = {key: v for key, v in own_values.items() if own[key] not in explicit}  # the command line wins
        # a list in a file stands for a comma-separated option's items
        from_file = {k: ",".join(map(str, v)) if isinstance(v, list) and k not in schema else v
                     for k, v in from_file.items()}
        values.update({k: v for k, v in from_file.items() if k not in explicit})
    config = RunConfig(**{k: v for k, v in values.items() if k in schema})
    extra = {**{k: v for k, v in values.items() if k not in schema}, **own_values}
    extra["out_given"] = (ctx.get_parameter_source("out") == click.core.ParameterSource.COMMANDLINE
                          or (path is not None and "out" in from_file))
    return config, extra


def _ray_option(what: str, after: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--ray ADDRESS``, one meaning for every command: ``what`` the Ray cluster at ADDRESS."""
    return click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
                        help=f"{what} the Ray cluster at ADDRESS (host:port, or auto for the one on this host){after} "
                             "(scripts/ray-local.sh start N makes one here).")


_overwrite_option = click.option(
    "--overwrite", is_flag=True,
    help="Replace an --out folder that already holds fedmst's results, whole (it is emptied once the inputs "
         "are checked). Without it such a folder is refused, and without --out each command takes a fresh "
         "folder: DIR, DIR-2, DIR-3 ...")


def _output(config: RunConfig, extra: Mapping[str, Any], overwrite: bool,
            say: Callable[[str], None] | None = None) -> tuple[RunConfig, OutputFolder]:
    """The folder this command writes (:mod:`fedmst.run.folders`), checked before anything runs,
    and the configuration pointing at it; ``say`` tells where it goes instead of a taken folder."""
    from fedmst.run.folders import choose

    folder = choose(Path(config.out), given=extra["out_given"], overwrite=overwrite)
    if folder.path != Path(config.out):
        (say or _report)(f"{config.out} holds earlier results: this one goes to {folder.path}/")
    return replace(config, out=str(folder.path)), folder


def _report(line: str) -> None:
    console.print(line, markup=False)


class _Lines:
    """A run's or compare's progress lines. What the command says before its inputs are checked
    (the folder it writes instead of a taken one, that --live falls back to plain lines) waits
    for the run's first line, which comes once they are: an input error says only its own line."""

    def __init__(self) -> None:
        self.early: list[str] = []

    def __call__(self, line: str) -> None:
        for early in self.early:
            _report(early)
        self.early.clear()
        _report(line)


def _started() -> float:
    """When this command's process began, on the monotonic clock (imports included): its start
    time in /proc is in clock ticks since boot (psutil's create_time is only as exact as btime's
    whole seconds)."""
    ticks = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    return time.monotonic() - age


def _guard(fn: Callable[[], Any], emulates: bool = False) -> Any:
    """Run ``fn`` turning fedmst errors into one line and signals into a clean exit; a command
    that ``emulates`` says its network was torn down (the ``with`` blocks did it).

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
        err_console.print("fedmst: interrupted" + ("; the emulated network was torn down" if emulates else ""))
        sys.exit(130)


@click.group(cls=_Group)
def main() -> None:
    """fedmst: federated learning over emulated links, MST trees with in-path aggregation vs SPFF."""


def entry() -> None:
    """The ``fedmst`` console script: :func:`main`, then an exit without the interpreter's teardown.

    Once a command is done, the interpreter would free every object of every module one by one,
    torch's included: 0.6 s of this host's CPU at the end of every run (0.26 s with the heap
    frozen). The teardown frees nothing the kernel does not, so the exit skips it: it comes once
    the non-daemon threads are done and after every other exit handler (this one is registered
    first, so it runs last), with stdout and stderr flushed and the command's exit code.
    """
    code = 1  # an exception that escapes: Python prints its traceback, then exits with 1
    atexit.register(lambda: _exit_now(code))
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        raise


def _exit_now(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(code)


_live_option = click.option(
    "--live", is_flag=True,
    help="Show the run's links live in this terminal (busiest link directions, rate against capacity, bytes "
         "against the plan, quiet links, CPU); plain lines when the output is not a terminal.")


@contextmanager
def _live(enabled: bool, out: Path, lines: _Lines) -> Iterator[Callable[[str], None]]:
    """``--live``: the live view of the run(s) this process writes into ``out`` while the block
    runs, taking the terminal; the block says its progress lines through the function it is given
    (held while the view has the terminal, then said)."""
    if not enabled or not console.is_terminal:
        if enabled:
            lines.early.append("--live: the output is not a terminal, so progress comes as plain lines")
        yield lines
        return
    from fedmst.views.live import live_view

    with live_view(out, console, os.getpid(), lines) as report:
        yield report


@main.command()
@_schema_options("scheduler")
@click.option("--out", default="runs/run", show_default=True,
              help="Run folder to write: a new or empty one (default: runs/run, or runs/run-2 ... if taken).")
@_overwrite_option
@_live_option
@_options
@click.pass_context
def run(ctx: click.Context, live: bool, overwrite: bool, **kw: Any) -> None:
    """Run one FL task for real in Mininet with one scheduler."""
    def go() -> Any:
        from fedmst.run.engine import run as run_
        from fedmst.run.prepare import resolve

        lines = _Lines()
        config, folder = _output(*_config(ctx, kw), overwrite, say=lines.early.append)
        with _live(live, folder.path, lines) as report:
            return config, run_(resolve(config)[0], report=report, command_started=_started(),
                                overwrite=folder.overwrite)

    config, summary = _guard(go, emulates=True)
    from fedmst.run.report import summary_table

    console.print(summary_table({config.scheduler: summary}))
    console.print(f"results in {config.out}/")


@main.command()
@click.option("--schedulers", default=COMPARED, show_default=True,
              help="Comma-separated schedulers to run on identical tasks, the first being the baseline: "
                   "registered names or package.module:Class.")
@click.option("--out", default="runs/compare", show_default=True,
              help="Folder for one run folder per scheduler and comparison.json: a new or empty one (default: "
                   "runs/compare, or runs/compare-2 ... if taken).")
@_overwrite_option
@_live_option
@_options
@click.pass_context
def compare(ctx: click.Context, live: bool, overwrite: bool, **kw: Any) -> None:
    """Run the same tasks with every scheduler and compare them side by side."""
    def go() -> Any:
        from fedmst.run.experiments import compare as compare_

        config, extra = _config(ctx, kw)
        lines = _Lines()
        config, folder = _output(config, extra, overwrite, say=lines.early.append)
        schedulers = list(split_list(extra["schedulers"], "--schedulers"))
        with _live(live, folder.path, lines) as report:
            return config, compare_(config, schedulers, folder, report=report, command_started=_started())

    config, summaries = _guard(go, emulates=True)
    from fedmst.run.report import summary_table

    console.print(summary_table(summaries, ratios_to_first=True))
    console.print(f"results in {config.out}/ (one folder per scheduler, comparison.json)")


def _ints_from(path: Path | None, key: str, value: Any) -> list[int]:
    """A sweep's list of positive whole numbers as its option or its file gave it: a list, one
    number, or the option's own text (``2,4,8``, ``2-14:2``)."""
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                                 for v in value):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return [value]
    if isinstance(value, str):
        try:
            return _int_list(None, None, value)
        except click.BadParameter as exc:
            raise FedmstError(f"--config {path}: {key} {exc.message}") from None
    raise FedmstError(f"--config {path}: {key} = {value!r}: give positive whole numbers, e.g. [2, 4, 8]")


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


@main.command()
@click.option("--out", default="runs/sweep", show_default=True,
              help="Folder for every run, sweep.csv and the figures: a new or empty one (default: runs/sweep, or "
                   "runs/sweep-2 ... if taken).")
@click.option("--schedulers", default=COMPARED, show_default=True,
              help="Comma-separated schedulers: registered names or package.module:Class.")
@click.option("--local-models", "ks", default="2,4,6,8,10,12,14,15", show_default=True,
              callback=_int_list, help="Local-model counts to sweep (list or range a-b:step).")
@click.option("--seeds", default="1,2", show_default=True, callback=_int_list, help="Seeds to repeat every point with.")
@click.option("--tasks", "task_counts", default="30", show_default=True, callback=_int_list,
              help="Concurrent FL tasks sharing the network, each placed by seed: a number, or several (list or "
                   "range a-b:step) to run every point with each.")
@_schema_options("ocs_wavelengths", "reconfig_ms", "rounds", "model", changed=SWEEP)
@click.option("--optical", "opticals", default=None, metavar="POLICY,...",
              help="Comma-separated optical policies (ocs, ots, size, joint, package.module:Class) to run every point "
                   "with on a fabric; with several, the policy is an axis of the figures and the table shows the tasks "
                   f"blocked and the wavelengths lit.  [default: {options()['optical'][0].default}]")
@click.option("--models", "--model-sizes", "models", default=None,
              help="Comma-separated models (e.g. mlp,mlp-large,mlp-xl: 19 KB, 4.5 MB, 45 MB) to run every point "
                   "with, instead of --model; with several, the sweep also maps where each schedule wins.")
@_schema_options("topology", "delay_mode", "time_scale", "strategy", "strategy_args", changed=SWEEP)
@click.option("--congestion-control", "congestion_controls", default=None, metavar="NAME,...",
              help=f"Comma-separated TCP congestion controls ({', '.join(CONGESTION_CONTROLS)}, PATH.bpf.c) to run "
                   "every point with; with several, the transport is an axis of the figures.  [default: "
                   f"{options()['congestion_control'][0].default}]")
@_ray_option("Run the points as tasks of", ", one per emulation slot its nodes offer, with --hosts 1")
@_schema_options("hosts", changed=SWEEP)
@_schema_options(*WORKER_OPTIONS)
@_config_file
@_overwrite_option
@click.pass_context
def sweep(ctx: click.Context, ks: list[int], seeds: list[int], task_counts: list[int], overwrite: bool,
          **kw: Any) -> None:
    """Reproduce the poster's Figure 3: every scheduler, many concurrent tasks, for real, with figures;
    over several models, a map of where each schedule wins. (Stall timeout 60 s unless given.)"""
    from rich.progress import Progress

    from fedmst.run.experiments import points, spans, sweep as sweep_

    kw_path = kw.get("config_file")
    # said once the inputs are checked (as the first point starts or ends): an input error says only its own line
    early: list[str] = []

    def lists() -> tuple[RunConfig, OutputFolder, list[str], list[str], list[str], list[str], str | None]:
        nonlocal ks, seeds, task_counts
        own = {"local_models": "ks", "seeds": "seeds", "tasks": "task_counts"}
        config, extra = _config(ctx, kw, SWEEP, own=own, refused={
            "seed": "give seeds = [1, 2]", "scheduler": 'give schedulers = ["spff", "mst"]'})
        config, ray_address = spans(config, extra["ray_address"])
        ks = _ints_from(kw_path, "local_models", extra.get("local_models", ks))
        seeds = _ints_from(kw_path, "seeds", extra.get("seeds", seeds))
        task_counts = _ints_from(kw_path, "tasks", extra.get("tasks", task_counts))
        config, out = _output(config, extra, overwrite, say=early.append)
        models = split_list(extra["models"] or config.model, "--models")
        transports = split_list(extra["congestion_controls"] or config.congestion_control, "--congestion-control")
        for cc in transports:
            validate(replace(config, congestion_control=cc))
        opticals = split_list(extra["opticals"] or config.optical, "--optical")
        return (config, out, list(split_list(extra["schedulers"], "--schedulers")), list(models), list(transports),
                list(opticals), ray_address)

    config, out, schedulers, models, transports, opticals, ray_address = _guard(lists)
    folder = out.path
    with Progress(*_sweep_columns(), console=console) as bar:
        total = len(points(ks, seeds, schedulers, models, transports, opticals, task_counts))
        job = bar.add_task("checking inputs" if ray_address is None else "all points", total=total)
        nodes: dict[str, Any] = {}

        class Shown:
            """The bar: the point running (without Ray), or the points done on each Ray node."""

            def started(self, point: str) -> None:
                self.say_early()
                bar.update(job, description=point)

            def say_early(self) -> None:
                while early:
                    bar.console.print(early.pop(0), markup=False)

            def finished(self, point: str, node: str) -> None:
                self.say_early()
                bar.advance(job)
                if node:
                    if node not in nodes:  # of all the sweep's points, those this node ran
                        nodes[node] = bar.add_task(f"  of which on ray node {node}", total=total, node=node)
                    bar.advance(nodes[node])

        try:
            rows = _guard(lambda: sweep_(config, ks, seeds, out, Shown(), schedulers, models, ray_address,
                                         transports, opticals, task_counts), emulates=True)
        except SystemExit as exc:
            if exc.code != 130:  # an error (an input's, most often) says its one line, and no bar after it
                bar.live.transient = True  # a terminal's bar is wiped
                console.quiet = not console.is_interactive  # a file gets no closing line
            raise
    _draw_sweep(rows, folder)


def _sweep_columns() -> tuple[Any, ...]:
    """The sweep's progress columns: the point (or Ray node), a bar, points done of all, and on the
    sweep's own row its elapsed and remaining time (a Ray node's row leaves them blank: its points
    share the sweep's time)."""
    from rich.progress import BarColumn, MofNCompleteColumn, ProgressColumn, Task, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn
    from rich.text import Text

    class SweepsOwn(ProgressColumn):
        """``column`` on the sweep's own row, blank on a Ray node's."""

        def __init__(self, column: ProgressColumn) -> None:
            super().__init__()
            self.column = column

        def render(self, task: Task) -> Any:
            return Text("") if task.fields.get("node") else self.column.render(task)

    return (TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
            *(SweepsOwn(c) for c in (TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn())))


def _draw_sweep(rows: list[dict[str, Any]], folder: Path) -> None:
    """A sweep's figures (Figure 3's pair for each model, congestion control, optical policy and
    number of tasks, each titled with what it ran, and with several models the regime map, one for
    each of the others), then its results table."""
    from fedmst.run.experiments import sweep_points, sweep_table
    from fedmst.run.layout import run_folder_name
    from fedmst.views.plots import plot_sweep

    models = list(dict.fromkeys(r["model"] for r in rows))
    def setting(r: dict[str, Any]) -> tuple[str, str, int]:
        return r["congestion_control"], r["optical"], int(r["tasks"])

    settings = list(dict.fromkeys(map(setting, rows)))
    several = [len({s[i] for s in settings}) > 1 for i in (0, 1, 2)]
    named = {s: "".join(f"-{v}" for v, many in zip((run_folder_name(s[0]), run_folder_name(s[1]), f"tasks{s[2]}"),
                                                  several) if many) for s in settings}
    for model in models:
        for each in settings:
            plot_sweep([r for r in rows if r["model"] == model and setting(r) == each],
                       folder, suffix=(f"-{model}" if len(models) > 1 else "") + named[each],
                       subject=sweep_subject(model, *each, several=(len(models) > 1, *several[1:])))
    width = console.width  # never cut a figure short: with several policies or tasks the table needs 100 columns
    console.width = max(width, 120)
    try:
        console.print(sweep_table(sweep_points(rows)))
    finally:
        console.width = width
    axes = " and ".join(name for name, many in zip(("congestion control", "optical policy", "number of tasks"),
                                                   several) if many)
    if len(models) == 1:
        figures = ("latency_vs_local_models.png and bandwidth_vs_local_models.png" if len(settings) == 1 else
                   f"the latency and bandwidth figures of each {axes}")
        console.print(f"sweep.csv and {figures} in {folder}/", markup=False)
        return
    from fedmst.run.experiments import regime_map
    from fedmst.run.report import regime_table
    from fedmst.run.results import write_json
    from fedmst.views.plots import plot_regime_map

    for each in settings:
        regime = regime_map([r for r in rows if setting(r) == each])
        write_json(folder / f"regime{named[each]}.json", regime)
        subject = sweep_subject("", *each, several=(False, *several[1:]))
        table = regime_table(regime)
        table.title = f"{table.title}, {subject}" if subject else table.title
        console.print(table)
        figure = plot_regime_map(regime, folder / f"regime_map{named[each]}.png", subject)
    maps = f"regime.json, {figure.name}" if len(settings) == 1 else f"the regime.json and map of each {axes}"
    console.print(f"sweep.csv, {maps} and each model's latency and bandwidth figures in {folder}/", markup=False)


def sweep_subject(model: str, congestion_control: str, optical: str = "ocs", tasks: int = 0, *,
                  several: tuple[bool, bool, bool] = (False, False, False)) -> str:
    """What one pair of a sweep's figures ran, for their titles: its TCP congestion control (none
    for a sweep.csv from before it was recorded), and where the sweep ran ``several`` of them, its
    model, optical policy and number of tasks.

    >>> sweep_subject("mlp", "dctcp"), sweep_subject("mlp-xl", "cubic", several=(True, False, False))
    ('TCP dctcp', 'model mlp-xl, TCP cubic')
    >>> sweep_subject("mlp", "unrecorded")
    ''
    >>> sweep_subject("mlp", "cubic", "joint", 8, several=(False, True, True))
    'TCP cubic, optical joint, 8 tasks'
    """
    models, opticals, tasks_ = several
    return ", ".join([f"model {model}"] * models + [f"TCP {congestion_control}"] * (congestion_control != "unrecorded")
                     + [f"optical {optical}"] * opticals + [counted(tasks, "task")] * tasks_)


CLUSTER_OPTIONS = ("topology", "slots", "jobs", "time_compress", "scheduler", "mode", "job_order", "placement",
                   "preempt", "rounds", "model", "dataset", "partition", "epochs", "compute_s", "seed", "lr",
                   "batch_size", "optimizer", "strategy", "strategy_args", "chunk_bytes", "mtu", "delay_mode",
                   "congestion_control", "cc_args", "ecn_k", "optical", "ocs_wavelengths", "ots_wavelengths",
                   "timeslots", "timeslot_us", "guard_us", "reconfig_ms", "time_scale", *HOST_OPTIONS)
"""The options of ``cluster``, in the order ``--help`` lists them."""


@main.command()
@click.option("--out", default="runs/cluster", show_default=True,
              help="Folder for jobs.csv, slots.csv, tasks.csv and summary.json: a new or empty one (default: "
                   "runs/cluster, or runs/cluster-2 ... if taken).")
@click.option("--policies", default=None, metavar="ORDER/PLACEMENT[/PREEMPT],...",
              help="Run the same trace under each queue order, placement and preemption (e.g. "
                   "fifo/random,smallest/sjf-bco,las/network/network) into DIR/ORDER+PLACEMENT[+PREEMPT]/, with "
                   "DIR/comparison.json and one table.")
@_overwrite_option
@_config_file
@_schema_options(*CLUSTER_OPTIONS)
@click.pass_context
def cluster(ctx: click.Context, overwrite: bool, **kw: Any) -> None:
    """Jobs arrive from a trace, wait for compute slots, are placed and run their rounds on the
    shared network; measured per job (JCT, queueing) and over the trace (makespan, utilisation)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from fedmst.run import cluster as cluster_

    def prepared() -> tuple[Any, OutputFolder, Any]:
        config, extra = _config(ctx, kw)
        policies = cluster_.parse_policies(extra["policies"]) if extra["policies"] is not None else None
        if policies:
            given = [options()[p][1].label(p) for p in ("job_order", "placement", "preempt")
                     if getattr(config, p) != options()[p][0].default
                     or ctx.get_parameter_source(p) == click.core.ParameterSource.COMMANDLINE]
            if given:
                raise FedmstError(f"{' and '.join(given)} with --policies: each ORDER/PLACEMENT[/PREEMPT] item names "
                                  "its run's policies; give them there")
        config, folder = _output(config, extra, overwrite)
        return cluster_.resolve(config), folder, policies

    resolved, folder, policies = _guard(prepared)
    _report(f"{counted(len(resolved.jobs), 'job')} on {resolved.graph.graph['name']}: "
            f"{counted(sum(resolved.slots.values()), 'slot')} on "
            f"{counted(sum(1 for s in resolved.slots.values() if s), 'node')}; "
            f"{resolved.config.mode}, scheduler {resolved.config.scheduler}, "
            + (f"policies {', '.join(cluster_.policy_spec(*p) for p in policies)}" if policies else
               f"order {resolved.config.job_order}, placement {resolved.config.placement}, "
               f"preemption {resolved.config.preempt}"))
    columns = (TextColumn("{task.description}", markup=False), BarColumn(bar_width=12), MofNCompleteColumn(),
               TextColumn("jobs"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        shown = bar.add_task("starting", total=len(resolved.jobs))

        def progress(p: Any, host_s: float) -> None:
            bar.update(shown, completed=p.done, description=f"{p.waiting} waiting, {p.running} running; "
                                                             f"network {p.now_s:.1f} s, host {host_s:.1f} s")

        try:
            if policies:
                summaries = _guard(lambda: cluster_.compare(resolved, policies, folder, _report, progress),
                                   emulates=resolved.base is not None)
            else:
                summaries = {"": _guard(lambda: cluster_.run(resolved, folder, _report, progress),
                                        emulates=resolved.base is not None)}
        except SystemExit as exc:
            if exc.code != 130:  # an error says its one line; an interrupted cluster keeps where it stood
                bar.update(shown, visible=False)
            raise
    from fedmst.run.cluster_records import cluster_table

    console.print(cluster_table(summaries))
    held = (f"{COMPARISON}, and a folder per policy ({', '.join(summaries)}) with its jobs.csv, slots.csv, ..."
            if policies else "jobs.csv, slots.csv, tasks.csv, summary.json, ...")
    console.print(f"results in {folder.path}/: {held} (docs/cluster.md)", markup=False)


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
    """Per-link traffic of a run folder, or of every scheduler of a compare folder against one of them.

    The table fits the terminal: at 80 columns (or piped) it leaves out weights and other MB first
    (then Mbit/s, pcap MB, drops, predicted MB, error), in a compare folder the differences, then the
    ratios, and names them under the table; a wider terminal or COLUMNS=200 shows every column. Peak
    util is at most 100 % (a 100 ms reading can hold htb's 15 KiB burst above capacity). A ratio reads
    new where only that scheduler carried traffic, - where neither did."""
    from fedmst.views.folders import check_links
    from fedmst.views.links import FittedTable, diff_table, is_compare_dir, link_table, render

    def table() -> FittedTable:
        check_links(run_dir)
        if is_compare_dir(run_dir):
            rows = diff_table(run_dir, sort=sort, against=against, round_=round_)
            labels = [rows[0]["labels"][n] for n in rows[0]["ratio"]] if rows else []
            vs = " - ".join([", ".join(labels), rows[0]["labels"][rows[0]["against"]]] if labels else ["measured"])
            when = f", round {round_}" if round_ is not None else ""
            return render(rows, title=f"{run_dir}: {vs} per link direction{when}")
        if against is not None:
            raise FedmstError(f"--against compares the runs of a compare folder; {run_dir} is not one")
        return render(link_table(run_dir, sort=sort, round_=round_), title=f"{run_dir}: links")

    console.print(_guard(table))
    if (run_dir / "pcap" / "index.json").exists():
        console.print(f"captures (--pcap): {run_dir / 'pcap'}/SRC-DST.pcap, one per link direction; "
                      f"{run_dir / 'pcap' / 'index.json'} names each one's node and interface")


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--wait", "wait_s", type=float, default=60.0, show_default=True,
              help="Seconds to wait for a run that has not begun writing its live state.")
def watch(run_dir: Path, wait_s: float) -> None:
    """Watch a run's links live, from another terminal, until the run ends; a compare (or sweep) folder
    while it runs: each run in turn. A folder of runs no one process runs now names them, to pick one."""
    from fedmst.views.live import watch as watch_

    _guard(lambda: watch_(run_dir, console, wait_s=wait_s))


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
@click.option("--jobs", is_flag=True,
              help="Instead, for a cluster folder: its jobs on the nodes' slots over time (a Gantt chart) and the "
                   "distribution of their completion times.")
@click.option("--slots", is_flag=True,
              help="Instead, for a run on a fabric with time-sliced lightpaths: the busiest fibre directions' "
                   "timeslots over time, coloured by task.")
def plot(run_dir: Path, out: Path | None, task: str | None, link: str | None, accuracy: bool, timeline: bool,
         jobs: bool, slots: bool) -> None:
    """Draw the topology with each link coloured by the bytes it carried and the task's broadcast and
    upload trees overlaid; a compare folder gets one panel per scheduler, side by side; a sweep folder
    gets its figures drawn again from its sweep.csv; a cluster folder its jobs (as --jobs), a
    --policies comparison every policy's JCT distribution side by side. A flag the folder cannot
    honour is refused, saying what it offers."""
    from fedmst.views.folders import check_plot
    from fedmst.views.plots import plot_accuracy, plot_link_utilisation, plot_run, plot_timeline

    if (link is not None) + accuracy + timeline + jobs + slots > 1:
        raise click.UsageError("give one of --link, --accuracy, --timeline, --jobs and --slots")
    kind = _guard(lambda: check_plot(run_dir, {"--jobs": jobs, "--link": link is not None, "--accuracy": accuracy,
                                               "--timeline": timeline, "--slots": slots, "--task": task is not None,
                                               "--out": out is not None}))
    if jobs or (link is None and kind in ("cluster", "policies")):
        from fedmst.views.gantt import plot_jobs

        console.print(f"wrote {_guard(lambda: plot_jobs(run_dir, out))}", soft_wrap=True)
    elif timeline:
        console.print(f"wrote {_guard(lambda: plot_timeline(run_dir, out))}", soft_wrap=True)
    elif slots:
        from fedmst.views.slotgrid import plot_slots

        console.print(f"wrote {_guard(lambda: plot_slots(run_dir, out))}", soft_wrap=True)
    elif kind == "sweep":
        from fedmst.run.experiments import read_sweep, sweep_ended

        def rows() -> list[dict[str, Any]]:
            """The sweep's rows, said to be those of the points it finished where it stopped early."""
            ended = sweep_ended(run_dir)
            if ended and not (run_dir / "sweep.csv").is_file():
                raise FedmstError(f"{run_dir}: {ended}, so it has nothing to draw")
            if ended:
                _report(f"{ended}: drawing those")
            return read_sweep(run_dir / "sweep.csv")

        _draw_sweep(_guard(rows), run_dir)
    elif accuracy:
        console.print(f"wrote {_guard(lambda: plot_accuracy(run_dir, out))}", soft_wrap=True)
    elif link is not None:
        console.print(f"wrote {_guard(lambda: plot_link_utilisation(run_dir, link, out))}", soft_wrap=True)
    else:
        console.print(f"wrote {_guard(lambda: plot_run(run_dir, out, task=task))}", soft_wrap=True)


@main.command()
@_ray_option("Also clean every host of", " that offers an emulation slot, each line naming its host")
def clean(ray_address: str | None) -> None:
    """Remove every namespace, interface, process and container that crashed fedmst runs left behind,
    naming the run each belonged to; a live run's are left alone. Puts back Ray's address file once
    scripts/ray-local.sh's cluster is gone."""
    def everywhere() -> list[str]:
        from fedmst.hosts.cleaning import clean_everywhere, clean_here

        if ray_address is None:
            return clean_here()
        from fedmst.hosts.raycluster import connect

        connect(ray_address)  # a cluster that does not answer: one line, before anything is cleaned here
        return [f"this host: {line}" for line in clean_here()] + clean_everywhere()

    for line in _guard(everywhere):
        console.print(line, soft_wrap=True)
