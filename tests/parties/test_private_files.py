"""Run directories are 0700 and every file in them 0600, whatever the umask.

A run holds the Host's label draw, checkpoints with noised labels, metrics, scores
in predictions and logs naming parties and rows: another local user must not read
them. The modes are set explicitly (parties/files.py), so even umask 0 cannot widen them.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import failures, memory_job, run_in_threads

from privfl.parties import label_draws
from privfl.parties.files import append_jsonl, open_private, private_dir, write_json
from privfl.parties.session import setup_logging
from privfl.protocol.memory import InMemoryHub


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The widest umask: files would be 0666 and folders 0777 if modes were left to it."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def modes(root: Path) -> dict[str, int]:
    """Permission bits of every folder and file under ``root``, by relative path."""
    found = {}
    for path in [root, *root.rglob("*")]:
        found[str(path.relative_to(root)) or "."] = stat.S_IMODE(path.stat().st_mode)
    return found


@pytest.mark.usefixtures("open_umask")
def test_a_real_run_directory_is_private(tmp_path: Path) -> None:
    # Prepare: a short run with label DP and flipback (draw, checkpoints, plot, audit…).
    job = memory_job(1, epochs=2, epsilon=1.0, flipback_every=1)
    out = tmp_path / "runs" / "one"

    # Act
    results = run_in_threads(job, InMemoryHub(record=False), out, options={"host": {"plots": True}})

    # Assert
    assert not failures(results), results
    found = modes(out)
    host = out / job.host
    for name in ("summary.json", "model.json", "metrics.jsonl", "training.png", "audit.jsonl"):
        assert (host / name).is_file(), name
    assert (host / label_draws.FILE_NAME).is_file() and (host / "checkpoints").is_dir()
    wrong = {
        path: oct(mode)
        for path, mode in found.items()
        if mode != (0o700 if (out / path).is_dir() else 0o600)
    }
    assert not wrong, wrong
    assert stat.S_IMODE((tmp_path / "runs").stat().st_mode) == 0o700  # made on the way


@pytest.mark.usefixtures("open_umask")
def test_the_party_log_and_files_made_before_are_private(tmp_path: Path) -> None:
    old = tmp_path / "metrics.jsonl"
    old.write_text("")
    old.chmod(0o644)  # left by an older privfl
    root = logging.getLogger()
    handlers = list(root.handlers)
    try:
        log_path = setup_logging(tmp_path / "party", "host")
        logging.getLogger("privfl.test").warning("a line")
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
            if handler not in handlers:
                handler.close()
        for handler in handlers:
            root.addHandler(handler)

    append_jsonl(old, {"epoch": 0})
    write_json(tmp_path / "deep" / "er" / "x.json", {})
    with open_private(tmp_path / "plot.png", "wb") as handle:
        handle.write(b"png")

    assert "a line" in log_path.read_text()
    for path in (log_path, old, tmp_path / "deep" / "er" / "x.json", tmp_path / "plot.png"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for folder in (tmp_path / "party", tmp_path / "deep", tmp_path / "deep" / "er"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert private_dir(tmp_path) == tmp_path  # a folder that exists is left as it is
