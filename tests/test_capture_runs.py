"""--pcap on a real run: every loaded link direction's capture, read with scapy, holds the bytes
links.csv counted for it (within 1%), and fedmst links says where the captures are."""

from __future__ import annotations

import csv
import json
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from scapy.layers import inet, l2  # noqa: F401 - registers Ethernet, IP and TCP for the reader
from scapy.utils import PcapReader

from conftest import FEDMST, fedmst_cli
from test_bad_input import error_line, fedmst

RUN = ["--topology", "nsfnet", "--scheduler", "mst", "--local-models", "6", "--rounds", "2", "--model", "mlp"]


@pytest.mark.integration
def test_every_loaded_link_directions_capture_holds_what_links_csv_counted(tmp_path: Path, clean_host: None) -> None:
    out = tmp_path / "run"
    proc = fedmst_cli("run", *RUN, "--pcap", "all", "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    index = json.loads((out / "pcap" / "index.json").read_text())
    assert len(index["captures"]) == 2 * 21  # NSFNET's 21 links, both directions
    measured, weights = defaultdict(int), defaultdict(int)
    with open(out / "links.csv") as f:
        for row in csv.DictReader(f):
            measured[row["src"], row["dst"]] += int(row["measured_bytes"])
            weights[row["src"], row["dst"]] += int(row["predicted_bytes"])
    loaded = [hop for hop, n in weights.items() if n > 0]
    assert len(loaded) >= 6
    for c in index["captures"]:
        hop = (c["src"], c["dst"])
        with PcapReader(str(out / "pcap" / c["file"])) as reader:
            frames = list(reader)
        assert c["dropped_by_kernel"] == 0 and c["packets"] == len(frames)
        captured = sum(p.wirelen for p in frames)
        assert captured == c["bytes"]
        assert all(len(p) <= index["snaplen"] for p in frames)  # headers only
        if hop in loaded:
            assert abs(captured - measured[hop]) <= 0.01 * measured[hop], (hop, captured, measured[hop])
            assert sum(p.haslayer(inet.TCP) for p in frames) >= 0.95 * len(frames)  # the weights' TCP segments
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pcap"]["link_directions"] == 42
    shown = subprocess.run([FEDMST, "links", str(out)], capture_output=True, text=True, timeout=60,
                           env={"COLUMNS": "250", "PATH": "/usr/bin:/bin"})
    assert shown.returncode == 0 and "pcap MB" in shown.stdout and "index.json" in shown.stdout, shown.stdout


@pytest.mark.host
def test_pcap_naming_a_link_the_topology_lacks_is_one_line(tmp_path: Path) -> None:
    line = error_line(fedmst(tmp_path, "run", "--topology", "line3", "-k", "2", "--rounds", "1", "--model", "mlp",
                             "--pcap", "a-c", "--out", "out"))
    assert "--pcap a-c: 'a-c' is not a link of the topology (its links: a-b, b-c)" in line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
