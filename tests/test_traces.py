"""Job traces (``--jobs``): job files, Poisson draws, Philly and Helios logs, and one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean
from typing import Any

import pytest

from fedmst.core.cluster.jobs import Job, JobError
from fedmst.core.cluster.traces import LOCAL_MODELS_MIX, ROUND_OF_TRACE_S, Trace, read_jobs


def refused(spec: str, fragment: str, **kw: Any) -> str:
    """The message of the JobError ``spec`` raises: one line, ``--jobs SPEC:`` first, ``fragment`` in it."""
    with pytest.raises(JobError) as info:
        read_jobs(spec, seed=0, **kw)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"--jobs {spec}: ")
    assert fragment in message, message
    return message


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


# --- job files ---------------------------------------------------------------------------------

GOOD_CSV = """job,submit_s,local_models,rounds,model,dataset,epochs,compute_s,priority
b,30,2,5,,,,,
a,10.5,1,3,cnn,digits,2,0.5,7
c,10.5,3,1,,,,,-1
"""

GOOD_JSONL = """{"job": "b", "submit_s": 30, "local_models": 2, "rounds": 5}

{"job": "a", "submit_s": 10.5, "local_models": 1, "rounds": 3, "model": "cnn", "dataset": "digits", "epochs": 2, \
"compute_s": 0.5, "priority": 7}
{"job": "c", "submit_s": 10.5, "local_models": 3, "rounds": 1, "model": null, "priority": -1}
"""

GOOD_JOBS = (
    Job("a", 5.25, 1, rounds=3, model="cnn", dataset="digits", epochs=2, compute_s=0.5, priority=7),
    Job("c", 5.25, 3, rounds=1, priority=-1),
    Job("b", 15.0, 2, rounds=5),
)
"""The good files' jobs with time_compress=2: by submit time, the tie (a, c) in file order."""


@pytest.mark.parametrize(("name", "text"), [("jobs.csv", GOOD_CSV), ("jobs.jsonl", GOOD_JSONL)])
def test_job_file_round_trips(tmp_path: Path, name: str, text: str) -> None:
    spec = write(tmp_path / name, text)
    trace = read_jobs(spec, seed=0, time_compress=2.0, max_local_models=1)
    assert trace == Trace(GOOD_JOBS, spec, 0)  # a file's jobs are not capped


def test_job_file_without_compression_keeps_submit_times(tmp_path: Path) -> None:
    trace = read_jobs(write(tmp_path / "jobs.csv", GOOD_CSV), seed=0)
    assert [(job.name, job.submit_s) for job in trace.jobs] == [("a", 10.5), ("c", 10.5), ("b", 30.0)]


HEADER = "job,submit_s,local_models,rounds\n"


def jl(**change: Any) -> str:
    """A JSON line of a good job ``a``, with ``change``."""
    return json.dumps({"job": "a", "submit_s": 0, "local_models": 1, "rounds": 1, **change}) + "\n"


