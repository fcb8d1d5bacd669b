"""The ``fedmst`` command: run, compare, clean.

Every :class:`FedmstError` becomes one line on stderr and exit code 1; Ctrl-C and SIGTERM tear
the emulation down (the ``with`` blocks do it) and exit with 130.
"""

from __future__ import annotations

import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import click
from rich.console import Console
from rich.table import Table

from fedmst.errors import FedmstError

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def _options(fn: Callable[..., Any]) -> Callable[..., Any]:
    from fedmst.fl.models import DEFAULT_MODEL

    opts = [
        click.option("--topology", default="nsfnet", show_default=True,
                     help="A file in topologies/, a .json/.graphml path, or a topohub key such as sndlib/polska."),
        click.option("--local-models", "-k", type=click.IntRange(min=1), default=4, show_default=True,
                     help="Number of local models of the task."),
        click.option("--tasks", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Concurrent FL tasks sharing the network, each placed by seed."),
        click.option("--wavelengths", type=click.IntRange(min=1), default=40, show_default=True,
                     help="Wavelengths per link of the optical layer (first fit; a task that finds none is blocked)."),
        click.option("--rounds", "-r", type=click.IntRange(min=1), default=2, show_default=True),
        click.option("--model", default=DEFAULT_MODEL, show_default=True,
                     help="A registered model name or package.module:factory."),
        click.option("--seed", type=int, default=1, show_default=True,
                     help="Seeds task placement, data split and model initialisation."),
        click.option("--global-node", default=None, help="Node of the global model (default: seeded)."),
        click.option("--local-nodes", default=None,
                     help="Comma-separated nodes of the local models (default: seeded)."),
        click.option("--epochs", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Local training epochs per round."),
        click.option("--chunk-kb", type=click.IntRange(min=1), default=256, show_default=True,
                     help="Relays forward weights in chunks of this size (pipelining)."),
        click.option("--mtu", type=click.IntRange(min=576, max=9000), default=1500, show_default=True,
                     help="MTU of every emulated link (jumbo frames cut per-packet CPU cost)."),
        click.option("--delay-mode", type=click.Choice(["auto", "netem", "userspace", "off"]), default="auto",
                     show_default=True,
                     help="How link propagation delay is applied: netem where the kernel has it (auto), "
                          "fedmst's NFQUEUE delay line, or not at all."),
        click.option("--loss", type=click.FloatRange(0, 1, max_open=True), default=0.0, show_default=True,
                     help="Packet loss probability on every link direction."),
        click.option("--jitter-ms", type=click.FloatRange(min=0), default=0.0, show_default=True,
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
        click.option("--stall-timeout", "stall_s", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
                     help="A transfer whose next chunk takes longer than this has failed (a dead link or peer)."),
        click.option("--slow-node", "slow_nodes", multiple=True, metavar="NODE:FACTOR",
                     help="NODE's worker trains FACTOR times slower (a straggler). Repeatable."),
        click.option("--deadline", "deadline_s", type=float, default=None, metavar="SECONDS",
                     help="Per-round training deadline: updates of local models not trained by then are dropped "
                          "(weights renormalised over the others) and recorded."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return _worker_options(fn)


def _worker_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    from fedmst.workers.docker import DEFAULT_IMAGE, WORKER_BACKENDS

    opts = [
        click.option("--workers", type=click.Choice(WORKER_BACKENDS), default="process", show_default=True,
                     help="Run each compute node's agent as a process in its host, or in a Docker container "
                          "whose network namespace gets the emulated links."),
        click.option("--image", default=DEFAULT_IMAGE, show_default=True,
                     help="Worker image for --workers docker (build it from the repository's Dockerfile)."),
        click.option("--cpus", multiple=True, metavar="[NODE=]CPUS",
                     help="CPU limit of every worker container, or NODE=CPUS for one node; repeatable."),
        click.option("--memory", multiple=True, metavar="[NODE=]SIZE",
                     help="Memory limit of every worker container (e.g. 1g), or NODE=SIZE for one node; repeatable."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _worker_config(kw: dict[str, Any]) -> dict[str, Any]:
    return {"workers": kw["workers"], "image": kw["image"], "cpus": tuple(kw["cpus"]), "memory": tuple(kw["memory"])}


def _config(out: str, scheduler: str, **kw: Any) -> Any:
    from fedmst.run.engine import RunConfig

    local_nodes = tuple(n.strip() for n in kw["local_nodes"].split(",")) if kw["local_nodes"] else None
    return RunConfig(
        topology=kw["topology"], scheduler=scheduler, local_models=kw["local_models"], tasks=kw["tasks"],
        wavelengths=kw["wavelengths"], rounds=kw["rounds"],
        model=kw["model"], seed=kw["seed"], out=out, global_node=kw["global_node"], local_nodes=local_nodes,
        epochs=kw["epochs"], chunk_bytes=kw["chunk_kb"] * 1024, mtu=kw["mtu"],
        delay_mode=kw["delay_mode"], loss=kw["loss"], jitter_ms=kw["jitter_ms"],
        save_models=kw["save_models"], fail_links=tuple(kw["fail_links"]), kill_workers=tuple(kw["kill_workers"]),
        slow_nodes=tuple(kw["slow_nodes"]), deadline_s=kw["deadline_s"], stall_s=kw["stall_s"],
        **_worker_config(kw),
    )


def _report(line: str) -> None:
    console.print(line, markup=False)


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


@click.group()
def main() -> None:
    """fedmst: federated learning over emulated links, MST trees with in-path aggregation vs SPFF."""


@main.command()
@click.option("--scheduler", default="mst", show_default=True,
              help="spff, mst, or a scheduler registered through the fedmst.schedulers entry points.")
@click.option("--out", default="runs/run", show_default=True, help="Run folder to write.")
@_options
def run(scheduler: str, out: str, **kw: Any) -> None:
    """Run one FL task for real in Mininet with one scheduler."""
    from fedmst.run.engine import run as run_

    summary = _guard(lambda: run_(_config(out, scheduler, **kw), report=_report))
    console.print(_table({scheduler: summary}))
    console.print(f"results in {out}/")


@main.command()
@click.option("--out", default="runs/compare", show_default=True, help="Folder for spff/, mst/ and comparison.json.")
@_options
def compare(out: str, **kw: Any) -> None:
    """Run the same task with SPFF and with MST and compare them side by side."""
    from fedmst.run.engine import prepare, run as run_
    from fedmst.run.results import write_json

    def both() -> dict[str, Any]:
        base = _config(out, "spff", **kw)
        for s in ("spff", "mst"):  # validate every input before building any network
            prepare(replace(base, scheduler=s))
        return {s: run_(replace(base, scheduler=s, out=str(Path(out) / s)), report=_report)
                for s in ("spff", "mst")}

    summaries = _guard(both)
    comparison = {
        "spff": summaries["spff"], "mst": summaries["mst"],
        "bytes_ratio": summaries["mst"]["link_bytes_measured"] / summaries["spff"]["link_bytes_measured"],
        "latency_ratio": summaries["mst"]["round_latency_s"] / summaries["spff"]["round_latency_s"],
    }
    write_json(Path(out) / "comparison.json", comparison)
    console.print(_table(summaries, ratios=True))
    console.print(f"results in {out}/ (spff/, mst/, comparison.json)")


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
@click.option("--out", default="runs/sweep", show_default=True, help="Folder for every run, sweep.csv and the figures.")
@click.option("--local-models", "ks", default="2,4,6,8,10,12,14,15", show_default=True,
              callback=_int_list, help="Local-model counts to sweep (list or range a-b:step).")
@click.option("--seeds", default="1,2", show_default=True, callback=_int_list, help="Seeds to repeat every point with.")
@click.option("--tasks", type=click.IntRange(min=1), default=30, show_default=True)
@click.option("--wavelengths", type=click.IntRange(min=1), default=120, show_default=True,
              help="Enough that SPFF blocks no task of the default sweep (with 40 it blocks 17 of 30 at 15 "
                   "local models); blocking is reported either way.")
@click.option("--rounds", "-r", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--model", default="mlp", show_default=True,
              help="Small by default: 30 tasks x 15 local models must fit a 2-core host.")
@click.option("--topology", default="nsfnet", show_default=True)
@click.option("--delay-mode", type=click.Choice(["auto", "netem", "userspace", "off"]), default="auto",
              show_default=True)
@_worker_options
def sweep(out: str, ks: list[int], seeds: list[int], tasks: int, wavelengths: int, rounds: int, model: str,
          topology: str, delay_mode: str, **worker_kw: Any) -> None:
    """Reproduce the poster's Figure 3: both schedulers, many concurrent tasks, for real, with figures."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    from fedmst.run.engine import RunConfig
    from fedmst.views.plots import plot_sweep
    from fedmst.run.experiments import points, sweep as sweep_

    folder = Path(out)
    base = RunConfig(topology=topology, tasks=tasks, wavelengths=wavelengths, rounds=rounds, model=model,
                     delay_mode=delay_mode, **_worker_config(worker_kw))
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("left"), TimeRemainingColumn())
    with Progress(*columns, console=console) as bar:
        job = bar.add_task("checking inputs", total=len(points(ks, seeds)))
        started = [False]

        def progress(what: str) -> None:
            if started[0]:
                bar.advance(job)
            started[0] = True
            bar.update(job, description=what)

        rows = _guard(lambda: sweep_(base, ks, seeds, folder, progress))
        bar.advance(job)
    latency, bandwidth = plot_sweep(rows, folder)
    console.print(f"sweep.csv, {latency.name} and {bandwidth.name} in {folder}/")


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--sort", default="measured", show_default=True,
              help="measured, predicted, error, utilisation, peak or link (compare folders: measured, spff, "
                   "mst, ratio or link).")
@click.option("--round", "round_", type=click.IntRange(min=1), default=None,
              help="Only this round (default: all rounds summed).")
def links(run_dir: Path, sort: str, round_: int | None) -> None:
    """Per-link traffic of a run folder, or MST minus SPFF for a compare folder."""
    from fedmst.views.links import diff_table, is_compare_dir, link_table, render

    def table() -> Table:
        if is_compare_dir(run_dir):
            if round_ is not None:
                raise FedmstError("--round applies to one run folder; give RUN_DIR/spff or RUN_DIR/mst")
            return render(diff_table(run_dir, sort=sort), title=f"{run_dir}: MST - SPFF per link direction")
        return render(link_table(run_dir, sort=sort, round_=round_), title=f"{run_dir}: links")

    console.print(_guard(table))


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None, help="PNG to write (default RUN_DIR/links.png).")
@click.option("--task", default="task0", show_default=True, help="Task whose trees are overlaid.")
@click.option("--link", default=None, help="Instead: one link's utilisation over time, e.g. --link 10-11.")
def plot(run_dir: Path, out: Path | None, task: str, link: str | None) -> None:
    """Draw the topology with each link coloured by the bytes it carried and the task's broadcast and
    upload trees overlaid; a compare folder gets SPFF and MST side by side."""
    from fedmst.views.plots import plot_link_utilisation, plot_run

    if link is not None:
        console.print(f"wrote {_guard(lambda: plot_link_utilisation(run_dir, link, out))}")
    else:
        console.print(f"wrote {_guard(lambda: plot_run(run_dir, out, task=task))}")


@main.command()
def clean() -> None:
    """Remove every namespace, interface and process a crashed fedmst run left behind."""
    from fedmst.net.cleanup import clean as clean_

    for line in _guard(clean_):
        console.print(line)


def _workers(workers: dict[str, Any]) -> str:
    """``processes`` or ``docker (IMAGE)``, for the table's caption."""
    return "processes" if workers["backend"] == "process" else f"docker ({workers['image']})"


def _table(summaries: dict[str, dict[str, Any]], ratios: bool = False) -> Table:
    """Side-by-side figures: measured beside predicted, and MST/SPFF ratios for a comparison."""
    names = list(summaries)
    table = Table(title=f"fedmst on {next(iter(summaries.values()))['topology']}")
    table.add_column("per round (mean)")
    for n in names:
        table.add_column(n.upper(), justify="right")
    if ratios:
        table.add_column("MST/SPFF", justify="right")

    def row(label: str, get: Callable[[dict[str, Any]], float], fmt: str, ratio: bool = True) -> None:
        values = [get(summaries[n]) for n in names]
        cells = [fmt.format(v) for v in values]
        if ratios:
            cells.append(f"{values[1] / values[0]:.2f}" if ratio and values[0] else "")
        table.add_row(label, *cells)

    rounds = lambda s: s["rounds"]  # noqa: E731
    row("broadcast (s)", lambda s: s["broadcast_s"], "{:.2f}")
    row("  predicted (s)", lambda s: s["predicted_broadcast_s"], "{:.2f}")
    row("train (s)", lambda s: s["train_s"], "{:.2f}")
    row("upload (s)", lambda s: s["upload_s"], "{:.2f}")
    row("  predicted (s)", lambda s: s["predicted_upload_s"], "{:.2f}")
    row("round latency (s)", lambda s: s["round_latency_s"], "{:.2f}")
    row("link bytes measured (MB)", lambda s: s["link_bytes_measured"] / rounds(s) / 1e6, "{:.2f}")
    row("  weights (MB)", lambda s: s["weight_bytes_measured"] / rounds(s) / 1e6, "{:.2f}")
    row("  weights predicted (MB)", lambda s: s["link_bytes_predicted"] / rounds(s) / 1e6, "{:.2f}")
    row("  ACKs and other (MB)", lambda s: s["ack_bytes_measured"] / rounds(s) / 1e6, "{:.2f}")
    row("TCP retransmissions (segments)", lambda s: s["tcp_retransmitted_segments"] / rounds(s), "{:.0f}", ratio=False)
    row("queue drops (packets)", lambda s: s["queue_drops"] / rounds(s), "{:.0f}", ratio=False)
    row("max per-link weight error (%)", lambda s: 100 * s["max_link_bytes_error"], "{:.2f}", ratio=False)
    row("final accuracy", lambda s: s["final_accuracy"], "{:.3f}", ratio=False)
    first = next(iter(summaries.values()))
    table.caption = (f"{first['local_models']} local models, model {first['model']} "
                     f"({first['model_bytes'] / 1e6:.2f} MB), {first['rounds']} rounds; "
                     f"delay: {first['emulated']['delay_mechanism']}; workers: {_workers(first['workers'])}")
    return table
