"""Seeds 000, 001 and 003: the horizontal mode's mechanisms, NbAFL sweeps and the Shuffler.

Each run is :func:`privfl.runs.simulate.run_experiment` (the same round steps as the
networked roles, in one process) on the chosen dataset.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Any

from privfl.config.horizontal import HflConfig
from privfl.runs.simulate import run_experiment
from privfl.tools.experiments.registry import (
    ExperimentResult,
    Settings,
    line_figure,
    register,
    table,
)

SEED_000 = "000_68b04117c37ad23d.txt"
SEED_001 = "001_4594ac523c4e0924.txt"
SEED_003 = "003_a02bdadffb73647a.txt"


def _base(settings: Settings, **kw: Any) -> HflConfig:
    dataset = "mnist" if settings.data_dir else "digits"
    quick = dict(rounds=3, local_epochs=2) if settings.quick else dict(rounds=10, local_epochs=5)
    return HflConfig(
        **{
            "dataset": dataset,
            "data_dir": settings.data_dir,
            "seed": settings.seed,
            "device": "cpu",
            **quick,
            **kw,
        }
    )


def _run(config: HflConfig, **extra: Any) -> dict[str, Any]:
    s = run_experiment(config)
    return {
        "dataset": config.dataset,
        "mechanism": config.mechanism,
        "clients": config.clients,
        "rounds": config.rounds,
        "accuracy": s["accuracy"],
        "loss": s["loss"],
        "epsilon_per_client_round": s["epsilon_per_client_round"],
        "epsilon_total": s["epsilon_total"],
        "epsilon_central_round": s.get("epsilon_central_round", math.nan),
        "loss_history": " ".join(f"{v:.5f}" for v in s["loss_history"]),
        "accuracy_history": " ".join(f"{v:.4f}" for v in s["accuracy_history"]),
        **extra,
    }


def _data_note(settings: Settings) -> str:
    if settings.data_dir:
        return f"MNIST from `{settings.data_dir}` with seed 000's CNN"
    return "sklearn digits (1 797 8×8 images, 75/25 split) with NbAFL's MLP (19 210 weights)"


# --------------------------------------------------------------------------- seed 000

PUBLISHED_000 = [
    {"figure": "4(a)", "dataset": "MNIST", "ε": 0.5, "users": 400, "no noise": 95.46,
     "PNPM": 94.00, "Duchi": "diverged", "PM": "diverged"},
    {"figure": "4(b)", "dataset": "FMNIST", "ε": 1.0, "users": 100, "no noise": 83.56,
     "PNPM": 81.20, "Duchi": "diverged", "PM": "diverged"},
    {"figure": "5(b)", "dataset": "FMNIST", "ε": 1.0, "users": 70, "no noise": 86.07,
     "PNPM": 85.92, "Duchi": 66.98, "PM": 54.83},
]  # fmt: skip


@register("hfl-mechanisms", SEED_000, "Seed 000: PNPM vs Duchi vs PM vs Gaussian by clients and ε")
def hfl_mechanisms(settings: Settings) -> ExperimentResult:
    clients = [10, 50] if settings.quick else [10, 25, 50, 100]
    epsilons = [0.5, 1.0, 2.0]
    mechanisms = ["pnpm", "duchi", "pm", "gaussian"]
    rows = []
    for n in clients:
        rows.append(_run(_base(settings, clients=n), epsilon="none"))
        for mech in mechanisms:
            for eps in epsilons:
                rows.append(_run(_base(settings, clients=n, mechanism=mech, epsilon=eps),
                                 epsilon=eps))  # fmt: skip
    figures = {}
    for eps in epsilons:
        series = {
            mech: (clients, [_acc(rows, mech, eps, n) for n in clients]) for mech in mechanisms
        }
        series["no noise"] = (clients, [_acc(rows, "none", "none", n) for n in clients])
        figures[f"accuracy_vs_clients_eps{eps:g}"] = line_figure(
            series, "clients", "test accuracy", f"Accuracy vs clients at ε = {eps:g}"
        )
    ours = [
        {"clients": n, "ε": eps, **{m: _acc(rows, m, eps, n) for m in mechanisms},
         "no noise": _acc(rows, "none", "none", n)}
        for n in clients for eps in epsilons
    ]  # fmt: skip
    wins = sum(1 for r in ours if r["pnpm"] >= max(r["duchi"], r["pm"]) - 1e-9)
    return ExperimentResult(
        rows=rows,
        figures=figures,
        setup=(
            f"{_data_note(settings)}, IID split, FedAvg of randomized weights, "
            f"{rows[0]['rounds']} rounds. PNPM/Duchi/PM: ε per weight (the seed's unit); "
            "Gaussian: discrete Gaussian on a grid, σ from zCDP (the rounding in the sensitivity) "
            "with ε per client per round, Δ = 2C/m."
        ),
        published="Seed 000 figures 4–5 (accuracy %, read from the text):\n\n"
        + table(
            PUBLISHED_000, ["figure", "dataset", "ε", "users", "no noise", "PNPM", "Duchi", "PM"]
        ),
        ours="Test accuracy:\n\n"
        + table(ours, ["clients", "ε", "pnpm", "duchi", "pm", "gaussian", "no noise"]),
        comparison=(
            f"PNPM is at least as good as both Duchi and PM in {wins} of {len(ours)} settings "
            f"({'consistent with' if wins >= len(ours) * 0.75 else 'only partly matching'} the "
            "seed's claim that PNPM wins with few clients at small ε). The reason is "
            "structural and worth stating plainly: PNPM randomises only the *sign* "
            "of each weight and keeps |w| (scaled by a factor in [1, C]), so its output "
            "variance does not depend on the weight range, while Duchi and PM must map each "
            "layer to [−1, 1] and pay variance ∝ range². Per-weight ε is the seed's unit; "
            "a whole report costs d·ε (d = 19 210 here), so none of these is a meaningful "
            "privacy guarantee for the model as a whole. The seed's absolute numbers are for "
            "MNIST/FMNIST CNNs with 70–500 users; digits is smaller, so compare trends."
        ),
    )


def _acc(rows: list[dict[str, Any]], mech: str, eps: Any, n: int) -> float:
    for r in rows:
        if r["mechanism"] == mech and r["epsilon"] == eps and r["clients"] == n:
            return float(r["accuracy"])
    return math.nan


# --------------------------------------------------------------------------- seed 001


@register("hfl-nbafl", SEED_001, "Seed 001 (NbAFL): loss vs ε, C, N, T and K")
def hfl_nbafl(settings: Settings) -> ExperimentResult:
    quick = settings.quick
    rounds = 5 if quick else 15
    base = _base(settings, mechanism="gaussian", clients=20, rounds=rounds, clip_norm=5.0,
                 local_epochs=2)  # fmt: skip
    rows: list[dict[str, Any]] = []

    def total(cfg: HflConfig, eps_total: float, sweep: str, value: float) -> None:
        # NbAFL: σ_U = c·L·Δs/ε with L = exposures; i.e. ε/L per exposure.
        exposures = max(1, round(cfg.rounds * cfg.fraction))
        cfg = replace(cfg, epsilon=eps_total / exposures)
        rows.append(_run(cfg, sweep=sweep, value=value, epsilon_setting=eps_total))

    eps_values = [10.0, 60.0, 100.0] if quick else [6.0, 10.0, 50.0, 100.0]
    for e in eps_values:
        total(base, e, "epsilon", e)
    for c in [1.0, 5.0, 20.0] if quick else [1.0, 2.0, 5.0, 10.0, 20.0]:
        total(replace(base, clip_norm=c), 60.0, "clip C", c)
    for n in [10, 20, 50]:
        total(replace(base, clients=n), 60.0, "clients N", n)
    for t in [2, 5, 10] if quick else [5, 10, 15, 20, 30]:
        total(replace(base, rounds=t), 60.0, "rounds T", t)
    for k in [10, 25, 50] if quick else [10, 20, 30, 40, 50]:
        total(replace(base, clients=50, fraction=k / 50), 60.0, "sampled K (N = 50)", k)
    figures = {}
    for sweep in dict.fromkeys(r["sweep"] for r in rows):
        sub = [r for r in rows if r["sweep"] == sweep]
        figures["loss_vs_" + sweep.split()[0].lower()] = line_figure(
            {sweep: ([r["value"] for r in sub], [r["loss"] for r in sub])},
            sweep, "final test loss", f"NbAFL: final loss vs {sweep}",
        )  # fmt: skip
    eps_sub = [r for r in rows if r["sweep"] == "epsilon"]
    figures["loss_curves_epsilon"] = line_figure(
        {f"ε = {r['value']:g}": (list(range(1, r["rounds"] + 1)),
                                [float(v) for v in r["loss_history"].split()]) for r in eps_sub},
        "round", "test loss", "NbAFL: loss per round by ε",
    )  # fmt: skip
    best = {
        sweep: min((r for r in rows if r["sweep"] == sweep), key=lambda r: r["loss"])["value"]
        for sweep in ("clip C", "rounds T", "sampled K (N = 50)")
    }
    eps_losses = [r["loss"] for r in rows if r["sweep"] == "epsilon"]
    monotone = all(a >= b for a, b in itertools.pairwise(eps_losses))
    return ExperimentResult(
        rows=rows,
        figures=figures,
        setup=(
            f"{_data_note(settings)}; clients clip their model to ‖w‖ ≤ C and add Gaussian "
            "noise (discrete Gaussian on a grid, σ from zCDP) calibrated to ε/L per upload "
            "with L = T·K/N "
            "expected uploads, as NbAFL's σ_U = cLΔs/ε; Δs = 2C/m. No server noise (NbAFL's "
            f"σ_D is 0 whenever T ≤ L√N, as here). Default N = 20, T = {rounds}, C = 5."
        ),
        published=(
            "Seed 001 gives figures only (MNIST, MLP, N = 50, m = 512 or 100 rows per client): "
            "loss falls as ε grows (figs 2–4); C = 20 is best among 10/15/20/25 (fig 5); more "
            "clients give lower loss (fig 6); an optimal T* exists and grows with ε (fig 7); an "
            "optimal K* exists (fig 8)."
        ),
        ours="Final test loss per sweep:\n\n"
        + table(
            rows,
            ["sweep", "value", "epsilon_setting", "epsilon_per_client_round", "loss", "accuracy"],
        ),
        comparison=(
            f"Best C here: {best['clip C']:g}; best T: {best['rounds T']:g}; best K: "
            f"{best['sampled K (N = 50)']:g}. Final loss is "
            f"{'monotone decreasing' if monotone else 'not monotone'} in ε here (the seed's "
            "figs 2–4: decreasing, since σ ∝ 1/ε). An interior optimum for C, T and K "
            "exists in theory (noise "
            "∝ C·L against clipping bias and progress per round); whether it shows inside the "
            "swept grid depends on the dataset scale — digits has ≈ 67 rows per client with "
            "N = 20, so Δs = 2C/m is large and noise dominates early. Where our best value sits "
            "at a grid edge the seed's interior optimum is not reproduced at this size."
        ),
    )


# --------------------------------------------------------------------------- seed 003


@register("hfl-shuffle", SEED_003, "Seed 003: SFD-RSS vs SFD-RAS vs DP-FedAvg vs LDP-FedAvg")
def hfl_shuffle(settings: Settings) -> ExperimentResult:
    n = 20 if settings.quick else 100
    base = _base(settings, clients=n)
    d = 19_210 if not settings.data_dir else 0
    splits = [("iid", 0.0)] if settings.quick else [("iid", 0.0), ("non-iid", 0.5)]
    alpha = 0.02
    rows = []
    for split, dirichlet in splits:
        b = replace(base, dirichlet=dirichlet)
        for eps_l in [500.0, 5000.0] if settings.quick else [50.0, 500.0, 5000.0, 20000.0]:
            rss = _run(
                replace(
                    b, mechanism="laplace-topk", topk_fraction=alpha, epsilon=eps_l, shuffler=True
                ),
                method="SFD-RSS",
                split=split,
                eps_l=eps_l,
            )
            ras = _run(
                replace(
                    b, mechanism="laplace-topk", topk_fraction=1.0, epsilon=eps_l, shuffler=True
                ),
                method="SFD-RAS",
                split=split,
                eps_l=eps_l,
            )
            central = float(rss["epsilon_central_round"])
            dp = _run(
                replace(b, mechanism="gaussian", epsilon=central),
                method="DP-FedAvg",
                split=split,
                eps_l=eps_l,
            )
            ldp = _run(
                replace(b, mechanism="laplace-topk", topk_fraction=1.0, epsilon=central),
                method="LDP-FedAvg",
                split=split,
                eps_l=eps_l,
            )
            rows += [rss, ras, dp, ldp]
        rows.append(_run(b, method="FedAvg (no noise)", split=split, eps_l=math.inf))
    figures = {}
    for split, _ in splits:
        sub = [r for r in rows if r["split"] == split and r["method"] != "FedAvg (no noise)"]
        methods = list(dict.fromkeys(r["method"] for r in sub))
        figures[f"accuracy_{split}"] = line_figure(
            {m: ([r["eps_l"] for r in sub if r["method"] == m],
                 [r["accuracy"] for r in sub if r["method"] == m]) for m in methods},
            "ε_l (per client per round)", "test accuracy", f"Shuffle model, {split}",
        )  # fmt: skip
    rss_wins = [
        (r1["accuracy"], r2["accuracy"])
        for r1 in rows
        for r2 in rows
        if r1["method"] == "SFD-RSS" and r2["method"] == "SFD-RAS"
        and r1["eps_l"] == r2["eps_l"] and r1["split"] == r2["split"]
    ]  # fmt: skip
    better = sum(a > b for a, b in rss_wins)
    return ExperimentResult(
        rows=rows,
        figures=figures,
        setup=(
            f"{_data_note(settings)}, {n} clients, Laplace randomizer on the clipped update "
            f"(±0.05 per coordinate). SFD-RSS: top-k with α = {alpha} (indices from the last "
            "public global update), ε_l/k per coordinate; SFD-RAS: all d coordinates, ε_l/d. "
            "Both shuffled. DP-FedAvg (Gaussian) and LDP-FedAvg (Laplace, all coordinates, no "
            "Shuffler) get ε equal to SFD-RSS's central ε from our amplification bound."
        ),
        published=(
            "Seed 003 fig. 3 / table 1 (1 000 clients; MNIST/FMNIST d = 50 618, ε_l = 506.18, "
            "α = 0.02; CIFAR-10 d = 231 562, ε_l = 2 315.62, α = 0.01): amplified central ε "
            "SFD-RAS 2.68 vs SFD-RSS 0.37; on MNIST SFD-RSS is 0.23 (IID) and 0.26 (non-IID) "
            "more accurate than SFD-RAS; SFD-RSS beats DP-FedAvg and LDP-FedAvg at (0.37, 5e-6)."
        ),
        ours="Test accuracy and our central ε per round:\n\n"
        + table(
            rows,
            [
                "split",
                "method",
                "eps_l",
                "epsilon_per_client_round",
                "epsilon_central_round",
                "accuracy",
            ],
        ),
        comparison=(
            f"SFD-RSS beats SFD-RAS in {better} of {len(rss_wins)} paired settings. The seed's "
            "accuracy argument is that spending ε_l on k = α·d "
            f"({int(alpha * d) if d else 'α·d'}) coordinates instead of all d makes each "
            "coordinate's Laplace scale d/k times smaller. "
            + (
                "That reproduces here."
                if better > len(rss_wins) / 2
                else "Here it does not: with the k indices taken from the previous (public) "
                "global update, only α·d coordinates move per round, so in this many rounds "
                "top-k sparsification, not noise, limits SFD-RSS (its accuracy stays flat as "
                "ε_l grows), while SFD-RAS recovers FedAvg's accuracy once ε_l/d is large."
            )
            + " LDP-FedAvg is the same randomizer without the Shuffler; shuffling permutes "
            "reports and cannot change the average, so its accuracy matches SFD-RAS's at equal "
            "ε_l up to the noise of one draw — the Shuffler only changes the privacy "
            "accounting. The seed's *privacy* "
            "numbers do not reproduce: with ε_l in the hundreds or more, the Feldman–McMillan–"
            "Talwar shuffle bound gives no useful amplification at these client counts (it "
            "needs ε0 ≲ log n), so our central ε stays ≈ ε_l, far from the seed's 0.37. The "
            "seed's 0.37 appears to come from accounting per coordinate (ε_l/k amplified "
            "separately), which does not compose to a guarantee on the whole report."
        ),
    )
