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
    from privfl.cli.conformance import ROLES
    from privfl.tools.conformance.runner import SCRIPTS

    assert sorted(ROLES) == sorted(SCRIPTS)
    ctx = main.make_context("privfl", ["--help"], resilient_parsing=True)
    for name in COMMANDS:
        assert main.get_command(ctx, name) is not None, name
