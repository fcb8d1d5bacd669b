"""One way to find every kind of plugin: registered names, entry points and ``package.module:attr``."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from fedmst import plugins
from fedmst.errors import FedmstError
from fedmst.plugins import Registry
from fedmst.workers import backends
from fedmst.workers.backends import DockerBackend, ProcessBackend, WorkerLimits, backend_for, check_backend

USER_MODULES = str(Path(__file__).with_name("userbackends"))


def _numbers() -> Registry[int]:
    return Registry("number", "fedmst.test-numbers", ValueError, {"one": 1},
                    accepts=lambda x: isinstance(x, int), requirement="an int", form="module:constant")


def test_entry_points_load_once_on_first_use_and_a_broken_one_only_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> int:
        raise ImportError("no such\nmodule")

    calls: list[str] = []
    found = [SimpleNamespace(name="two", value="m:two", load=lambda: 2),
             SimpleNamespace(name="bad", value="m:bad", load=broken),
             SimpleNamespace(name="one", value="m:one", load=lambda: 11)]  # a clash is refused, not overwritten
    monkeypatch.setattr(plugins, "entry_points", lambda group: calls.append(group) or found)
    numbers = _numbers()
    assert calls == []
    with pytest.warns(UserWarning) as warned:
        assert numbers.lookup("two") == 2
    assert [str(w.message) for w in warned] == [
        "skipping number plugin 'bad' (m:bad): ImportError: no such module",
        "skipping number plugin 'one' (m:one): ValueError: number 'one' is already registered; pick another name"]
    assert numbers.names() == ("one", "two") and numbers.lookup("one") == 1
    assert calls == ["fedmst.test-numbers"]


@pytest.mark.parametrize("name, obj, message", [
    ("one", 5, "number 'one' is already registered; pick another name"),
    ("five", "5", "number 'five': '5' is not an int"),
    ("a:b", 5, "number 'a:b': a registered name is not empty and has no ':'"),
])
def test_register_refuses_in_one_line(name: str, obj: object, message: str) -> None:
    numbers = _numbers()
    with pytest.raises(ValueError) as info:
        numbers.register(name, obj)  # type: ignore[arg-type]
    assert str(info.value) == message
    assert numbers.names() == ("one",)


def test_a_copy_is_independent() -> None:
    numbers = _numbers()
    twin = numbers.copy()
    twin.register("two", 2)
    assert numbers.names() == ("one",) and twin.names() == ("one", "two")


def test_backends_by_name_and_with_the_run_settings() -> None:
    assert isinstance(backend_for("process"), ProcessBackend)
    docker = backend_for("docker", "img", {"3": WorkerLimits(cpus=0.5)})
    assert isinstance(docker, DockerBackend) and docker.image == "img" and docker.limits == {"3": WorkerLimits(0.5)}
    assert docker.describe().to_json() == {"backend": "docker", "image": "img",
                                           "limits": {"3": {"cpus": 0.5, "memory": None}}}
    assert backend_for("process").describe().to_json() == {"backend": "process"}
    assert (ProcessBackend().where, docker.where) == ("processes", "containers")
    assert (docker.exit_hint(137), docker.exit_hint(1), ProcessBackend().exit_hint(137)) == (
        " (out of memory? see --memory)", "", "")


def test_an_unknown_backend_lists_the_choices() -> None:
    with pytest.raises(FedmstError) as info:
        backend_for("kubernetes")
    message = str(info.value)  # other tests (the API's doctest) may have registered more names
    assert re.fullmatch(r"unknown worker backend 'kubernetes'; choose one of: docker, (.*, )?process, "
                        r"or give package.module:Class \(did you forget to register it\?\)", message), message


def test_a_backend_as_module_class(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(USER_MODULES)
    backend = backend_for("recording:Recording")
    assert isinstance(backend, ProcessBackend) and backend.describe().to_json() == {"backend": "recording"}
    check_backend("recording:Recording", limited=False)
    with pytest.raises(FedmstError, match="^worker backend 'recording:NotABackend': NotABackend is not a concrete "
                                          "subclass of fedmst.api.WorkerBackend$"):
        backend_for("recording:NotABackend")
    with pytest.raises(FedmstError, match="worker backend 'nowhere_at_all:X': cannot import module"):
        check_backend("nowhere_at_all:X", limited=False)


def test_container_limits_need_a_backend_that_takes_them() -> None:
    check_backend("docker", limited=True)
    check_backend("process", limited=False)
    with pytest.raises(FedmstError, match="--cpus/--memory limit containers: add --workers docker"):
        check_backend("process", limited=True)


def test_register_backend_refuses_duplicates_and_non_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "BACKENDS", backends.BACKENDS.copy())

    class Quiet(ProcessBackend):
        name = "quiet"

    backends.register_backend("quiet", Quiet)
    assert isinstance(backend_for("quiet"), Quiet) and "quiet" in backends.BACKENDS.names()
    with pytest.raises(FedmstError, match="worker backend 'docker' is already registered"):
        backends.register_backend("docker", Quiet)
    with pytest.raises(FedmstError, match="is not a concrete subclass"):
        backends.register_backend("abstract", backends.WorkerBackend)
