"""A party process loads only what its role needs: the CLI's start-up imports, by module."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("matplotlib", "sklearn", "pandas", "scipy", "torch", "opendp", "tqdm")


def loaded_after(code: str) -> list[str]:
    """The heavy libraries a fresh interpreter holds after running ``code``."""
    report = f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    probe = f"{code}\nimport json, sys\n{report}"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return list(json.loads(result.stdout.splitlines()[-1]))


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["vfl", "guest", "--help"],
        ["vfl", "server", "--help"],
        ["hfl", "client", "--help"],
        ["init", "vfl", "--help"],
        ["keys", "gen", "--help"],
    ],
)
def test_help_loads_no_heavy_library(argv: list[str]) -> None:
    code = f"from privfl.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
    assert loaded_after(code) == []


@pytest.mark.parametrize(
    ("module", "allowed"),
    [
        ("privfl.parties.vertical.guest", []),
        ("privfl.parties.vertical.server", []),
        ("privfl.parties.vertical.runner", ["tqdm"]),  # the Host's and Guest's progress bars
        ("privfl.parties.horizontal.shuffler", []),
    ],
)
def test_a_vertical_party_process_does_not_load_plotting_or_torch(
    module: str, allowed: list[str]
) -> None:
    assert loaded_after(f"import {module}") == allowed


def test_every_top_level_command_resolves() -> None:
    from privfl.cli import COMMANDS, main
    from privfl.cli.conformance import ENDINGS, ROLES, SESSIONS
    from privfl.models.registry import KINDS
    from privfl.tools.conformance import runner

    # Every script is keyed "<role>" (training) or "predict:<role>" (prediction).
    scripted = {key for kind in KINDS.values() for key in kind.conformance}
    keys = {runner.script_key(role, session) for role in ROLES for session in SESSIONS}
    assert scripted == keys and SESSIONS == runner.SESSIONS and ROLES == runner.ROLES
    assert ENDINGS == runner.BOOST_GUEST_ENDINGS
    ctx = main.make_context("privfl", ["--help"], resilient_parsing=True)
    for name in COMMANDS:
        assert main.get_command(ctx, name) is not None, name


def test_every_command_reports_errors_in_one_line() -> None:
    """Each leaf command is wrapped in friendly_errors (or reports through one inside)."""
    import click

    from privfl.cli import main

    def leaves(group: click.Group, ctx: click.Context, path: str) -> list[tuple[str, object]]:
        found = []
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None
            if isinstance(command, click.Group):
                found += leaves(command, ctx, f"{path} {name}")
            else:
                found.append((f"{path} {name}", command.callback))
        return found

    ctx = main.make_context("privfl", ["--help"], resilient_parsing=True)
    commands = leaves(main, ctx, "privfl")
    assert len(commands) >= 15
    unwrapped = [path for path, callback in commands if not getattr(callback, "friendly_errors", 0)]
    assert unwrapped == []
