"""Real vertical runs that several attack modules read, made once per test session.

Under xdist a session fixture is made once per worker that asks for it: every test
that reads these runs is put in one group (``--dist loadgroup``), so one worker makes
them and the other never waits on a second pair.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from processes import WEAK, privfl

LABEL_EPSILON = 1.0  # the label ε of these runs (test_label_inference.py bounds against it)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "vertical_runs" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("vertical_runs"))


@pytest.fixture(scope="session")
def vertical_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two finished ``run-local`` sessions (Server, Host, one guest; 512-bit test keys).

    One epoch each, label ε = 1: their audit logs, label draws and kits are read, never
    written (tests tamper with copies). Run b decrypts with ``--workers 1``: its parties
    stop sooner after training, the timing that once left the last audit heads unread.
    """
    made = []
    for name, workers in (("a", ()), ("b", ("--workers", "1"))):
        out = tmp_path_factory.mktemp("runs") / name
        result = privfl(
            "vfl", "run-local", *WEAK, "--epochs", "1", "--label-epsilon", str(LABEL_EPSILON),
            "--out", str(out), "--no-progress", *workers, timeout=300,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        made.append(out)
    return made[0], made[1]
