"""Finding what a user names: a registered name, an entry point, or ``package.module:attribute``.

Schedulers, models, datasets and worker backends are all looked up the same way, so a mistyped
module, a missing attribute, a duplicate name or an unknown one read the same whichever a user
was naming. Torch-free, so the pure core may use it.
"""

from __future__ import annotations

import importlib
import warnings
from importlib.metadata import entry_points
from typing import Any, Callable, Generic, Mapping, TypeVar

T = TypeVar("T")


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line: how a user's own code failing is reported."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def import_object(spec: str, what: str, error: type[Exception]) -> Any:
    """The object ``package.module:attribute`` names; ``error`` (with ``what`` and the spec in its
    message) when the module cannot be imported or lacks the attribute.

    >>> import_object("math:pi", "constant", ValueError)
    3.141592653589793
    >>> import_object("math:tau2", "constant", ValueError)
    Traceback (most recent call last):
    ...
    ValueError: constant 'math:tau2': module 'math' has no attribute 'tau2'
    """
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the spec's fault
        raise error(f"{what} {spec!r}: cannot import module {module_name!r} ({one_line(exc)})") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise error(f"{what} {spec!r}: module {module_name!r} has no attribute {attr!r}") from None


class Registry(Generic[T]):
    """Named plugins of one kind: the built-ins, then ``register`` calls and the entry points of
    ``group`` (loaded on the first lookup; a broken plugin only warns, so it cannot break the
    others), and any ``package.module:attribute`` a user names directly.

    ``accepts`` says whether an object is of this kind; ``requirement`` says in words what it
    must be, for the error. Errors are ``error`` instances, one line each.

    >>> numbers = Registry("number", "no.such.group", ValueError, {"one": 1},
    ...                    accepts=lambda x: isinstance(x, float), requirement="a float", form="module:constant")
    >>> numbers.lookup("math:pi")
    3.141592653589793
    >>> numbers.register("e", 2.718)
    >>> numbers.names()
    ('e', 'one')
    >>> numbers.register("e", 2.7)
    Traceback (most recent call last):
    ...
    ValueError: number 'e' is already registered; pick another name
    >>> numbers.lookup("two")
    Traceback (most recent call last):
    ...
    ValueError: unknown number 'two'; choose one of: e, one, or give module:constant (did you forget to register it?)
    >>> numbers.lookup("os:sep")
    Traceback (most recent call last):
    ...
    ValueError: number 'os:sep': sep is not a float
    """

    def __init__(self, kind: str, group: str, error: type[Exception], builtins: Mapping[str, T] | None = None, *,
                 accepts: Callable[[object], bool] = lambda obj: True, requirement: str = "",
                 form: str = "package.module:Class") -> None:
        self.kind, self.group, self.error, self.form = kind, group, error, form
        self._accepts, self._requirement = accepts, requirement
        self._entries: dict[str, T] = dict(builtins or {})
        self._loaded = False

    def copy(self) -> Registry[T]:
        """An independent registry holding the same entries (tests register into a copy)."""
        twin: Registry[T] = Registry(self.kind, self.group, self.error, self._entries, accepts=self._accepts,
                                     requirement=self._requirement, form=self.form)
        twin._loaded = self._loaded
        return twin

    def register(self, name: str, obj: T) -> None:
        """Make ``obj`` available to every command as ``name``; a name already taken is refused."""
        self._load_entry_points()
        if name in self._entries:
            raise self.error(f"{self.kind} {name!r} is already registered; pick another name")
        if ":" in name or not name:
            raise self.error(f"{self.kind} {name!r}: a registered name is not empty and has no ':'")
        self._entries[name] = self._checked(name, obj, repr(obj))

    def names(self) -> tuple[str, ...]:
        """Every registered name, sorted, entry points included."""
        self._load_entry_points()
        return tuple(sorted(self._entries))

    def lookup(self, spec: str) -> T:
        """The object registered as ``spec``, or the one ``package.module:attribute`` names; an
        unknown name fails with the valid choices."""
        if ":" in spec:
            return self._checked(spec, import_object(spec, self.kind, self.error), spec.partition(":")[2])
        self._load_entry_points()
        try:
            return self._entries[spec]
        except KeyError:
            raise self.error(f"unknown {self.kind} {spec!r}; choose one of: {', '.join(self.names())}, "
                             f"or give {self.form} (did you forget to register it?)") from None

    def _checked(self, label: str, obj: Any, shown: str) -> T:
        if not self._accepts(obj):
            raise self.error(f"{self.kind} {label!r}: {shown} is not {self._requirement}")
        return obj

    def _load_entry_points(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for ep in entry_points(group=self.group):
            try:
                self.register(ep.name, ep.load())
            except Exception as exc:  # noqa: BLE001 - one broken plugin must not break the others
                warnings.warn(f"skipping {self.kind} plugin {ep.name!r} ({ep.value}): {one_line(exc)}",
                              stacklevel=3)
