"""Party processes started by tests; tests/conftest.py stops and reaps them after each test."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

STARTED: list[subprocess.Popen[bytes]] = []
WEAK = ["--key-bits", "512", "--allow-weak-keys"]  # test-sized keys, behind their explicit flag


def _env(extra: Mapping[str, str] | None) -> dict[str, str] | None:
    return {**os.environ, **extra} if extra else None


def privfl(
    *args: str, timeout: float = 120, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the privfl CLI in a fresh interpreter (``env``: extra variables), capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "privfl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(env),
    )


def privfl_here(*args: str) -> subprocess.CompletedProcess[str]:
    """``privfl ARGS`` in this process (click's runner), as :func:`privfl` reports it: for
    the kit a test starts from, where the kit command is not what it checks (no
    interpreter to start, no modules to load again)."""
    from click.testing import CliRunner

    from privfl.cli import main

    result = CliRunner().invoke(main, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # what a fresh interpreter would print as a traceback
    return subprocess.CompletedProcess(
        ["privfl", *args], result.exit_code, result.stdout, result.stderr
    )


def spawn(*args: str, log: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``privfl ARGS`` in the background; its output goes to ``log``."""
    with log.open("wb") as handle:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(
            [sys.executable, "-m", "privfl", *args], stdout=handle, stderr=handle, env=_env(env)
        )
    STARTED.append(process)
    return process


ONE_GUEST = (("server", "server"), ("host", "host"), ("guest", "guest-1"))


def spawn_parties(
    job: Path,
    runs: Path,
    log_of: Callable[[str], Path],
    extra: Mapping[str, Sequence[str]] | None = None,
    roles: Sequence[tuple[str, str]] = ONE_GUEST,
) -> dict[str, subprocess.Popen[bytes]]:
    """Start ``privfl vfl ROLE`` for every party of a job, each into ``runs/NAME``."""
    extra = extra or {}
    return {
        name: spawn(
            "vfl", role, "--job", str(job), "--party", name, "--out", str(runs / name),
            "--no-progress", *extra.get(name, ()), log=log_of(name),
        )
        for role, name in roles
    }  # fmt: skip


def spawn_predict(
    job: Path,
    party: str,
    out: Path,
    *,
    log: Path,
    model: Path | None = None,
    data: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``privfl vfl predict`` for one party (the Server takes no model and no rows)."""
    inputs = [] if model is None else ["--model", str(model)]
    inputs += [] if data is None else ["--data", str(data)]
    return spawn(
        "vfl", "predict", "--job", str(job), "--party", party, *inputs, "--out", str(out), log=log
    )


def reap() -> None:
    """Kill whatever is still running (a frozen party too) and wait for every process."""
    while STARTED:
        process = STARTED.pop()
        if process.poll() is None:
            process.kill()
        process.wait()
