"""``--partition``: every split gives each local model what its documentation says, from its seed."""

from __future__ import annotations

import numpy as np
import pytest

from fedmst.errors import TaskError
from fedmst.fl.partitions import MIN_SAMPLES, Partition, counts, parse_partition, split

LABELS = np.repeat(np.arange(10), 60)  # 600 samples, 10 classes
USERS = np.repeat(np.arange(30), 20)  # 30 users of 20 samples each


@pytest.mark.parametrize("spec", ["dirichlet:0.1", "dirichlet:5", "iid", "classes:1", "classes:3", "quantity:0.5",
                                  "natural"])
@pytest.mark.parametrize("k", [1, 4, 15])
def test_every_sample_goes_to_exactly_one_local_model(spec: str, k: int) -> None:
    shards = split(parse_partition(spec), LABELS, k, seed=3, groups=USERS)
    assert len(shards) == k and all(len(s) >= MIN_SAMPLES for s in shards)
    if spec.startswith("classes"):  # each class's samples go to the models holding it: unheld classes go nowhere
        held = np.concatenate(shards)
        assert len(held) == len(set(held.tolist()))
    else:
        assert np.array_equal(np.sort(np.concatenate(shards)), np.arange(len(LABELS)))


@pytest.mark.parametrize("spec", ["dirichlet:0.5", "iid", "classes:2", "quantity:1", "natural"])
def test_a_split_is_a_pure_function_of_its_seed(spec: str) -> None:
    a, b, c = (split(parse_partition(spec), LABELS, 5, seed=s, groups=USERS) for s in (7, 7, 8))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


@pytest.mark.parametrize("n, k", [(1, 10), (2, 10), (3, 4), (2, 5)])
def test_classes_n_gives_each_local_model_exactly_n_classes_and_holds_every_class(n: int, k: int) -> None:
    shards = split(Partition("classes", n), LABELS, k, seed=1)
    assert [len(set(LABELS[s].tolist())) for s in shards] == [n] * k
    if n * k >= 10:
        assert set(LABELS[np.concatenate(shards)].tolist()) == set(range(10))


def test_iid_gives_equal_shards_with_every_class_and_quantity_skews_only_sizes() -> None:
    even = split(Partition("iid"), LABELS, 4, seed=1)
    assert [len(s) for s in even] == [150] * 4 and all(len(set(LABELS[s].tolist())) == 10 for s in even)
    sizes = [len(s) for s in split(Partition("quantity", 0.3), LABELS, 4, seed=1)]
    assert sum(sizes) == 600 and max(sizes) > 2 * min(sizes)


def test_natural_gives_each_local_model_whole_users_dealt_in_turn() -> None:
    shards = split(Partition("natural"), LABELS, 4, seed=2, groups=USERS)
    users = [set(USERS[s].tolist()) for s in shards]
    assert [len(u) for u in users] == [8, 8, 7, 7]
    assert all(a.isdisjoint(b) for i, a in enumerate(users) for b in users[i + 1:])
    assert all(len(s) == 20 * len(u) for s, u in zip(shards, users))  # every sample of a user, none of another


def test_small_alpha_skews_the_label_mix() -> None:
    def skew(alpha: float) -> float:
        overall = np.bincount(LABELS) / len(LABELS)
        mixes = [np.bincount(LABELS[s], minlength=10) / len(s) for s in split(Partition("dirichlet", alpha), LABELS,
                                                                                 5, seed=2)]
        return float(np.mean([0.5 * np.abs(m - overall).sum() for m in mixes]))

    assert skew(0.1) > 0.5 > 0.1 > skew(1000.0)


def test_counts_say_each_local_model_s_samples_per_class() -> None:
    shards = split(Partition("classes", 1), LABELS, 10, seed=1)
    described = counts(shards, LABELS)
    assert all(d["samples"] == 60 and len(d["classes"]) == 1 for d in described)
    assert sorted(next(iter(d["classes"])) for d in described) == [str(c) for c in range(10)]


@pytest.mark.parametrize("spec, said", [
    ("dirichlet:0", "--partition dirichlet:0: give dirichlet:ALPHA > 0"),
    ("dirichlet", "--partition dirichlet: give dirichlet:ALPHA > 0"),
    ("classes:1.5", "--partition classes:1.5: give classes:N >= 1 classes a local model sees"),
    ("quantity:-1", "--partition quantity:-1: give quantity:ALPHA > 0"),
    ("iid:2", "--partition iid:2: iid takes no argument"),
    ("zipf:2", "--partition zipf:2: unknown partition 'zipf'; give one of dirichlet:ARG, iid, classes:ARG, "
               "quantity:ARG, natural"),
])
def test_a_malformed_partition_is_one_line(spec: str, said: str) -> None:
    with pytest.raises(TaskError) as info:
        parse_partition(spec)
    assert str(info.value) == said


@pytest.mark.parametrize("partition, k, groups, said", [
    (Partition("classes", 11), 4, None, "--partition classes:11: the dataset has 10 classes"),
    (Partition("classes", 1), 20, None, "--partition classes:1: local model "),  # 12 samples of class 0, 2 holders
    (Partition("natural"), 4, None, "--partition natural: this dataset has no natural ids (users)"),
    (Partition("natural"), 4, np.repeat(np.arange(3), 200), "--partition natural: the dataset has 3 users, fewer "
                                                             "than 4 local models"),
    (Partition("iid"), 61, None, "cannot split 600 training samples into 61 shards of at least 10"),
])
def test_a_split_the_dataset_cannot_give_is_one_line(partition: Partition, k: int, groups: np.ndarray | None,
                                                     said: str) -> None:
    labels = np.concatenate([np.zeros(12, dtype=int), LABELS[LABELS > 0]]) if partition.name == "classes" else LABELS
    with pytest.raises(TaskError) as info:
        split(partition, labels, k, seed=1, groups=groups)
    assert str(info.value).startswith(said) and "\n" not in str(info.value), str(info.value)


def test_an_earlier_runs_config_with_alpha_reruns_as_its_dirichlet_partition(tmp_path) -> None:  # noqa: ANN001
    """A config.json from before --partition held the Dirichlet concentration as ``alpha``."""
    from fedmst.run.config import read_config_file

    (tmp_path / "config.json").write_text('{"alpha": 0.3, "rounds": 2}')
    assert read_config_file(tmp_path / "config.json") == {"partition": "dirichlet:0.3", "rounds": 2}
