"""Every `--help` page tells the truth: it opens, shows defaults in one style, names only
its own role's options and things, and lists its subcommands' summaries uncut."""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from privfl.cli import main

# A bracketed default written by hand ("[10]", "[runs/<timestamp>]"): not click's own
# "[default: X]", "[required]" or range ("[x>=1]"), nor a choice list ("[a|b]"), nor a
# usage word ("[OPTIONS]", "[RUN_DIRS]...") or an extra in a package name ("privfl[ray]").
BRACKET = re.compile(r"(?<![\w\[ᵀ])\[([^\[\]]*)\]")
CLICK_OWN = re.compile(r"^(default: |required$|[A-Z_]+$|-- )|[<>]=?x|x[<>]|\|")
HOST_ONLY = ("--label-column", "--redraw-labels")


def walk(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The path of every command below ``command``, groups included."""
    yield path
    if isinstance(command, click.Group):
        ctx = click.Context(command, info_name=path[-1] if path else "privfl")
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, name
            if not sub.hidden:
                yield from walk(sub, (*path, name))


PATHS = list(walk(main))


def page(path: tuple[str, ...]) -> str:
    """``privfl PATH --help`` at the default width, asserting that it exits 0."""
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0, (path, result.output)
    return result.output


@pytest.fixture(scope="module")
def pages() -> dict[tuple[str, ...], str]:
    return {path: page(path) for path in PATHS}


def test_every_command_is_walked() -> None:
    # Arrange / act: the walk above. Assert: both modes' roles and the nested groups are in.
    for path in [("vfl", "server"), ("vfl", "run-local"), ("hfl", "client"), ("init", "hfl")]:
        assert path in PATHS
    assert len(PATHS) > 25


def test_every_default_is_shown_in_one_style(pages: dict[tuple[str, ...], str]) -> None:
    bad = {}
    for path, text in pages.items():
        flat = " ".join(text.split())  # a bracket the layout wraps still counts
        found = [m.group(0) for m in BRACKET.finditer(flat) if not CLICK_OWN.search(m.group(1))]
        if found:
            bad[" ".join(path)] = found
    assert not bad, f"defaults written by hand, not as [default: X]: {bad}"


@pytest.mark.parametrize("role", ["server", "guest"])
def test_server_and_guest_name_no_host_only_option(
    pages: dict[tuple[str, ...], str], role: str
) -> None:
    text = pages[("vfl", role)]
    assert not [flag for flag in HOST_ONLY if flag in text]
    assert "Host only" not in text


def test_host_keeps_its_own_options(pages: dict[tuple[str, ...], str]) -> None:
    text = " ".join(pages[("vfl", "host")].split())
    assert all(flag in text for flag in HOST_ONLY)
    assert "label draw" in text


@pytest.mark.parametrize("role", ["client", "shuffler"])
def test_hfl_roles_without_a_bar_list_no_progress_option(
    pages: dict[tuple[str, ...], str], role: str
) -> None:
    text = pages[("hfl", role)]
    assert "aggregator" not in text.split("Options:")[1]
    assert "--no-progress" not in text
    assert "--no-progress" in pages[("hfl", "aggregator")]


def test_no_page_without_a_host_speaks_of_its_label_draw(
    pages: dict[tuple[str, ...], str],
) -> None:
    speaking = [" ".join(p) for p, text in pages.items() if "label draw" in " ".join(text.split())]
    assert sorted(speaking) == ["vfl host", "vfl run-local"]


def test_group_summaries_are_not_cut(pages: dict[tuple[str, ...], str]) -> None:
    cut = {}
    for path, text in pages.items():
        if "Commands:" in text:
            rows = text.split("Commands:")[1].splitlines()
            cut.update({f"{' '.join(path)}: {r.strip()}": 1 for r in rows if "..." in r})
    assert not cut, list(cut)


def test_no_progress_is_still_accepted_by_every_role() -> None:
    # runs/launcher.py starts every role with --no-progress: the unlisted flag still parses.
    for role in ("client", "shuffler"):
        command = main.get_command(click.Context(main), "hfl")
        assert isinstance(command, click.Group)
        sub = command.get_command(click.Context(command), role)
        assert sub is not None
        assert any("--no-progress" in p.opts for p in sub.params)


def test_a_shown_default_is_the_configs(pages: dict[tuple[str, ...], str]) -> None:
    from privfl.cli.optable import default_of
    from privfl.config.horizontal import HflConfig
    from privfl.config.vertical import TrainingConfig

    rounds = default_of(HflConfig, "rounds")
    epochs = default_of(TrainingConfig, "epochs")
    assert f"Rounds. [default: {rounds};" in " ".join(pages[("hfl", "run-local")].split())
    assert f"Maximum epochs. [default: {epochs};" in " ".join(pages[("vfl", "run-local")].split())


@pytest.mark.parametrize(
    ("text", "by_hand"),
    [
        ("Rounds. [10]", True),
        ("Run directory. [runs/<timestamp>]", True),
        ("[$PRIVFL_POLICY, else none]", True),
        ("Rounds. [default: 10; x>=1]", False),
        ("--engine [pool|ray]  pip install 'privfl[ray]'", False),
        ("Usage: privfl board [OPTIONS] [RUN_DIRS]...", False),
        ("--job PATH  The job file.  [required]", False),
    ],
)
def test_the_style_check_tells_a_hand_written_default(text: str, by_hand: bool) -> None:
    found = [m for m in BRACKET.finditer(text) if not CLICK_OWN.search(m.group(1))]
    assert bool(found) is by_hand
