"""The README and docs/ stay navigable: every relative link resolves, the README stays a front
door, and every `fedmst SUBCOMMAND --option` shown in a sh or bash block names a real option.

Pure: reads files and builds click's command objects; no network, no root, no subprocess.
"""
from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 350

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*```")


def _prose(text: str) -> Iterator[str]:
    """The lines outside fenced code blocks, where markdown links are links."""
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            yield line


def _blocks(text: str, langs: set[str]) -> Iterator[str]:
    """The body of every fenced block opened with ```LANG, LANG one of LANGS."""
    body: list[str] | None = None
    for line in text.splitlines():
        if FENCE.match(line):
            if body is None:
                body = [] if line.strip()[3:] in langs else None
                if body is None:  # another language: skip to its end
                    body = ["<skip>"]
            else:
                if body[:1] != ["<skip>"]:
                    yield "\n".join(body)
                body = None
        elif body is not None:
            body.append(line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor on PAGE, with GitHub's -1, -2 ... for repeated headings."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in _prose(page.read_text()):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def relative_links(page: Path) -> Iterator[str]:
    for line in _prose(page.read_text()):
        for target in LINK.findall(line):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
                yield target


def test_slug_follows_github() -> None:
    assert slug("Faults and re-scheduling") == "faults-and-re-scheduling"
    assert slug("Reproducing the poster's Figure 3") == "reproducing-the-posters-figure-3"
    assert slug("Two nodes: TCP goodput a→b (`iperf3 -t 10 -O 3`)") == "two-nodes-tcp-goodput-ab-iperf3--t-10--o-3"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.is_file():
            broken.append(f"{target}: no file {file}")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file):
            broken.append(f"{target}: no heading #{fragment} in {file.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_readme_is_a_front_door() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move sections to docs/"
    linked = {Path(t.partition("#")[0]).name for t in relative_links(README)}
    unlisted = [p.name for p in PAGES[1:] if p.name not in linked]
    assert not unlisted, f"docs pages the README does not link: {unlisted}"


@pytest.mark.parametrize("page", PAGES[1:], ids=lambda p: p.name)
def test_page_has_title_and_way_back(page: Path) -> None:
    text = page.read_text()
    assert text.startswith("# "), f"{page.name} should start with a one-line title"
    assert "../README.md" in set(relative_links(page)), f"{page.name} should link back to the README"


def _invocations(command: str) -> Iterator[tuple[str, list[str]]]:
    """(subcommand, its arguments) for every `fedmst SUB ...` in one shell line."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        words = command.split("#")[0].split()
    for i, word in enumerate(words):
        if (word == "fedmst" or word.endswith("/fedmst")) and i + 1 < len(words):
            args = []
            for arg in words[i + 2:]:
                if arg in {"&&", "||", "|", ";", "&"}:
                    break
                if arg.endswith(("&", ";")):
                    args.append(arg[:-1])
                    break
                args.append(arg)
            yield words[i + 1], args


COMMANDS = {"sh", "bash"}
"""Blocks of commands to paste into a shell: each must run as written."""
SYNOPSES = {"", "text"}
"""Blocks that sum commands up (``fedmst run ... --clock independent``): each names real options."""


def shown_invocations(langs: set[str] = COMMANDS) -> Iterator[tuple[str, str, list[str]]]:
    for page in PAGES:
        for block in _blocks(page.read_text(), langs):
            for line in block.replace("\\\n", " ").splitlines():
                if langs is COMMANDS or line.startswith("fedmst "):  # not a table's "fedmst on nsfnet"
                    for sub, args in _invocations(line):
                        yield page.name, sub, args


def test_shell_blocks_show_fedmst_commands() -> None:
    subs = {sub for _, sub, _ in shown_invocations()}
    assert {"compare", "run", "sweep", "links", "watch"} <= subs


def test_every_shown_command_parses_as_written() -> None:
    """Every `fedmst` line of a sh block, parsed by the real command line (its options, their
    values and choices, the arguments it needs) without running it."""
    import click

    from fedmst.cli import main

    wrong = []
    for page, sub, args in shown_invocations():
        command = main.commands.get(sub)
        if command is None:
            wrong.append(f"{page}: fedmst {sub}: no such command")
            continue
        try:
            command.make_context(sub, list(args))
        except click.ClickException as exc:
            wrong.append(f"{page}: fedmst {sub} {' '.join(args)}: {exc.format_message()}")
    assert not wrong, "\n".join(wrong)


def test_summed_up_commands_name_real_options() -> None:
    from fedmst.cli import main

    wrong = []
    for page, sub, args in shown_invocations(SYNOPSES):
        command = main.commands.get(sub.split("/")[0])  # "run/compare ... --live": run's
        if command is None:
            wrong.append(f"{page}: fedmst {sub}: no such command")
            continue
        known = {"--help"} | {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
        options = [a.split("=")[0] for a in args if a.startswith("--") and len(a) > 2]
        wrong += [f"{page}: fedmst {sub} {o}: no such option" for o in options if o not in known]
    assert not wrong, "\n".join(wrong)
