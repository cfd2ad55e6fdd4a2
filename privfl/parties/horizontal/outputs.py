"""Run-directory outputs of the horizontal mode: metrics.jsonl, summary.json, plot, checkpoint."""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from privfl.config.horizontal import HflConfig, config_dict
from privfl.learning.plotting import integer_ticks
from privfl.parties.files import (
    append_jsonl,
    open_private,
    private_dir,
    save_figure,
    write_json,
)
from privfl.parties.horizontal.ledger import PrivacyLedger

log = logging.getLogger("privfl.parties.horizontal.outputs")
NEAR_CHANCE = 0.1  # a final accuracy within this (absolute) of chance has learned nothing


def chance_level(labels: np.ndarray) -> float:
    """Accuracy of always answering the test split's most common class."""
    counts = np.bincount(np.asarray(labels, dtype=np.int64))
    return float(counts.max() / max(counts.sum(), 1))


def near_chance_warning(accuracy: float | None, chance: float, config: HflConfig) -> str:
    """One line saying the run learned nothing, and what to change; "" when it learned."""
    if accuracy is None or accuracy > chance + NEAR_CHANCE:
        return ""
    per_round = max(1, round(config.fraction * config.clients))
    noiseless = config.mechanism == "none" and config.local_dp == "none" and not config.ddp_noise
    if noiseless:  # no privacy noise to blame: the data, the settings or a deviating client
        return (
            f"accuracy {accuracy:.3f} is near chance ({chance:.3f}) with no privacy noise: "
            "check the data and --lr, and the aggregator's log for refused reports (a "
            "deviating client); a robust --aggregation (trimmed-mean, median) limits one"
        )
    return (
        f"accuracy {accuracy:.3f} is near chance ({chance:.3f}): the privacy noise drowns "
        f"the updates of {per_round} client(s) per round. To learn, ask more clients per round "
        "(--clients, --fraction), raise ε (--epsilon, or lower --local-noise; costs privacy) "
        "or run more rounds (--rounds; each costs ε)"
    )


def privacy_title(config: HflConfig, snapshot: dict[str, Any]) -> str:
    """The ε a run booked, for the plot's title and the console."""
    parts = []
    if config.mechanism != "none":
        parts.append(f"{config.mechanism}, ε = {_eps(snapshot['epsilon_total'])} per client")
    if config.local_dp != "none":
        parts.append(
            f"{config.local_dp}, ε = {_eps(snapshot['epsilon_local_sample_level'])} per row"
        )
    if config.secure_aggregation and "epsilon_distributed" in snapshot:
        booked = float(snapshot.get("delta_distributed", config.delta))
        at = f" at δ = {booked:.3g} (the job's plus the sampler's)" if booked > config.delta else ""
        parts.append(
            f"secure aggregation, Skellam z = {config.ddp_noise:g}, central ε = "
            f"{_eps(snapshot['epsilon_distributed'])} per client{at}"
        )
    if not parts:
        return "no privacy (ε = ∞)"
    return "; ".join(parts) + f" (δ = {config.delta:g})"


def _eps(value: float | str) -> str:
    number = float(value)
    return "∞" if math.isinf(number) else f"{number:.3g}"


@dataclass
class Recorder:
    """Collects per-round records and writes them where `privfl vfl` writes its own."""

    config: HflConfig
    out: Path | None
    chance: float = 0.0  # accuracy of always answering the most common test class
    started: float = field(default_factory=time.monotonic)
    history: list[dict[str, Any]] = field(default_factory=list)
    plots: bool = True  # False: no training.png (metrics.jsonl and summary.json hold its numbers)

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
        warning = near_chance_warning(last["accuracy"], self.chance, self.config)
        if warning:
            log.warning("%s", warning)
        snapshot = ledger.snapshot()
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
            "chance_accuracy": self.chance,
            "warning": warning,
            "privacy": privacy_title(self.config, {**snapshot, **extra}),
            **snapshot,
            "ledger": ledger.lines(),
            "config": config_dict(self.config),
            **extra,
        }
        if self.out is not None:
            write_json(self.out / "summary.json", summary)
            if self.plots:
                plot(self.history, self.out / "training.png", summary["privacy"], self.chance)
        return summary


def plot(history: list[dict[str, Any]], path: Path, title: str, chance: float = 0.0) -> None:
    """Test accuracy (on a fixed 0–1 axis, with the chance level) and loss per round."""
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
    # fixed 0–1: a fitted axis made a run falling towards chance look like a flat line
    acc_ax.set_ylim(0.0, 1.0)
    if chance > 0:
        acc_ax.axhline(chance, ls=":", lw=1, color="tab:gray", label=f"chance ({chance:.2f})")
    integer_ticks(acc_ax)
    loss_ax = acc_ax.twinx()
    loss_ax.plot(
        rounds, [r["loss"] for r in history], "s--", color="tab:red", label="test loss (right)"
    )
    loss_ax.set_ylabel("test cross-entropy")
    # Two y axes: one legend names both curves and says which axis each reads on.
    lines = acc_ax.get_lines() + loss_ax.get_lines()
    acc_ax.legend(lines, [str(line.get_label()) for line in lines], loc="center right")
    acc_ax.set_title(f"horizontal FL, {title}", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


def read_summary(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return data
