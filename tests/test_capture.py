"""Captures' pure half: which link directions --pcap names, file names, and pcap timestamps
rewritten to the network's time (read back with scapy, a pcap reader independent of fedmst's)."""

from __future__ import annotations

import struct
from pathlib import Path

import networkx as nx
import pytest
from scapy.utils import PcapReader

from fedmst.errors import FedmstError
from fedmst.net.capture import file_name, parse_links, records, rescale_times


def _pcap(path: Path, packets: list[tuple[float, bytes, int]]) -> None:
    """A classic little-endian microsecond pcap of Ethernet frames: (time, captured bytes, original length)."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 128, 1))
        for t, data, orig in packets:
            f.write(struct.pack("<IIII", int(t), round((t - int(t)) * 1e6), len(data), orig))
            f.write(data)


def test_named_links_give_both_directions_once_in_either_spelling() -> None:
    g = nx.Graph([("0", "1"), ("1", "2"), ("2", "3")])
    assert parse_links("1-0, 2-1,0-1", g) == (("0", "1"), ("1", "0"), ("1", "2"), ("2", "1"))
    assert len(parse_links("all", g)) == 6
    for bad, said in (("0-2", "'0-2' is not a link"), (",", "give link names"), ("0", "'0' is not a link")):
        with pytest.raises(FedmstError, match=said):
            parse_links(bad, g)


def test_file_names_are_one_per_direction() -> None:
    assert file_name(("0", "1")) != file_name(("1", "0"))
    assert file_name(("a b", "c:d")) == "a_b-c_d.pcap"


def test_a_slowed_capture_is_rewritten_in_the_networks_time(tmp_path: Path) -> None:
    path = tmp_path / "a-b.pcap"
    frame = bytes(range(60))
    _pcap(path, [(1000.0, frame, 1514), (1004.0, frame, 1514), (1010.5, frame[:40], 66)])
    rescale_times(path, start=1000.0, factor=4.0)
    with PcapReader(str(path)) as reader:
        got = [(float(p.time), p.wirelen, bytes(p)) for p in reader]
    assert [t for t, _, _ in got] == pytest.approx([1000.0, 1001.0, 1002.625], abs=1e-6)
    assert [n for _, n, _ in got] == [1514, 1514, 66]  # original lengths and bytes untouched
    assert [d for _, _, d in got] == [frame, frame, frame[:40]]
    assert [orig for _, orig, _ in records(path)] == [1514, 1514, 66]


def test_what_is_no_pcap_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.pcap"
    path.write_bytes(b"\x0a\x0d\x0d\x0a" + bytes(40))  # a pcapng section header
    with pytest.raises(FedmstError, match="not a classic pcap"):
        list(records(path))