@pytest.mark.parametrize(("name", "text", "fragment"), [
    ("x.csv", "job,submit_s,local_models,rounds,gpus\na,0,1,1,2\n", "unknown column(s) 'gpus' (known: job,"),
    ("x.csv", "job,submit_s,local_models\na,0,1\n", "no column(s) rounds"),
    ("x.csv", HEADER + "a,0,2.5,1\n", "job a (line 2): local_models '2.5' is not an integer"),
    ("x.csv", HEADER + "a,0,1,1\nb,soon,1,1\n", "job b (line 3): submit_s 'soon' is not a number"),
    ("x.csv", HEADER + "a,-1,1,1\n", "job a (line 2): submit_s -1.0: give 0 or more seconds"),
    ("x.csv", HEADER + "a,0,0,1\n", "job a (line 2): local_models 0: give 1 or more"),
    ("x.csv", HEADER + "a,0,1,0\n", "job a (line 2): rounds 0: give 1 or more"),
    ("x.csv", HEADER + "a,0,1,\n", "job a (line 2): no rounds"),
    ("x.csv", HEADER + ",0,1,1\n", "line 2: no job"),
    ("x.csv", HEADER + "a,0,1,1,9\n", "line 2: 5 cells under 4 columns"),
    ("x.csv", HEADER + "a,0,1,1\nb,1,1,1\na,2,1,1\n", "job a is given twice (line 2 and line 4)"),
    ("x.csv", "", "no jobs"),
    ("x.csv", HEADER, "no jobs"),
    ("x.jsonl", jl(gpu=2), "unknown key(s) 'gpu' (known: job,"),
    ("x.jsonl", '{"job": "a", "submit_s": 0, "local_models": 1}\n', "job a (line 1): no rounds"),
    ("x.jsonl", jl(rounds=None), "job a (line 1): no rounds"),
    ("x.jsonl", jl(job=""), "line 1: no job"),
    ("x.jsonl", jl(local_models=2.0), "job a (line 1): local_models 2.0 is not an integer"),
    ("x.jsonl", jl(local_models=True), "local_models True is not an integer"),
    ("x.jsonl", jl(rounds="3"), "rounds '3' is not an integer"),
    ("x.jsonl", jl(submit_s="0"), "submit_s '0' is not a number"),
    ("x.jsonl", jl(job=7), "line 1: job 7 is not a string"),
    ("x.jsonl", jl(submit_s=-0.5), "submit_s -0.5: give 0 or more seconds"),
    ("x.jsonl", jl(epochs=0), "epochs 0: give 1 or more"),
    ("x.jsonl", jl(compute_s=-1), "compute_s -1.0: give 0 or more seconds"),
    ("x.jsonl", jl(priority=1.5), "priority 1.5 is not an integer"),
    ("x.jsonl", jl(model=3), "model 3 is not a string"),
    ("x.jsonl", jl() + '{"job": "a"\n', "line 2: not JSON"),
    ("x.jsonl", "[1, 2]\n", "line 1: not a JSON object"),
    ("x.jsonl", jl() * 2, "job a is given twice (line 1 and line 2)"),
    ("x.jsonl", "\n\n", "no jobs"),
])
def test_bad_job_file_is_refused_in_one_line(tmp_path: Path, name: str, text: str, fragment: str) -> None:
    refused(write(tmp_path / name, text), fragment)


def test_missing_file_is_refused(tmp_path: Path) -> None:
    refused(str(tmp_path / "none.csv"), "cannot read it (No such file or directory)")
    refused(str(tmp_path / "none.jsonl"), "cannot read it")


def test_other_suffix_is_refused(tmp_path: Path) -> None:
    message = refused(write(tmp_path / "jobs.txt", GOOD_CSV), "not a .csv or .jsonl file")
    assert "poisson:RATE,N" in message


@pytest.mark.parametrize("spec", ["nothing-here", "uniform:3,4", "poisson"])
def test_unknown_form_lists_the_forms(spec: str) -> None:
    refused(spec, "give a .csv or .jsonl job file, poisson:RATE,N, philly:FILE or helios:FILE")


@pytest.mark.parametrize("factor", [0.0, -2.0, float("nan"), float("inf")])
def test_time_compress_must_be_positive(factor: float) -> None:
    with pytest.raises(JobError, match=r"^--time-compress .*: give a positive factor$"):
        read_jobs("poisson:60,3", seed=0, time_compress=factor)


# --- poisson -----------------------------------------------------------------------------------

def test_poisson_names_order_and_fields() -> None:
    trace = read_jobs("poisson:60,12", seed=3)
    assert trace.source == "poisson:60,12" and trace.skipped == 0
    assert [job.name for job in trace.jobs] == [f"job{i}" for i in range(12)]
    assert trace.jobs[0].submit_s == 0.0
    times = [job.submit_s for job in trace.jobs]
    assert times == sorted(times) and len(set(times)) == 12
    assert all(job.rounds is None and job.model is None and job.compute_s is None for job in trace.jobs)
    assert all(job.local_models in LOCAL_MODELS_MIX for job in trace.jobs)


def test_poisson_is_seeded() -> None:
    assert read_jobs("poisson:60,50", seed=7) == read_jobs("poisson:60,50", seed=7)
    assert read_jobs("poisson:60,50", seed=7).jobs != read_jobs("poisson:60,50", seed=8).jobs


