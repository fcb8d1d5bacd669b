"""The package's shape, checked: classes and functions short enough to read whole, and no import
cycle among fedmst's modules (a cycle is two modules that can only be understood together)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "fedmst"
LONGEST_CLASS = 350
LONGEST_FUNCTION = 80


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = ast.parse(path.read_text(), filename=str(path))
    return out


def _length(node: ast.AST) -> int:
    return node.end_lineno - node.lineno + 1  # type: ignore[attr-defined]


def test_no_class_or_function_is_too_long_to_read_whole() -> None:
    long = []
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and _length(node) > LONGEST_CLASS:
                long.append(f"class {name}.{node.name}: {_length(node)} lines")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _length(node) > LONGEST_FUNCTION:
                long.append(f"function {name}.{node.name}: {_length(node)} lines")
    assert not long, f"over {LONGEST_CLASS} lines a class or {LONGEST_FUNCTION} a function: {long}"


def _imports(module: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The fedmst modules ``module`` imports when it is imported (module level, outside
    ``if TYPE_CHECKING:``); imports inside functions run later and make no cycle at import time."""
    found: set[str] = set()
    package = module if module in known and any(k.startswith(module + ".") for k in known) else \
        module.rpartition(".")[0]

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test):
                visit(stmt.orelse)
                continue
            if isinstance(stmt, (ast.If, ast.Try)):
                visit(stmt.body)
                visit(getattr(stmt, "orelse", []))
                for handler in getattr(stmt, "handlers", []):
                    visit(handler.body)
                continue
            if isinstance(stmt, ast.Import):
                found.update(a.name for a in stmt.names)
            elif isinstance(stmt, ast.ImportFrom):
                base = stmt.module or ""
                if stmt.level:
                    base = ".".join([package.rsplit(".", stmt.level - 1)[0]] + ([base] if base else []))
                found.add(base)
                found.update(f"{base}.{a.name}" for a in stmt.names)

    visit(tree.body)
    return {name for name in found if name in known and name != module}


def test_no_import_cycle_among_fedmst_modules() -> None:
    modules = _modules()
    known = set(modules)
    graph = nx.DiGraph()
    graph.add_nodes_from(known)
    for name, tree in modules.items():
        graph.add_edges_from((name, target) for target in _imports(name, tree, known))
    # a package importing its own submodules (an __init__ re-exporting them) is no cycle of design
    cycles = [c for c in nx.simple_cycles(graph)
              if not any(a.startswith(b + ".") or b.startswith(a + ".") for a in c for b in c if a != b)]
    assert not cycles, f"import cycles: {cycles[:5]}"


def test_the_import_reader_sees_relative_and_absolute_imports() -> None:
    """The cycle check is only as good as its reading of imports."""
    tree = ast.parse("from fedmst.core import plan\nimport fedmst.errors\nfrom . import wire\n"
                     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fedmst.run import engine\n")
    known = {"fedmst.core.plan", "fedmst.core", "fedmst.errors", "fedmst.core.wire", "fedmst.run.engine",
             "fedmst.core.route"}
    assert _imports("fedmst.core.route", tree, known) == {"fedmst.core", "fedmst.core.plan", "fedmst.errors",
                                                         "fedmst.core.wire"}
