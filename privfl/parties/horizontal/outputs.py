"""Run-directory outputs of the horizontal mode: metrics.jsonl, summary.json, plot, checkpoint."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from privfl.config.horizontal import HflConfig, config_dict
from privfl.learning.plotting import fit_unit_axis, integer_ticks
from privfl.parties.files import (
    append_jsonl,
    open_private,
    private_dir,
    save_figure,
    write_json,
)
from privfl.parties.horizontal.ledger import PrivacyLedger


@dataclass
class Recorder:
    """Collects per-round records and writes them where `privfl vfl` writes its own."""

    config: HflConfig
    out: Path | None
    started: float = field(default_factory=time.monotonic)
    history: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.out is not None:
            private_dir(self.out)
            (self.out / "metrics.jsonl").unlink(missing_ok=True)

    def round(self, record: dict[str, Any], weights: torch.Tensor, ledger: PrivacyLedger) -> None:
        self.history.append(record)
        if self.out is None:
            return
        append_jsonl(self.out / "metrics.jsonl", record)
        with open_private(self.out / "checkpoint.pt", "wb") as handle:
            torch.save(
                {"round": record["round"], "weights": weights.cpu(), "ledger": ledger.state()},
                handle,
            )

    def summary(
        self, ledger: PrivacyLedger, stop_reason: str, extra: dict[str, Any]
    ) -> dict[str, Any]:
        last = self.history[-1] if self.history else {"accuracy": None, "loss": None}
        summary: dict[str, Any] = {
            "mode": "horizontal",
            "dataset": self.config.dataset,
            "mechanism": self.config.mechanism,
            "clients": self.config.clients,
            "rounds": len(self.history),
            "accuracy": last["accuracy"],
            "loss": last["loss"],
            "accuracy_history": [r["accuracy"] for r in self.history],
            "loss_history": [r["loss"] for r in self.history],
            "reports_history": [r["reports"] for r in self.history],
            "refused_history": [r.get("refused_reports", 0) for r in self.history],
            "stop_reason": stop_reason,
            "wall_seconds": round(time.monotonic() - self.started, 3),
            **ledger.snapshot(),
            "ledger": ledger.lines(),
            "config": config_dict(self.config),
            **extra,
        }
        if self.out is not None:
            write_json(self.out / "summary.json", summary)
            plot(self.history, self.out / "training.png", self.config.mechanism)
        return summary


def plot(history: list[dict[str, Any]], path: Path, title: str) -> None:
    """Test accuracy and loss per round."""
    if not history:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = [r["round"] for r in history]
    accuracy = [r["accuracy"] for r in history]
    fig, acc_ax = plt.subplots(figsize=(6, 3.5))
    acc_ax.plot(rounds, accuracy, "o-", color="tab:blue", label="test accuracy (left)")
    acc_ax.set_xlabel("round")
    acc_ax.set_ylabel("test accuracy")
    fit_unit_axis(acc_ax, accuracy)
    integer_ticks(acc_ax)
    loss_ax = acc_ax.twinx()
    loss_ax.plot(
        rounds, [r["loss"] for r in history], "s--", color="tab:red", label="test loss (right)"
    )
    loss_ax.set_ylabel("test cross-entropy")
    # Two y axes: one legend names both curves and says which axis each reads on.
    lines = acc_ax.get_lines() + loss_ax.get_lines()
    acc_ax.legend(lines, [str(line.get_label()) for line in lines], loc="center right")
    acc_ax.set_title(f"horizontal FL, mechanism {title}")
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


def read_summary(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return data
