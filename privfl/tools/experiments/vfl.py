"""Seed 004: the vertical mode (encrypted logistic regression + label DP) at several ε and λ.

Every run is the real protocol: real Paillier (512-bit keys, weak on purpose and
labelled so, to keep the sweep short), the three parties in threads over the
in-memory transport, the same state machines as `privfl run`.
"""

from __future__ import annotations

import itertools
import json
import math
import tempfile
import threading
import uuid
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from privfl.config.vertical import JobConfig, LabelDPConfig, PartySpec, TrainingConfig
from privfl.data.views import demo_columns
from privfl.errors import PrivflError
from privfl.parties.vertical.runner import run_party
from privfl.protocol.memory import InMemoryHub
from privfl.tools.experiments.registry import (
    ExperimentResult,
    Settings,
    fmt,
    line_figure,
    register,
    table,
)

KEY_BITS = 512
SEED_FILE = "004_c12c08f5c08bd8b2.txt"

# Seed 004, tables 3.1–3.4 (λ = 2) and 3.5–3.8 (ε = 4): final accuracy of the
# guest's ("A") and the host's ("B") bottom model on the 143 test rows.
PUBLISHED_EPSILON = {
    math.inf: (0.916083916083916, 0.8601398601398601),
    8.0: (0.8251748251748252, 0.8531468531468531),
    4.0: (0.916083916083916, 0.7622377622377622),
    2.0: (0.8461538461538461, 0.9020979020979021),
}
PUBLISHED_LAMBDA = {
    2.0: (0.916083916083916, 0.7622377622377622),
    0.8: (0.8671328671328671, 0.9090909090909091),
    0.2: (0.8671328671328671, 0.8881118881118881),
    0.1: (0.8601398601398601, 0.8741258741258742),
}


@dataclass(frozen=True, slots=True)
class VflRun:
    epsilon: float
    l2: float
    flipback: bool
    epochs: int
    seed: int


_ACCURACY_COLUMNS = (
    "joint_accuracy",
    "host_accuracy",
    "host_accuracy_sd",
    "guest_accuracy",
    "guest_accuracy_sd",
    "seed_host(B)",
    "seed_guest(A)",
)
"""The 'ours' table of vfl-epsilon and vfl-lambda, after the swept parameter."""


def run_vertical(run: VflRun, timeout: float = 120.0) -> dict[str, Any]:
    """One encrypted training run in-process; the Host's summary.

    The Host flips the labels with a generator seeded with ``run.seed`` so that the
    sweep is reproducible: **seeded noise — not private**. A real run draws them from
    the OS CSPRNG.
    """
    columns = demo_columns(1)
    names = ["server", "host", "guest-1"]
    parties = {n: PartySpec(n, n.split("-")[0], f"mem://{n}", columns.get(n, ())) for n in names}
    job = JobConfig(
        session=uuid.uuid4().hex,
        parties=parties,
        key_bits=KEY_BITS,
        allow_weak_keys=True,
        timeout_seconds=timeout,
        seed=run.seed,
        training=TrainingConfig(epochs=run.epochs, l2=run.l2),
        label_dp=LabelDPConfig(epsilon=run.epsilon, flipback_every=5 if run.flipback else 0),
    )
    hub = InMemoryHub()
    transports = {n: hub.transport(n) for n in names}
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:

        def party(name: str) -> None:
            try:
                seeded = np.random.default_rng(run.seed) if name == "host" else None
                results[name] = run_party(  # in a folder deleted after: no plot to draw
                    job,
                    name,
                    Path(tmp) / name,
                    transport=transports[name],
                    label_rng=seeded,
                    plots=False,
                )
            except BaseException as exc:  # reported below
                results[name] = exc

        threads = [threading.Thread(target=party, args=(n,), daemon=True) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout + 30)
        for name in names:
            if name not in results:
                raise PrivflError(f"vertical run: {name} did not finish within {timeout + 30:g} s")
            if isinstance(results[name], BaseException):
                raise PrivflError(f"vertical run: {name} failed: {results[name]}")

        summary: dict[str, Any] = json.loads((Path(tmp) / "host" / "summary.json").read_text())
    return summary


