"""A new user's job-file mistakes, in both modes: each is one line naming the key, no traceback."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from click.testing import CliRunner

from privfl.cli import main
from privfl.config.horizontal import HflConfig
from privfl.config.horizontal import to_dict as hfl_dict
from privfl.config.vertical import ModelConfig, to_dict
from privfl.runs.kits import demo_job, local_hfl_job

Edit = Callable[[dict[str, Any]], None]


def vertical(kind: str) -> dict[str, Any]:
    job = demo_job(key_bits=512, allow_weak_keys=True)
    model = ModelConfig(kind=kind, classes=3 if kind == "multiclass" else 0)
    return to_dict(replace(job, model=model))


def horizontal() -> dict[str, Any]:
    return hfl_dict(local_hfl_job(HflConfig(rounds=2)))


def set_(path: str, value: Any) -> Edit:
    """Set ``a.b.c`` to ``value``."""

    def edit(data: dict[str, Any]) -> None:
        *tables, key = path.split(".")
        for table in tables:
            data = data.setdefault(table, {})
        data[key] = value

    return edit


def drop(path: str) -> Edit:
    """Remove ``a.b.c``."""

    def edit(data: dict[str, Any]) -> None:
        *tables, key = path.split(".")
        for table in tables:
            data = data[table]
        del data[key]

    return edit


def rename(path: str, new: str) -> Edit:
    """Rename the last part of ``a.b`` to ``new`` (a typo), keeping its value."""

    def edit(data: dict[str, Any]) -> None:
        *tables, key = path.split(".")
        for table in tables:
            data = data[table]
        data[new] = data.pop(key)

    return edit


# (mode, model kind, the mistake, what the one line must name)
MISTAKES: list[tuple[str, str, Edit, tuple[str, ...]]] = [
    ("vfl", "logistic", rename("training.epochs", "epoch"), ("training.epoch", "training.epochs")),
    ("vfl", "logistic", set_("training.epochs", "30"), ("training.epochs", "an integer")),
    (
        "vfl",
        "logistic",
        set_("training.learning_rate", "fast"),
        ("training.learning_rate", "number"),
    ),
    (
        "vfl",
        "logistic",
        set_("training.allow_small_batches", 1),
        ("allow_small_batches", "true or false"),
    ),
    ("vfl", "logistic", rename("training", "trainng"), ("trainng", "did you mean training")),
    ("vfl", "logistic", rename("label_dp", "labeldp"), ("labeldp", "label_dp")),
    ("vfl", "logistic", set_("colour", "blue"), ("colour",)),
    ("vfl", "logistic", rename("key_bits", "keybits"), ("keybits", "key_bits")),
    ("vfl", "logistic", set_("key_bits", 512.5), ("key_bits", "an integer")),
    ("vfl", "logistic", set_("timeout_seconds", "60s"), ("timeout_seconds", "number")),
    ("vfl", "logistic", drop("session"), ("session", "missing")),
    ("vfl", "logistic", drop("parties"), ("[parties]", "missing")),
    ("vfl", "logistic", drop("parties.host.endpoint"), ("parties.host.endpoint", "missing")),
    ("vfl", "logistic", set_("parties.host.columns", [0, "1"]), ("parties.host.columns[1]",)),
    ("vfl", "logistic", set_("parties.host.colums", [0]), ("parties.host.colums", "columns")),
    ("vfl", "logistic", set_("parties", 3), ("parties", "table")),
    ("vfl", "logistic", set_("label_dp.epsilon", "eight"), ("label_dp.epsilon", "number")),
    ("vfl", "logistic", set_("data.dataset", 3), ("data.dataset", "a string")),
    ("vfl", "logistic", set_("data.spilt_seed", 3), ("data.spilt_seed", "data.split_seed")),
    ("vfl", "secureboost", rename("model.trees", "tree"), ("model.tree", "model.trees")),
    ("vfl", "secureboost", set_("model.depth", "3"), ("model.depth", "an integer")),
    ("vfl", "secureboost", set_("model.learning_rate", True), ("model.learning_rate", "number")),
    ("vfl", "secureboost", set_("model", "secureboost"), ("model", "table")),
    ("vfl", "multiclass", rename("model.classes", "class"), ("model.class", "model.classes")),
    ("vfl", "multiclass", set_("model.sigmoid", 1), ("model.sigmoid", "a string")),
    ("hfl", "", rename("hfl.rounds", "round"), ("hfl.round", "hfl.rounds")),
    ("hfl", "", set_("hfl.epsilon", "one"), ("hfl.epsilon", "number")),
    ("hfl", "", set_("hfl.shuffler", "yes"), ("hfl.shuffler", "true or false")),
    ("hfl", "", rename("hfl", "fl"), ("fl", "did you mean hfl")),
    ("hfl", "", drop("session"), ("session", "missing")),
    ("hfl", "", drop("parties.aggregator.role"), ("parties.aggregator.role", "missing")),
    ("hfl", "", set_("parties.aggregator.num_client", 2), ("num_client", "num_clients")),
]


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(tomli_w.dumps(data))
    return path


@pytest.mark.parametrize(
    ("mode", "kind", "edit", "names"), MISTAKES, ids=[f"{m[0]}-{m[3][0]}" for m in MISTAKES]
)
def test_each_mistake_is_one_line_naming_the_key(
    tmp_path: Path, mode: str, kind: str, edit: Edit, names: tuple[str, ...]
) -> None:
    # Prepare: a job file that loads, then the user's mistake.
    data = copy.deepcopy(vertical(kind) if mode == "vfl" else horizontal())
    edit(data)
    job = write(tmp_path, data)
    role, party = ("server", "server") if mode == "vfl" else ("aggregator", "aggregator")

    # Act: the first thing a party command does is read the job file.
    result = CliRunner().invoke(main, [mode, role, "--job", str(job), "--party", party])

    # Assert
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("privfl: error: job file ") and str(job) in lines[0]
    for name in names:
        assert name in lines[0], lines[0]


def test_the_list_covers_both_modes_and_several_kinds() -> None:
    assert len(MISTAKES) >= 20
    assert {m[0] for m in MISTAKES} == {"vfl", "hfl"}
    assert {m[1] for m in MISTAKES if m[0] == "vfl"} >= {"logistic", "secureboost", "multiclass"}


@pytest.mark.parametrize("kind", ["logistic", "secureboost", "multiclass"])
def test_an_unedited_job_loads(tmp_path: Path, kind: str) -> None:
    """The control arm: without the mistake the same command gets past the job file."""
    job = write(tmp_path, vertical(kind))
    result = CliRunner().invoke(main, ["vfl", "server", "--job", str(job), "--party", "nobody"])
    assert "no party named 'nobody'" in result.stderr, result.stderr
