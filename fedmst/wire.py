"""How many bytes a TCP transfer puts on an emulated Ethernet link (pure arithmetic).

fedmst turns segmentation offloads off on every emulated interface, so the interface byte
counters see real frames: each carries at most ``MSS`` payload bytes plus ``FRAME_OVERHEAD``
header bytes (Ethernet 14 + IPv4 20 + TCP with timestamps 32). The receiver acknowledges
with header-only frames in the reverse direction; how many depends on how the receiving
application reads, so fedmst measures those instead of predicting them.

>>> wire_bytes(1448)
1514
>>> wire_bytes(1449)
1581
"""

MTU = 1500
ETH_HEADER = 14
IP_TCP_HEADER = 20 + 32
MSS = MTU - IP_TCP_HEADER
FRAME_OVERHEAD = ETH_HEADER + IP_TCP_HEADER


def segments(payload: int) -> int:
    """Number of full-size-or-smaller TCP segments that carry ``payload`` bytes."""
    return -(-payload // MSS)


def wire_bytes(payload: int) -> int:
    """Bytes on the wire, in the data direction, for ``payload`` bytes of application data."""
    return payload + segments(payload) * FRAME_OVERHEAD

