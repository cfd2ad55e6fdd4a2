"""The SecureBoost Host's outputs: its part of the trees, summary.json, metrics plot, importance."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from privfl.learning import secureboost as sb
from privfl.parties.session import PartyContext, write_json

if TYPE_CHECKING:
    from privfl.parties.vertical.secureboost.host import HostBoost


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


def host_model(ctx: PartyContext, state: HostBoost) -> dict[str, Any]:
    """The Host's model.json: every tree's shape and leaves; thresholds of its own splits only."""
    data = state.data
    trees = []
    for tree in state.trees:
        nodes = []
        for n, node in sorted(tree.items()):
            if node.leaf:
                nodes.append({"node": n, "leaf": node.value})
                continue
            entry: dict[str, Any] = {"node": n, "party": owner(ctx.job.guests, node.group)}
            entry["gain"] = node.gain
            if node.group == 0:
                entry["feature"] = data.feature_names[node.feature]
                entry["threshold"] = float(state.edges[node.feature][node.bin])
            nodes.append(entry)
        trees.append(nodes)
    return {
        "party": ctx.name,
        "role": "host",
        "kind": "secureboost",
        "session": ctx.job.session,
        "base_margin": state.base,
        "trees": trees,
        "standardisation": {
            n: {"mean": float(m), "scale": float(s)}
            for n, m, s in zip(data.feature_names, data.mean, data.scale, strict=True)
        },
        "note": "a row goes left at a host node when its standardised value <= threshold; "
        "a guest's nodes are decided by that guest (prediction needs every party online)",
    }


def importance(ctx: PartyContext, state: HostBoost) -> dict[str, dict[str, float]]:
    """Total split gain per party and column (a guest's columns by index: names stay there)."""
    out: dict[str, dict[str, float]] = {}
    for (group, feature), gain in sorted(sb.feature_importance(state.trees).items()):
        party = owner(ctx.job.guests, group)
        name = state.data.feature_names[feature] if group == 0 else f"column {feature}"
        out.setdefault(party, {})[name] = gain
    return out


def finish(ctx: PartyContext, state: HostBoost, wall: float, reason: str) -> dict[str, Any]:
    """Write model.json, the plots and summary.json; return the summary."""
    write_json(ctx.out / "model.json", host_model(ctx, state))
    gains = importance(ctx, state)
    plot(state.records, gains, ctx.out)
    kept = len(state.trees)
    last = state.records[kept - 1] if kept else {}
    job = ctx.job
    summary: dict[str, Any] = {
        "model": {"kind": "secureboost", **{k: v for k, v in vars_of(state.params).items()}},
        **{k: last.get(k) for k in ("accuracy", "precision", "recall", "f1", "auc")},
        "valid_logloss": last.get("valid_logloss"),
        "trees": kept,
        "trees_grown": len(state.records),
        "stop_reason": reason,
        "tree_seconds": [r["seconds"] for r in state.records],
        "history": state.records,
        "importance_by_gain": gains,
        "importance_by_party": {p: sum(v.values()) for p, v in gains.items()},
        "key_bits": job.key_bits,
        "obfuscation": job.obfuscation,
        "encryptions": state.encrypted,
        "decryptions": sum(g.decrypted for g in state.guests),
        "guests": len(job.guests),
        "guest_names": job.guests,
        "wall_seconds": wall,
        "split_seed": job.data.split_seed,
        "test_size": job.data.test_size,
        "train_rows": len(state.labels),
        "test_rows": len(state.data.x_test),
        "label_dp": "not applied: the labels never leave the Host (gradients travel encrypted)",
        "privacy": {
            "guests_see": "fresh encryptions of the Host's g/h, the row set of every node "
            "(the instance space), and the bin of the splits they own",
            "host_sees": "per-bin sums of its own g/h and row counts of every guest column "
            "at every node, the guests' split decisions on training and held-out rows",
            "server_sees": "Hello messages only",
        },
        "session": job.session,
    }
    write_json(ctx.out / "summary.json", summary)
    return summary


def vars_of(params: sb.BoostParams) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(params)


def plot(records: list[dict[str, Any]], gains: dict[str, dict[str, float]], out: Path) -> None:
    """training.png (logloss and AUC per tree) and importance.png (gain per party and column)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if records:
        trees = [r["tree"] + 1 for r in records]
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        left.plot(trees, [r["train_logloss"] for r in records], marker="o", ms=3, label="train")
        left.plot(trees, [r["valid_logloss"] for r in records], marker="o", ms=3, label="held-out")
        left.set_xlabel("trees")
        left.set_ylabel("logloss")
        left.legend()
        right.plot(trees, [r["auc"] for r in records], marker="o", ms=3, label="AUC")
        right.plot(trees, [r["accuracy"] for r in records], ls="--", label="accuracy")
        right.set_xlabel("trees")
        right.set_ylim(0, 1.02)
        right.legend(loc="lower right")
        fig.suptitle("privfl vertical SecureBoost (held-out split)")
        fig.tight_layout()
        fig.savefig(out / "training.png", dpi=110)
        plt.close(fig)
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
    fig.savefig(out / "importance.png", dpi=110)
    plt.close(fig)
