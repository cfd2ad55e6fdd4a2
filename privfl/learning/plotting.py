"""Axis helpers shared by the training plots: whole-number ticks, fitted axes, references.

They take matplotlib axes that the caller made, so this module imports matplotlib only
for its tick locator, and only when a plot is drawn.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def integer_ticks(ax: Any) -> None:
    """Whole epochs, trees or rounds on the x axis (a 3-epoch run has no epoch 1.5)."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def fit_unit_axis(ax: Any, values: Iterable[float | None], *, margin: float = 0.02) -> None:
    """Fit a score axis (accuracy, AUC: within 0..1) to the plotted values with a margin.

    A 0..1 axis flattens 0.87..0.96 into a line; a fitted one shows the differences,
    and the margin (at least ``margin``, or a tenth of the range) keeps points off the frame.
    """
    shown = [float(v) for v in values if v is not None]
    if not shown:
        return
    low, high = min(shown), max(shown)
    pad = max(margin, 0.1 * (high - low))
    ax.set_ylim(max(0.0, low - pad), min(1.0 + margin, high + pad))


def draw_references(ax: Any, references: Sequence[dict[str, Any]], metric: str) -> list[float]:
    """Dashed horizontal lines for the centralised references of ``metric``; their values.

    ``references``: summary.json's ``references`` entries (``name``, ``metric``, ``value``).
    """
    drawn = []
    for i, ref in enumerate(r for r in references if r.get("metric") == metric):
        value = float(ref["value"])
        ax.axhline(value, ls="--", lw=1, color=f"C{7 + i}", label=f"{ref['name']} (centralised)")
        drawn.append(value)
    return drawn
