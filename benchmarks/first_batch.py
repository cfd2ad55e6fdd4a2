"""What the Host's private start costs and buys: accuracy, and a guest's label search.

Accuracy: the plaintext twin (``reference_train``, which the encrypted run equals) of
every GLM kind on its bundled table and default settings, 30 epochs, from zero and from
``learning.start.host_start`` (``--starts`` draws; without ``--warmup`` only the draw).

Attack: a guest's nearest-binary-labels search (exact, over all ``2^b`` labellings by
meet-in-the-middle, metric ``(X_gᵀX_g)⁻¹``) on the first gradient of a logistic batch of
``b`` rows and ``F`` guest columns of breast cancer; "aware" also tells the guest the
Host's fit ``z_H ≈ a + c·(4y − 2)`` on all rows. A later batch (zero start, after one
joint epoch) for comparison. Fractions of labels right; majority class about 0.63.

    python benchmarks/first_batch.py --trials 40 --starts 3
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from privfl.config.vertical import TrainingConfig
from privfl.data.views import PartyData, demo_columns, demo_table, split_view
from privfl.learning import start as starts
from privfl.learning.glm import glm_named, mean_of, reference_train

CASES = [  # model, dataset, batch size, metric
    (glm_named("logistic"), "breast_cancer", 0, "accuracy"),
    (glm_named("multiclass", 10, "taylor"), "digits", 64, "accuracy"),
    (glm_named("multiclass", 10, "separable"), "digits", 64, "accuracy"),
    (glm_named("multiclass", 3, "taylor"), "wine", 0, "accuracy"),
    (glm_named("linear"), "diabetes", 0, "rmse"),
    (glm_named("poisson"), "counts", 0, "deviance"),
]


def split(dataset: str) -> tuple[PartyData, PartyData]:
    """The demo's Host and guest views (one guest), standardised, 75/25."""
    cols = demo_columns(1, dataset)
    host = split_view(demo_table(dataset, cols["host"], True), 0.25, 0)
    guest = split_view(demo_table(dataset, cols["guest-1"], False), 0.25, 0)
    return host, guest


def accuracy(draws: int, warmup: bool) -> None:
    for glm, dataset, batch, metric in CASES:
        host, guest = split(dataset)
        assert host.y_train is not None and host.y_test is not None
        x_h = np.hstack([host.x_train, np.ones((len(host.x_train), 1))])
        pen = [np.r_[np.ones(host.x_train.shape[1]), 0.0], np.ones(guest.x_train.shape[1])]
        cfg = TrainingConfig(epochs=30, batch_size=batch)
        results = []
        for d in range(draws + 1):
            start = None
            if d:
                rng = np.random.default_rng(100 + d)
                start = (
                    starts.host_start(glm, x_h, host.y_train, offset=host.offset_train,
                                      penalised=pen[0], training=cfg, rng=rng)
                    if warmup else starts.draw(glm, x_h.shape[1], rng)
                )  # fmt: skip
            th, _ = reference_train([x_h, guest.x_train], host.y_train, cfg,
                                    np.random.default_rng(0), glm, host.offset_train, pen,
                                    start=start)  # fmt: skip
            x_t = np.hstack([host.x_test, np.ones((len(host.x_test), 1))])
            eta = x_t @ th[0] + guest.x_test @ th[1]
            got = glm.metrics(host.y_test, mean_of(glm, eta, host.offset_test))
            results.append(float(got[metric]))
        print(f"{glm.kind:10} {dataset:13} {glm.sigmoid:9} {metric}: zero {results[0]:.4f}, "
              f"private {np.mean(results[1:]):.4f} ({min(results[1:]):.4f}–"
              f"{max(results[1:]):.4f})", flush=True)  # fmt: skip


def subset_sums(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    bits = ((np.arange(1 << len(rows))[:, None] >> np.arange(len(rows))) & 1).astype(float)
    return bits @ rows, bits


def nearest(x: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The binary ``y`` minimising ``‖xᵀy − target‖`` in the metric ``(xᵀx)⁻¹``."""
    whiten = np.linalg.cholesky(np.linalg.inv(x.T @ x))
    xw, tw = x @ whiten, target @ whiten
    half = len(x) // 2
    (a, a_bits), (b, b_bits) = subset_sums(xw[:half]), subset_sums(xw[half:])
    a = a - tw
    bb = (b * b).sum(1)
    best, pick = np.inf, np.zeros(len(x))
    for i in range(0, len(a), 512):
        d = (a[i : i + 512] ** 2).sum(1)[:, None] + bb[None, :] + 2 * a[i : i + 512] @ b.T
        j = np.unravel_index(np.argmin(d), d.shape)
        if d[j] < best:
            best, pick = d[j], np.r_[a_bits[i + j[0]], b_bits[j[1]]]
    return pick


def attack(trials: int, b: int, features: list[int]) -> None:
    host, guest = split("breast_cancer")
    x_h = np.hstack([host.x_train, np.ones((len(host.x_train), 1))])
    y = host.y_train
    assert y is not None
    pen = np.r_[np.ones(host.x_train.shape[1]), 0.0]
    glm, cfg = glm_named("logistic"), TrainingConfig()
    joint, _ = reference_train([x_h, guest.x_train], y, replace(cfg, epochs=1, batch_size=64),
                               np.random.default_rng(0), glm)  # fmt: skip
    arms: dict[str, Callable[[np.random.Generator], np.ndarray]] = {
        "zero start": lambda rng: np.zeros((x_h.shape[1], 1)),
        "draw only": lambda rng: starts.draw(glm, x_h.shape[1], rng),
        "draw + warm-up": lambda rng: starts.host_start(
            glm, x_h, y, offset=None, penalised=pen, training=cfg, rng=rng
        ),
        "later batch": lambda rng: joint[0],
    }
    for name, make in arms.items():
        for f in features:
            rng = np.random.default_rng(1)
            right = {"naive": 0, "aware": 0}
            whole = {"naive": 0, "aware": 0}
            for _ in range(trials):
                z_all = (x_h @ make(rng))[:, 0]
                rows = rng.choice(len(y), b, replace=False)
                cols = rng.choice(guest.x_train.shape[1], f, replace=False)
                x, yb = guest.x_train[rows][:, cols], y[rows]
                four_d = z_all[rows] + 2.0 - 4.0 * yb  # the guests' scores are 0 here
                gradient = x.T @ four_d
                a, c = np.linalg.lstsq(np.c_[np.ones(len(y)), 4 * y - 2.0], z_all, rcond=None)[0]
                c = min(c, 0.9) if name != "zero start" else 0.0
                targets = {
                    "naive": (2.0 * x.sum(0) - gradient) / 4.0,
                    "aware": (gradient - x.sum(0) * (a + 2.0 * (1.0 - c))) / (4.0 * (c - 1.0)),
                }
                for kind, target in targets.items():
                    guess = nearest(x, target)
                    right[kind] += int((guess == yb).sum())
                    whole[kind] += int(np.array_equal(guess, yb))
            print(f"{name:15} b={b} F={f}: naive {right['naive'] / (b * trials):.3f} "
                  f"({whole['naive']}/{trials} whole), aware {right['aware'] / (b * trials):.3f} "
                  f"({whole['aware']}/{trials} whole)", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--rows", type=int, default=24)
    args = parser.parse_args()
    accuracy(args.starts, warmup=True)
    attack(args.trials, args.rows, [6, 12])


if __name__ == "__main__":
    main()
