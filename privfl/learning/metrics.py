"""Evaluation at the Host: each model's metrics per epoch and the training plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from privfl.learning.plotting import draw_references, fit_unit_axis, integer_ticks


def binary_metrics(labels: np.ndarray, probabilities: np.ndarray) -> dict[str, float]:
    """Accuracy, precision, recall, F1 (threshold ½) and AUC of predicted probabilities.

    Plain numpy (sklearn's definitions, tests/learning/test_metrics.py): the SecureBoost
    Host computes them after every tree, between one tree's decisions and the next
    tree's gradients, where sklearn's argument checks cost tens of milliseconds.
    """
    y = np.asarray(labels).astype(np.int64) == 1
    predicted = np.asarray(probabilities) >= 0.5
    hits = int(np.sum(y & predicted))
    chosen, positives = int(predicted.sum()), int(y.sum())
    precision = hits / chosen if chosen else 0.0
    recall = hits / positives if positives else 0.0
    both = precision + recall
    return {
        "accuracy": float(np.mean(y == predicted)),
        "precision": float(precision),
        "recall": float(recall),
        "f1": float(2 * precision * recall / both) if both else 0.0,
        "auc": roc_auc(y, np.asarray(probabilities, dtype=np.float64)),
    }


def roc_auc(positive: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve: the Mann–Whitney U with tied scores at their mean rank."""
    count = int(positive.sum())
    if count in (0, len(positive)):
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    ranked = scores[order]
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
    ends = np.r_[starts[1:], len(ranked)]
    ranks = np.empty(len(scores))
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    u = float(ranks[positive].sum()) - count * (count + 1) / 2.0
    return u / (count * (len(positive) - count))


def regression_metrics(labels: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """RMSE, MAE and R² of predicted means."""
    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(predicted, dtype=np.float64)
    error = p - y
    spread = float(np.sum((y - y.mean()) ** 2))
    return {
        "rmse": float(np.sqrt(np.mean(error**2))),
        "mae": float(np.mean(np.abs(error))),
        "r2": float(1.0 - np.sum(error**2) / spread) if spread > 0 else float("nan"),
    }


def poisson_deviance(labels: np.ndarray, rates: np.ndarray) -> float:
    """Mean Poisson deviance ``2·mean(y log(y/μ) − y + μ)`` (sklearn's mean_poisson_deviance)."""
    y = np.asarray(labels, dtype=np.float64)
    mu = np.asarray(rates, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        term = np.where(y > 0, y * np.log(y / mu), 0.0)
    return float(2.0 * np.mean(term - y + mu))


def poisson_metrics(labels: np.ndarray, rates: np.ndarray) -> dict[str, float]:
    """Mean Poisson deviance, and RMSE/MAE/R² of the predicted counts."""
    return {"deviance": poisson_deviance(labels, rates), **regression_metrics(labels, rates)}


def multiclass_metrics(labels: np.ndarray, scores: np.ndarray) -> dict[str, Any]:
    """Accuracy, macro precision/recall/F1 and per class; the class is the top score."""
    from sklearn.metrics import precision_recall_fscore_support

    y = np.asarray(labels).astype(np.int64)
    classes = scores.shape[1]
    predicted = np.argmax(scores, axis=1)
    every = list(range(classes))
    precision, recall, f1, support = precision_recall_fscore_support(
        y, predicted, labels=every, zero_division=0
    )
    return {
        "accuracy": float(np.mean(predicted == y)),
        "precision": float(np.mean(precision)),
        "recall": float(np.mean(recall)),
        "f1": float(np.mean(f1)),
        "per_class": {
            str(c): {
                "precision": float(precision[c]),
                "recall": float(recall[c]),
                "f1": float(f1[c]),
                "support": int(support[c]),
            }
            for c in every
        },
    }


def plot_history(
    records: Sequence[dict[str, Any]],
    path: Path | IO[bytes],
    title: str,
    headline: str = "accuracy",
    *,
    loss_name: str = "Taylor loss",
    noised: bool = True,
    references: Sequence[dict[str, Any]] = (),
) -> None:
    """Loss and the ``headline`` metric per epoch, as in seed 004's figures (with the bottom
    models where the records hold them). ``path``: a file name or an open binary file (PNG).

    ``loss_name`` names the loss the records hold (the kind's ``loss_name``); ``noised``: the
    training labels were noised (a finite label ε); ``references``: centralised models'
    scores (summary.json's ``references``), drawn as dashed lines on the metric panel.
    """
    import matplotlib.pyplot as plt

    fig = history_figure(
        records, title, headline, loss_name=loss_name, noised=noised, references=references
    )
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def history_figure(
    records: Sequence[dict[str, Any]],
    title: str,
    headline: str,
    *,
    loss_name: str,
    noised: bool,
    references: Sequence[dict[str, Any]],
) -> Any:
    """``plot_history``'s figure (a matplotlib Figure), for tests to read its axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [r["epoch"] + 1 for r in records]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(epochs, [r["loss"] for r in records], marker="o", ms=3, label=loss_name)
    labels = "training labels as noised" if noised else "training labels, no label DP"
    left.set_ylabel(f"{loss_name}\nat epoch start, {labels}")
    left.legend()
    metric_panel(right, records, headline, references)
    for ax in (left, right):
        ax.set_xlabel("epoch")
        integer_ticks(ax)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def metric_panel(
    ax: Any, records: Sequence[dict[str, Any]], metric: str, references: Sequence[dict[str, Any]]
) -> None:
    """The headline test metric per epoch (with the bottom models where the records hold
    them: logistic regression's) and the references."""
    epochs = [r["epoch"] + 1 for r in records]
    series = [[r[metric] for r in records]]
    ax.plot(epochs, series[0], marker="o", ms=3, label="joint model")
    if records and BOTTOM_KEYS[0] in records[0]:
        for key, style, label in (
            ("bottom_host_accuracy", "--", "host bottom"),
            ("bottom_guests_accuracy", ":", "guests bottom"),
        ):
            series.append([r[key] for r in records])
            ax.plot(epochs, series[-1], ls=style, label=label)
    series.append(draw_references(ax, references, metric))
    ax.set_ylabel(f"test {metric}")
    if metric in UNIT_METRICS:
        fit_unit_axis(ax, [v for s in series for v in s])
    ax.legend(loc="best")


BOTTOM_KEYS = ("bottom_host_accuracy", "bottom_guests_accuracy")
"""The bottom models' accuracies, in the records of a kind that reports them."""
# Scores that live in 0..1, whose axis is fitted to the data rather than drawn 0..1.
UNIT_METRICS = ("accuracy", "auc", "f1")
