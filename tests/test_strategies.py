"""Server strategies' pure half: each step against Flower's formulas, written out again here with
numpy over three rounds, and the errors a user meets (no network here)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from fedmst.errors import FedmstError
from fedmst.fl import training
from fedmst.fl.strategies import STRATEGIES, StrategyError, build_strategy, knobs
from fedmst.run.config import RunConfig, validate

ROUNDS = [np.array([0.3, -0.2, 0.0, 1e-3]), np.array([0.1, 0.2, 0.0, -2e-3]), np.array([-0.4, 0.05, 0.0, 0.0])]
"""Three rounds' mean updates: the third coordinate never changes, the fourth barely."""


def _flower(name: str, start: np.ndarray) -> list[np.ndarray]:
    """Flower's ``aggregate_fit`` steps (``flwr.server.strategy``, 1.x), for the default knobs."""
    x, m, v, out = start.copy(), np.zeros_like(start), np.zeros_like(start), []
    for t, delta in enumerate(ROUNDS, start=1):
        if name == "fedavg":
            x = x + delta
        elif name == "fedavgm":  # server_momentum 0.9, server_learning_rate 1: v = 0.9 v + g
            m = -delta if t == 1 else 0.9 * m - delta
            x = x - m
        else:
            beta_1, beta_2, eta, tau = {"fedadam": (0.9, 0.99, 0.1, 1e-9), "fedyogi": (0.9, 0.99, 0.01, 1e-3),
                                        "fedadagrad": (0.0, 0.0, 0.1, 1e-9)}[name]
            m = beta_1 * m + (1 - beta_1) * delta
            if name == "fedadam":
                v = beta_2 * v + (1 - beta_2) * delta * delta
                eta = eta * np.sqrt(1 - beta_2 ** (t + 1)) / (1 - beta_1 ** (t + 1))
            elif name == "fedyogi":
                v = v - (1 - beta_2) * delta * delta * np.sign(v - delta * delta)
            else:
                v = v + delta * delta
            x = x + eta * m / (np.sqrt(v) + tau)
        out.append(x)
    return out


@pytest.mark.parametrize("name", ["fedavg", "fedavgm", "fedadam", "fedyogi", "fedadagrad"])
def test_each_step_is_flowers(name: str) -> None:
    start = np.array([1.0, -1.0, 0.5, 2.0])
    strategy = build_strategy(name, {"server_momentum": 0.9} if name == "fedavgm" else {})
    current = torch.tensor(start, dtype=torch.float64)
    for t, (delta, expected) in enumerate(zip(ROUNDS, _flower(name, start)), start=1):
        current = strategy.step(t, current, torch.tensor(delta, dtype=torch.float64))
        assert np.allclose(current.numpy(), expected, rtol=1e-12, atol=1e-12), (name, t)
    assert current[2].item() == 0.5  # a weight no local model changed stays exactly as it was


def test_fedavgm_with_flowers_defaults_is_fedavg() -> None:
    current, update = torch.tensor([1.0, 2.0]), torch.tensor([0.25, -0.5])
    assert torch.equal(build_strategy("fedavgm", {}).step(1, current, update),
                       build_strategy("fedavg", {}).step(1, current, update))


def test_only_the_robust_strategies_need_every_update_and_each_says_its_knobs() -> None:
    whole = {n for n in STRATEGIES.names() if not STRATEGIES.lookup(n).decomposable}
    assert whole == {"fedmedian", "fedtrimmedavg", "krum"}
    assert knobs(STRATEGIES.lookup("krum")) == {"num_malicious_clients": 0, "num_clients_to_keep": 0}
    assert knobs(STRATEGIES.lookup("fedyogi")) == {"eta": 0.01, "beta_1": 0.9, "beta_2": 0.99, "tau": 0.001}
    assert knobs(STRATEGIES.lookup("fedavg")) == {}


