"""Every list of choices the docs show is the code's list: the options that declare choices, the
plugin registries' built-in names, the topologies in topologies/ and the links table's sort keys.

A new scheduler, model or topology left the docs listing the old ones (issue 32: `dumbbell`,
`mlp-xl` and five schedulers were missing); here each enumeration a page shows is pulled out of
its markdown and compared with the code's, and a failure names the page, the listing, what is
missing and what is extra. LISTINGS is the table to extend when a page enumerates something new;
test_every_declared_choice_is_listed fails when the code gains a list of choices no page is
checked for.

Pure: reads markdown and imports the registries (the models' and datasets' import torch); no
network, no root, no subprocess.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
from test_docs import _prose

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
"""A choice as the docs write one: lowercase words joined by '-' (`mlp-xl`, `sjf-contention`)."""
GROUP = re.compile(r"fedmst\.[a-z]+")
"""An entry-point group (`fedmst.schedulers`)."""

Extract = Callable[[str], list[str] | None]
"""A page's text -> the names its listing shows, in order; None where the listing is not found."""


def _registries() -> dict[str, Any]:
    """Each registry by the option that names its plugins (imported here: models and datasets load torch)."""
    from fedmst.core.cluster.policies import ORDERS, PLACEMENTS, PREEMPTIONS
    from fedmst.core.optical.policies import POLICIES
    from fedmst.core.schedulers import SCHEDULERS
    from fedmst.core.selection import SELECTIONS
    from fedmst.fl.data import DATASETS
    from fedmst.fl.models import MODELS
    from fedmst.fl.strategies import STRATEGIES
    from fedmst.workers.backends import BACKENDS

    return {"--scheduler": SCHEDULERS, "--model": MODELS, "--dataset": DATASETS, "--strategy": STRATEGIES,
            "--selection": SELECTIONS, "--workers": BACKENDS, "cluster --order": ORDERS, "--placement": PLACEMENTS,
            "--preempt": PREEMPTIONS, "--optical": POLICIES}


def built_in(registry: Any) -> tuple[str, ...]:
    """A registry's names less those of installed entry points: a plugin must not make the docs stale."""
    plugged = {ep.name for ep in entry_points(group=registry.group)}
    return tuple(name for name in registry.names() if name not in plugged)


@cache
def code_choices() -> dict[str, tuple[str, ...]]:
    """What the code accepts, by the option (or listing) a page enumerates it for."""
    from fedmst.core.topology import SHIPPED_DIR
    from fedmst.net.congestion import CONGESTION_CONTROLS
    from fedmst.run.config import options
    from fedmst.views.links import LINK_SORTS

    choices = {opt.label(name): tuple(opt.choices) for name, (_, opt) in options().items() if opt.choices}
    registries = _registries()
    choices.update({flag: built_in(registry) for flag, registry in registries.items()})
    choices["--topology"] = tuple(sorted(p.stem for p in SHIPPED_DIR.glob("*.json")))
    choices["links --sort"] = LINK_SORTS
    choices["--congestion-control"] = CONGESTION_CONTROLS  # or a user's PATH.bpf.c / PATH.bpf.o
    choices["entry-point groups"] = tuple(sorted(r.group for r in registries.values()))
    return choices


def _cells(line: str) -> list[str]:
    """A markdown table row's cells (an escaped \\| stays inside its cell)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def _code(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def names_in(text: str, option: str | None = None, word: re.Pattern[str] = NAME) -> list[str]:
    """The names backticked in ``text``: whole spans that are a name, and the values of
    `OPTION a|b|c` (other options' spans, like `--clock independent`, are not this listing's).

    >>> names_in("`cubic`, `bbr` or `reno`; see `workers.json`")
    ['cubic', 'bbr', 'reno']
    >>> names_in("chosen by `--selection random|loss|network`, not `--clock independent`", "--selection")
    ['random', 'loss', 'network']
    """
    found = []
    for span in _code(text):
        flag, _, value = span.partition(" ")
        if flag.startswith("-"):
            if flag != option:
                continue
            span = value
        found += [part for part in re.split(r"[|,]\s*", span.strip()) if word.fullmatch(part)]
    return found


def option_row(flag: str) -> Extract:
    """The names in the default and meaning of the option table's row for ``flag``."""
    def extract(text: str) -> list[str] | None:
        for line in _prose(text):
            cells = _cells(line)
            if line.lstrip().startswith("|") and len(cells) >= 3 and flag in _code(cells[0]):
                return names_in(" ".join(cells[1:]), flag)
        return None
    return extract


