"""Job traces: the jobs a cluster run is given (``--jobs SPEC``), read into a :class:`Trace`.

SPEC is one of:

- a ``.csv`` or ``.jsonl`` file of jobs written by hand (:data:`FIELDS`);
- ``poisson:RATE,N``: N jobs drawn with exponential gaps, RATE jobs per minute of network time;
- ``philly:FILE``: Microsoft Philly's ``cluster_job_log`` (github.com/msr-fiddle/philly-traces);
- ``helios:FILE``: a SenseTime Helios ``cluster_log.csv`` (github.com/S-Lab-System-Group/HeliosData).

Public traces span months of wall-clock time, so their times are divided by ``time_compress``, and
a job's run time becomes its number of rounds (:data:`ROUND_OF_TRACE_S`). What a trace leaves out
(``None``) takes the command's options later (:meth:`~fedmst.core.cluster.jobs.Job.filled`). Every
fault is one line starting ``--jobs SPEC:``.

Columns follow one rule: a format fedmst defines is read strictly, a format someone else publishes
is read for what fedmst needs. A job file (``.csv``, ``.jsonl``) is written for fedmst, so a column
or key outside :data:`FIELDS` is refused: it is a typo or a field fedmst does not know (``gpus``
for ``local_models``), and ignoring it would run jobs other than those meant. A Philly or Helios
trace is read as its authors publish it, with fields fedmst has no use for (user, virtual cluster,
state, CPUs ...), so only the fields listed in each reader are read and checked, and the others are
ignored, whatever a later release of the trace adds.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import random
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

from fedmst.core.cluster.jobs import Job, JobError
from fedmst.wording import counted

ROUND_OF_TRACE_S = 1.0
"""One FL round stands for one second of compressed trace: a Philly or Helios job that ran ``D``
seconds runs ``max(1, round(D / time_compress / ROUND_OF_TRACE_S))`` rounds, so the trace's long
jobs stay long and its short ones short, whatever a round takes on the emulated network."""

LOCAL_MODELS_MIX: dict[int, float] = {1: 0.51, 2: 0.17, 4: 0.13, 8: 0.12, 16: 0.05, 32: 0.02}
"""Weights of a Poisson job's local models: an approximation of the GPU demand of public traces.

