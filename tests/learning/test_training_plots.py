"""The training plots say what was run: the loss by its name, whole epochs, fitted axes."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import matplotlib.pyplot as plt
import pytest

from privfl.config.vertical import JobConfig
from privfl.learning.metrics import history_figure
from privfl.parties.vertical.host import plot_options
from privfl.runs.kits import demo_job

REFERENCE = {"name": "sklearn LogisticRegression", "metric": "accuracy", "value": 0.958}


def records(epochs: int, kind: str = "logistic") -> list[dict[str, Any]]:
    """Epoch records as the Host writes them, accuracy rising from 0.87 to 0.93."""
    out = []
    for e in range(epochs):
        r = {"epoch": e, "loss": 0.6 - 0.05 * e, "accuracy": 0.87 + 0.03 * e}
        if kind == "logistic":
            r.update(bottom_host_accuracy=0.9, bottom_guests_accuracy=0.88)
        out.append(r)
    return out


def figure(job: JobConfig, epochs: int, references: list[dict[str, Any]]) -> Any:
    options = plot_options(job)
    return history_figure(records(epochs, job.model.kind), references=references,
                          **options)  # fmt: skip


def multiclass_job(guests: int, epsilon: float = 8.0) -> JobConfig:
    job = demo_job(guests=guests, dataset="wine", label_epsilon=epsilon)
    return replace(job, model=replace(job.model, kind="multiclass", classes=3))


def test_three_epochs_have_whole_number_ticks() -> None:
    fig = figure(demo_job(), 3, [])
    try:
        for ax in fig.axes:
            shown = [t for t in ax.get_xticks() if 1 <= t <= 3]
            assert shown == [1.0, 2.0, 3.0], ax.get_xticks()
    finally:
        plt.close(fig)


@pytest.mark.parametrize(
    ("guests", "loss"),
    [(1, "cross-entropy (separable-sigmoid fit)"), (2, "Taylor loss")],
)
def test_the_loss_axis_names_the_residual_the_run_used(guests: int, loss: str) -> None:
    fig = figure(multiclass_job(guests), 3, [])
    try:
        label = fig.axes[0].get_ylabel()
        assert label.startswith(loss) and "as noised" in label
        other = "Taylor" if guests == 1 else "separable"
        assert other not in label
    finally:
        plt.close(fig)


def test_label_dp_off_does_not_say_noised() -> None:
    fig = figure(demo_job(label_epsilon=math.inf), 3, [])
    try:
        assert "as noised" not in fig.axes[0].get_ylabel()
        assert "no label DP" in fig.axes[0].get_ylabel()
    finally:
        plt.close(fig)


def test_accuracy_axis_fits_the_data_and_shows_the_reference() -> None:
    fig = figure(demo_job(), 3, [REFERENCE])
    try:
        ax = fig.axes[1]
        low, high = ax.get_ylim()
        assert 0.8 < low < 0.87 and 0.958 < high < 1.03, (low, high)
        dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
        assert any(list(line.get_ydata()) == [0.958, 0.958] for line in dashed)
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "sklearn LogisticRegression (centralised)" in legend
    finally:
        plt.close(fig)
