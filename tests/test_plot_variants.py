"""Every ``fedmst plot`` and ``fedmst links`` variant on every kind of folder fedmst writes: each
draws, prints, or refuses in one line, and none ends in a traceback.

The folders are made once, for real, by the cheapest commands that write them (the ``mlp`` model,
one round of one epoch, on ``line3`` or ``dumbbell``: some 40 s of emulation on a 2-core host); a
cluster on the fluid model costs no emulation. A command killed or stopped half-way leaves what it
had written so far: those folders are copies of the real ones cut back to that.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import fedmst_cli, leftovers

pytestmark = pytest.mark.integration

ONE = ("--model", "mlp", "--rounds", "1", "--epochs", "1")
JOBS = "job,submit_s,local_models,rounds,compute_s\na,0,1,2,\nb,0.05,1,2,\nc,0.1,2,1,\n"
"""On line3 with one slot a node: a runs, b fits beside it, c waits for their slots."""

KINDS = ("run", "independent", "compare", "sweep", "cluster", "cluster-simulate", "policies", "run-killed",
         "run-interrupted", "compare-partial", "sweep-interrupted", "cluster-killed", "policies-partial", "empty",
         "not-fedmst", "missing")
VARIANTS = {
    "plot": ("plot",), "plot --out": ("plot", "--out", "{out}"), "plot --task": ("plot", "--task", "task0"),
    "plot --link a-b": ("plot", "--link", "a-b"), "plot --link 0-1": ("plot", "--link", "0-1"),
    "plot --accuracy": ("plot", "--accuracy"), "plot --timeline": ("plot", "--timeline"),
    "plot --slots": ("plot", "--slots"),
    "plot --jobs": ("plot", "--jobs"), "plot --jobs --out": ("plot", "--jobs", "--out", "{out}"),
    "plot --link --task": ("plot", "--link", "a-b", "--task", "task0"),
    "links": ("links",), "links --round 1": ("links", "--round", "1"),
    "links --sort error": ("links", "--sort", "error"), "links --sort link": ("links", "--sort", "link"),
    "links --against mst": ("links", "--against", "mst"),
}
EXPECTED = {
    # what the issue found, now drawn, or refused saying what the folder offers
    ("independent", "plot --accuracy"): "wrote ",
    ("cluster", "plot --accuracy"): "is a cluster folder: plot it without flags (or with --jobs) for its Gantt chart",
    ("cluster", "plot --timeline"): "is a cluster folder: plot it without flags (or with --jobs) for its Gantt chart",
    ("cluster", "plot --link a-b"): "wrote ",
    ("cluster-simulate", "plot --link a-b"): "a cluster that ran on the fluid model (--mode simulate) measured no link",
    ("cluster-simulate", "plot --accuracy"): "is a cluster folder: plot it without flags (or with --jobs)",
    ("policies", "plot --jobs"): "is a cluster --policies comparison: plot it without flags for every policy's JCT",
    ("compare", "plot --jobs"): "--jobs draws a cluster folder's jobs (fedmst cluster); ",
    ("run", "plot --jobs"): "is a run folder: plot it without flags",
    ("sweep", "plot --out"): "--out names one PNG, and a sweep folder's figures are several",
    ("sweep", "plot --link a-b"): "is a sweep folder, with no per-link trace, rounds or timeline of its own",
    ("sweep", "plot --timeline"): "is a sweep folder, with no per-link trace, rounds or timeline of its own",
    ("sweep", "links"): "is a sweep folder, with no links of its own",
    ("policies", "links"): "is a cluster --policies comparison, with no links of its own",
    ("run", "plot --link --task"): "--task picks the task whose trees the folder's own figure overlays",
    ("run", "plot --slots"): "no slot_occupancy.csv: the run held no time-sliced lightpath",
    ("compare", "plot --slots"): "is a compare folder: --slots draws one run, give one of",
    ("empty", "plot"): "holds no results of fedmst",
    ("missing", "plot"): "no such folder",
}


def _made(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, (proc.args, proc.stdout[-2000:], proc.stderr[-2000:])


def _cut(source: Path, target: Path, keep: tuple[str, ...]) -> Path:
    """A copy of ``source`` holding only ``keep`` (and its mark): what a command killed earlier left."""
    target.mkdir()
    for name in (".fedmst", *keep):
        if (source / name).is_dir():
            shutil.copytree(source / name, target / name)
        elif (source / name).exists():
            shutil.copy2(source / name, target / name)
    return target


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kinds")
    made = {kind: root / kind for kind in KINDS}
    (root / "jobs.csv").write_text(JOBS)
    workload = Path(__file__).resolve().parents[1] / "topologies" / "workloads" / "dumbbell-2tasks.json"
    _made(fedmst_cli("run", "--topology", "line3", *ONE, "--local-models", "2", "--out", made["run"]))
    _made(fedmst_cli("run", "--topology", "dumbbell", "--workload", workload, "--clock", "independent",
                     "--interleave", "cassini", "--queue", "fair", "--compute-s", "0.2", *ONE,
                     "--out", made["independent"]))
    _made(fedmst_cli("compare", "--topology", "line3", *ONE, "--local-models", "2", "--out", made["compare"]))
    _made(fedmst_cli("sweep", "--topology", "line3", "--model", "mlp", "--rounds", "1",
                     "--local-models", "2", "--seeds", "1", "--schedulers", "spff,mst", "--out", made["sweep"]))
    cluster = ("cluster", "--topology", "line3", "--slots", "1", "--jobs", root / "jobs.csv", "--model", "mlp",
               "--epochs", "1")
    _made(fedmst_cli(*cluster, "--out", made["cluster"]))
    _made(fedmst_cli(*cluster, "--mode", "simulate", "--compute-s", "0.1", "--order", "las", "--preempt", "las",
                     "--out", made["cluster-simulate"]))
    _made(fedmst_cli(*cluster, "--mode", "simulate", "--compute-s", "0.1", "--policies",
                     "fifo/random,las/random/las", "--out", made["policies"]))
    assert not leftovers()

    _cut(made["run"], made["run-killed"], ("config.json", "plan.json", "agents"))
    interrupted = _cut(made["run"], made["run-interrupted"], ("config.json", "plan.json", "live.json"))
    (interrupted / "summary.json").write_text(json.dumps({
        "status": "interrupted", "scheduler": "mst", "topology": "line3", "rounds": 0, "rounds_planned": 1,
        "wall_s": 1.0}))
    partial = _cut(made["compare"], made["compare-partial"], ())
    shutil.copytree(made["compare"] / "spff", partial / "spff")  # still running mst: no comparison.json yet
    stopped = _cut(made["sweep"], made["sweep-interrupted"], ())
    (stopped / "sweep.json").write_text(json.dumps({"status": "interrupted", "points": 2, "points_done": 0}))
    _cut(made["cluster"], made["cluster-killed"], ("config.json", "jobs.csv", "slots.csv", "tasks.csv", "jobs"))
    policies = _cut(made["policies"], made["policies-partial"], ())
    shutil.copytree(made["policies"] / "fifo+random", policies / "fifo+random")
    made["empty"].mkdir()
    made["not-fedmst"].mkdir()
    (made["not-fedmst"] / "notes.txt").write_text("a folder of something else\n")
    return made


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("kind", KINDS)
def test_every_view_draws_or_refuses_in_one_line(folders: dict[str, Path], tmp_path: Path, kind: str,
                                                 variant: str) -> None:
    out = tmp_path / "picture.png"
    command, *flags = (str(out) if a == "{out}" else a for a in VARIANTS[variant])
    proc = fedmst_cli(command, folders[kind], *flags, timeout=120)
    said = proc.stdout + proc.stderr
    assert "Traceback" not in said, said
    assert proc.returncode in (0, 1, 2), said
    if proc.returncode:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("fedmst: error: "), said
        assert not out.exists()
    elif "--out" in flags:
        assert out.is_file() and f"wrote {out}" in proc.stdout  # --out honoured, never ignored
    expected = EXPECTED.get((kind, variant))
    if expected is not None:
        assert expected in said, said
