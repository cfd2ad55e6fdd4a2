"""Evaluation at the Host: each model's metrics per epoch and the training plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np


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


# The metric each kind plots and the runner's tables lead with.
HEADLINE = {
    "logistic": "accuracy",
    "multiclass": "accuracy",
    "linear": "rmse",
    "poisson": "deviance",
}


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


def glm_metrics(kind: str, labels: np.ndarray, prediction: np.ndarray) -> dict[str, Any]:
    """The metrics of one model kind from its prediction (``glm.mean_of``, ``(rows, k)``)."""
    if kind == "logistic":
        return binary_metrics(labels, prediction[:, 0])
    if kind == "multiclass":
        return multiclass_metrics(labels, prediction)
    if kind == "poisson":
        return poisson_metrics(labels, prediction[:, 0])
    return regression_metrics(labels, prediction[:, 0])


def plot_history(
    records: Sequence[dict[str, Any]], path: Path | IO[bytes], title: str, kind: str = "logistic"
) -> None:
    """Loss and the headline metric per epoch, as in seed 004's figures (with the bottom
    models for logistic regression). ``path``: a file name or an open binary file (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [r["epoch"] + 1 for r in records]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    taylor = kind in ("logistic", "multiclass")
    name = "Taylor loss" if taylor else "loss"
    left.plot(epochs, [r["loss"] for r in records], marker="o", ms=3, label=name)
    left.set_xlabel("epoch")
    left.set_ylabel(f"{name} at epoch start (training labels as noised)")
    left.legend()
    metric = HEADLINE.get(kind, "accuracy")
    right.plot(epochs, [r[metric] for r in records], marker="o", ms=3, label="joint model")
    if kind != "logistic":
        right.set_xlabel("epoch")
        right.set_ylabel(f"test {metric}")
        right.legend()
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(path, format="png", dpi=110)
        plt.close(fig)
        return
    right.plot(epochs, [r["bottom_host_accuracy"] for r in records], ls="--", label="host bottom")
    right.plot(
        epochs, [r["bottom_guests_accuracy"] for r in records], ls=":", label="guests bottom"
    )
    right.set_xlabel("epoch")
    right.set_ylabel("test accuracy")
    right.set_ylim(0, 1.02)
    right.legend(loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