def test_poisson_job_i_does_not_depend_on_n() -> None:
    assert read_jobs("poisson:60,50", seed=2).jobs[:5] == read_jobs("poisson:60,5", seed=2).jobs


def test_poisson_ignores_time_compress() -> None:
    assert read_jobs("poisson:60,20", seed=1, time_compress=10.0).jobs == read_jobs("poisson:60,20", seed=1).jobs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_poisson_mean_gap_is_60_over_rate(seed: int) -> None:
    times = [job.submit_s for job in read_jobs("poisson:30,2000", seed=seed).jobs]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert mean(gaps) == pytest.approx(60 / 30, rel=0.10)


def test_poisson_mix_looks_like_public_traces() -> None:
    sizes = [job.local_models for job in read_jobs("poisson:60,4000", seed=5).jobs]
    assert sum(1 for s in sizes if s <= 2) / len(sizes) > 0.6
    assert 0.02 < sum(1 for s in sizes if s >= 16) / len(sizes) < 0.12
    assert {1, 2, 4, 8, 16, 32} <= set(sizes)
    assert mean(sizes) == pytest.approx(sum(k * w for k, w in LOCAL_MODELS_MIX.items()), rel=0.15)


def test_mix_weights_sum_to_one() -> None:
    assert sum(LOCAL_MODELS_MIX.values()) == pytest.approx(1.0)


def test_poisson_cap() -> None:
    capped = read_jobs("poisson:60,500", seed=4, max_local_models=4).jobs
    free = read_jobs("poisson:60,500", seed=4).jobs
    assert max(job.local_models for job in capped) == 4
    assert [job.local_models for job in capped] == [min(job.local_models, 4) for job in free]
    assert [job.submit_s for job in capped] == [job.submit_s for job in free]


@pytest.mark.parametrize("spec", ["poisson:", "poisson:60", "poisson:x,3", "poisson:-1,3", "poisson:0,3",
                                  "poisson:60,0", "poisson:60,2.5", "poisson:nan,3", "poisson:60,3,4"])
def test_malformed_poisson_is_refused(spec: str) -> None:
    refused(spec, "give poisson:RATE,N (RATE jobs per minute > 0, N jobs >= 1)")


def test_max_local_models_must_be_positive() -> None:
    refused("poisson:60,3", "give 1 or more", max_local_models=0)


# --- Philly ------------------------------------------------------------------------------------

def attempt(start: str | None, end: str | None, *machines: int) -> dict[str, Any]:
    return {"start_time": start, "end_time": end,
            "detail": [{"ip": f"m{i}", "gpus": [f"gpu{g}" for g in range(n)]} for i, n in enumerate(machines)]}


def philly_job(jobid: str, submitted: str | None, *attempts: dict[str, Any]) -> dict[str, Any]:
    return {"status": "Pass", "vc": "ee9e8c", "jobid": jobid, "attempts": list(attempts),
            "submitted_time": submitted, "user": "ce2f4c"}


PHILLY = [
    philly_job("cpu_first", "2017-10-07 00:00:00", attempt("2017-10-07 00:00:01", "2017-10-07 00:05:00", 0)),
    # two machines of 4 GPUs; retried: runs from the first start to the last end (3600 s)
    philly_job("a", "2017-10-07 01:00:00", attempt("2017-10-07 01:00:30", "2017-10-07 01:10:30", 4, 4),
               attempt("2017-10-07 01:11:00", "2017-10-07 02:00:30", 4, 4)),
    philly_job("never", "2017-10-07 01:01:00"),
    philly_job("b", "2017-10-07 01:10:00", attempt("2017-10-07 01:20:00", "2017-10-07 01:22:00", 1)),
    philly_job("running", "2017-10-07 01:02:00", attempt("2017-10-07 01:03:00", "None", 2)),
    philly_job("gap", "2017-10-07 01:03:00", attempt(None, "2017-10-07 01:04:00", 2)),
    philly_job("early", "2017-10-07 00:59:00", attempt("2017-10-07 00:59:00", "2017-10-07 00:59:30", 2)),
]


