"""The shell's shape: no import cycles, a pure core, a CLI that starts without torch, and options
that come from the command line, a TOML file or an earlier run's config.json alike."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import networkx as nx
import click
import pytest

import fedmst
from fedmst.errors import FedmstError
from fedmst.run.config import RunConfig, read_config_file, validate

PACKAGE = Path(fedmst.__file__).parent
SHELL = ("fedmst.workers", "fedmst.net", "fedmst.run", "fedmst.views", "fedmst.cli", "fedmst.fl", "fedmst.protocol")


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> nx.DiGraph:
    """Every fedmst module and the fedmst modules it imports, at any depth of its code (lazy
    imports inside functions and imports under TYPE_CHECKING count too)."""
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target.startswith("fedmst") and target != name and target != "fedmst":
                    graph.add_edge(name, target)
    return graph


def test_no_import_cycles() -> None:
    graph = import_graph()
    assert len(graph) > 30
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, f"import cycles: {cycles[:3]}"


def test_the_pure_core_imports_nothing_of_the_shell() -> None:
    graph = import_graph()
    core = [n for n in graph if n.startswith("fedmst.core")]
    assert "fedmst.core.plan" in core and "fedmst.core.schedulers.mst" in core
    for module in core:
        shell = [t for t in graph.successors(module) if t.startswith(SHELL)]
        assert not shell, f"{module} imports {shell}"


def test_the_network_layer_knows_no_worker_backend() -> None:
    graph = import_graph()
    for module in (n for n in graph if n.startswith("fedmst.net")):
        assert not [t for t in graph.successors(module) if t.startswith("fedmst.workers")], module


def _fresh(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_importing_the_cli_loads_no_torch_nor_graphs_nor_plots() -> None:
    out = _fresh("import sys, fedmst.cli, fedmst.protocol;"
                 "print(sorted(m for m in ('torch', 'networkx', 'matplotlib') if m in sys.modules))")
    assert out == "[]"


def test_the_links_view_loads_no_torch_nor_plots() -> None:
    out = _fresh("import sys, fedmst.views.links;"
                 "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))")
    assert out == "[]"


def test_the_extension_api_loads_no_torch() -> None:
    assert _fresh("import sys, fedmst.api; print('torch' in sys.modules)") == "False"


def test_cli_defaults_are_the_run_configs() -> None:
    from fedmst import cli
    from fedmst.run import config
    from fedmst.workers import backends

    assert (cli.DEFAULT_MODEL, cli.DEFAULT_DATASET, cli.DEFAULT_IMAGE) == (
        config.DEFAULT_MODEL, config.DEFAULT_DATASET, backends.DEFAULT_IMAGE)
    assert cli.DELAY_MODES == config.DELAY_MODES
    assert cli.OPTIMIZERS == config.OPTIMIZERS
    assert (cli.CLOCKS, cli.INTERLEAVES, cli.LINK_STATES) == (config.CLOCKS, config.INTERLEAVES, config.LINK_STATES)
    assert (cli.ORDERS, cli.QUEUES) == (config.ORDERS, config.QUEUES)


def test_every_run_option_defaults_to_the_run_configs_field() -> None:
    """The options repeat RunConfig's defaults (the CLI must not import it to start at once):
    each one that sets a field must say the same as the field."""
    from dataclasses import fields

    from fedmst import cli
    from fedmst.run.config import RunConfig

    defaults = {f.name: f.default for f in fields(RunConfig)}
    ctx = click.Context(cli.run)
    compared = 0
    for param in cli.run.params:
        field = cli._FIELD.get(param.name, param.name)
        if field not in defaults or field == "out":
            continue
        compared += 1
        default = param.get_default(ctx)
        default = default * 1024 if param.name == "chunk_kb" else default
        if param.multiple:  # no default given: click's UNSET, an empty tuple once parsed
            default = tuple(default) if isinstance(default, (list, tuple)) else ()
        assert default == defaults[field], param.name
    assert compared >= 25


@pytest.mark.parametrize("change,fragment", [
    ({"local_models": 0}, "--local-models 0: give a number of 1 or more"),
    ({"seed": -3}, "--seed -3: give a seed of 0 or more"),
    ({"loss": 0.1, "delay_mode": "off"}, "--loss needs a delay mechanism"),
    ({"jitter_ms": 2.0, "loss": 0.01, "delay_mode": "off"}, "--loss and --jitter-ms need a delay mechanism"),
    ({"mtu": 100}, "--mtu 100"),
    ({"cpus": ("1",)}, "add --workers docker"),
    ({"tasks": 2, "global_node": "0"}, "place one task"),
    ({"deadline_s": 0.0}, "--deadline 0"),
    ({"optimizer": "rmsprop"}, "--optimizer rmsprop: choose one of sgd, momentum, adam"),
    ({"lr": 0.0}, "--lr 0: give a positive learning rate"),
    ({"target_accuracy": 1.5}, "--target-accuracy 1.5: give an accuracy in (0, 1]"),
    ({"workload": "w.json", "tasks": 2}, "--workload places the tasks"),
    ({"clock": "async"}, "--clock async: choose one of lockstep, independent"),
    ({"interleave": "cassini"}, "add --clock independent"),
    ({"interleave": "tetris", "clock": "independent"}, "--interleave tetris: choose one of none, cassini"),
    ({"compute_s": -1.0}, "--compute-s -1: give 0 or more seconds"),
    ({"clock": "independent", "fail_links": ("0-1@2",)}, "--fail-link: not supported with --clock independent"),
    ({"clock": "independent", "deadline_s": 2.0}, "--deadline: not supported with --clock independent"),
    ({"link_state": "guessed"}, "--link-state guessed: choose one of planned, measured"),
    ({"order": "lifo"}, "--order lifo: choose one of fifo, sjf-bco"),
    ({"clock": "independent", "link_state": "measured"}, "--link-state measured: not supported with --clock"),
])
def test_validate_refuses_in_one_line(change: dict[str, object], fragment: str) -> None:
    with pytest.raises(FedmstError, match=None) as exc:
        validate(RunConfig(**change))  # type: ignore[arg-type]
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def test_a_runs_config_json_reads_back_as_the_same_config(tmp_path: Path) -> None:
    config = RunConfig(local_nodes=("2", "3"), fail_links=("0-4@2",), deadline_s=1.5, cpus=("1",), workers="docker")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(asdict(config)))
    assert RunConfig(**read_config_file(path)) == config


def test_a_toml_file_with_dashes_or_underscores(tmp_path: Path) -> None:
    path = tmp_path / "exp.toml"
    path.write_text('local-models = 6\ntopology = "small"\nlr = 1\nfail_links = ["0-4@2"]\nschedulers = "spff,mst"\n')
    assert read_config_file(path, extra_keys=("schedulers",)) == {
        "local_models": 6, "topology": "small", "lr": 1.0, "fail_links": ("0-4@2",), "schedulers": "spff,mst"}


@pytest.mark.parametrize("text,fragment", [
    ("local_modles = 3\n", "unknown option 'local_modles'"),
    ("local_models = \"three\"\n", "option 'local_models' = 'three' is not of type int"),
    ("rounds = [\n", "malformed"),
    ("schedulers = \"spff\"\n", "unknown option 'schedulers'"),
])
def test_a_bad_config_file_is_refused_naming_the_key(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(FedmstError) as exc:
        read_config_file(path)
    assert fragment in str(exc.value) and str(path) in str(exc.value)
