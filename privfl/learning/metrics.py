"""Evaluation at the Host: classification metrics per epoch and the training plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def binary_metrics(labels: np.ndarray, probabilities: np.ndarray) -> dict[str, float]:
    """Accuracy, precision, recall, F1 (threshold ½) and AUC of predicted probabilities."""
    from sklearn.metrics import (  # the Host's evaluation only: other roles never load sklearn
        accuracy_score,
        f1_score,
        precision_score,
        recall_score,
        roc_auc_score,
    )

    predicted = (probabilities >= 0.5).astype(np.int64)
    auc = float("nan") if len(set(labels.tolist())) < 2 else roc_auc_score(labels, probabilities)
    return {
        "accuracy": float(accuracy_score(labels, predicted)),
        "precision": float(precision_score(labels, predicted, zero_division=0)),
        "recall": float(recall_score(labels, predicted, zero_division=0)),
        "f1": float(f1_score(labels, predicted, zero_division=0)),
        "auc": float(auc),
    }


def plot_history(records: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    """Loss and accuracy per epoch, as in seed 004's figures (joint and bottom models)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [r["epoch"] + 1 for r in records]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(epochs, [r["loss"] for r in records], marker="o", ms=3, label="Taylor loss")
    left.set_xlabel("epoch")
    left.set_ylabel("Taylor loss at epoch start (flipped labels)")
    left.legend()
    right.plot(epochs, [r["accuracy"] for r in records], marker="o", ms=3, label="joint model")
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
    fig.savefig(path, dpi=110)
    plt.close(fig)