@lru_cache(maxsize=256)
def _run_once(run: VflRun) -> dict[str, Any]:
    """:func:`run_vertical`, once per setting in this process: a seeded run's flips, start,
    batch plan and flipback all come from its seed, so a second run of the same setting
    ends alike (two runs measured: equal loss histories and accuracies). vfl-epsilon,
    vfl-lambda and vfl-flipback share settings (ε = 4, λ = 2, flipback on, among
    others): `privfl experiment all` runs each once."""
    return run_vertical(run)


def _sweep(runs: list[VflRun]) -> list[dict[str, Any]]:
    rows = []
    for run in runs:
        s = _run_once(run)
        rows.append(
            {
                "epsilon": run.epsilon,
                "lambda": run.l2,
                "flipback": run.flipback,
                "seed": run.seed,
                "epochs": run.epochs,
                "joint_accuracy": s["accuracy"],
                "host_accuracy": s["bottom_accuracy"]["host"],
                "guest_accuracy": s["bottom_accuracy"]["guests_combined"],
                "auc": s["auc"],
                "flipped": s["flip"]["count"],
                "label_noise": s["flip"]["noise"],
                "flipped_back": s.get("flipback", {}).get("flipped_back", 0),
                "final_loss": s["loss_history"][-1],
                "loss_history": " ".join(f"{v:.5f}" for v in s["loss_history"]),
            }
        )
    return rows


