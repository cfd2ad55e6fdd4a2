"""Seed 002: DP-SGD vs FSDP at ε ∈ {2, 4, 8}, δ = 1e-5, and FSDP's rank k and ablations."""

from __future__ import annotations

from typing import Any

import torch

from privfl.data.images import load_dataset
from privfl.learning.dpsgd import PrivateTrainConfig, train_private
from privfl.learning.models import build_model
from privfl.learning.threads import one_compute_thread
from privfl.tools.experiments.registry import (
    ExperimentResult,
    Settings,
    line_figure,
    register,
    table,
)

SEED_002 = "002_6f8e9bcc806c9856.txt"

# Seed 002 table 5 (MNIST accuracy %, δ = 1e-5) and table 3 (MNIST, FSDP by k).
PUBLISHED_TABLE5 = {
    "DP-SGD": (94.52, 95.94, 97.13),
    "FSDP-M": (95.37, 96.64, 97.51),
    "FSDP-S": (95.63, 96.98, 97.85),
    "FSDP-R": (96.18, 97.51, 98.21),
    "FSDP-C": (95.45, 96.81, 97.73),
    "FSDP": (96.37, 97.68, 98.33),
}
PUBLISHED_TABLE3 = {  # k: (ε=2, ε=4, ε=8)
    10: (96.12, 97.33, 98.16),
    50: (96.37, 97.68, 98.33),
    200: (96.41, 97.72, 98.35),
    500: (96.39, 97.69, 98.38),
    1000: (96.07, 97.35, 97.89),
}

VARIANTS = {  # name: (method, relevance, adaptive clipping)
    "DP-SGD": ("dpsgd", False, False),
    "FSDP-M": ("fsdp", False, False),
    "FSDP-R": ("fsdp", True, False),
    "FSDP-C": ("fsdp", False, True),
    "FSDP": ("fsdp", True, True),
}


@register("dpsgd-fsdp", SEED_002, "Seed 002: DP-SGD vs FSDP (ε = 2, 4, 8; δ = 1e-5)")
def dpsgd_fsdp(settings: Settings) -> ExperimentResult:
    one_compute_thread()
    dataset = "mnist" if settings.data_dir else "digits"
    data = load_dataset(dataset, settings.data_dir, seed=settings.seed)
    quick = settings.quick
    epochs = 2 if quick else 8
    epsilons = [2.0, 8.0] if quick else [2.0, 4.0, 8.0]
    ranks = [10] if quick else [10, 50, 200]
    variants = ["DP-SGD", "FSDP"] if quick else list(VARIANTS)
    rows: list[dict[str, Any]] = []
    for eps in epsilons:
        runs = [(v, 50 if not quick else 10) for v in variants]
        runs += [("FSDP", k) for k in ranks if k != runs[-1][1]]
        for variant, rank in runs:
            method, relevance, adaptive = VARIANTS[variant]
            torch.manual_seed(settings.seed)
            model = build_model(dataset, data.input_shape, data.num_classes)
            cfg = PrivateTrainConfig(
                method=method, epsilon=eps, epochs=epochs, batch_size=64, lr=0.5, clip=1.0,
                rank=rank, relevance=relevance, adaptive_clip=adaptive, seed=settings.seed,
            )  # fmt: skip
            r = train_private(model, data.x_train, data.y_train, data.x_test, data.y_test, cfg)
            rows.append(
                {
                    "variant": variant,
                    "rank_k": rank if method == "fsdp" else "",
                    "epsilon_target": eps,
                    "epsilon": r["epsilon"],
                    "epsilon_source": r["epsilon_source"],
                    "noise_multiplier": r["noise_multiplier"],
                    "steps": r["steps"],
                    "accuracy": r["accuracy"],
                    "accuracy_history": " ".join(f"{h['accuracy']:.4f}" for h in r["history"]),
                }
            )
    main_rank = 10 if quick else 50
    core = [r for r in rows if r["variant"] == "DP-SGD" or r["rank_k"] == main_rank]
    series = {v: (epsilons, [_get(core, v, e) for e in epsilons]) for v in variants}
    fig = line_figure(series, "ε (δ = 1e-5)", "test accuracy", "DP-SGD vs FSDP variants")
    ours = [{"variant": v, **{f"ε={e:g}": _get(core, v, e) for e in epsilons}} for v in variants]
    k_rows = [
        {"k": k, **{f"ε={e:g}": _get([r for r in rows if r["rank_k"] == k], "FSDP", e)
                    for e in epsilons}}
        for k in ranks
    ]  # fmt: skip
    gap = [_get(core, "FSDP", e) - _get(core, "DP-SGD", e) for e in epsilons]
    pub5 = [{"model": m, "ε=2": a, "ε=4": b, "ε=8": c} for m, (a, b, c) in PUBLISHED_TABLE5.items()]
    pub3 = [{"k": k, "ε=2": a, "ε=4": b, "ε=8": c} for k, (a, b, c) in PUBLISHED_TABLE3.items()]
    cols = [f"ε={e:g}" for e in epsilons]
    return ExperimentResult(
        rows=rows,
        figures={"accuracy_vs_epsilon": fig},
        setup=(
            f"{dataset} ({len(data.x_train)} training rows), "
            f"{'NbAFL MLP' if dataset == 'digits' else 'seed 000 CNN'}, {epochs} epochs of "
            "Poisson-sampled batches (expected 64), lr 0.5, clip 1. The noise multiplier is "
            "set by the RDP accountant so the whole run spends exactly the target ε; FSDP "
            "uses the same multiplier — its ε is *the paper's own analysis*, not a proof "
            "(noise is added per sample after a data-dependent factorisation, and the "
            "clip comes after the noise). FSDP-S (smooth sensitivity) is not implemented."
        ),
        published="Seed 002 table 5 (MNIST, accuracy %):\n\n"
        + table(pub5, ["model", "ε=2", "ε=4", "ε=8"])
        + "\n\nTable 3 (MNIST, FSDP by k):\n\n"
        + table(pub3, ["k", "ε=2", "ε=4", "ε=8"]),
        ours=f"Test accuracy (FSDP rows with k = {main_rank}):\n\n"
        + table(ours, ["variant", *cols])
        + "\n\nFSDP by k:\n\n"
        + table(k_rows, ["k", *cols]),
        comparison=(
            "FSDP − DP-SGD accuracy: "
            + ", ".join(f"ε = {e:g}: {g:+.3f}" for e, g in zip(epsilons, gap, strict=True))
            + " (seed: +1.85, +1.74, +1.20 points on MNIST). Two findings qualify the seed's "
            "claim. (1) For fully connected layers a per-sample weight gradient is an outer "
            "product xᵢδᵢᵀ — rank one — so the Funk-SVD at any k ≥ 1 is exact and the "
            "residual Φ is ≈ 0; k only matters for convolutions. (2) FSDP adds noise to each "
            "sample before averaging (table 2 steps 8–9), so the averaged noise shrinks as "
            "1/√B instead of DP-SGD's 1/B; at the same multiplier FSDP is therefore *noisier* "
            "unless its adaptive thresholds C_V, C_Φ are much smaller than DP-SGD's C — which "
            "they are, because they are means of data-dependent norms. That is where its "
            "accuracy comes from, and it is also why its ε is not a proven bound: the "
            "thresholds themselves depend on the private batch."
        ),
    )


def _get(rows: list[dict[str, Any]], variant: str, eps: float) -> float:
    for r in rows:
        if r["variant"] == variant and r["epsilon_target"] == eps:
            return float(r["accuracy"])
    return float("nan")