def after(heading: str, extract: Extract) -> Extract:
    """``extract`` applied to what follows ``heading`` (a section's own table, where an option
    of the same name has a row above)."""
    def extract_after(text: str) -> list[str] | None:
        at = text.find(heading)
        return None if at < 0 else extract(text[at:])
    return extract_after


def error_row(given: str) -> Extract:
    """The names an unknown-name error lists (``one of[:] a, b, c, or give ...``) in the bad-input
    table's row for ``given``."""
    def extract(text: str) -> list[str] | None:
        for line in _prose(text):
            cells = _cells(line)
            if len(cells) >= 2 and _code(cells[0]) == [given]:
                listed = re.search(r"one of:? (.*?), (?:or give|not a)", cells[1])
                return listed.group(1).split(", ") if listed else []
        return None
    return extract


def first_column(header: str) -> Extract:
    """The names in the first column of the table whose header row starts with ``header``."""
    def extract(text: str) -> list[str] | None:
        rows: list[str] | None = None
        for line in _prose(text):
            cells = _cells(line) if line.lstrip().startswith("|") else None
            if rows is None:
                if cells and cells[0] == header:
                    rows = []
            elif cells is None:
                break
            elif not set(cells[0]) <= set("-: "):
                rows += names_in(cells[0])
        return rows
    return extract


def passage(start: str, end: str, option: str | None = None, word: re.Pattern[str] = NAME) -> Extract:
    """The names in the prose from ``start`` to the first ``end`` after it (lines joined)."""
    def extract(text: str) -> list[str] | None:
        prose = " ".join(" ".join(_prose(text)).split())
        begin = prose.find(start)
        if begin < 0:
            return None
        stop = prose.find(end, begin + len(start))
        return names_in(prose[begin + len(start):None if stop < 0 else stop], option, word)
    return extract


@dataclass(frozen=True)
class Listing:
    """One enumeration on one page, and the code's list it must equal."""

    page: str
    where: str
    choices: str
    extract: Extract

    def problems(self, text: str) -> list[str]:
        """What differs between the page's listing and the code's choices (empty: they agree)."""
        shown = self.extract(text)
        if shown is None:
            return [f"{self.page}, {self.where}: listing not found (moved? update LISTINGS)"]
        code = code_choices()[self.choices]
        missing = [c for c in code if c not in shown]
        extra = sorted(set(shown) - set(code))
        if not missing and not extra:
            return []
        return [f"{self.page}, {self.where}: missing {', '.join(missing) or 'nothing'}; "
                f"extra {', '.join(extra) or 'nothing'} (the code's {self.choices}: {', '.join(code)})"]


def _table(option: str) -> Listing:
    return Listing("docs/commands.md", f"option table, {option}", option, option_row(option))


COMMANDS_OPTIONS = ("--scheduler", "--model", "--dataset", "--optimizer", "--strategy", "--selection",
                    "--delay-mode", "--congestion-control", "--queue", "--workers", "--clock", "--interleave",
                    "--order", "--link-state", "--optical")

