"""The SecureBoost Host's outputs: its part of the trees, summary.json, metrics plot, importance."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.data.views import PartyData, bundled
from privfl.learning import secureboost as sb
from privfl.learning.plotting import draw_references, fit_unit_axis, integer_ticks
from privfl.models.registry import model_entry
from privfl.parties.files import save_figure
from privfl.parties.session import PartyContext
from privfl.parties.vertical.secureboost import oblivious


def tree_to_json(tree: sb.Tree) -> list[list[Any]]:
    """``[node, group, feature, bin, gain, value]`` per node."""
    return [[n, v.group, v.feature, v.bin, v.gain, v.value] for n, v in sorted(tree.items())]


def tree_from_json(rows: list[list[Any]]) -> sb.Tree:
    return {
        int(n): sb.Node(group=int(g), feature=int(f), bin=int(b), gain=float(gain), value=float(v))
        for n, g, f, b, gain, v in rows
    }


def json_line(record: dict[str, Any]) -> str:
    return json.dumps(record) + "\n"


def owner(job_guests: list[str], group: int) -> str:
    return "host" if group == 0 else job_guests[group - 1]


def host_model(
    ctx: PartyContext, data: PartyData, trees_: list[sb.Tree], edges: np.ndarray, base: float
) -> dict[str, Any]:
    """The Host's model.json: every tree's shape and leaves; thresholds of its own splits only."""
    hidden, bins = ctx.job.model.instance_space == "hidden", ctx.job.model.bins
    trees = []
    for tree in trees_:
        nodes = []
        for n, node in sorted(tree.items()):
            if node.leaf:
                nodes.append({"node": n, "leaf": node.value})
                continue
            entry: dict[str, Any] = {"node": n, "party": owner(ctx.job.guests, node.group)}
            entry["gain"] = node.gain
            if node.group == 0:
                entry["feature"] = data.feature_names[node.feature]
                entry["threshold"] = float(edges[node.feature][node.bin])
            elif hidden:  # the guest's candidate (oblivious.py); the guest never learns it
                entry["candidate"] = oblivious.candidate(node.feature, node.bin, bins)
            nodes.append(entry)
        trees.append(nodes)
    return {
        "party": ctx.name,
        "role": "host",
        "session": ctx.job.session,
        "model": model_entry(ctx.job.model.kind),
        "base_margin": base,
        "instance_space": ctx.job.model.instance_space,
        "trees": trees,
        "standardisation": {
            n: {"mean": float(m), "scale": float(s)}
            for n, m, s in zip(data.feature_names, data.mean, data.scale, strict=True)
        },
        "note": "a row goes left at a host node when its standardised value <= threshold; "
        "a guest's nodes are decided by that guest (prediction needs every party online)",
    }


def importance(
    ctx: PartyContext, trees: list[sb.Tree], names: tuple[str, ...]
) -> dict[str, dict[str, float]]:
    """Total split gain per party and column, each guest column named as the job knows it."""
    out: dict[str, dict[str, float]] = {}
    for (group, feature), gain in sorted(sb.feature_importance(trees).items()):
        party = owner(ctx.job.guests, group)
        name = names[feature] if group == 0 else guest_column(ctx.job, party, feature)
        out.setdefault(party, {})[name] = gain
    return out


def guest_column(job: JobConfig, party: str, feature: int) -> str:
    """A guest's ``feature``-th column by the name the job gives it.

    The guest's ``features`` when the job lists them; for the bundled table, the
    column's global index and name (the job's ``columns`` are public); else its
    local index, since the guest's own CSV header stays with the guest.
    """
    spec = job.party(party)
    if feature < len(spec.features):
        return spec.features[feature]
    if feature < len(spec.columns) and not spec.data:
        column = spec.columns[feature]
        names = bundled(job.data.dataset)[1]
        if 0 <= column < len(names):  # a harness's job may name columns the table lacks
            return f"column {column} ({names[column]})"
    return f"local column {feature}"


def vars_of(params: sb.BoostParams) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(params)


def plot(records: list[dict[str, Any]], gains: dict[str, dict[str, float]], out: Path) -> None:
    """training.png (logloss and AUC per tree) and importance.png (gain per party and column)."""
    if records:
        plot_training(records, out / "training.png")
    plot_importance(gains, out / "importance.png")


def plot_training(
    records: list[dict[str, Any]], path: Path, references: Sequence[dict[str, Any]] = ()
) -> None:
    """Logloss, held-out AUC and accuracy per tree; ``references``: centralised AUCs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trees = [r["tree"] + 1 for r in records]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(trees, [r["train_logloss"] for r in records], marker="o", ms=3, label="train")
    left.plot(trees, [r["valid_logloss"] for r in records], marker="o", ms=3, label="held-out")
    left.set_ylabel("logloss")
    left.legend()
    auc = [r["auc"] for r in records]
    accuracy = [r["accuracy"] for r in records]
    right.plot(trees, auc, marker="o", ms=3, label="AUC")
    right.plot(trees, accuracy, ls="--", label="accuracy")
    drawn = draw_references(right, references, "auc")
    right.set_ylabel("held-out AUC / accuracy")
    fit_unit_axis(right, [*auc, *accuracy, *drawn])
    right.legend(loc="lower right")
    for ax in (left, right):
        ax.set_xlabel("trees")
        integer_ticks(ax)
    fig.suptitle("privfl vertical SecureBoost (held-out split)")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def plot_importance(gains: dict[str, dict[str, float]], path: Path) -> None:
    """Total split gain of each party's ten best columns, one colour per party."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, values, colours = [], [], []
    for i, (party, columns) in enumerate(gains.items()):
        for name, gain in sorted(columns.items(), key=lambda kv: -kv[1])[:10]:
            labels.append(f"{party}: {name}")
            values.append(gain)
            colours.append(f"C{i}")
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.3 * len(labels) + 1)))
    order = np.argsort(values)
    ax.barh(
        [labels[i] for i in order], [values[i] for i in order], color=[colours[i] for i in order]
    )
    ax.set_xlabel("total split gain")
    ax.set_title("feature importance by gain, per party (top 10 each)")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def draw_training(
    job: JobConfig, records: list[dict[str, Any]], path: Path, references: Sequence[dict[str, Any]]
) -> None:
    """The registry's plot (models/registry.py): :func:`plot_training` of a job's records."""
    plot_training(records, path, references)


def report_table(summary: dict[str, Any], references: Sequence[dict[str, Any]], out: Path) -> str:
    """The registry's end-of-run report: :func:`results_table` (the references are in it)."""
    return results_table(summary, out)


