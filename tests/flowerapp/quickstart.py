"""A Flower client written as Flower's quickstart-pytorch writes one, on data it makes itself.

Nothing here knows fedmst: ``app`` is the ``ClientApp`` ``flwr run`` would start, and
``fedmst run --client quickstart:client_fn`` (with this folder on ``PYTHONPATH``) runs the same
``client_fn`` over emulated links. Each partition holds a different number of examples drawn
from 10 Gaussian classes, most of them from 3 classes of its own (non-IID, as a federated split
is); the model is a two-layer perceptron (about 150 KB of weights).
"""

from collections import OrderedDict

import torch
from torch import nn
from flwr.client import ClientApp, NumPyClient
from flwr.common import Context

FEATURES, CLASSES = 64, 10


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(FEATURES, 512)
        self.fc2 = nn.Linear(512, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def train_examples(partition_id: int) -> int:
    """How many training examples a partition holds (its FedAvg weight)."""
    return 120 + 40 * partition_id


def load_data(partition_id: int, num_partitions: int):
    """Partition ``partition_id``'s (train, test) tensors; the class centres are shared."""
    centres = torch.randn(CLASSES, FEATURES, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1 + partition_id)
    n_train = train_examples(partition_id)
    n = n_train + n_train // 4
    own = (torch.arange(3) + 3 * partition_id) % CLASSES
    y = torch.where(torch.rand(n, generator=g) < 0.8, own[torch.randint(0, 3, (n,), generator=g)],
                    torch.randint(0, CLASSES, (n,), generator=g))
    x = centres[y] + 2.5 * torch.randn(n, FEATURES, generator=g)
    return (x[:n_train], y[:n_train]), (x[n_train:], y[n_train:])


def train(net: Net, data, epochs: int, lr: float) -> float:
    x, y = data
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    net.train()
    total = 0.0
    for _ in range(epochs):
        total = 0.0
        for batch in torch.randperm(len(y)).split(32):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(net(x[batch]), y[batch])
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch)
    return total / len(y)


def test(net: Net, data) -> tuple[float, float]:
    x, y = data
    net.eval()
    with torch.no_grad():
        out = net(x)
    return nn.functional.cross_entropy(out, y).item(), (out.argmax(1) == y).float().mean().item()


def get_weights(net: Net):
    return [v.cpu().numpy() for v in net.state_dict().values()]


def set_weights(net: Net, parameters) -> None:
    net.load_state_dict(OrderedDict((k, torch.tensor(v)) for k, v in zip(net.state_dict().keys(), parameters)))


class FlowerClient(NumPyClient):
    def __init__(self, net: Net, trainset, testset, local_epochs: int, lr: float) -> None:
        self.net, self.trainset, self.testset = net, trainset, testset
        self.local_epochs, self.lr = local_epochs, lr

    def get_parameters(self, config):
        return get_weights(self.net)

    def fit(self, parameters, config):
        set_weights(self.net, parameters)
        loss = train(self.net, self.trainset, self.local_epochs, self.lr)
        return get_weights(self.net), len(self.trainset[1]), {"train_loss": loss}

    def evaluate(self, parameters, config):
        set_weights(self.net, parameters)
        loss, accuracy = test(self.net, self.testset)
        return loss, len(self.testset[1]), {"accuracy": accuracy}


def client_fn(context: Context):
    partition_id = int(context.node_config["partition-id"])
    num_partitions = int(context.node_config["num-partitions"])
    trainset, testset = load_data(partition_id, num_partitions)
    return FlowerClient(Net(), trainset, testset, int(context.run_config.get("local-epochs", 1)),
                        float(context.run_config.get("learning-rate", 0.05))).to_client()


app = ClientApp(client_fn=client_fn)
