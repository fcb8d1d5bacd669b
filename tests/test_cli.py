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


def _schema_params(command: click.Command) -> dict[str, click.Parameter]:
    from fedmst.run.config import options

    """The command's click options of option fields (``out`` is a field each command names its own way)."""
    flagged = {name for name, (_, opt) in options().items() if opt.flags}
    return {p.name: p for p in command.params if p.name in flagged}


@pytest.mark.parametrize("name", ["run", "compare", "sweep", "cluster"])
def test_the_click_options_are_built_from_the_schema(name: str) -> None:
    """Every option field has one click option per command that offers it, with the field's flags,
    default (or the command's own, declared in the schema too) and choices: they cannot drift."""
    from fedmst import cli
    from fedmst.run.config import CLUSTER_ONLY, SWEEP, options

    command = cli.main.commands[name]
    params = _schema_params(command)
    parsed = command.make_context(name, []).params
    for field_name, param in params.items():
        field, opt = options()[field_name]
        assert sorted(param.opts + param.secondary_opts) == sorted(opt.flags), field_name
        default = SWEEP.get(field_name, {}).get("default", field.default) if name == "sweep" else field.default
        value = tuple(parsed[field_name]) if param.multiple else parsed[field_name]
        assert (value * opt.unit if opt.unit != 1 else value) == default, field_name
        if isinstance(param.type, click.Choice):
            assert tuple(param.type.choices) == opt.choices, field_name
        else:
            assert not isinstance(opt.choices, tuple), field_name
    flagged = {f for f, (_, opt) in options().items() if opt.flags}
    if name == "run":  # every option field but the cluster's is offered, and once (a dict keeps one per name)
        assert set(params) == flagged - set(CLUSTER_ONLY)
        assert len([p for p in command.params if p.name in flagged]) == len(flagged) - len(CLUSTER_ONLY)
    elif name == "compare":
        assert set(params) == flagged - {"scheduler"} - set(CLUSTER_ONLY)
    elif name == "cluster":
        assert set(CLUSTER_ONLY) <= set(params)
    else:
        assert set(SWEEP) - {"stall_s"} <= set(params) and "stall_s" not in params


def test_no_option_declares_its_choices_or_default_twice() -> None:
    """The command line declares no run option of its own: each comes from the schema."""
    from fedmst import cli

    # --live says how the run is shown and --overwrite what happens to an earlier run's folder, not
    # what the run does: neither is a run option (not in config.json, so a re-run never overwrites);
    # a hidden one is an option's old name, which only refuses
    own = ({p.name for p in cli.run.params if not getattr(p, "hidden", False)} - set(_schema_params(cli.run))
           - {"config_file", "out", "live", "overwrite"})
    assert own == set()
    source = (PACKAGE / "cli.py").read_text()
    for literal in ('"momentum"', '"sjf-contention"', '"lockstep"', '"cassini"', '"userspace"', '"fedmst-worker"',
                    '"mlp-large"', "default=2,", "default=40"):
        assert literal not in source, literal


def test_the_sweeps_own_defaults_apply_unless_given(tmp_path: Path) -> None:
    from fedmst import cli

    def merged(*args: str) -> RunConfig:
        ctx = cli.sweep.make_context("sweep", list(args))
        kw = {k: v for k, v in ctx.params.items() if k not in ("ks", "seeds")}
        return cli._config(ctx, kw, cli.SWEEP)[0]

    config = merged()
    assert ((config.ocs_wavelengths, config.rounds, config.model, config.stall_s) == (120, 1, "mlp", 60.0))
    assert cli.sweep.make_context("sweep", []).params["task_counts"] == [30]  # the poster's 30, a list of one
    path = tmp_path / "exp.toml"
    path.write_text("stall_s = 5.0\nrounds = 3\n")
    config = merged("--config", str(path), "--rounds", "4")
    assert (config.stall_s, config.rounds) == (5.0, 4)  # the file over the sweep's defaults, the command line over both


def test_a_command_lines_options_become_the_fields(tmp_path: Path) -> None:
    from fedmst import cli

    ctx = cli.run.make_context("run", ["--chunk-kb", "64", "--local-nodes", "a, b", "--fail-link", "a-b@1", "-k", "2"])
    config = cli._config(ctx, dict(ctx.params))[0]
    assert (config.chunk_bytes, config.local_nodes, config.fail_links, config.local_models) == (
        64 * 1024, ("a", "b"), ("a-b@1",), 2)


@pytest.mark.parametrize("args,fragment", [
    (["sweep", "--models", "mlp,,"], "--models 'mlp,,': an empty item"),
    (["sweep", "--schedulers", "spff,,mst"], "--schedulers 'spff,,mst': an empty item"),
    (["compare", "--schedulers", "spff,mst,"], "--schedulers 'spff,mst,': an empty item"),
    (["run", "--local-nodes", "a,,b", "-k", "3"], "--local-nodes 'a,,b': an empty item"),
    (["sweep", "--local-models", "2,,4"], "Invalid value for '--local-models'"),
    (["sweep", "--seeds", "1,"], "Invalid value for '--seeds'"),
])
def test_a_comma_list_with_an_empty_item_is_refused_in_one_line(tmp_path: Path, args: list[str],
                                                               fragment: str) -> None:
    """Refused before the host is checked: no root needed, nothing built."""
    proc = subprocess.run([str(Path(sys.executable).with_name("fedmst")), *args, "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode in (1, 2) and len(lines) == 1, proc.stderr
    assert lines[0].startswith("fedmst: error: ") and fragment in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("change,fragment", [
    ({"local_models": 0}, "--local-models 0: give a number of 1 or more"),
    ({"seed": -3}, "--seed -3: give a seed of 0 or more"),
    ({"loss": 0.1, "delay_mode": "off"}, "--loss needs a delay mechanism"),
    ({"jitter_ms": 2.0, "loss": 0.01, "delay_mode": "off"}, "--loss and --jitter-ms need a delay mechanism"),
    ({"mtu": 100}, "--mtu 100"),
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
    ({"order": "lifo"}, "--order lifo: choose one of fifo, sjf-contention"),
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


def test_an_unknown_worker_backend_is_refused_before_the_host_is_checked() -> None:
    from fedmst.run.prepare import resolve

    with pytest.raises(FedmstError, match="unknown worker backend 'podman'; choose one of: docker, process"):
        resolve(RunConfig(workers="podman"))
    with pytest.raises(FedmstError, match="--cpus/--memory limit containers: add --workers docker"):
        resolve(RunConfig(cpus=("1",)))
