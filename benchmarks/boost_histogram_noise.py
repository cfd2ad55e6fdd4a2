"""What noise on a SecureBoost guest's bin sums would cost: held-out AUC of the plain booster.

The option weighed in docs/security.md ("A deviating Host"): the guest adds uniform
noise of up to ``N`` gradient units (``N·2^20`` in the fixed-point fields) to every
bin's ``Σg`` (centred) and ``Σh`` (non-negative) before it sends them. The plain
booster of learning/secureboost.py grows the same trees as the federated run, so the
guest's histograms are noised here in the clear. Demo columns of the test helpers
(breast cancer, host 10 / guest 20 columns), 10 trees of depth 3, 32 bins; noise from
the OS CSPRNG, ``--runs`` runs per level.

    python benchmarks/boost_histogram_noise.py --runs 5
"""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers import memory_job, party_data

from privfl.learning import secureboost as sb
from privfl.learning.metrics import binary_metrics


def auc(units: float, guest_columns: int, data: dict) -> float:  # type: ignore[type-arg]
    """One booster's held-out AUC with the guest's bin sums noised by up to ``units``."""
    honest = sb.histogram
    rng = np.random.default_rng(secrets.randbits(128))
    top = int(units * (1 << sb.FRAC_BITS))

    def noisy(binned: np.ndarray, g: np.ndarray, h: np.ndarray, bins: int) -> np.ndarray:
        out = honest(binned, g, h, bins)
        if top and binned.shape[1] == guest_columns:  # the guest's group only
            out[..., 0] += rng.integers(0, top, out.shape[:2]) - top // 2
            out[..., 1] += rng.integers(0, top, out.shape[:2])
        return out

    host, guest = data["host"], data["guest-1"]
    sb.histogram = noisy
    try:
        params = sb.BoostParams(trees=10, depth=3, bins=32)
        booster = sb.fit([host.x_train, guest.x_train], host.y_train.astype(float), params)
    finally:
        sb.histogram = honest
    p = booster.predict_proba([host.x_test, guest.x_test])
    return float(binary_metrics(host.y_test, p)["auc"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    data = party_data(memory_job(1))
    columns = data["guest-1"].x_train.shape[1]
    for units in (0, 1, 8, 64):
        runs = [auc(units, columns, data) for _ in range(args.runs if units else 1)]
        print(
            f"noise up to {units:>2} gradient units per bin: AUC {np.mean(runs):.4f} "
            f"(min {min(runs):.4f}, max {max(runs):.4f}, {len(runs)} runs)"
        )


if __name__ == "__main__":
    main()
