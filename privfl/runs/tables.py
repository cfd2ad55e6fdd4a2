"""The end-of-run tables of ``privfl vfl run-local`` for the GLM kinds (models/registry.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from privfl.models.registry import UNPROTECTED_READS, kind_named


def logistic_table(summary: dict[str, Any], references: Sequence[dict[str, Any]], out: Path) -> str:
    """The end-of-run table: joint metrics, bottom models, privacy, where the files are."""
    baseline = references[0]["value"] if references else None
    rows = [
        ("joint accuracy", fmt(summary["accuracy"])),
        ("joint precision", fmt(summary["precision"])),
        ("joint recall", fmt(summary["recall"])),
        ("joint F1", fmt(summary["f1"])),
        ("joint AUC", fmt(summary["auc"])),
        ("host bottom-model accuracy", fmt(summary["bottom_accuracy"]["host"])),
        ("guests bottom-model accuracy", fmt(summary["bottom_accuracy"]["guests_combined"])),
    ]
    if baseline is not None:
        rows.append(("centralised sklearn LR (reference)", fmt(baseline)))
    flip = summary["flip"]
    rows += [
        ("final Taylor loss", fmt(summary["loss_history"][-1])),
        ("epochs", f"{summary['epochs']} ({summary['stop_reason']})"),
        (
            "label ε / flip prob. / flipped",
            f"{summary['label_epsilon']} / {flip['probability']:.4g} / "
            f"{flip['count']} of {flip['rows']}",
        ),
        ("flipped back", str(summary["flipback"]["flipped_back"])),
        ("wall time", f"{summary['wall_seconds']:.1f} s"),
        ("outputs", str(out)),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def glm_table(summary: dict[str, Any], references: Sequence[dict[str, Any]], out: Path) -> str:
    """The end-of-run table of a linear, Poisson or multiclass model (its report metrics)."""
    entry = kind_named(summary["model"]["kind"])
    kind = entry.name
    macro = " (macro)" if "classes" in entry.reads else ""
    rows = [
        (f"test {name}{macro if name != 'accuracy' else ''}", fmt(summary.get(name)))
        for name in entry.report_metrics
    ]
    if references:
        headline, baseline = entry.report_metrics[0], references[0]["value"]
        rows.append(
            (f"centralised sklearn {entry.reference} {headline} (reference)", fmt(baseline))
        )
    flip = summary["flip"]
    if flip["mechanism"] == "none":
        noise = "no label DP"
    elif flip.get("laplace_scale"):
        noise = f"Laplace scale {flip['laplace_scale']:.4g}"
    else:
        noise = f"flip prob. {flip['probability']:.4g}, {flip['count']} of {flip['rows']} changed"
    rows += [
        ("model", f"{kind} on {summary.get('dataset')}"),
        ("final loss", fmt(summary["loss_history"][-1])),
        ("epochs", f"{summary['epochs']} ({summary['stop_reason']})"),
        ("label ε", f"{summary['label_epsilon']} ({flip['mechanism']}; {noise})"),
        *(
            [("a deviating guest reads", UNPROTECTED_READS[kind])]
            if flip["mechanism"] == "none" and kind in UNPROTECTED_READS
            else []
        ),
        ("wall time", f"{summary['wall_seconds']:.1f} s"),
        ("outputs", str(out)),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def fmt(value: Any) -> str:
    """A metric to four decimals, ``n/a`` where there is none."""
    return "n/a" if value is None else f"{value:.4f}"