def results_table(summary: dict[str, Any], out: Path) -> str:
    """The end-of-run table of ``privfl vfl run-local`` for SecureBoost."""

    def fmt(value: Any) -> str:
        return "n/a" if value is None else f"{value:.4f}"

    m = summary["model"]
    parties = summary["importance_by_party"]
    total = sum(parties.values()) or 1.0
    rows = [
        ("joint accuracy", fmt(summary["accuracy"])),
        ("joint AUC", fmt(summary["auc"])),
        ("joint F1", fmt(summary["f1"])),
        ("held-out logloss", fmt(summary["valid_logloss"])),
        *(
            (f"centralised {r['name']} AUC (reference)", fmt(r["value"]))
            for r in summary.get("references", ())
        ),
        (
            "trees",
            f"{summary['trees']} kept of {summary['trees_grown']} ({summary['stop_reason']})",
        ),
        ("depth / learning rate / bins", f"{m['depth']} / {m['learning_rate']:g} / {m['bins']}"),
        ("label ε / flip prob. / flipped", label_line(summary)),
        ("instance space", space_line(summary)),
        ("gain share by party", ", ".join(f"{p} {v / total:.0%}" for p, v in parties.items())),
        ("encryptions / decryptions", f"{summary['encryptions']} / {summary['decryptions']}"),
        ("wall time", f"{summary['wall_seconds']:.1f} s"),
        ("outputs", str(out)),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


SHARED_READS = (
    "a guest of a shared instance space learns every node's rows: 2-means over the leaves "
    "read 0.96 of the training labels at ε = 2 and 0.97 at ε = 8 on breast cancer, against "
    '0.90 from a guest\'s own columns (docs/security.md); instance_space = "hidden" '
    "keeps the rows from the guests"
)
"""What ``instance_space = "shared"`` gives away, measured (docs/results.md)."""


def space_line(summary: dict[str, Any]) -> str:
    """The run's instance space; a shared one with what a guest reads from it."""
    space = summary.get("instance_space", "shared")
    if space == "hidden":
        return "hidden (no guest learns a node's rows)"
    return f"{space}: {SHARED_READS}"


def label_line(summary: dict[str, Any]) -> str:
    """The run's label DP in one line (runs written before trees had label DP say none)."""
    flip = summary.get("flip")
    if flip is None:
        return "none"
    return (
        f"{summary['label_epsilon']} / {flip['probability']:.4g} / "
        f"{flip['count']} of {flip['rows']}"
    )
