"""How many bytes a TCP transfer puts on an emulated Ethernet link (pure arithmetic).

fedmst turns segmentation offloads off on every emulated interface, so the interface byte
counters see real frames: each carries at most ``mss(mtu)`` payload bytes plus
``FRAME_OVERHEAD`` header bytes (Ethernet 14 + IPv4 20 + TCP with timestamps 32). The receiver
acknowledges with header-only frames in the reverse direction; how many depends on how the
receiving application reads, so fedmst measures those instead of predicting them.

>>> wire_bytes(1448)
1514
>>> wire_bytes(1449)
1581
>>> wire_bytes(8948, mtu=9000)
9014
"""

DEFAULT_MTU = 1500
ETH_HEADER = 14
IP_TCP_HEADER = 20 + 32
FRAME_OVERHEAD = ETH_HEADER + IP_TCP_HEADER


def mss(mtu: int = DEFAULT_MTU) -> int:
    """Largest TCP payload of one frame on a link with this MTU."""
    return mtu - IP_TCP_HEADER


def segments(payload: int, mtu: int = DEFAULT_MTU) -> int:
    """Number of full-size-or-smaller TCP segments that carry ``payload`` bytes."""
    return -(-payload // mss(mtu))


def wire_bytes(payload: int, mtu: int = DEFAULT_MTU) -> int:
    """Bytes on the wire, in the data direction, for ``payload`` bytes of application data."""
    return payload + segments(payload, mtu) * FRAME_OVERHEAD
