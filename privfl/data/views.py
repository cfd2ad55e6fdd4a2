"""Each party's view of the rows: its own columns, the agreed split, its own standardisation."""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privfl.config.vertical import DATASET_TASK, DATASETS
from privfl.data import sklearn_files
from privfl.data.alignment import positions
from privfl.errors import ConfigError
from privfl.models.registry import kind_named

HOST_DEMO_COLUMNS = tuple(range(0, 10))  # seed 004's B_idx
GUEST_DEMO_COLUMNS = tuple(range(10, 30))  # seed 004's A_idx
COUNTS_ROWS = 2000
COUNTS_WEIGHTS = (0.4, -0.3, 0.25, 0.15, -0.2, 0.3)
COUNTS_INTERCEPT = -0.3


@dataclass(frozen=True, slots=True)
class Table:
    """Raw rows held by one party, before any split."""

    x: np.ndarray
    feature_names: tuple[str, ...]
    y: np.ndarray | None = None
    exposure: np.ndarray | None = None  # Poisson: the Host's exposures (not a feature)


@dataclass(frozen=True, slots=True)
class PartyData:
    """One party's standardised training and held-out rows (labels only at the Host)."""

    feature_names: tuple[str, ...]
    x_train: np.ndarray
    x_test: np.ndarray
    mean: np.ndarray
    scale: np.ndarray
    y_train: np.ndarray | None = None
    y_test: np.ndarray | None = None
    # The ordered row ids (docs/protocol.md §2.3): ids after PSI, else 0-based positions.
    train_ids: tuple[str, ...] = ()
    test_ids: tuple[str, ...] = ()
    # Poisson at the Host: log(exposure) of each row (None = exposure 1).
    offset_train: np.ndarray | None = None
    offset_test: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return int(self.x_train.shape[0] + self.x_test.shape[0])