def test_bad_strategies_and_knobs_are_one_line() -> None:
    with pytest.raises(StrategyError, match=r"^unknown strategy 'fedmagic'; choose one of: fedadagrad, fedadam, "):
        build_strategy("fedmagic", {})
    with pytest.raises(StrategyError, match=r"^--strategy-arg eta: fedavg has no such knob \(it has none\)$"):
        build_strategy("fedavg", {"eta": 0.1})
    with pytest.raises(StrategyError, match=r"^fedprox needs proximal_mu above 0: give --strategy-arg proximal_mu="):
        build_strategy("fedprox", {})
    assert build_strategy("fedprox", {"proximal_mu": 0.1}).proximal_mu == 0.1
    with pytest.raises(FedmstError, match=r"^--strategy-arg eta: give KNOB=NUMBER$"):
        validate(RunConfig(strategy_args=("eta",)))
    validate(RunConfig(strategy="fedadam", strategy_args=("eta=0.01", "tau=1e-3")))


def test_the_proximal_term_keeps_a_local_model_near_the_global_one() -> None:
    """FedProx's client side: the larger ``proximal_mu``, the less training moves the weights."""
    from fedmst.fl import data, models

    d = data.load_dataset("digits")
    drift = {}
    for mu in (0.0, 1.0, 10.0):
        torch.manual_seed(3)
        model = models.build_model("mlp", num_classes=d.num_classes, input_shape=d.input_shape)
        start = [p.detach().clone() for p in model.parameters()]
        loss = training.train_local(model, d.x_train[:256], d.y_train[:256], epochs=2, batch_size=32, lr=0.1,
                                    seed=1, optimizer="sgd", proximal_mu=mu)
        assert loss > 0
        drift[mu] = sum((p.detach() - s).pow(2).sum().item() for p, s in zip(model.parameters(), start))
    assert drift[0.0] > drift[1.0] > drift[10.0] > 0


UPDATES = {0: [0.5, -1.0, 0.0], 2: [0.1, 3.0, 0.0], 3: [-0.2, 0.2, 0.0], 5: [9.0, 0.4, 0.0], 7: [0.3, -0.1, 0.0]}
"""Five participants' updates (by local model), one of them far off."""


def _robust(name: str, knobs_: dict[str, float], updates: dict[int, list[float]]) -> np.ndarray:
    weights = {i: 1 / len(updates) for i in updates}
    current = torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64)
    out = build_strategy(name, knobs_).aggregate(1, current, {i: torch.tensor(u, dtype=torch.float64)
                                                             for i, u in updates.items()}, weights)
    return out.numpy() - 1.0


@pytest.mark.parametrize("count", [5, 4])
def test_fedmedian_is_numpys_median_of_the_models(count: int) -> None:
    chosen = dict(list(UPDATES.items())[:count])
    assert np.allclose(_robust("fedmedian", {}, chosen), np.median(np.array(list(chosen.values())), axis=0))


def test_fedtrimmedavg_cuts_flowers_share_from_each_end() -> None:
    values = np.sort(np.array(list(UPDATES.values())), axis=0)
    assert np.allclose(_robust("fedtrimmedavg", {}, UPDATES), values[1:4].mean(axis=0))  # int(0.2 * 5) = 1 cut
    assert np.allclose(_robust("fedtrimmedavg", {"beta": 0.1}, UPDATES), values.mean(axis=0))  # int(0.5) = 0
    with pytest.raises(StrategyError, match=r"beta=0.5: fedtrimmedavg's beta must be in \[0, 0.5\) \(the fraction"):
        build_strategy("fedtrimmedavg", {"beta": 0.5})


