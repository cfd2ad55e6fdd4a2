"""What a hidden-mode SecureBoost guest reads from its own won splits: the plain twin.

In the hidden instance space a guest's only per-row facts are the sides of its own won
splits (its columns cut at the thresholds the Host chose). This fits the plain booster
(whose trees the federated run equals) on labels flipped at ε with the OS CSPRNG, cuts
the guest's columns at its won splits, and clusters the training rows by those sides:
2-means and instance clustering (spectral, rows joined by shared sides); the larger
cluster is called benign. Breast cancer, the demo's columns; ``--draws`` per setting.

    python benchmarks/boost_guest_splits.py --draws 10
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

import numpy as np
from sklearn.cluster import KMeans, SpectralClustering

from privfl.learning import secureboost as sb
from privfl.mechanisms.label_dp import private_generator, randomized_response
from privfl.tools.bench.workload import breast_cancer

SETTINGS = ((2.0, 4.0, 3), (1.0, 4.0, 3), (2.0, 4.0, 2))  # ε, min_child_weight, depth


def majority(cluster: np.ndarray) -> np.ndarray:
    return np.where(cluster == int(np.bincount(cluster).argmax()), 1, 0)


def two_means(x: np.ndarray) -> np.ndarray:
    return majority(KMeans(n_clusters=2, n_init=10, random_state=0).fit_predict(x))


def instance_clustering(sides: np.ndarray) -> np.ndarray:
    both = np.hstack([sides, 1.0 - sides])
    graph = both @ both.T + 1e-6
    return majority(
        SpectralClustering(2, affinity="precomputed", random_state=0).fit_predict(graph)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=10)
    args = parser.parse_args()
    w = breast_cancer()
    assert w.host.y_train is not None
    y = w.host.y_train.astype(np.int64)
    groups = [w.host.x_train, w.guest.x_train]
    print("eps\tmin_child_weight\tdepth\tsplits\t2means\tsd\tinstance\tsd")
    for eps, mcw, depth in SETTINGS:
        params = replace(sb.BoostParams(), min_child_weight=mcw, depth=depth)
        splits, km, ic = [], [], []
        for _ in range(args.draws):
            flipped = randomized_response(y, eps, private_generator()).astype(float)
            booster = sb.fit(groups, flipped, params)
            binned = sb.bin_columns(w.guest.x_train, booster.edges[1])
            cuts = [
                (binned[:, n.feature] <= n.bin).astype(float)
                for tree in booster.trees
                for n in tree.values()
                if n.group == 1
            ]
            splits.append(len(cuts))
            if not cuts:
                continue
            sides = np.stack(cuts, axis=1)
            km.append(float((two_means(sides) == y).mean()))
            ic.append(float((instance_clustering(sides) == y).mean()))
        print(
            f"{eps:g}\t{mcw:g}\t{depth}\t{statistics.fmean(splits):.1f}\t"
            f"{statistics.fmean(km):.3f}\t{statistics.pstdev(km):.3f}\t"
            f"{statistics.fmean(ic):.3f}\t{statistics.pstdev(ic):.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