def test_philly_mapping(tmp_path: Path) -> None:
    spec = "philly:" + write(tmp_path / "cluster_job_log", json.dumps(PHILLY))
    trace = read_jobs(spec, seed=0, time_compress=60.0, max_local_models=2)
    assert trace.source == spec
    assert trace.skipped == 4  # cpu_first, never, running, gap
    assert trace.jobs == (
        Job("early", 0.0, 2, rounds=1),  # 30 s / 60 rounds to 0: at least one round
        Job("a", 1.0, 8, rounds=60),  # kept beyond max_local_models: the cluster refuses it
        Job("b", 11.0, 1, rounds=2),
    )


def test_philly_uncompressed(tmp_path: Path) -> None:
    """Without compression a round stands for ROUND_OF_TRACE_S seconds of the trace."""
    trace = read_jobs("philly:" + write(tmp_path / "log", json.dumps(PHILLY)), seed=0)
    assert [(job.name, job.submit_s, job.rounds) for job in trace.jobs] == [
        ("early", 0.0, round(30 / ROUND_OF_TRACE_S)), ("a", 60.0, round(3600 / ROUND_OF_TRACE_S)),
        ("b", 660.0, round(120 / ROUND_OF_TRACE_S))]


@pytest.mark.parametrize(("content", "fragment"), [
    ("{not json", "not a Philly cluster_job_log (the JSON array of github.com/msr-fiddle/philly-traces): not JSON"),
    (json.dumps({"jobs": PHILLY}), "not a JSON array"),
    (json.dumps([{"attempts": []}]), "entry 0 has no 'jobid'"),
    (json.dumps([{"jobid": "x", "attempts": []}]), "job x has no 'submitted_time'"),
    (json.dumps([{"jobid": "x", "submitted_time": None}]), "job x has no 'attempts'"),
    (json.dumps([philly_job("x", "2017-10-07 01:00:00", {"start_time": None, "end_time": None})]),
     "job x has no 'detail'"),
    (json.dumps([philly_job("x", "yesterday", attempt("2017-10-07 01:00:30", "2017-10-07 01:10:30", 1))]),
     "job x: submitted_time 'yesterday' is not a time like 2017-10-07 01:12:09"),
    (json.dumps([philly_job("x", "2017-10-07 01:00:00", attempt("2017-10-07 01:00:30", "2017-10-07 01:10:30", 1))] * 2),
     "job x is given twice (entry 0 and entry 1)"),
    (json.dumps([philly_job("x", "2017-10-07 01:00:00")]), "no jobs"),
])
def test_bad_philly_is_refused(tmp_path: Path, content: str, fragment: str) -> None:
    refused("philly:" + write(tmp_path / "log", content), fragment)


def test_missing_philly_file_is_refused(tmp_path: Path) -> None:
    refused(f"philly:{tmp_path / 'none'}", "cannot read it")
    refused("philly:", "no file named")


# --- Helios ------------------------------------------------------------------------------------

HELIOS_HEADER = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
HELIOS = HELIOS_HEADER + """\
100,uA,vc1,0,4,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:00,2020-04-01 00:01:00,60,0
101,uA,vc1,4,16,1,COMPLETED,2020-04-01 00:00:20,2020-04-01 00:00:30,2020-04-01 01:00:30,3600,10
102,uB,vc2,1,2,1,CANCELLED,2020-04-01 00:10:20,,,,
103,uB,vc2,16,64,2,FAILED,2020-04-01 00:05:20,2020-04-01 00:06:00,2020-04-01 00:08:00,120,40
104,uC,vc1,8,32,1,COMPLETED,2020-04-01 00:00:20,2020-04-01 00:00:20,2020-04-01 02:00:20,7200.0,0
"""


def test_helios_mapping(tmp_path: Path) -> None:
    spec = "helios:" + write(tmp_path / "cluster_log.csv", HELIOS)
    trace = read_jobs(spec, seed=0, time_compress=10.0, max_local_models=4)
    assert trace.source == spec
    assert trace.skipped == 2  # 100 runs on CPUs only, 102 never started
    assert trace.jobs == (
        Job("101", 0.0, 4, rounds=360),
        Job("104", 0.0, 8, rounds=720),  # submitted with 101: file order
        Job("103", 30.0, 16, rounds=12),
    )