Helios' own summary of its four clusters (HeliosArtifact, ``helios_cluster_summary.csv``; Hu et
al., SC 2021) gives a median of 1 GPU per GPU job in every cluster and a mean of 3.7 over all of
them (2.1 to 6.7 per cluster); Philly (Jeon et al., ATC 2019) is dominated by 1-GPU jobs too, with
fewer jobs of 2-4, 5-8 and more than 8 GPUs, the buckets its analysis uses. These weights keep that
shape, powers of two as jobs ask for them: half the jobs take 1 (the median), most of the rest 2-8,
a few 16 or 32, for a mean of 3.77.
"""

FIELDS: dict[str, type] = {"job": str, "submit_s": float, "local_models": int, "rounds": int, "model": str,
                           "dataset": str, "epochs": int, "compute_s": float, "priority": int}
"""The columns of a CSV job file (the keys of a JSON lines one) and their types."""

REQUIRED = ("job", "submit_s", "local_models", "rounds")
"""The fields every row of a job file gives; the others may be left out (empty in CSV)."""

_FORMS = "give a .csv or .jsonl job file, poisson:RATE,N, philly:FILE or helios:FILE"
_POISSON_FORM = "give poisson:RATE,N (RATE jobs per minute > 0, N jobs >= 1)"
_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
_MISSING = {"", "none", "null", "nan", "nat"}
"""How the public traces write a time or number they do not have (Philly's JSON says ``None``;
Helios' CSV, written by pandas, leaves the cell empty or says ``NaN``/``NaT``)."""
_PHILLY = "not a Philly cluster_job_log (the JSON array of github.com/msr-fiddle/philly-traces)"
_HELIOS = "not a Helios cluster_log.csv (github.com/S-Lab-System-Group/HeliosData)"
_HELIOS_COLUMNS = ("job_id", "gpu_num", "submit_time", "start_time", "end_time", "duration")


SKIPPED_WHY = "no GPU, or no run time: never ran, or still running when the trace was taken"
"""Why a public trace's job is left out (:attr:`Trace.skipped`): it asked for no GPU, or the trace
gives no start or no end for it, so its run time is unknown (it never started, or it was still
running when the trace was taken; in Philly also a gap in its log)."""


@dataclass(frozen=True)
class Trace:
    """The jobs of a trace, by submission time (ties keep the trace's order), and how many of a
    public trace's jobs were left out (:data:`SKIPPED_WHY`): the caller says so once."""

    jobs: tuple[Job, ...]
    source: str
    """The spec as the user gave it, e.g. ``poisson:60,12`` or ``philly:/data/cluster_job_log``."""
    skipped: int = 0

    def left_out(self) -> str | None:
        """The line that says how many of the trace's jobs were left out, and why; None if none were.

        >>> print(Trace((), "philly:log", skipped=3).left_out())  # doctest: +NORMALIZE_WHITESPACE
        philly:log: 3 jobs of the trace left out (no GPU, or no run time: never ran, or still running
        when the trace was taken)
        """
        if not self.skipped:
            return None
        return f"{self.source}: {counted(self.skipped, 'job')} of the trace left out ({SKIPPED_WHY})"


def read_jobs(spec: str, *, seed: int, time_compress: float = 1.0, max_local_models: int | None = None) -> Trace:
    """The jobs ``spec`` (the ``--jobs`` option) names.

    ``time_compress`` divides the submission times of files and public traces, and the run times
    that make a public trace's rounds; it does not apply to ``poisson:`` (its rate is already per
    minute of network time). ``seed`` draws ``poisson:`` jobs; ``max_local_models`` caps those draws
    only: a job of a file or of a public trace keeps its size, and a cluster too small refuses it.

    >>> trace = read_jobs("poisson:6,3", seed=1)
    >>> [job.name for job in trace.jobs], trace.jobs[0].submit_s, trace.skipped
    (['job0', 'job1', 'job2'], 0.0, 0)
    """
    if not time_compress > 0 or math.isinf(time_compress):
        raise JobError(f"--time-compress {time_compress}: give a positive factor")
    where = f"--jobs {spec}"
    if max_local_models is not None and max_local_models < 1:
        raise JobError(f"{where}: at most {max_local_models} local models per job: give 1 or more")
    skipped = 0
    if spec.startswith("poisson:"):
        rows = _poisson(where, spec.removeprefix("poisson:"), seed, max_local_models)
    elif spec.startswith("philly:"):
        rows, skipped = _philly(where, _read_text(where, spec.removeprefix("philly:")), time_compress)
    elif spec.startswith("helios:"):
        rows, skipped = _helios(where, _read_text(where, spec.removeprefix("helios:")), time_compress)
    elif spec.lower().endswith(".csv"):
        rows = _own(where, _csv_rows(where, _read_text(where, spec)), time_compress, cells=True)
    elif spec.lower().endswith(".jsonl"):
        rows = _own(where, _jsonl_rows(where, _read_text(where, spec)), time_compress, cells=False)
    elif Path(spec).exists():
        raise JobError(f"{where}: not a .csv or .jsonl file: {_FORMS}")
    else:
        raise JobError(f"{where}: no such file and no known form: {_FORMS}")
    if not rows:
        raise JobError(f"{where}: no jobs: give at least one")
    first: dict[str, str] = {}
    for row, job in rows:
        if not _NAME.fullmatch(job.name):
            raise JobError(f"{where}: job {job.name!r} ({row}): give a name of letters, digits, '.', '_' and '-' "
                           "(it names the job's folder)")
        if not math.isfinite(job.submit_s):
            raise JobError(f"--time-compress {time_compress:g}: too small for {where}: job {job.name} would "
                           "arrive at infinity")
        if job.name in first:
            raise JobError(f"{where}: job {job.name} is given twice ({first[job.name]} and {row}): "
                           "give each job its own name")
        first[job.name] = row
    return Trace(tuple(sorted((job for _, job in rows), key=lambda job: job.submit_s)), spec, skipped)


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
"""A job's name: it names its folder (``DIR/jobs/NAME``), so it is never a path."""


def _read_text(where: str, path: str) -> str:
    if not path:
        raise JobError(f"{where}: no file named: {_FORMS}")
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise JobError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise JobError(f"{where}: cannot read it (not UTF-8 text)") from None


def _rounds(duration_s: float, time_compress: float) -> int:
    """Rounds of a public trace's job that ran ``duration_s`` seconds (:data:`ROUND_OF_TRACE_S`).

    >>> _rounds(3600.0, 60.0), _rounds(0.0, 1.0)
    (60, 1)
    """
    rounds = duration_s / time_compress / ROUND_OF_TRACE_S
    if not math.isfinite(rounds):
        raise JobError(f"--time-compress {time_compress:g}: too small: a job of {duration_s:g} s would run for ever")
    return max(1, round(rounds))


def _seed(seed: int) -> int:
    """The Poisson draws' seed: a hash of ``seed`` and a name, so they share no stream with the
    other draws of the same seed (placement, data)."""
    return int.from_bytes(hashlib.sha256(f"fedmst-jobs/poisson/{seed}".encode()).digest()[:8], "big")


def _poisson(where: str, arg: str, seed: int, cap: int | None) -> list[tuple[str, Job]]:
    """N jobs, the first at 0 and each next after an exponential gap of mean 60/RATE seconds, their
    sizes drawn from :data:`LOCAL_MODELS_MIX`. Job i is drawn before job i+1, so it is the same
    whatever N is."""
    rate_text, comma, n_text = arg.partition(",")
    try:
        rate, n = float(rate_text), int(n_text)
    except ValueError:
        raise JobError(f"{where}: {_POISSON_FORM}") from None
    if not comma or not (math.isfinite(rate) and rate > 0) or n < 1:
        raise JobError(f"{where}: {_POISSON_FORM}")
    rng = random.Random(_seed(seed))
    sizes, weights = list(LOCAL_MODELS_MIX), list(LOCAL_MODELS_MIX.values())
    at = 0.0
    rows: list[tuple[str, Job]] = []
    for i in range(n):
        if i:
            at += rng.expovariate(rate / 60.0)
        size = rng.choices(sizes, weights)[0]
        rows.append((f"job {i}", Job(f"job{i}", at, size if cap is None else min(size, cap))))
    return rows


def _csv_rows(where: str, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) of a CSV job file, cells stripped, an empty cell ``None``."""
    reader = csv.reader(io.StringIO(text))
    header = [name.strip() for name in next(reader, [])]
    if not header:
        return
    twice = sorted({name for name in header if header.count(name) > 1})
    if twice:
        raise JobError(f"{where}: header: column(s) {', '.join(map(repr, twice))} given twice: give each once")
    unknown = [name for name in header if name not in FIELDS]
    if unknown:
        raise JobError(f"{where}: header: unknown column(s) {', '.join(map(repr, unknown))} "
                       f"(known: {', '.join(FIELDS)})")
    missing = [name for name in REQUIRED if name not in header]
    if missing:
        raise JobError(f"{where}: header: no column(s) {', '.join(missing)} (required: {', '.join(REQUIRED)})")
    for cells in reader:
        if not any(cell.strip() for cell in cells):
            continue
        if len(cells) > len(header):
            raise JobError(f"{where}: line {reader.line_num}: {len(cells)} cells under {len(header)} columns: "
                           "give one cell per column")
        yield reader.line_num, {name: cell.strip() or None for name, cell in zip(header, cells)}


def _jsonl_rows(where: str, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of a JSON lines job file, blank lines left out."""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as exc:
            raise JobError(f"{where}: line {number}: not JSON ({exc}): give one JSON object per line") from None
        if not isinstance(entry, dict):
            raise JobError(f"{where}: line {number}: not a JSON object: give one JSON object per line")
        yield number, entry


def _own(where: str, rows: Iterator[tuple[int, dict[str, Any]]], time_compress: float, *, cells: bool
         ) -> list[tuple[str, Job]]:
    """The jobs of a job file (``cells``: a CSV one, its values strings), ``submit_s`` divided by
    ``time_compress``."""
    out: list[tuple[str, Job]] = []
    for number, entry in rows:
        name = entry.get("job")
        row = f"{where}: job {name} (line {number})" if isinstance(name, str) and name else f"{where}: line {number}"
        unknown = [key for key in entry if key not in FIELDS]
        if unknown:
            raise JobError(f"{row}: unknown key(s) {', '.join(map(repr, unknown))} (known: {', '.join(FIELDS)})")
        values = {key: _value(row, key, entry.get(key), cells=cells) for key in FIELDS}
        missing = [key for key in REQUIRED if values[key] is None]
        if missing:
            raise JobError(f"{row}: no {', '.join(missing)} (required: {', '.join(REQUIRED)})")
        for key, least, unit in (("submit_s", 0, " seconds"), ("compute_s", 0, " seconds"),
                                 ("local_models", 1, ""), ("rounds", 1, ""), ("epochs", 1, "")):
            if values[key] is not None and values[key] < least:
                raise JobError(f"{row}: {key} {values[key]}: give {least} or more{unit}")
        out.append((f"line {number}", Job(
            values["job"], values["submit_s"] / time_compress, values["local_models"], rounds=values["rounds"],
            model=values["model"], dataset=values["dataset"], epochs=values["epochs"],
            compute_s=values["compute_s"], priority=values["priority"] or 0)))
    return out


def _value(row: str, key: str, value: Any, *, cells: bool) -> Any:
    """``value`` as ``FIELDS[key]`` says: a CSV cell (``cells``) is parsed, a JSON value must
    already be of the type (an int may stand for a float), and None or "" is "not given".

    >>> _value("x", "local_models", "3", cells=True), _value("x", "submit_s", 2, cells=False)
    (3, 2.0)
    """
    kind = FIELDS[key]
    if value is None or value == "":
        return None
    if kind is str:
        if isinstance(value, str):
            return value
        raise JobError(f"{row}: {key} {value!r} is not a string: give a name in quotes")
    number: int | float | None = None
    if cells:
        try:
            number = int(value) if kind is int else float(value)
        except ValueError:
            pass
    elif isinstance(value, int if kind is int else (int, float)) and not isinstance(value, bool):
        number = kind(value)
    if kind is int and number is None:
        raise JobError(f"{row}: {key} {value!r} is not an integer: give a whole number")
    if number is None or not math.isfinite(number):
        raise JobError(f"{row}: {key} {value!r} is not a number: give seconds, e.g. 12.5")
    return number


def _missing(value: Any) -> bool:
    """Whether a public trace's cell or field says it has no value (:data:`_MISSING`)."""
    return value is None or (isinstance(value, str) and value.strip().lower() in _MISSING)


def _time(where: str, row: str, key: str, value: Any, what: str) -> datetime:
    """A public trace's time, written like ``2017-10-07 01:12:09``.

    >>> _time("x", "job j", "start_time", "2017-10-07 01:12:09", "x").hour
    1
    """
    try:
        return datetime.strptime(str(value).strip(), _TIME_FORMAT)
    except ValueError:
        raise JobError(f"{where}: {what}: {row}: {key} {value!r} is not a time like 2017-10-07 01:12:09") from None


def _relative(kept: list[tuple[str, str, datetime, int, float]], time_compress: float) -> list[tuple[str, Job]]:
    """Jobs from a public trace's (row, name, submitted, GPUs, run seconds): submitted from the
    earliest one on, times divided by ``time_compress``."""
    if not kept:
        return []
    start = min(submitted for _, _, submitted, _, _ in kept)
    return [(row, Job(name, (submitted - start).total_seconds() / time_compress, gpus,
                      rounds=_rounds(run_s, time_compress)))
            for row, name, submitted, gpus, run_s in kept]


def _philly(where: str, text: str, time_compress: float) -> tuple[list[tuple[str, Job]], int]:
    """Philly's jobs, named by ``jobid``, their GPUs (those of the first attempt, all machines) as
    local models and their run time (first attempt's start to last attempt's end, as the trace's
    own analysis notebook has it) as rounds. Left out: jobs without GPUs or attempts, and those
    whose first attempt has no start or last attempt no end (never ran, a logging gap, or still
    running when the trace was taken): their run time is not known."""
    try:
        entries = json.loads(text)
    except ValueError as exc:
        raise JobError(f"{where}: {_PHILLY}: not JSON ({exc})") from None
    if not isinstance(entries, list):
        raise JobError(f"{where}: {_PHILLY}: not a JSON array")
    kept: list[tuple[str, str, datetime, int, float]] = []
    skipped = 0
    for i, entry in enumerate(entries):
        jobid = _philly_field(where, f"entry {i}", entry, "jobid", str)
        row = f"job {jobid}"
        submitted = _philly_field(where, row, entry, "submitted_time", object)
        attempts = _philly_field(where, row, entry, "attempts", list)
        for attempt in attempts:
            for key in ("start_time", "end_time"):
                _philly_field(where, row, attempt, key, object)
            for machine in _philly_field(where, row, attempt, "detail", list):
                _philly_field(where, row, machine, "gpus", list)
        gpus = sum(len(machine["gpus"]) for machine in attempts[0]["detail"]) if attempts else 0
        when = (("submitted_time", submitted), ("start_time", attempts[0]["start_time"]),
                ("end_time", attempts[-1]["end_time"])) if attempts else ()
        if not gpus or any(_missing(value) for _, value in when):
            skipped += 1
            continue
        at, start, end = (_time(where, row, key, value, _PHILLY) for key, value in when)
        kept.append((f"entry {i}", jobid, at, gpus, (end - start).total_seconds()))
    return _relative(kept, time_compress), skipped


def _philly_field(where: str, row: str, entry: Any, key: str, kind: type) -> Any:
    if not isinstance(entry, dict) or key not in entry:
        raise JobError(f"{where}: {_PHILLY}: {row} has no {key!r}")
    if not isinstance(entry[key], kind):
        raise JobError(f"{where}: {_PHILLY}: {row}: {key} {entry[key]!r} is not a {kind.__name__}")
    return entry[key]


def _helios(where: str, text: str, time_compress: float) -> tuple[list[tuple[str, Job]], int]:
    """Helios' jobs, named by ``job_id``, ``gpu_num`` as local models and ``duration`` (seconds) as
    rounds. Left out: CPU-only jobs (``gpu_num`` 0) and jobs without a submit, start or end time or
    a duration (never started, or still running when the trace was taken)."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [name for name in _HELIOS_COLUMNS if name not in (reader.fieldnames or [])]
    if missing:
        raise JobError(f"{where}: {_HELIOS}: no column(s) {', '.join(missing)}")
    kept: list[tuple[str, str, datetime, int, float]] = []
    skipped = 0
    for cells in reader:
        row = f"line {reader.line_num}"
        gpus = _helios_number(where, row, "gpu_num", cells["gpu_num"])
        duration = _helios_number(where, row, "duration", cells["duration"])
        ran = not any(_missing(cells[key]) for key in ("submit_time", "start_time", "end_time"))
        if not gpus or duration is None or not ran:
            skipped += 1
            continue
        if not gpus.is_integer() or gpus < 0:
            raise JobError(f"{where}: {_HELIOS}: {row}: gpu_num {cells['gpu_num']!r} is not a count of GPUs")
        if _missing(cells["job_id"]):
            raise JobError(f"{where}: {_HELIOS}: {row} has no job_id")
        kept.append((row, cells["job_id"].strip(), _time(where, row, "submit_time", cells["submit_time"], _HELIOS),
                     int(gpus), duration))
    return _relative(kept, time_compress), skipped


def _helios_number(where: str, row: str, key: str, cell: Any) -> float | None:
    if _missing(cell):
        return None
    try:
        number = float(cell)
    except ValueError:
        raise JobError(f"{where}: {_HELIOS}: {row}: {key} {cell!r} is not a number") from None
    if not math.isfinite(number):
        raise JobError(f"{where}: {_HELIOS}: {row}: {key} {cell!r} is not a number")
    return number


__all__ = ["FIELDS", "LOCAL_MODELS_MIX", "REQUIRED", "ROUND_OF_TRACE_S", "SKIPPED_WHY", "Trace", "read_jobs"]
