"""Experiments over any list of schedulers: ``compare`` (one configuration, every scheduler on
identical tasks) and ``sweep`` (the poster's Figure 3: every scheduler over a range of
local-model counts and seeds, over several models for a regime map, over several TCP
congestion controls to make the transport an axis, over several optical policies on a fabric, and
over several numbers of concurrent tasks).

Everything is resolved before the first network is built: the host is checked once, and each
point's topology, tasks and plans are made once, so bad input fails before anything runs and a
plan is never made twice.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence

from fedmst.core.plan import TRANSFER_PHASES
from fedmst.errors import FedmstError
from fedmst.run.config import RunConfig
from fedmst.run.prepare import ResolvedRun, check_host, resolve
from fedmst.run.layout import COMPARISON, SWEEP_RECORD, run_folder_name
from fedmst.run.folders import Kind, OutputFolder, claim
from fedmst.run.report import Report, RunStatus, Summary, comparison, failed, how_it_ended
from fedmst.run.results import read_csv, write_csv, write_json
from fedmst.wording import counted



@dataclass(frozen=True)
class SweepRow:
    """One row of sweep.csv: one task and round of one point (model, congestion control, optical
    policy, tasks, local models, seed, scheduler), with the point's run-wide figures (``run_*``: per
    round where they are bytes). Written by :func:`write_sweep` and read back, numbers as numbers,
    by :func:`read_sweep`."""

    model: str
    model_bytes: int
    congestion_control: str
    optical: str
    """The ``--optical`` policy (it gives wavelengths only on a fabric)."""
    tasks: int
    """The point's concurrent tasks (``--tasks``; 0 in a sweep.csv from before it was recorded)."""
    scheduler: str
    local_models: int
    seed: int
    task: str
    round: int
    broadcast_s: float
    train_s: float
    upload_s: float
    round_s: float
    accuracy: float
    run_link_bytes_measured: float
    run_link_bytes_predicted: float
    run_reserved_capacity_mbps: float
    run_tasks_blocked: int
    run_predicted_comm_s: float
    run_wavelengths_lit: int
    """Wavelengths held, summed over the links (on a fabric, its fibres): the most at once on each."""
    run_slot_utilisation: float
    """The share of the lit time-sliced wavelengths' slots held (0 without any)."""
    time_scale: float
    """How many times slower than its network the point ran (``--time-scale``)."""
    cpu_busy: float
    """The host's busiest transfer phase of the round, as a fraction of its CPUs."""
    ray_node: str
    """The Ray node the point ran on, or the hosts it spanned joined by ``+`` (``--hosts 2`` or more;
    '' on this host)."""
    host_bound: str
    """The round's transfer phases the host bound rather than the links (``rounds.csv``'s
    ``host_bound``: more than 1.2x their prediction with the CPUs busy; '' where none, or the
    point ran before it was recorded)."""


SWEEP_FIELDS = tuple(f.name for f in fields(SweepRow))
_PARSE: dict[str, Callable[[str], Any]] = {"str": str, "int": int, "float": float}
DEFAULT_SCHEDULERS = ("spff", "mst")


def check_schedulers(schedulers: Sequence[str]) -> None:
    """Refuse an empty list or a scheduler named twice (two runs would share one folder)."""
    if not schedulers:
        raise FedmstError("--schedulers: name at least one scheduler, e.g. spff,mst")
    folders = [run_folder_name(s) for s in schedulers]
    if {".", ".."} & set(folders):
        raise FedmstError("--schedulers: '.' and '..' cannot name a scheduler")
    twice = sorted({s for s, f in zip(schedulers, folders) if folders.count(f) > 1})
    if twice:
        raise FedmstError(f"--schedulers: {', '.join(twice)} given twice")


