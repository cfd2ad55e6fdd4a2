"""A vertical party whose clock starts when the test says go, not when its interpreter does.

Tests only: ``python tests/e2e/gated.py GATE vfl ROLE --job ... --party NAME ...``. The
interpreter first loads what a vertical party's start needs (seconds of CPU on a loaded
machine: its modules, the demo table), then writes ``GATE/NAME.ready`` and waits for
``GATE/go``; only then does it run the command. A test whose job has a short
``timeout_seconds`` starts every party this way: a first contact waits at most that
long for a peer, and three interpreters starting on a loaded machine can be further
apart than that.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

POLL_SECONDS = 0.05


def wait_for_go(gate: Path, args: list[str]) -> None:
    """Load what the party's start needs (its modules and, but for the Server, its share of
    the demo table), say ready, and block until the test writes ``go``."""
    from privfl.config.vertical import load_job
    from privfl.parties.vertical import guest, host, server  # noqa: F401  (imported for speed)
    from privfl.parties.vertical.runner import load_data

    job = load_job(Path(args[args.index("--job") + 1]))
    name = args[args.index("--party") + 1]
    if job.party(name).role != "server":
        load_data(job, name, None, None)
    (gate / f"{name}.ready").touch()
    while not (gate / "go").exists():
        time.sleep(POLL_SECONDS)


def run(argv: list[str]) -> None:
    """``argv``: GATE, then the ``privfl`` arguments (with ``--party NAME``)."""
    from privfl.cli import main

    gate, args = Path(argv[0]), argv[1:]
    wait_for_go(gate, args)
    sys.argv = ["privfl", *args]
    main()


def open_gate(
    gate: Path, procs: Mapping[str, subprocess.Popen[bytes]], timeout: float = 300
) -> None:
    """Wait until every party of ``procs`` is ready, then let them all go at once."""
    deadline = time.monotonic() + timeout
    while not all((gate / f"{name}.ready").exists() for name in procs):
        exited = {name: p.returncode for name, p in procs.items() if p.poll() is not None}
        assert not exited, f"exited before they were ready: {exited}"
        assert time.monotonic() < deadline, f"not all ready in {timeout} s: {sorted(procs)}"
        time.sleep(POLL_SECONDS)
    (gate / "go").touch()


if __name__ == "__main__":
    run(sys.argv[1:])
