"""fedmst: federated learning over emulated links, MST trees with in-path aggregation vs SPFF.

Data flows one way: topology -> tasks -> scheduler -> plan -> emulation/agents -> results.
"""

__version__ = "0.1.0"


def source_digest() -> str:
    """A hash of this fedmst's Python sources: agents in a container image built from another
    checkout report a different one, and the run stops instead of mixing two versions."""
    import hashlib
    from pathlib import Path

    root = Path(__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
