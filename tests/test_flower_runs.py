"""A Flower client trains over real emulated links in a real ``fedmst`` run, and Flower's bad
input fails in one line leaving nothing behind."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from conftest import FEDMST
from fedmst.fl import aggregation
from test_bad_input import error_line, fedmst

FLOWER_APP = str(Path(__file__).with_name("flowerapp"))
sys.path.insert(0, FLOWER_APP)
import quickstart  # noqa: E402 - from the folder put on the path above

ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [FLOWER_APP, os.environ.get("PYTHONPATH")]))}
RUN = ["--topology", "line3", "-k", "2", "--rounds", "1", "--out", "out"]


@pytest.mark.integration
def test_a_flower_client_trains_over_mst_and_spff_and_g_is_fedavg_of_its_updates(tmp_path: Path,
                                                                                  clean_host: None) -> None:
    import subprocess

    out = tmp_path / "cmp"
    proc = subprocess.run(
        [FEDMST, "compare", "--topology", "nsfnet", "--local-models", "6", "--rounds", "2", "--schedulers", "spff,mst",
         "--client", "quickstart:client_fn", "--run-config", "local-epochs=2", "--save-models", "--out", str(out)],
        capture_output=True, text=True, timeout=600, env={**os.environ, **ENV})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    finals = {}
    for scheduler in ("spff", "mst"):
        summary = json.loads((out / scheduler / "summary.json").read_text())
        assert summary["model"] == "flower:quickstart:client_fn"
        assert summary["model_bytes"] == 4 * sum(p.numel() for p in quickstart.Net().parameters())
        assert abs(summary["weight_bytes_measured"] / summary["link_bytes_predicted"] - 1) < 0.02
        saved = out / scheduler / "models" / "round2"
        weights = {int(i): w for i, w in json.loads((saved / "task0-weights.json").read_text()).items()}
        examples = [quickstart.train_examples(i) for i in sorted(weights)]  # partition i is local model i
        assert [weights[i] for i in sorted(weights)] == pytest.approx(aggregation.sample_weights(examples))
        updates = [torch.load(saved / f"task0-local{i}.pt") for i in sorted(weights)]
        got = torch.load(saved / "task0-global.pt")
        assert torch.allclose(got, aggregation.fedavg(updates, examples), atol=1e-5)
        finals[scheduler] = got
        assert 0 < summary["final_accuracy"] <= 1
    assert torch.allclose(finals["spff"], finals["mst"], atol=1e-4)  # the same updates, summed on other links


def _client(tmp_path: Path, name: str, body: str) -> dict[str, str]:
    (tmp_path / f"{name}.py").write_text("import numpy as np\nfrom flwr.client import NumPyClient\n" + body)
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}


WRONG_SHAPES = """
class C(NumPyClient):
    def get_parameters(self, config):
        return [np.zeros((4, 3), np.float32), np.zeros(3, np.float32)]
    def fit(self, parameters, config):
        return [np.zeros((3, 4), np.float32), np.zeros(3, np.float32)], 10, {}
    def evaluate(self, parameters, config):
        return 0.0, 10, {"accuracy": 0.5}
def client_fn(context):
    return C().to_client()
"""


@pytest.mark.host
def test_a_client_returning_arrays_of_other_shapes_stops_the_run_in_one_line(tmp_path: Path) -> None:
    line = error_line(fedmst(tmp_path, "run", *RUN, "--client", "wrong:client_fn",
                             env=_client(tmp_path, "wrong", WRONG_SHAPES)))
    assert "fit returned 2 arrays of shapes [[3, 4], [3]]; the model's 2 arrays have shapes [[4, 3], [3]]" in line


@pytest.mark.host
def test_a_client_fn_without_flower_installed_is_one_line(tmp_path: Path) -> None:
    hide_flower = "import sys; sys.modules['flwr'] = None; sys.argv = sys.argv[1:]; from fedmst.cli import main; main()"
    line = error_line(fedmst(tmp_path, "run", *RUN, "--client", "quickstart:client_fn", env=ENV,
                             prefix=(sys.executable, "-c", hide_flower)))
    assert "--client quickstart:client_fn: Flower (flwr) is not installed here" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.host
@pytest.mark.parametrize("extra,fragment", [
    (["--client", "quickstart:nothing"], "module 'quickstart' has no attribute 'nothing'"),
    (["--client", "quickstart"], "give package.module:client_fn"),
    (["--client", "quickstart:client_fn", "--model", "cnn"], "--client brings its own model and data"),
    (["--client", "quickstart:client_fn", "--clock", "independent"], "use --clock lockstep"),
    (["--client", "quickstart:client_fn", "--workers", "docker"], "leave out --workers docker"),
    (["--client", "quickstart:client_fn", "--run-config", "local-epochs"], "--run-config"),
])
def test_flower_options_that_cannot_run_are_one_line(tmp_path: Path, extra: list[str], fragment: str) -> None:
    line = error_line(fedmst(tmp_path, "run", *RUN, *extra, env=ENV))
    assert fragment in line
