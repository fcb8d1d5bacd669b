"""What the host trainer costs an agent (``--host-trainer``, ``--device cuda``): each fit's weights go
to the trainer and back over a Unix socket. Measured here on the CPU: a local model's fit in the
agent's own process against the same fit through a trainer process, its time in the trainer
(``busy_s``, what the run counts) and the rest (the socket, the copies), per model size.

    .venv/bin/python scripts/bench_trainer.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_host_trainer import _ask, _in_the_agent, _start  # noqa: E402  (the tests' own requests)

from fedmst.fl.models import model_bytes, build_model  # noqa: E402
from fedmst.fl.data import load_dataset  # noqa: E402
from fedmst.workers.gputrainer import TrainerClient  # noqa: E402
from fedmst.workers.hosttrainer import HostTrainer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    digits = load_dataset("digits")
    print(f"{'model':<10} {'MB':>6} {'in the agent':>13} {'via trainer':>12} {'busy_s':>8} {'overhead':>9}")
    with tempfile.TemporaryDirectory() as scratch:
        host = HostTrainer("cpu", Path(scratch), Path(scratch) / "trainer.log")
        try:
            client = TrainerClient(str(host.socket))
            for model in ("mlp", "cnn", "mlp-large", "mlp-xl"):
                start, ask = _start(model), _ask(model=model)
                client.fit(ask, start)  # warm: the trainer builds the model and the shard once
                local, remote, busy = [], [], []
                for _ in range(args.repeat):
                    began = time.perf_counter()
                    _in_the_agent(ask, start)
                    local.append(time.perf_counter() - began)
                    began = time.perf_counter()
                    reply, _ = client.fit(ask, start)
                    remote.append(time.perf_counter() - began)
                    busy.append(reply.busy_s)
                size = model_bytes(build_model(model, digits.num_classes, digits.input_shape)) / 1e6
                m = statistics.median
                print(f"{model:<10} {size:>6.2f} {m(local) * 1e3:>10.1f} ms {m(remote) * 1e3:>9.1f} ms "
                      f"{m(busy) * 1e3:>5.1f} ms {(m(remote) - m(busy)) * 1e3:>6.1f} ms")
        finally:
            host.close()


if __name__ == "__main__":
    main()
