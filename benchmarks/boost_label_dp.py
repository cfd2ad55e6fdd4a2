"""SecureBoost's label DP: held-out AUC of the plain booster at each ε, mechanism and tree setting.

The federated trees equal the plain booster's (learning/secureboost.py) split for split,
so the Host's randomized response is measured here in the clear: flip the training
labels once at ε (the OS CSPRNG), fit, score the untouched held-out labels. Tables:
breast cancer (the demo's columns, host 10 / guest 20) and the bench's synthetic
10,000-row table (tools/bench/boost.synthetic_boost). Mechanisms:

- ``rr``: train on the flipped labels as they are;
- ``rr+debias``: the same flips, the base score from the de-biased label mean
  ``(m - ρ)/(1 - 2ρ)`` (post-processing of the flipped labels: no ε).

Each row of the output: table, ε, mechanism, tree setting, mean held-out AUC over
``--draws`` private draws, its sd, and the plaintext booster's AUC at the same setting
and at the old defaults.

    python benchmarks/boost_label_dp.py --draws 20
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from privfl.learning import secureboost as sb
from privfl.learning.metrics import binary_metrics
from privfl.mechanisms.label_dp import flip_probability, private_generator, randomized_response
from privfl.tools.bench.boost import synthetic_boost
from privfl.tools.bench.workload import Workload, breast_cancer

OLD = sb.BoostParams()  # trees 10, depth 3, lr 0.3, l2 1, min_child_weight 1
SETTINGS = {
    "old": OLD,
    "lr0.1x30": replace(OLD, trees=30, learning_rate=0.1),
    "mcw4": replace(OLD, min_child_weight=4.0),
    "lr0.1x30mcw4": replace(OLD, trees=30, learning_rate=0.1, min_child_weight=4.0),
    "lr0.1x30l2x10": replace(OLD, trees=30, learning_rate=0.1, l2=10.0),
}


def auc_of(w: Workload, labels: np.ndarray, params: sb.BoostParams, base: float | None) -> float:
    """Held-out AUC of the booster fit on ``labels`` (base score ``base`` if given)."""
    if base is None:
        model = sb.fit([w.host.x_train, w.guest.x_train], labels, params)
    else:
        model = _fit_from(w, labels, params, base)
    p = model.predict_proba([w.host.x_test, w.guest.x_test])
    assert w.host.y_test is not None
    return float(binary_metrics(w.host.y_test, p)["auc"])


def _fit_from(w: Workload, labels: np.ndarray, params: sb.BoostParams, base: float) -> sb.Booster:
    """``sb.fit`` with the starting score ``base`` instead of the labels' log-odds."""
    plain = sb.base_margin
    sb.base_margin = lambda _labels: base  # type: ignore[assignment]
    try:
        return sb.fit([w.host.x_train, w.guest.x_train], labels, params)
    finally:
        sb.base_margin = plain


def debiased_base(noisy: np.ndarray, eps: float) -> float:
    """Log-odds of ``(m - ρ)/(1 - 2ρ)``, the flipped labels' mean de-biased, clipped."""
    rho = flip_probability(eps)
    m = (float(np.mean(noisy)) - rho) / (1 - 2 * rho)
    m = min(max(m, 0.02), 0.98)
    return math.log(m / (1 - m))


def measure(
    w: Workload, eps: float, mech: str, params: sb.BoostParams, draws: int
) -> tuple[float, float]:
    """Mean and sd of the held-out AUC over ``draws`` private flips."""
    assert w.host.y_train is not None
    y = w.host.y_train.astype(np.int64)
    out = []
    for _ in range(draws):
        noisy = randomized_response(y, eps, private_generator()).astype(np.float64)
        base = debiased_base(noisy, eps) if mech == "rr+debias" else None
        out.append(auc_of(w, noisy, params, base))
    return statistics.fmean(out), statistics.stdev(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--tables", default="breast_cancer,synthetic")
    parser.add_argument("--eps", default="0.5,1,1.5,2")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--mechs", default="rr,rr+debias")
    args = parser.parse_args()
    tables: dict[str, Callable[[], Workload]] = {
        "breast_cancer": breast_cancer,
        "synthetic": synthetic_boost,
    }
    print("table\teps\tmechanism\tsetting\tauc_mean\tauc_sd\tplain_same\tplain_old\tdraws")
    for name in args.tables.split(","):
        w = tables[name]()
        assert w.host.y_train is not None
        y = w.host.y_train.astype(np.float64)
        plain_old = auc_of(w, y, OLD, None)
        for setting in args.settings.split(","):
            params = SETTINGS[setting]
            plain = auc_of(w, y, params, None)
            for eps in (float(e) for e in args.eps.split(",")):
                for mech in args.mechs.split(","):
                    start = time.perf_counter()
                    mean, sd = measure(w, eps, mech, params, args.draws)
                    print(
                        f"{name}\t{eps:g}\t{mech}\t{setting}\t{mean:.4f}\t{sd:.4f}\t"
                        f"{plain:.4f}\t{plain_old:.4f}\t{args.draws}"
                        f"\t# {time.perf_counter() - start:.0f}s",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