def compare(config: RunConfig, schedulers: Sequence[str], out: OutputFolder, report: Report,
            command_started: float | None = None) -> dict[str, Summary]:
    """Run ``config`` with every scheduler on identical tasks into ``out/NAME/`` and write
    ``out/comparison.json``: every summary and its ratios to the first scheduler (the baseline).
    The first run's time breakdown counts the preparation since ``command_started``.

    However the compare ends, comparison.json says so: ``status`` (``completed``,
    ``interrupted`` or ``failed: REASON``) and each scheduler's under ``runs`` (``not run`` for
    those it never started), with the summaries of the runs that finished a round."""
    from fedmst.run.engine import run

    check_schedulers(schedulers)
    runs = resolve(config, schedulers)
    names = [r.config.scheduler for r in runs]
    summaries: dict[str, Summary] = {}

    def record(status: str) -> None:
        ended = {n: RunStatus.of(out.path / run_folder_name(n)) for n in names}
        write_json(out.path / COMPARISON, {"status": status, "runs": {
            n: "not run" if e is None else e.status for n, e in ended.items()}, **comparison(summaries, names)})

    with claimed(out, "compare", record):
        for i, r in enumerate(runs):
            summaries[r.config.scheduler] = run(_into(r, out.path / run_folder_name(r.config.scheduler)),
                                                report=report, command_started=command_started if i == 0 else None)
    return summaries


@contextmanager
def claimed(out: OutputFolder, kind: Kind, record: Callable[[str], None]) -> Iterator[None]:
    """The block writing into ``out``, claimed for ``kind``; then ``record(status)`` says how it
    ended (``completed``, ``interrupted``, ``failed: REASON``), unless the folder is gone."""
    handle, status = claim(out, kind), "interrupted"
    try:
        yield
        status = "completed"
    except Exception as exc:
        status = failed(exc)
        raise
    finally:
        try:
            if out.path.is_dir():
                record(status)
        finally:
            os.close(handle)


def _into(run: ResolvedRun, folder: Path) -> ResolvedRun:
    return replace(run, config=replace(run.config, out=str(folder)))


Point = tuple[str, str, str, int, int, int, str]
"""One run of a sweep: (model, congestion control, optical policy, tasks, local models, seed, scheduler)."""


def points(local_models: Sequence[int], seeds: Sequence[int], schedulers: Sequence[str] = DEFAULT_SCHEDULERS,
           models: Sequence[str] = ("mlp",), congestion_controls: Sequence[str] = ("cubic",),
           opticals: Sequence[str] = ("ocs",), tasks: Sequence[int] = (30,)) -> list[Point]:
    """Every point to run, in the order they run.

    >>> points([2, 4], [1], ["mst"])
    [('mlp', 'cubic', 'ocs', 30, 2, 1, 'mst'), ('mlp', 'cubic', 'ocs', 30, 4, 1, 'mst')]
    """
    return [(m, cc, o, n, k, seed, s) for m in models for cc in congestion_controls for o in opticals
            for n in tasks for k in local_models for seed in seeds for s in schedulers]


def point_folder(out: Path, point: Point, several: Sequence[bool]) -> Path:
    """Where one point's run goes: ``out/k4-seed1/mst``, with the model, the congestion control, the
    optical policy and the tasks in front where the sweep has ``several`` of each
    (``out/mlp-xl-dctcp-tasks8-k4-seed1/mst``)."""
    model, cc, optical, tasks, k, seed, scheduler = point
    named = [run_folder_name(model), run_folder_name(cc), run_folder_name(optical), f"tasks{tasks}"]
    name = "-".join([v for v, many in zip(named, several) if many] + [f"k{k}-seed{seed}"])
    return out / name / run_folder_name(scheduler)


class Progress(Protocol):
    """What a sweep tells the one watching it."""

    def started(self, point: str) -> None:
        """A point starts here (one at a time, without Ray)."""

    def finished(self, point: str, node: str) -> None:
        """A point is done, on Ray node ``node`` ('' without Ray)."""


