"""The experiment registry and the writers shared by every experiment (CSV, PNG, Markdown)."""

from __future__ import annotations

import csv
import math
import platform
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure


@dataclass(frozen=True, slots=True)
class Settings:
    """What the command line chose: quick or full size, where data files live, the seed."""

    quick: bool = False
    data_dir: str = ""
    seed: int = 0


@dataclass(slots=True)
class ExperimentResult:
    """Rows for the CSV, figures for the PNGs and the Markdown sections of the report."""

    rows: list[dict[str, Any]]
    figures: dict[str, Figure] = field(default_factory=dict)
    published: str = ""  # Markdown: the seed's numbers
    ours: str = ""  # Markdown: our table
    comparison: str = ""  # Markdown: where we match, where not, why
    setup: str = ""  # Markdown: sizes, data, model


@dataclass(frozen=True, slots=True)
class Experiment:
    name: str
    seed_file: str
    title: str
    run: Callable[[Settings], ExperimentResult]


EXPERIMENTS: dict[str, Experiment] = {}


def register(
    name: str, seed_file: str, title: str
) -> Callable[[Callable[[Settings], ExperimentResult]], Callable[[Settings], ExperimentResult]]:
    def wrap(
        fn: Callable[[Settings], ExperimentResult],
    ) -> Callable[[Settings], ExperimentResult]:
        EXPERIMENTS[name] = Experiment(name, seed_file, title, fn)
        return fn

    return wrap


def fmt(value: Any, digits: int = 4) -> str:
    if isinstance(value, float):
        if math.isinf(value):
            return "∞"
        if math.isnan(value):
            return "—"
        return f"{value:.{digits}g}"
    return str(value)


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A Markdown table of ``columns`` from ``rows``."""
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns)
    body = ["| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join([head, *body])


def line_figure(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    xlabel: str,
    ylabel: str,
    title: str,
) -> Figure:
    """One line per named series of (x, y)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", markersize=3, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if series:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def write_outputs(exp: Experiment, result: ExperimentResult, out: Path, settings: Settings,
                  seconds: float, command: str) -> Path:  # fmt: skip
    """Write results.csv, one PNG per figure and report.md under ``out``; return the report."""
    out.mkdir(parents=True, exist_ok=True)
    columns: list[str] = []
    for row in result.rows:
        columns += [k for k in row if k not in columns]
    with (out / "results.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        for row in result.rows:
            writer.writerow({k: row.get(k, "") for k in columns})
    pngs = []
    for name, fig in result.figures.items():
        fig.savefig(out / f"{name}.png", dpi=110)
        plt.close(fig)
        pngs.append(f"{name}.png")
    size = "quick (CI size)" if settings.quick else "full"
    parts = [
        f"# {exp.title}",
        "",
        f"Experiment `{exp.name}`, reproducing seed `{exp.seed_file}`. Size: **{size}**; "
        f"seed {settings.seed}; {seconds:.0f} s on {platform.machine()} "
        f"({platform.python_version()}).",
        "",
        f"Command: `{command}`",
        "",
        "## Setup",
        "",
        result.setup,
        "",
        "## Published (the seed)",
        "",
        result.published,
        "",
        "## Ours",
        "",
        result.ours,
        "",
        *[f"![{p}]({p})" for p in pngs],
        "",
        "## Comparison",
        "",
        result.comparison,
        "",
        "Raw rows: `results.csv`.",
        "",
    ]
    report = out / "report.md"
    report.write_text("\n".join(parts))
    return report