@pytest.mark.parametrize(("name", "knob", "value", "valid"), [
    ("fedadam", "eta", -1.0, "above 0"), ("fedyogi", "eta", 0.0, "above 0"), ("fedadagrad", "tau", 0.0, "above 0"),
    ("fedadam", "beta_1", 1.0, r"in \[0, 1\)"), ("fedyogi", "beta_2", -0.1, r"in \[0, 1\)"),
    ("fedadam", "tau", float("nan"), "above 0"), ("fedavgm", "server_momentum", 1.0, r"in \[0, 1\)"),
    ("fedavgm", "server_learning_rate", 0.0, "above 0"), ("fedprox", "proximal_mu", -0.1, "above 0"),
    ("krum", "num_malicious_clients", -1.0, "0 or more"), ("krum", "num_clients_to_keep", -2.0, "0 or more")])
def test_a_knob_outside_its_declared_range_is_refused_in_one_line(name: str, knob: str, value: float,
                                                                  valid: str) -> None:
    """Each strategy declares its knobs' valid values once (``limits``); the edges inside pass."""
    with pytest.raises(StrategyError, match=rf"^--strategy-arg {knob}={value:g}: {name}'s {knob} must be {valid}"):
        build_strategy(name, {knob: value})
    edge = {"above 0": 1e-6, "0 or more": 0.0}.get(valid, 0.0 if value < 0 else 0.999)
    args = {knob: edge, **({"proximal_mu": 0.1} if name == "fedprox" and knob != "proximal_mu" else {})}
    assert knobs(build_strategy(name, args))[knob] == edge


def test_a_strategy_knob_out_of_range_stops_the_run_before_any_network() -> None:
    from fedmst.run.prepare import Host, resolve

    host = Host(delay_mode="userspace", netem_available=False)
    with pytest.raises(StrategyError, match=r"^--strategy-arg eta=-1: fedadam's eta must be above 0$"):
        resolve(RunConfig(topology="line3", strategy="fedadam", strategy_args=("eta=-1",), time_scale="1"), ["mst"],
                host)


def test_krum_picks_the_update_closest_to_its_neighbours_as_flower_does() -> None:
    flat = np.array(list(UPDATES.values()))
    distances = ((flat[:, None, :] - flat[None, :, :]) ** 2).sum(axis=2)
    closest = max(1, len(flat) - 1 - 2)  # f = 1
    scores = [distances[i][np.argsort(distances[i])[1:closest + 1]].sum() for i in range(len(flat))]
    assert np.allclose(_robust("krum", {"num_malicious_clients": 1}, UPDATES), flat[int(np.argmin(scores))])
    kept = np.argsort(scores)[:2]  # Multi-Krum: the two best, weighted alike here
    assert np.allclose(_robust("krum", {"num_malicious_clients": 1, "num_clients_to_keep": 2}, UPDATES),
                       flat[kept].mean(axis=0))
    with pytest.raises(StrategyError, match=r"^--strategy-arg num_malicious_clients=1.5: krum takes a whole number$"):
        build_strategy("krum", {"num_malicious_clients": 1.5})


def test_a_robust_strategy_refuses_to_step_from_a_sum() -> None:
    with pytest.raises(TypeError, match="not decomposable"):
        build_strategy("fedmedian", {}).step(1, torch.zeros(2), torch.zeros(2))



def test_krum_refuses_rounds_too_small_for_its_f_before_anything_runs() -> None:
    """Blanchard et al.'s bound, n > 2f + 2, checked on the run's participants per round."""
    from fedmst.run.prepare import Host, resolve

    host = Host(delay_mode="userspace", netem_available=False)
    krum = RunConfig(topology="nsfnet", local_models=8, strategy="krum", strategy_args=("num_malicious_clients=2",),
                     time_scale="1")
    with pytest.raises(StrategyError, match=r"^krum with num_malicious_clients=2 needs more than 6 participants a "
                                            r"round \(Blanchard et al.: n > 2f \+ 2\); this run has 4$"):
        resolve(replace(krum, clients_per_round="4"), ["mst"], host)
    resolve(krum, ["mst"], host)  # eight participants: enough
    with pytest.raises(StrategyError, match=r"^krum: num_clients_to_keep=9 must be from 0 to the 8 participants"):
        resolve(replace(krum, strategy_args=("num_clients_to_keep=9",)), ["mst"], host)