def spans(config: RunConfig, ray_address: str | None) -> tuple[RunConfig, str | None]:
    """A sweep's ``--hosts`` with its ``--ray``: each point spread over ``config.hosts`` hosts of that
    cluster, one point after another (the points' configuration gets the address; none is left to
    run points as the cluster's tasks), or with one host each, the points side by side as the
    cluster's tasks (the address kept for that), or here without ``--ray``.

    >>> spread, tasks_at = spans(RunConfig(hosts=3), "10.0.0.1:6379")
    >>> spread.ray, tasks_at, spans(RunConfig(hosts=1), "10.0.0.1:6379")[1]
    ('10.0.0.1:6379', None, '10.0.0.1:6379')
    """
    if config.hosts == 1:
        return config, ray_address
    if ray_address is None:
        raise FedmstError(f"--hosts {config.hosts}: spanning each point over hosts needs --ray ADDRESS")
    return replace(config, ray=ray_address), None


def sweep(base: RunConfig, local_models: Sequence[int], seeds: Sequence[int], output: OutputFolder,
          progress: Progress, schedulers: Sequence[str] = DEFAULT_SCHEDULERS, models: Sequence[str] | None = None,
          ray_address: str | None = None, congestion_controls: Sequence[str] | None = None,
          opticals: Sequence[str] | None = None, tasks: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Run every point for real, writing ``out/sweep.csv`` after each one; return its rows.
    ``models``, ``congestion_controls``, ``opticals`` and ``tasks`` (default: the configuration's)
    add dimensions: each point runs with each model, congestion control, optical policy and number
    of concurrent tasks.
    With ``ray_address`` the points run as tasks of that Ray cluster (:mod:`fedmst.run.distributed`),
    as many at once as it has emulation slots; with ``base.ray`` each point spans ``base.hosts`` of its
    hosts, one point at a time (:func:`spans`); the table is the same, in the same order.
    However the sweep ends, ``out/sweep.json`` says so: ``status`` and the points done of all."""
    from fedmst.run.engine import run

    check_schedulers(schedulers)
    models = list(dict.fromkeys(models or [base.model]))
    transports = list(dict.fromkeys(congestion_controls or [base.congestion_control]))
    policies = list(dict.fromkeys(opticals or [base.optical]))
    counts = list(dict.fromkeys(tasks or [base.tasks]))
    order = points(local_models, seeds, schedulers, models, transports, policies, counts)
    resolved: dict[Point, ResolvedRun] = {}
    on = None
    if base.ray is not None:  # the points' hosts and the network between them: asked and measured once
        from fedmst.core.topology import load_topology
        from fedmst.run.spread import check_spread

        on = check_spread(base, load_topology(base.topology))
    for cc in transports:  # every input is checked and planned before the first network is built
        host = check_host(replace(base, congestion_control=cc))
        for model, _, optical, n, k, seed in dict.fromkeys(p[:-1] for p in order if p[1] == cc):
            config = replace(base, model=model, congestion_control=cc, optical=optical, tasks=n, local_models=k,
                             seed=seed)
            for r in resolve(config, schedulers, host, on):
                resolved[(model, cc, optical, n, k, seed, r.config.scheduler)] = r
    out = output.path
    several = (len(models) > 1, len(transports) > 1, len(policies) > 1, len(counts) > 1)
    folders = {p: point_folder(out, p, several) for p in order}
    described = {p: f"{p[-1]}, {counted(p[4], 'local model')}, seed {p[5]}"
                 + "".join(f", {v}" for v, many in zip((p[0], p[1], p[2], counted(p[3], "task")), several) if many)
                 for p in order}
    done: dict[Point, list[SweepRow]] = {}

    def record(point: Point, summary: Summary, node: str) -> None:
        spanned = "+".join(summary.emulated.get("hosts") or {})  # a point spread over hosts: those hosts
        done[point] = _rows(point, summary, folders[point], node or spanned)
        write_sweep(out / "sweep.csv", [row for p in order if p in done for row in done[p]])
        progress.finished(described[point], node)

    def ended(status: str) -> None:
        write_json(out / SWEEP_RECORD, {"status": status, "points": len(order), "points_done": len(done)})

    if ray_address is None:
        with claimed(output, "sweep", ended):
            for point in order:
                progress.started(described[point])
                record(point, run(_into(resolved[point], folders[point]), report=lambda _: None), "")
    else:
        from fedmst.hosts.raycluster import connect
        from fedmst.run.distributed import Finished, run_points, unpack

        connect(ray_address)  # a cluster that cannot be reached leaves no folder behind

        def arrived(point: Any, result: Finished) -> None:
            unpack(result.files, folders[point])
            if result.summary is None:
                raise FedmstError(f"{described[point]}, on ray node {result.node}: {result.error} "
                                  f"(its run folder: {folders[point]})")
            record(point, result.summary, result.node)

        with claimed(output, "sweep", ended):
            run_points({p: resolved[p] for p in order}, arrived)
    return [asdict(row) for p in order for row in done[p]]


def sweep_ended(folder: Path) -> str | None:
    """How a sweep that did not finish every point ended, from its ``sweep.json`` (``the sweep
    was interrupted after 3 of 8 points``); None for a finished one, or one from before the record."""
    try:
        record = json.loads((folder / SWEEP_RECORD).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise FedmstError(f"{folder / SWEEP_RECORD}: cannot read JSON: {' '.join(str(exc).split())}") from None
    if not isinstance(record, dict) or record.get("status") == "completed":
        return None
    ended = how_it_ended(str(record.get("status")), record.get("points_done", 0), record.get("points", 0), "point")
    return f"the sweep ({SWEEP_RECORD}) was {ended}"


def _rows(point: Point, summary: Summary, folder: Path, node: str) -> list[SweepRow]:
    """A finished point's rows of ``sweep.csv``: one per task and round."""
    model, cc, optical, tasks, k, seed, scheduler = point
    lit = (summary.optical or {}).get("wavelengths_used", {})
    rounds = read_csv(folder / "rounds.csv")
    busy = {r["round"]: max(float(r[f"{p}_cpu_busy"] or 0) for p in TRANSFER_PHASES) for r in rounds}
    bound = {r["round"]: r["host_bound"] for r in rounds}
    return [SweepRow(
        model=model, model_bytes=summary.model_bytes, congestion_control=cc, optical=optical, tasks=tasks,
        scheduler=scheduler, local_models=k, seed=seed,
        task=r["task"], round=int(r["round"]), broadcast_s=float(r["broadcast_s"]), train_s=float(r["train_s"]),
        upload_s=float(r["upload_s"]), round_s=float(r["round_s"]), accuracy=float(r["accuracy"]),
        run_link_bytes_measured=summary.per_round_bytes,
        run_link_bytes_predicted=summary.link_bytes_predicted / summary.rounds,
        run_reserved_capacity_mbps=summary.reserved_capacity_mbps, run_tasks_blocked=summary.tasks_blocked,
        run_predicted_comm_s=summary.predicted_broadcast_s + summary.predicted_upload_s,
        run_wavelengths_lit=sum(lit.values()),
        run_slot_utilisation=float((summary.optical or {}).get("slot_utilisation", 0.0)),
        time_scale=float(summary.emulated.get("time_scale", 1.0)), cpu_busy=busy[r["round"]], ray_node=node,
        host_bound=bound[r["round"]],
    ) for r in read_csv(folder / "tasks.csv")]


def write_sweep(path: Path, rows: Sequence[SweepRow]) -> None:
    """sweep.csv from its rows."""
    write_csv(path, SWEEP_FIELDS, (asdict(row) for row in rows))


TIE = 0.01
"""Schedulers within 1% of the best share a win (MST and the exact Steiner tree often plan the
same bytes)."""


def read_sweep(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``sweep.csv``, each column read as its :class:`SweepRow` field's type (to
    draw its figures again); a file of another format is refused in one line."""
    rows = [{"congestion_control": "unrecorded", "host_bound": "", "optical": "ocs", "tasks": "0",
             "run_wavelengths_lit": "0", "run_slot_utilisation": "0", **r}  # a sweep from before the columns
            for r in read_csv(path)]
    missing = [f for f in SWEEP_FIELDS if rows and f not in rows[0]]
    if missing:
        raise FedmstError(f"{path} lacks the columns {', '.join(missing)}")
    types = {f.name: _PARSE[str(f.type)] for f in fields(SweepRow)}
    try:
        return [asdict(SweepRow(**{k: types[k](r[k]) for k in SWEEP_FIELDS})) for r in rows]
    except ValueError as exc:
        raise FedmstError(f"{path}: malformed row ({exc})") from None


def sweep_points(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A sweep's results, one entry per point and scheduler (model, congestion control, optical
    policy, tasks, local models, in the order the rows have them): the means over its seeds, tasks and
    rounds of the round's latency, its communication (broadcast + upload) and the Plans' prediction
    of it, the bytes on all links per round, measured and predicted, the tasks blocked and the
    wavelengths lit; ``baseline`` is the first scheduler of the point (the one the others are
    compared with).

    >>> row = lambda s, seed, up, b: {"model": "m", "model_bytes": 8, "congestion_control": "cubic",
    ...     "optical": "ocs", "tasks": 1, "local_models": 2, "seed": seed, "scheduler": s, "round_s": 1.0,
    ...     "broadcast_s": 0.5, "upload_s": up, "run_predicted_comm_s": 1.0, "run_link_bytes_measured": b,
    ...     "run_link_bytes_predicted": b, "run_tasks_blocked": 0, "run_wavelengths_lit": 4}
    >>> spff, mst = sweep_points([row("spff", 1, 0.5, 10.0), row("mst", 1, 1.0, 6.0), row("spff", 2, 1.5, 30.0)])
    >>> spff["scheduler"], spff["comm_s"], spff["bytes"], mst["baseline"], mst["wavelengths"]
    ('spff', 1.5, 20.0, 'spff', 4.0)
    """
    groups: dict[tuple[str, str, str, int, int], dict[str, list[Mapping[str, Any]]]] = {}
    for r in rows:
        point = (r["model"], r["congestion_control"], r["optical"], int(r["tasks"]), int(r["local_models"]))
        groups.setdefault(point, {}).setdefault(r["scheduler"], []).append(r)
    measures: dict[str, Callable[[Mapping[str, Any]], float]] = {
        "round_s": lambda r: float(r["round_s"]),
        "comm_s": lambda r: float(r["broadcast_s"]) + float(r["upload_s"]),
        "predicted_comm_s": lambda r: float(r["run_predicted_comm_s"]),
        "bytes": lambda r: float(r["run_link_bytes_measured"]),
        "predicted_bytes": lambda r: float(r["run_link_bytes_predicted"]),
        "blocked": lambda r: float(r["run_tasks_blocked"]),
        "wavelengths": lambda r: float(r["run_wavelengths_lit"]),
    }
    return [{"model": model, "model_bytes": int(rs[0]["model_bytes"]), "congestion_control": cc, "optical": optical,
             "tasks": n, "local_models": k, "scheduler": scheduler, "baseline": next(iter(per)),
             **{name: sum(map(measure, rs)) / len(rs) for name, measure in measures.items()}}
            for (model, cc, optical, n, k), per in groups.items() for scheduler, rs in per.items()]


def sweep_table(points: Sequence[Mapping[str, Any]]) -> Any:
    """A rich Table of a sweep's results (:func:`sweep_points`): a row per
    point and scheduler, with the model, the congestion control, the optical policy and the tasks
    where the sweep ran several (with several policies or tasks, the tasks blocked and the
    wavelengths lit too),
    measured beside predicted, and each scheduler's communication and link bytes against its
    point's first scheduler's (the baseline, the first of ``--schedulers``)."""
    from rich import box
    from rich.table import Table

    from fedmst.run.report import scheduler_label, size_label, size_unit

    def several(key: str) -> bool:
        return len({p[key] for p in points}) > 1

    models, transports, opticals, tasks = (several("model"), several("congestion_control"), several("optical"),
                                           several("tasks"))
    unit, scale = size_unit(max([p[key] for p in points for key in ("bytes", "predicted_bytes")] + [1]))
    size = "{:.0f}" if unit == "B" else "{:.2f}"
    base = scheduler_label(points[0]["baseline"]) if points else ""
    table = Table(title="The sweep, per task and round (means over seeds; comm.: broadcast + upload; "
                        f"link {unit}: on all links per round)", box=box.SIMPLE_HEAD, show_edge=False,
                  collapse_padding=True, pad_edge=False)
    varied = ["model"] * models + ["TCP"] * transports + ["optical"] * opticals + ["tasks"] * tasks
    for header in [*varied, "k", "scheduler"]:
        table.add_column(header, overflow="fold")
    compared = len({p["scheduler"] for p in points}) > 1
    for header in ("round\n(s)", "comm.\n(s)", "pred.\n(s)", f"link\n{unit}", f"pred.\n{unit}",
                   *[f"comm.\nvs {base}", f"bytes\nvs {base}"] * compared, *["blocked", "λ lit"] * (opticals or tasks)):
        table.add_column(header, justify="right")  # two lines a header: fits 80 columns
    def key(p: Mapping[str, Any], scheduler: str) -> tuple[object, ...]:
        return p["model"], p["congestion_control"], p["optical"], p["tasks"], p["local_models"], scheduler

    by = {key(p, p["scheduler"]): p for p in points}

    def ratio(p: Mapping[str, Any], measure: str) -> str:
        baseline = by[key(p, p["baseline"])]
        return "" if p is baseline or not baseline[measure] else f"{p[measure] / baseline[measure]:.2f}"

    for p in points:
        what = ([f"{p['model']} {size_label(p['model_bytes'])}"] * models + [p["congestion_control"]] * transports
                + [p["optical"]] * opticals + [str(p["tasks"])] * tasks)
        table.add_row(*what, str(p["local_models"]), scheduler_label(p["scheduler"]), f"{p['round_s']:.3f}",
                      f"{p['comm_s']:.3f}", f"{p['predicted_comm_s']:.3f}", size.format(p["bytes"] / scale),
                      size.format(p["predicted_bytes"] / scale), *[ratio(p, "comm_s"), ratio(p, "bytes")] * compared,
                      *[f"{p['blocked']:g}", f"{p['wavelengths']:g}"] * (opticals or tasks))
    return table


def regime_map(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """For every (model, local models) point of a sweep: which schedulers have the lowest round
    latency and the fewest link bytes, measured (means over seeds, tasks and rounds) and as the
    Plans predict. Latency is the round's communication (broadcast + upload), measured and
    predicted alike: training is the same under every schedule, and its noise (seconds with a
    45 MB model) would otherwise pick the winners.

    >>> row = lambda s, lat, b: {"model": "m", "model_bytes": 8, "local_models": 2, "scheduler": s,
    ...     "broadcast_s": 0.0, "upload_s": lat, "run_predicted_comm_s": lat, "run_link_bytes_measured": b,
    ...     "run_link_bytes_predicted": b}
    >>> (point,) = regime_map([row("mst", 2.0, 100.0), row("ring", 1.5, 100.5), row("spff", 3.0, 200.0)])
    >>> point["latency_measured"], point["bytes_measured"]
    (['ring'], ['mst', 'ring'])
    """
    groups: dict[tuple[str, int], dict[str, list[Mapping[str, Any]]]] = {}
    for r in rows:
        groups.setdefault((r["model"], int(r["local_models"])), {}).setdefault(r["scheduler"], []).append(r)

    measures: dict[str, Callable[[Mapping[str, Any]], float]] = {
        "latency_measured": lambda r: float(r["broadcast_s"]) + float(r["upload_s"]),
        "latency_predicted": lambda r: float(r["run_predicted_comm_s"]),
        "bytes_measured": lambda r: float(r["run_link_bytes_measured"]),
        "bytes_predicted": lambda r: float(r["run_link_bytes_predicted"]),
    }
    out = []
    for (model, k), per in groups.items():
        point: dict[str, Any] = {"model": model, "model_bytes": int(next(iter(per.values()))[0]["model_bytes"]),
                                 "local_models": k}
        for name, measure in measures.items():
            means = {s: sum(map(measure, rs)) / len(rs) for s, rs in per.items()}
            low = min(means.values())
            point[name] = [s for s, v in means.items() if v <= low * (1 + TIE)]
            point[f"{name}_values"] = means
        out.append(point)
    return sorted(out, key=lambda p: (p["model_bytes"], p["local_models"]))
