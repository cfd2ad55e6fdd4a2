"""parties/label_draws.py: one draw per job, exact on reload, bound to its job and rows."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import memory_job, party_data

from privfl.config.vertical import JobConfig, ModelConfig
from privfl.errors import ConfigError
from privfl.parties.label_draws import FILE_NAME, check_agreement, load_or_draw
from privfl.parties.vertical import host_steps


def linear_job(epsilon: float = 1.0) -> JobConfig:
    model = ModelConfig(kind="linear", label_low=25.0, label_high=346.0)
    return memory_job(1, epsilon=epsilon, dataset="diabetes", model=model)


@pytest.mark.parametrize("kind", ["linear", "multiclass"])
def test_every_start_gets_the_first_draw_exactly(tmp_path: Path, kind: str) -> None:
    # Prepare: Laplace labels (floats) or k-ary randomized response, drawn by the Host's code.
    job = (
        linear_job()
        if kind == "linear"
        else memory_job(1, epsilon=1.0, dataset="digits", model=ModelConfig("multiclass", 10))
    )
    data = party_data(job)[job.host]
    rows = len(data.x_train)

    def draw() -> tuple[np.ndarray, dict[str, Any]]:
        return host_steps.draw_labels(data, job)

    # Act
    first = load_or_draw(tmp_path, job.fingerprint(), 1.0, draw, rows=rows)
    again = load_or_draw(tmp_path, job.fingerprint(), 1.0, draw, rows=rows)

    # Assert: bit for bit, with its report; a fresh draw would differ.
    assert not first.reused and again.reused
    assert np.array_equal(first.labels, again.labels) and first.labels.dtype == again.labels.dtype
    assert again.info == first.info and again.draws == 1 and again.epsilon == 1.0
    assert not np.array_equal(draw()[0], first.labels)
    assert (tmp_path / FILE_NAME).stat().st_mode & 0o777 == 0o600


def test_a_redraw_is_booked_and_a_forced_restart_refused(tmp_path: Path) -> None:
    job = linear_job()
    data = party_data(job)[job.host]
    rows = len(data.x_train)

    def draw() -> tuple[np.ndarray, dict[str, Any]]:
        return host_steps.draw_labels(data, job)

    load_or_draw(tmp_path, job.fingerprint(), 1.0, draw, rows=rows)
    second = load_or_draw(tmp_path, job.fingerprint(), 1.0, draw, rows=rows, redraw=True)
    kept = load_or_draw(tmp_path, job.fingerprint(), 1.0, draw, rows=rows)

    assert second.epsilons == (1.0, 1.0) and kept.epsilon == 2.0 and kept.draws == 2
    assert np.array_equal(second.labels, kept.labels)
    with pytest.raises(ConfigError, match="--redraw-labels"):
        check_agreement(kept, resume=True, completed=0)
    check_agreement(kept, resume=True, completed=3)  # a common checkpoint: fine
    check_agreement(kept, resume=False, completed=0)  # the operator starts over: fine
    check_agreement(second, resume=True, completed=0)  # drawn by this start: nothing reused


def test_a_draw_of_another_job_or_other_rows_is_refused(tmp_path: Path) -> None:
    job = linear_job()
    data = party_data(job)[job.host]
    rows = len(data.x_train)
    load_or_draw(
        tmp_path, job.fingerprint(), 1.0, lambda: host_steps.draw_labels(data, job), rows=rows
    )

    with pytest.raises(ConfigError, match="another job"):
        load_or_draw(tmp_path, "0" * 64, 1.0, lambda: host_steps.draw_labels(data, job), rows=rows)
    with pytest.raises(ConfigError, match="other rows"):
        load_or_draw(tmp_path, job.fingerprint(), 1.0, lambda: (np.zeros(3), {}), rows=rows - 1)


def test_a_start_that_replaces_the_run_replaces_another_jobs_draw(tmp_path: Path) -> None:
    job = linear_job()
    data = party_data(job)[job.host]
    rows = len(data.x_train)
    load_or_draw(tmp_path, "0" * 64, 1.0, lambda: host_steps.draw_labels(data, job), rows=rows)

    drawn = load_or_draw(
        tmp_path,
        job.fingerprint(),
        1.0,
        lambda: host_steps.draw_labels(data, job),
        rows=rows,
        replace_other_job=True,
    )
    again = load_or_draw(
        tmp_path, job.fingerprint(), 1.0, lambda: host_steps.draw_labels(data, job), rows=rows
    )

    assert not drawn.reused and drawn.epsilons == (1.0,)
    assert again.reused and np.array_equal(again.labels, drawn.labels)


def test_without_label_dp_nothing_is_saved(tmp_path: Path) -> None:
    job = linear_job(math.inf)
    data = party_data(job)[job.host]

    drawn = load_or_draw(
        tmp_path,
        job.fingerprint(),
        math.inf,
        lambda: host_steps.draw_labels(data, job),
        rows=len(data.x_train),
    )

    assert not (tmp_path / FILE_NAME).exists()
    assert data.y_train is not None and np.array_equal(drawn.labels, data.y_train)
