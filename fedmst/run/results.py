"""Run folders: every file written atomically, so an interrupted run never leaves half a file.

A run folder holds ``config.json`` (resolved options), ``plan.json`` (the Plan and its
addresses), ``rounds.csv`` (a row per round), ``tasks.csv`` (a row per task and round), ``links.csv``
(a row per link direction and round: measured beside predicted bytes; round 0 is the whole run on
an independent clock), ``samples.csv`` (link counters over time), ``timeline.csv`` (independent
clock: every task's phases over time), ``background.json`` (background flows), ``ecn.csv`` (ECN
marking: a row per link direction over the whole run) and ``mltcp.csv`` (the aggressiveness mltcp
applied, a row per tenth of bytes_ratio) where the run's transport has them, and ``summary.json``.
"""

from __future__ import annotations

import csv
import io
import json
import os
import secrets
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from fedmst.errors import FedmstError
from fedmst.net.congestion import AggressivenessBin
from fedmst.net.ecn import MarkCounts

if TYPE_CHECKING:
    import networkx as nx

    from fedmst.net.tcp import RunTcp

ROUND_FIELDS = (
    "round", "broadcast_s", "train_s", "upload_s", "round_s",
    "predicted_broadcast_s", "predicted_upload_s",
    "bytes_measured", "bytes_predicted", "bytes_aborted", "retransmitted_segments", "queue_drops", "accuracy",
    "local_models", "faults", "replan_s", "late_updates", "broadcast_cpu_busy", "train_cpu_busy", "upload_cpu_busy",
    "broadcast_host_s", "train_host_s", "upload_host_s", "time_scale", "host_bound", "keeps_up_at",
)
TASK_FIELDS = ("round", "task", "broadcast_s", "train_s", "upload_s", "round_s", "accuracy", "local_models",
               "start_s", "end_s", "predicted_round_s")
"""tasks.csv: each task's own phase latencies (when its last node finished), accuracy, and when its
round began and ended (seconds from the first round's start); on an independent clock, also the
round's predicted latency (:func:`fedmst.core.contention.simulate`)."""
TIMELINE_FIELDS = ("kind", "task", "round", "phase", "start_s", "end_s")
"""timeline.csv (independent clock): each task's phases, ``measured`` and ``predicted``, in seconds
from the common start."""
SAMPLE_FIELDS = ("t_s", "round", "phase", "src", "dst", "bytes")
CPU_FIELDS = ("round", "phase", "process", "cpu_s")
"""cpu.csv (lockstep): the host's CPU seconds in each phase, by kind of process (``agent``,
``delay``, ``send``, ``sink``, ``coordinator``; real seconds, whatever the time scale)."""
"""samples.csv: cumulative bytes of each link direction, read about every 100 ms during phases."""


@dataclass(frozen=True)
class LinkRow:
    """One row of links.csv: what one link direction carried in one round (round 0: a whole run
    on an independent clock), measured beside the plans' prediction. Written by
    :func:`write_links` and read back by :func:`read_links`, so the columns live here only."""

    round: int
    link: str
    """The link, its ends in node order (``"1-2"``)."""
    src: str
    dst: str
    capacity_mbps: float
    predicted_bytes: int
    measured_bytes: int
    measured_weight_bytes: int
    """Measured bytes in the phases that planned weights on this direction."""
    measured_other_bytes: int
    """The rest: ACKs (and ARP) of transfers going the other way."""
    error_pct: float
    """Weight bytes against predicted; 0 where nothing was planned."""
    broadcast_bytes: int | None
    """Bytes in each transfer phase; ``None`` (written empty) on an independent clock."""
    upload_bytes: int | None
    aborted_bytes: int
    queue_drops: int
    background_bytes: int


LINK_FIELDS = tuple(f.name for f in fields(LinkRow))


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it into place. The file is
    created with the mode any new file gets here (the umask's, as the figures get): a private
    temporary file renamed into place would hide the numbers from the users who see the pictures."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def write_csv(path: Path, fields: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(fields))
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _fmt(row[k]) for k in fields})
    write_atomic(path, buf.getvalue())


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _fmt(value: Any) -> Any:
    return f"{value:.6g}" if isinstance(value, float) else value


def write_links(path: Path, rows: Iterable[LinkRow]) -> None:
    """links.csv from its rows (an unknown phase's bytes written empty)."""
    write_csv(path, LINK_FIELDS, ({k: "" if v is None else v for k, v in vars(row).items()} for row in rows))


def read_links(path: Path) -> list[LinkRow]:
    """links.csv as written by :func:`write_links`; a file of another format is refused, naming
    the columns it lacks or the row that does not read."""
    rows = read_csv(path)
    missing = [c for c in LINK_FIELDS if rows and c not in rows[0]]
    if missing:
        raise FedmstError(f"{path} lacks the columns {', '.join(missing)}")
    try:
        return [LinkRow(
            round=int(r["round"]), link=r["link"], src=r["src"], dst=r["dst"],
            capacity_mbps=float(r["capacity_mbps"]), predicted_bytes=_int(r["predicted_bytes"]),
            measured_bytes=_int(r["measured_bytes"]), measured_weight_bytes=_int(r["measured_weight_bytes"]),
            measured_other_bytes=_int(r["measured_other_bytes"]), error_pct=float(r["error_pct"]),
            broadcast_bytes=_int(r["broadcast_bytes"]) if r["broadcast_bytes"] != "" else None,
            upload_bytes=_int(r["upload_bytes"]) if r["upload_bytes"] != "" else None,
            aborted_bytes=_int(r["aborted_bytes"]), queue_drops=_int(r["queue_drops"]),
            background_bytes=_int(r["background_bytes"]),
        ) for r in rows]
    except (TypeError, ValueError) as exc:
        raise FedmstError(f"{path}: malformed row ({exc})") from None


def _int(text: str) -> int:
    return int(float(text))


ECN_FIELDS = ("link", "src", "dst", "capacity_mbps", "k_bytes") + tuple(f.name for f in fields(MarkCounts))
MLTCP_FIELDS = tuple(f.name for f in fields(AggressivenessBin))


def write_transport(out: Path, tcp: RunTcp, graph: nx.Graph) -> None:
    """``ecn.csv`` and ``mltcp.csv`` from what a closed emulation's TCP read (nothing where it has
    neither); ``graph`` gives each link's capacity in the network's terms."""
    from fedmst.core.topology import link_name
    from fedmst.net.congestion import aggressiveness

    if tcp.ecn_marks:
        rows = [{"link": link_name(u, v), "src": u, "dst": v,
                 "capacity_mbps": graph.edges[u, v]["capacity_mbps"], "k_bytes": tcp.ecn_k_bytes.get((u, v)),
                 **asdict(counts)} for (u, v), counts in tcp.ecn_marks.items()]
        write_csv(out / "ecn.csv", ECN_FIELDS, rows)
    if "mltcp_stats" in tcp.maps:
        write_csv(out / "mltcp.csv", MLTCP_FIELDS, [asdict(b) for b in aggressiveness(tcp.maps["mltcp_stats"])])