def demo_columns(guests: int, dataset: str = "breast_cancer") -> dict[str, tuple[int, ...]]:
    """Seed 004's column split: the Host the first third, the guests share the rest.

    (Breast cancer: Host 0-9, guests 10-29.)
    """
    total = dataset_width(dataset)
    host = tuple(range(max(1, total // 3)))
    rest = tuple(range(len(host), total))
    if not 1 <= guests <= len(rest):
        raise ConfigError(f"the {dataset} demo supports 1 to {len(rest)} guests, not {guests}")
    parts = np.array_split(np.array(rest), guests)
    shares = {"host": host}
    shares.update({f"guest-{i + 1}": tuple(int(c) for c in p) for i, p in enumerate(parts)})
    return shares


def dataset_width(dataset: str) -> int:
    """How many feature columns a bundled table has."""
    return int(bundled(dataset)[0].shape[1])


def bundled(dataset: str) -> tuple[np.ndarray, tuple[str, ...], np.ndarray, np.ndarray | None]:
    """``(x, feature names, labels, exposure)`` of a bundled table.

    sklearn's breast_cancer (binary), diabetes (regression), wine and digits
    (multiclass), and ``counts``: a Poisson count table generated from a fixed public
    seed, with an exposure column (the Host's, not a feature).
    """
    if dataset not in DATASETS:
        raise ConfigError(f"unknown dataset {dataset!r}; bundled: {', '.join(DATASETS)}")
    if dataset == "counts":
        return count_table()
    shipped = sklearn_files.read(dataset)  # sklearn's files, without importing sklearn
    if shipped is not None:
        x, names, target = shipped
        return x, names, _labels(dataset, target), None
    from sklearn import datasets  # the demo only: CSV sites never load sklearn

    loader = {
        "breast_cancer": datasets.load_breast_cancer,
        "diabetes": datasets.load_diabetes,
        "wine": datasets.load_wine,
        "digits": datasets.load_digits,
    }[dataset]
    bunch = loader()
    names = tuple(str(n) for n in bunch.feature_names)
    return bunch.data.astype(np.float64), names, _labels(dataset, bunch.target), None


def _labels(dataset: str, target: np.ndarray) -> np.ndarray:
    """A bundled table's labels: floats for a regression task, integers otherwise."""
    if kind_named(DATASET_TASK[dataset]).label_type == "real":
        return target.astype(np.float64)
    return target.astype(np.int64)


def count_table(
    rows: int = COUNTS_ROWS,
) -> tuple[np.ndarray, tuple[str, ...], np.ndarray, np.ndarray]:
    """A public synthetic Poisson table: ``y ~ Poisson(exposure · exp(xβ + b))``.

    Fixed seed (the data is public, no privacy rests on it); exposures in [0.5, 3].
    """
    rng = np.random.default_rng(2024)
    weights = np.array(COUNTS_WEIGHTS)
    x = rng.normal(size=(rows, len(weights)))
    x[:, 1] = 0.6 * x[:, 0] + 0.8 * x[:, 1]  # correlated columns, as in real tables
    exposure = rng.uniform(0.5, 3.0, size=rows)
    rate = np.exp(x @ weights + COUNTS_INTERCEPT)
    y = rng.poisson(exposure * rate).astype(np.float64)
    names = tuple(f"x{i}" for i in range(len(weights)))
    return x, names, y, exposure


def demo_table(dataset: str, columns: tuple[int, ...], with_labels: bool) -> Table:
    """The bundled dataset restricted to ``columns`` (and its label column if asked).

    The Host (``with_labels``) of the counts table also gets its exposure column.
    """
    x, all_names, labels, exposure = bundled(dataset)
    if not columns or max(columns) >= x.shape[1] or min(columns) < 0:
        raise ConfigError(f"columns {columns} are outside the {x.shape[1]} demo columns")
    names = tuple(all_names[c] for c in columns)
    y = labels if with_labels else None
    return Table(
        x=x[:, list(columns)],
        feature_names=names,
        y=y,
        exposure=exposure if with_labels else None,
    )


def read_csv(
    path: Path,
    label_column: str | None,
    exposure_column: str | None = None,
    float_labels: bool = False,
) -> Table:
    """A numeric CSV with a header row; rows must be in the same order at every party.

    ``exposure_column`` (Poisson, Host): read apart from the features; must be positive.
    ``float_labels``: regression labels, kept as floats.
    """
    try:
        with path.open(newline="") as handle:
            header, values = _numeric_csv(csv.reader(handle), path)
    except FileNotFoundError as exc:
        raise ConfigError(f"data file {path} not found; check --data") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read data file {path}: {exc}") from exc
    if label_column is not None and label_column not in header:
        raise ConfigError(f"data file {path} has no label column {label_column!r}")
    if exposure_column is not None and exposure_column not in header:
        raise ConfigError(f"data file {path} has no exposure column {exposure_column!r}")
    apart = (label_column, exposure_column)
    features = [i for i, name in enumerate(header) if name not in apart]
    y = None
    if label_column is not None:
        column = values[:, header.index(label_column)]
        y = column if float_labels else column.astype(np.int64)
    exposure = None
    if exposure_column is not None:
        exposure = values[:, header.index(exposure_column)]
        if np.any(exposure <= 0):
            raise ConfigError(f"data file {path}: every exposure must be positive")
    return Table(
        x=values[:, features],
        feature_names=tuple(header[i] for i in features),
        y=y,
        exposure=exposure,
    )


CSV_BLOCK_ROWS = 4096
"""Rows parsed into floats at a time: the text of a block, never of the whole table, is
held as Python strings (about 80 bytes per cell, ten times the float it becomes)."""


def _numeric_csv(reader: Iterator[list[str]], path: Path) -> tuple[list[str], np.ndarray]:
    """The header and every row as float64, parsed block by block (``CSV_BLOCK_ROWS``)."""
    header = next(reader, None)
    blocks: list[np.ndarray] = []
    while header is not None:
        rows = list(itertools.islice(reader, CSV_BLOCK_ROWS))
        if not rows:
            break
        if any(len(row) != len(header) for row in rows):
            raise ConfigError(f"data file {path}: every row needs {len(header)} finite numbers")
        try:
            block = np.array([[float(v) for v in row] for row in rows], dtype=np.float64)
        except ValueError as exc:
            raise ConfigError(f"data file {path} has a non-numeric value: {exc}") from exc
        if not np.isfinite(block).all():
            raise ConfigError(f"data file {path}: every row needs {len(header)} finite numbers")
        blocks.append(block.reshape(len(rows), len(header)))
    if header is None or not blocks:
        raise ConfigError(f"data file {path} needs a header row and at least one data row")
    return header, np.concatenate(blocks)


def split_rows(rows: int, test_size: float, split_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Training and test row positions: sklearn's ``train_test_split`` rule, without sklearn.

    ``ceil(test_size · rows)`` test rows, the first of a ``RandomState(split_seed)``
    permutation, the rest training rows (``ShuffleSplit``; tests/data/test_sklearn_files.py
    checks it against sklearn). Importing sklearn would cost a party ~2.5 CPU seconds.
    """
    test = math.ceil(test_size * rows)
    if not 0 < test < rows:
        raise ConfigError(
            f"{rows} rows cannot be split into training and test rows at test_size {test_size}"
        )
    permutation = np.random.RandomState(split_seed).permutation(rows)
    return permutation[test:], permutation[:test]


def split_view(table: Table, test_size: float, split_seed: int) -> PartyData:
    """Apply the agreed split (same rule at every party) and standardise on training rows."""
    train_idx, test_idx = split_rows(table.x.shape[0], test_size, split_seed)
    x_train, x_test = table.x[train_idx], table.x[test_idx]
    mean = x_train.mean(axis=0)
    scale = x_train.std(axis=0)
    scale[scale == 0] = 1.0  # a constant column stays zero instead of dividing by zero
    y = table.y
    return PartyData(
        feature_names=table.feature_names,
        x_train=(x_train - mean) / scale,
        x_test=(x_test - mean) / scale,
        mean=mean,
        scale=scale,
        y_train=None if y is None else y[train_idx],
        y_test=None if y is None else y[test_idx],
        train_ids=positions(train_idx),
        test_ids=positions(test_idx),
        offset_train=None if table.exposure is None else np.log(table.exposure[train_idx]),
        offset_test=None if table.exposure is None else np.log(table.exposure[test_idx]),
    )


def central_baseline(dataset: str, test_size: float, split_seed: int) -> float:
    """Test accuracy of sklearn's LogisticRegression on all columns pooled (demo reference).

    Only the demo harness can compute this, since no real party holds every column.
    """
    from sklearn.linear_model import LogisticRegression

    table = demo_table(dataset, HOST_DEMO_COLUMNS + GUEST_DEMO_COLUMNS, True)
    view = split_view(table, test_size, split_seed)
    model = LogisticRegression(max_iter=1000).fit(view.x_train, view.y_train)
    return float(model.score(view.x_test, view.y_test))
