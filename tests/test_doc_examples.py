"""The docs' cluster examples and tables are the code's: docs/extending.md's cluster policy plugin,
taken from the page and run with the page's own command (simulated: no root, no network), does
what it says; docs/cluster.md's results table names every column fedmst writes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
EXTENDING = ROOT / "docs" / "extending.md"
CLUSTER = ROOT / "docs" / "cluster.md"


def _python_block(page: Path, marker: str) -> str:
    """The one ```python block of ``page`` holding ``marker``, dedented (it may sit in a list item)."""
    found = [b for b in re.findall(r"```python\n(.*?)^\s*```", page.read_text(), re.S | re.M) if marker in b]
    assert len(found) == 1, f"{page.name} shows {len(found)} python blocks with {marker!r}"
    return textwrap.dedent(found[0])


def _inline_command(page: Path, pattern: str) -> str:
    """The one inline `fedmst ...` command of ``page`` matching ``pattern``, its line breaks as spaces."""
    found = re.findall(rf"`(fedmst [^`]*{pattern}[^`]*)`", page.read_text())
    assert len(found) == 1, f"{page.name} shows {len(found)} commands like {pattern!r}"
    return " ".join(found[0].split())


def test_the_cluster_policy_plugin_example_runs_as_written(tmp_path: Path) -> None:
    """The page's mypolicies.py and its command: every job runs, the summary names the plugins, and
    each job's G and models are where Nearest puts them, its note (jobs.csv's `placement`) right."""
    (tmp_path / "mypolicies.py").write_text(_python_block(EXTENDING, "class Nearest(Placement)"))
    command = _inline_command(EXTENDING, r"--placement mypolicies:Nearest")
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    ran = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PATH": path, "PYTHONPATH": str(tmp_path)})
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]

    out = tmp_path / re.search(r"--out (\S+)", command).group(1)  # type: ignore[union-attr]
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["status"], summary["order"], summary["placement"]) == (
        "completed", "mypolicies:LargestFirst", "mypolicies:Nearest"), summary
    assert summary["jobs_finished"] == summary["jobs"] == 16, summary

    from fedmst.core.topology import load_topology
    from fedmst.run.cluster_records import NODE_SEPARATOR, read_jobs_csv

    graph = load_topology("nsfnet")
    for row in read_jobs_csv(out):
        g, *models = row.nodes.split(NODE_SEPARATOR)
        assert len({g, *models}) == len(models) + 1 == row.local_models + 1, row  # one slot a node
        hops = nx.single_source_shortest_path_length(graph, g)
        assert row.placement == f"farthest model {max(hops[m] for m in models)} hop(s) from G", row


def _results_row(name: str) -> str:
    """docs/cluster.md's results table row for file ``name``."""
    results = CLUSTER.read_text().split("\n## Results\n", 1)[1]
    rows = [line for line in results.splitlines() if line.startswith(f"| `{name}` |")]
    assert len(rows) == 1, f"docs/cluster.md's results table has {len(rows)} rows for {name}"
    return rows[0]


def test_the_results_table_names_every_column_fedmst_writes() -> None:
    """jobs.csv, slots.csv and preemptions.csv: each column the code writes is named (in backticks)
    in the file's row (a jobs.csv `placement` column went unmentioned once)."""
    from fedmst.run.cluster_records import JOB_FIELDS, JOBS, SLOT_FIELDS, SLOTS, STOPPED, STOPPED_FIELDS

    for name, columns in ((JOBS, JOB_FIELDS), (SLOTS, SLOT_FIELDS), (STOPPED, STOPPED_FIELDS)):
        named = {word for quoted in re.findall(r"`([^`]*)`", _results_row(name))
                 for word in re.findall(r"\w+", quoted)}
        missing = [c for c in columns if c not in named]
        assert not missing, f"docs/cluster.md's {name} row does not name {', '.join(missing)}"