@pytest.mark.parametrize(("content", "fragment"), [
    ("job_id,user,vc,cpu_num,submit_time,start_time,end_time\n1,u,v,1,2020-04-01 00:00:00,,\n",
     "not a Helios cluster_log.csv (github.com/S-Lab-System-Group/HeliosData): no column(s) gpu_num, duration"),
    ("", "no column(s) job_id, gpu_num, submit_time, start_time, end_time, duration"),
    (HELIOS_HEADER + "1,u,v,x,1,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:00,2020-04-01 00:01:00,60,0\n",
     "line 2: gpu_num 'x' is not a number"),
    (HELIOS_HEADER + "1,u,v,2.5,1,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:00,2020-04-01 00:01:00,60,0\n",
     "line 2: gpu_num '2.5' is not a count of GPUs"),
    (HELIOS_HEADER + "1,u,v,2,1,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:00,2020-04-01 00:01:00,long,0\n",
     "line 2: duration 'long' is not a number"),
    (HELIOS_HEADER + "1,u,v,2,1,1,COMPLETED,01/04/2020,2020-04-01 00:00:00,2020-04-01 00:01:00,60,0\n",
     "line 2: submit_time '01/04/2020' is not a time"),
    (HELIOS_HEADER + ",u,v,2,1,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:00,2020-04-01 00:01:00,60,0\n",
     "line 2 has no job_id"),
    (HELIOS_HEADER + "1,u,v,0,1,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:00,2020-04-01 00:01:00,60,0\n",
     "no jobs"),
])
def test_bad_helios_is_refused(tmp_path: Path, content: str, fragment: str) -> None:
    refused("helios:" + write(tmp_path / "cluster_log.csv", content), fragment)


# --- one rule for columns ------------------------------------------------------------------------

def test_own_files_refuse_an_extra_column_public_traces_ignore_theirs(tmp_path: Path) -> None:
    """One rule (traces.py's docstring, docs/cluster.md): a job file is fedmst's format, so a column
    or key it does not know is refused (a typo would go unapplied); a Philly or Helios trace is read
    as published, so the same extra field is ignored and the jobs are those without it."""
    refused(write(tmp_path / "jobs.csv", GOOD_CSV.replace("priority\n", "priority,note\n", 1)),
            "unknown column(s) 'note'")
    first, *rest = GOOD_JSONL.splitlines(keepends=True)
    refused(write(tmp_path / "jobs.jsonl", first.replace("}", ', "note": "x"}') + "".join(rest)),
            "unknown key(s) 'note'")

    lines = HELIOS.splitlines()
    noted = "\n".join([lines[0] + ",note", *(line + ",x" for line in lines[1:])]) + "\n"
    plain = read_jobs("helios:" + write(tmp_path / "plain.csv", HELIOS), seed=0, time_compress=10.0)
    extra = read_jobs("helios:" + write(tmp_path / "noted.csv", noted), seed=0, time_compress=10.0)
    assert extra.jobs == plain.jobs and extra.skipped == plain.skipped and len(plain.jobs) == 3

    def note(entry: dict[str, Any]) -> dict[str, Any]:  # every level of a Philly entry gains a field
        return {**entry, "note": "x", "attempts": [
            {**a, "note": "x", "detail": [{**m, "note": "x"} for m in a["detail"]]} for a in entry["attempts"]]}
    plain = read_jobs("philly:" + write(tmp_path / "plain.json", json.dumps(PHILLY)), seed=0)
    extra = read_jobs("philly:" + write(tmp_path / "noted.json", json.dumps([note(e) for e in PHILLY])), seed=0)
    assert extra.jobs == plain.jobs and extra.skipped == plain.skipped and len(plain.jobs) == 3


def test_what_a_public_trace_leaves_out_is_said_with_why() -> None:
    """Jobs still running when the trace was taken (no end) are left out with those that never ran
    and those without a GPU; the line the command prints says so (issue 45)."""
    assert Trace((), "poisson:6,3").left_out() is None
    line = Trace((), "philly:log", skipped=4).left_out()
    assert line == ("philly:log: 4 jobs of the trace left out "
                    "(no GPU, or no run time: never ran, or still running when the trace was taken)"), line