LISTINGS = [
    *(_table(option) for option in COMMANDS_OPTIONS),
    *(Listing("docs/commands.md", f"fedmst cluster's table, {flag}", choices, after("## `fedmst cluster`",
                                                                                   option_row(flag)))
      for flag, choices in (("--mode", "--mode"), ("--order", "cluster --order"), ("--placement", "--placement"),
                            ("--preempt", "--preempt"))),
    Listing("docs/commands.md", "bad input, --topology", "--topology", error_row("--topology no-such-topology")),
    Listing("docs/commands.md", "bad input, --scheduler", "--scheduler", error_row("--scheduler no-such-sched")),
    Listing("docs/commands.md", "bad input, --model", "--model", error_row("--model no-such-model")),
    Listing("docs/topologies.md", "table of topologies", "--topology", first_column("name")),
    Listing("README.md", "schedulers", "--scheduler", passage("A scheduler is a registered name (", ")")),
    Listing("README.md", "strategies", "--strategy",
            passage("into the next global model is", "needs every update whole at G", "--strategy")),
    Listing("README.md", "selections", "--selection",
            passage("take part in a round, chosen by", " (", "--selection")),
    Listing("README.md", "fedmst links --sort", "links --sort", passage("`--sort` by", ".")),
    Listing("README.md", "entry-point groups", "entry-point groups",
            passage("through the entry-point group", "of your package", word=GROUP)),
    Listing("docs/strategies.md", "table of strategies", "--strategy", first_column("`--strategy`")),
    Listing("docs/extending.md", "entry-point groups", "entry-point groups",
            passage("through the entry-point group", "of your package", word=GROUP)),
]


@pytest.mark.parametrize("listing", LISTINGS, ids=lambda listing: f"{Path(listing.page).name}:{listing.where}")
def test_docs_list_the_codes_choices(listing: Listing) -> None:
    problems = listing.problems((ROOT / listing.page).read_text())
    assert not problems, "\n".join(problems)


def test_every_declared_choice_is_listed() -> None:
    """An option that declares choices, or a registry, with no checked row in docs/commands.md
    would let its list go stale unnoticed."""
    checked = {listing.choices for listing in LISTINGS if listing.page == "docs/commands.md"}
    unchecked = sorted(set(code_choices()) - checked - {"links --sort", "entry-point groups"})
    assert not unchecked, (f"choices no docs/commands.md row is checked for: {', '.join(unchecked)}: "
                           "add each to the option table and to COMMANDS_OPTIONS")


def test_every_registry_is_known() -> None:
    """A registry added under fedmst/ must join _registries, or its names would go unchecked."""
    declared = set()
    for source in (ROOT / "fedmst").rglob("*.py"):
        declared |= set(re.findall(r"Registry\(\s*\"[^\"]+\",\s*\"(fedmst\.[a-z_]+)\"", source.read_text()))
    known = {registry.group for registry in _registries().values()}
    assert declared == known, f"registries not checked: {sorted(declared - known)}; gone: {sorted(known - declared)}"


@pytest.mark.parametrize(("page", "where", "before", "after", "name"), [
    ("docs/topologies.md", "table of topologies", "\n| `dumbbell` |", "\n| `dumbell` |", "dumbbell"),
    ("docs/commands.md", "option table, --model", "`mlp-large`, `mlp-xl`)", "`mlp-large`)", "mlp-xl"),
    ("docs/commands.md", "bad input, --topology", "one of dumbbell, line3", "one of line3", "dumbbell"),
    ("README.md", "schedulers", "`spff`, `mst`,", "`mst`,", "spff"),
])
def test_a_dropped_name_is_reported(page: str, where: str, before: str, after: str, name: str) -> None:
    """The extraction reads what a page lists: the page with one name taken out (or misspelt)
    fails its listing, naming the page and the name."""
    text = (ROOT / page).read_text()
    assert text.count(before) == 1, f"{page} no longer shows {before!r}: pick another example"
    listing = next(listing for listing in LISTINGS if (listing.page, listing.where) == (page, where))
    problems = listing.problems(text.replace(before, after))
    assert problems and f"{page}, {where}: missing {name}" in problems[0], problems