def _mean_rows(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """Average the accuracy columns over seeds, one row per setting."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = []
    for key, rs in groups.items():
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        for col in ("joint_accuracy", "host_accuracy", "guest_accuracy", "auc", "final_loss"):
            vals = [r[col] for r in rs]
            row[col] = float(np.mean(vals))
            if col.endswith("accuracy"):
                row[col + "_sd"] = float(np.std(vals))
        row["runs"] = len(rs)
        out.append(row)
    return out


def _sizes(settings: Settings, full_seeds: int = 5) -> tuple[int, list[int]]:
    # Quick: six epochs, the fewest that still hold a flipback (after the fifth, never
    # after the last), so vfl-flipback's on/off runs differ at CI size too.
    epochs = 6 if settings.quick else 40
    seeds = [settings.seed] if settings.quick else [settings.seed + i for i in range(full_seeds)]
    return epochs, seeds


def _loss_figure(rows: list[dict[str, Any]], key: str, label: str) -> Any:
    series = {}
    for r in rows:
        if r["seed"] != rows[0]["seed"]:
            continue
        ys = [float(v) for v in r["loss_history"].split()]
        series[f"{label} = {r[key]:g}"] = (list(range(1, len(ys) + 1)), ys)
    return line_figure(
        series, "epoch", "Taylor loss (flipped labels)", f"Loss per epoch by {label}"
    )


SETUP = (
    "Breast-cancer data (569 rows; seed 004's column split: host = label + its columns, one "
    "guest), 75/25 split, encrypted Taylor-loss logistic regression over the real protocol "
    f"(Paillier {KEY_BITS}-bit keys — weak, for speed; the maths is the same), label DP by "
    "randomized response before training, flipback every 5 epochs on 2% of rows. "
    '"Host" = the seed\'s B (label holder), "guest" = the seed\'s A. Our per-party '
    "accuracy is each side's bottom model alone (its partial score through the sigmoid). "
    "**Seeded noise — not private**: the label flips come from a generator seeded with each "
    "run's seed, so the sweep can be reproduced; a real run draws them from the OS CSPRNG."
)


@register("vfl-epsilon", SEED_FILE, "Seed 004 test 1: accuracy vs label-DP ε (λ = 2)")
def vfl_epsilon(settings: Settings) -> ExperimentResult:
    epochs, seeds = _sizes(settings)
    eps_list = [math.inf, 8.0, 4.0, 2.0]
    rows = _sweep([VflRun(e, 2.0, True, epochs, s) for s in seeds for e in eps_list])
    means = _mean_rows(rows, ("epsilon",))
    for m in means:
        pub = PUBLISHED_EPSILON[m["epsilon"]]
        m["seed_guest(A)"], m["seed_host(B)"] = pub
    pub_rows = [{"ε": e, "A (guest)": a, "B (host)": b} for e, (a, b) in PUBLISHED_EPSILON.items()]
    xs = [_x(m["epsilon"]) for m in means]
    pub_x = [_x(e) for e in PUBLISHED_EPSILON]
    fig = line_figure(
        {
            "ours: joint": (xs, [m["joint_accuracy"] for m in means]),
            "ours: host": (xs, [m["host_accuracy"] for m in means]),
            "ours: guest": (xs, [m["guest_accuracy"] for m in means]),
            "seed: B (host)": (pub_x, [b for _, b in PUBLISHED_EPSILON.values()]),
            "seed: A (guest)": (pub_x, [a for a, _ in PUBLISHED_EPSILON.values()]),
        },
        "label ε (16 = no noise)",
        "test accuracy",
        "Accuracy vs ε (λ = 2)",
    )
    ordered = sorted(means, key=lambda m: -_x(m["epsilon"]))
    return ExperimentResult(
        rows=rows,
        figures={"accuracy_vs_epsilon": fig, "loss_curves": _loss_figure(rows, "epsilon", "ε")},
        published="Tables 3.1–3.4 (one run each, 30–40 epochs):\n\n"
        + table(pub_rows, ["ε", "A (guest)", "B (host)"]),
        ours=f"{epochs} epochs, mean (sd) over {len(seeds)} seed(s):\n\n"
        + table(
            means,
            ["epsilon", *_ACCURACY_COLUMNS],
        ),
        comparison=_compare_epsilon(ordered),
        setup=SETUP,
    )


def _x(eps: float) -> float:
    return 16.0 if math.isinf(eps) else eps


def _compare_epsilon(means: list[dict[str, Any]]) -> str:
    """Facts from our numbers (ordered from no noise to the smallest ε), then the seed's."""
    base = means[0]
    worst = min(means, key=lambda m: m["joint_accuracy"])
    joint = [m["joint_accuracy"] for m in means]
    monotone = all(a >= b - 1e-12 for a, b in itertools.pairwise(joint))
    drop = base["joint_accuracy"] - means[-1]["joint_accuracy"]
    flips = ", ".join(
        f"{100 / (1 + math.exp(m['epsilon'])):.2g}% at ε = {m['epsilon']:g}" for m in means[1:]
    )
    return (
        f"Without label noise our joint model reaches {base['joint_accuracy']:.3f}; the lowest "
        f"mean joint accuracy is {worst['joint_accuracy']:.3f} (ε = {fmt(worst['epsilon'])}); "
        f"from no noise to ε = {means[-1]['epsilon']:g} it changes by {-drop:+.3f}, and it is "
        f"{'monotone' if monotone else 'not monotone'} in ε here. Randomized response flips "
        f"1/(1+e^ε) of the labels ({flips}); logistic regression with λ = 2 is robust to that "
        "much symmetric label noise, so accuracy moves by a few test rows at most (one of the "
        "143 test rows is 0.7 points). The seed's numbers are single runs whose ordering is "
        "not monotone in ε (its B is best at ε = 2 and worst at ε = 4) — differences of the "
        "same size as single-run noise, so we do not read its claim that label DP *raises* "
        "a party's accuracy as a reproducible effect unless our seed-averaged rows show it."
    )


@register("vfl-lambda", SEED_FILE, "Seed 004 test 2: accuracy vs the L2 weight λ (ε = 4)")
def vfl_lambda(settings: Settings) -> ExperimentResult:
    epochs, seeds = _sizes(settings)
    lambdas = [2.0, 0.8, 0.2, 0.1]
    rows = _sweep([VflRun(4.0, lam, True, epochs, s) for s in seeds for lam in lambdas])
    means = _mean_rows(rows, ("lambda",))
    for m in means:
        m["seed_guest(A)"], m["seed_host(B)"] = PUBLISHED_LAMBDA[m["lambda"]]
    pub_rows = [{"λ": k, "A (guest)": a, "B (host)": b} for k, (a, b) in PUBLISHED_LAMBDA.items()]
    xs = [m["lambda"] for m in means]
    fig = line_figure(
        {
            "ours: joint": (xs, [m["joint_accuracy"] for m in means]),
            "ours: host": (xs, [m["host_accuracy"] for m in means]),
            "ours: guest": (xs, [m["guest_accuracy"] for m in means]),
            "seed: B (host)": (list(PUBLISHED_LAMBDA), [b for _, b in PUBLISHED_LAMBDA.values()]),
            "seed: A (guest)": (list(PUBLISHED_LAMBDA), [a for a, _ in PUBLISHED_LAMBDA.values()]),
        },
        "λ", "test accuracy", "Accuracy vs λ (ε = 4)",
    )  # fmt: skip
    best = max(means, key=lambda m: m["joint_accuracy"])
    return ExperimentResult(
        rows=rows,
        figures={"accuracy_vs_lambda": fig, "loss_curves": _loss_figure(rows, "lambda", "λ")},
        published="Tables 3.5–3.8 (ε = 4, one run each):\n\n"
        + table(pub_rows, ["λ", "A (guest)", "B (host)"]),
        ours=f"{epochs} epochs, mean (sd) over {len(seeds)} seed(s):\n\n"
        + table(
            means,
            ["lambda", *_ACCURACY_COLUMNS],
        ),
        comparison=(
            f"Our best mean joint accuracy is at λ = {best['lambda']:g} "
            f"({best['joint_accuracy']:.3f}). The seed's hypothesis is that label DP acts like a "
            "regulariser, so a smaller λ should help under DP; its own B column rises from "
            "0.762 (λ = 2) to 0.909 (λ = 0.8) and then falls again, while A falls — single "
            "runs again. Compare the direction of our host column with the seed's B column "
            "above; differences of one or two test rows (0.7–1.4 points) are within noise."
        ),
        setup=SETUP,
    )


@register("vfl-flipback", SEED_FILE, "Seed 004: does flipback help? (on/off at each ε)")
def vfl_flipback(settings: Settings) -> ExperimentResult:
    epochs, seeds = _sizes(settings, full_seeds=3)
    eps_list = [8.0, 4.0, 2.0, 1.0]
    rows = _sweep(
        [VflRun(e, 2.0, fb, epochs, s) for s in seeds for e in eps_list for fb in (True, False)]
    )
    means = _mean_rows(rows, ("epsilon", "flipback"))
    on = {m["epsilon"]: m for m in means if m["flipback"]}
    off = {m["epsilon"]: m for m in means if not m["flipback"]}
    diff_rows = [
        {
            "epsilon": e,
            "joint_on": on[e]["joint_accuracy"],
            "joint_off": off[e]["joint_accuracy"],
            "gain": on[e]["joint_accuracy"] - off[e]["joint_accuracy"],
            "host_on": on[e]["host_accuracy"],
            "host_off": off[e]["host_accuracy"],
        }
        for e in eps_list
    ]
    fig = line_figure(
        {
            "flipback on": (eps_list, [on[e]["joint_accuracy"] for e in eps_list]),
            "flipback off": (eps_list, [off[e]["joint_accuracy"] for e in eps_list]),
        },
        "label ε", "joint test accuracy", "Flipback on/off (λ = 2)",
    )  # fmt: skip
    gains = [r["gain"] for r in diff_rows]
    verdict = (
        "helps on average"
        if np.mean(gains) > 0.005
        else "hurts on average"
        if np.mean(gains) < -0.005
        else "makes no measurable difference"
    )
    return ExperimentResult(
        rows=rows,
        figures={"flipback": fig},
        published=(
            "Seed 004 §2 claims flipback (re-flipping the 1–4% of labels the model disagrees "
            "with most, every k epochs) raises accuracy and speeds convergence; it gives no "
            "on/off table, only the ε runs above (all with flipback)."
        ),
        ours=f"{epochs} epochs, mean over {len(seeds)} seed(s):\n\n"
        + table(diff_rows, ["epsilon", "joint_on", "joint_off", "gain", "host_on", "host_off"]),
        comparison=(
            f"Mean gain of flipback over all ε: {np.mean(gains):+.4f} — flipback {verdict} "
            "here. Per ε: "
            + "; ".join(
                f"ε = {r['epsilon']:g}: {r['gain']:+.3f} (flip rate "
                f"{100 / (1 + math.exp(r['epsilon'])):.2g}% vs 2% re-flipped every 5 epochs)"
                for r in diff_rows
            )
            + ". Flipback is post-processing (no ε cost). It re-flips a fixed 2% of rows "
            "every 5 epochs: when fewer labels than that were flipped it must also flip "
            "correct labels, and when many were flipped it repairs some of them."
        ),
        setup=SETUP,
    )
