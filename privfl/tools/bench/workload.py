"""The benchmark's datasets: the demo's breast-cancer split and a synthetic n × d table."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privfl.data.views import PartyData, Table, demo_columns, demo_table, split_view

TEST_SIZE = 0.25
GUEST_SHARE = 0.6  # synthetic: 60 % of the features at the guest, 40 % at the host


@dataclass(frozen=True)
class Workload:
    """One dataset as the Host and one Guest hold it (standardised, split)."""

    name: str
    host: PartyData  # features + labels
    guest: PartyData
    tables: dict[str, Table] | None = None  # raw tables to write as CSV; None = demo data

    @property
    def rows(self) -> int:
        return int(self.host.x_train.shape[0])

    @property
    def test_rows(self) -> int:
        return int(self.host.x_test.shape[0])

    def describe(self) -> str:
        return (
            f"{self.name}: {self.rows} training + {self.test_rows} test rows, host "
            f"{self.host.x_train.shape[1]} (+ bias) / guest {self.guest.x_train.shape[1]} features"
        )


def breast_cancer() -> Workload:
    """The demo: seed 004's columns (host 0–9 + label, guest 10–29), 75/25 split, seed 0."""
    columns = demo_columns(1)
    host = split_view(demo_table("breast_cancer", columns["host"], True), TEST_SIZE, 0)
    guest = split_view(demo_table("breast_cancer", columns["guest-1"], False), TEST_SIZE, 0)
    return Workload("breast_cancer", host, guest)


def synthetic(rows: int, features: int, seed: int = 0) -> Workload:
    """``rows`` training rows (plus a quarter as many test rows) of ``features`` columns.

    Labels come from a logistic model on all columns, so training has something to learn.
    """
    rng = np.random.default_rng(seed)
    total = rows + -(-rows // 3)  # 75/25 split leaves exactly ``rows`` for training
    guest_features = max(1, round(features * GUEST_SHARE))
    host_features = max(1, features - guest_features)
    x = rng.normal(size=(total, host_features + guest_features))
    w = rng.normal(size=x.shape[1]) / np.sqrt(x.shape[1])
    y = (x @ w + rng.logistic(scale=0.5, size=total) > 0).astype(np.int64)
    host_table = Table(
        x=x[:, :host_features], feature_names=tuple(f"h{i}" for i in range(host_features)), y=y
    )
    guest_table = Table(
        x=x[:, host_features:], feature_names=tuple(f"g{i}" for i in range(guest_features))
    )
    return Workload(
        f"synthetic_{rows}x{features}",
        split_view(host_table, TEST_SIZE, 0),
        split_view(guest_table, TEST_SIZE, 0),
        {"host": host_table, "guest-1": guest_table},
    )


def write_csv(table: Table, path: Path) -> Path:
    """Write a table (label column ``label`` if it has labels) for a party's ``--data``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        header = list(table.feature_names) + (["label"] if table.y is not None else [])
        writer.writerow(header)
        for i, row in enumerate(table.x.tolist()):
            writer.writerow(
                [repr(v) for v in row] + ([int(table.y[i])] if table.y is not None else [])
            )
    return path
