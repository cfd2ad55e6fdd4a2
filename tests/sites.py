"""Two or three sites' own CSV files from the demo table: shuffled, partly overlapping ids."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.datasets import load_breast_cancer


@dataclass(frozen=True)
class Sites:
    """The files written and the ground truth the tests check against."""

    files: dict[str, Path]
    ids: dict[str, set[str]]
    shared: set[str]
    columns: dict[str, list[str]]


def make_sites(
    folder: Path,
    guests: int = 1,
    *,
    only_fraction: float = 0.1,
    seed: int = 7,
    missing: int = 0,
) -> Sites:
    """Host: columns 0–9 + label; guests split columns 10–29. Each site drops its own
    ``only_fraction`` of ids (so every site holds ids the others lack) and shuffles its rows.
    ``missing`` cells of the host's file are emptied (missing values)."""
    rng = np.random.default_rng(seed)
    bunch = load_breast_cancer()
    names = [str(n).replace(" ", "_") for n in bunch.feature_names]
    ids = np.array([f"P{i:05d}" for i in range(len(bunch.target))])
    parts = np.array_split(np.arange(10, 30), guests)
    layout = {"host": list(range(10)), **{f"guest-{i + 1}": list(p) for i, p in enumerate(parts)}}
    # Disjoint "only at one site" ids: each site lacks a slice that every other site keeps.
    order = rng.permutation(len(ids))
    chunk = int(only_fraction * len(ids))
    dropped = {site: set(ids[order[k * chunk : (k + 1) * chunk]]) for k, site in enumerate(layout)}
    folder.mkdir(parents=True, exist_ok=True)
    files, held, columns = {}, {}, {}
    for site, cols in layout.items():
        keep = np.array([i not in dropped[site] for i in ids])
        frame = pd.DataFrame(bunch.data[keep][:, cols], columns=[names[c] for c in cols])
        frame.insert(0, "patient_id", ids[keep])
        if site == "host":
            frame["diagnosis"] = bunch.target[keep]
            for _ in range(missing):
                frame.iat[int(rng.integers(len(frame))), int(rng.integers(1, 11))] = np.nan
        frame = frame.sample(frac=1.0, random_state=int(rng.integers(1 << 31)))
        path = folder / f"{site}.csv"
        frame.to_csv(path, index=False)
        files[site], held[site] = path, set(ids[keep])
        columns[site] = [names[c] for c in cols]
    shared = set.intersection(*held.values())
    return Sites(files=files, ids=held, shared=shared, columns=columns)
