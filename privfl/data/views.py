"""Each party's view of the rows: its own columns, the agreed split, its own standardisation."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privfl.data.alignment import positions
from privfl.errors import ConfigError

DATASETS = ("breast_cancer",)
HOST_DEMO_COLUMNS = tuple(range(0, 10))  # seed 004's B_idx
GUEST_DEMO_COLUMNS = tuple(range(10, 30))  # seed 004's A_idx


@dataclass(frozen=True, slots=True)
class Table:
    """Raw rows held by one party, before any split."""

    x: np.ndarray
    feature_names: tuple[str, ...]
    y: np.ndarray | None = None


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

    @property
    def rows(self) -> int:
        return int(self.x_train.shape[0] + self.x_test.shape[0])


def demo_columns(guests: int) -> dict[str, tuple[int, ...]]:
    """Seed 004's column split; the guest columns are divided among ``guests`` guests."""
    if not 1 <= guests <= len(GUEST_DEMO_COLUMNS):
        raise ConfigError(f"the demo supports 1 to {len(GUEST_DEMO_COLUMNS)} guests, not {guests}")
    parts = np.array_split(np.array(GUEST_DEMO_COLUMNS), guests)
    shares = {"host": HOST_DEMO_COLUMNS}
    shares.update({f"guest-{i + 1}": tuple(int(c) for c in p) for i, p in enumerate(parts)})
    return shares


def demo_table(dataset: str, columns: tuple[int, ...], with_labels: bool) -> Table:
    """The bundled dataset restricted to ``columns`` (and its label column if asked)."""
    if dataset not in DATASETS:
        raise ConfigError(f"unknown dataset {dataset!r}; bundled: {', '.join(DATASETS)}")
    from sklearn.datasets import load_breast_cancer  # the demo only: CSV sites never load sklearn

    bunch = load_breast_cancer()
    if not columns or max(columns) >= bunch.data.shape[1] or min(columns) < 0:
        raise ConfigError(f"columns {columns} are outside the {bunch.data.shape[1]} demo columns")
    names = tuple(str(bunch.feature_names[c]) for c in columns)
    y = bunch.target.astype(np.int64) if with_labels else None
    return Table(x=bunch.data[:, list(columns)].astype(np.float64), feature_names=names, y=y)


def read_csv(path: Path, label_column: str | None) -> Table:
    """A numeric CSV with a header row; rows must be in the same order at every party."""
    try:
        with path.open(newline="") as handle:
            rows = list(csv.reader(handle))
    except FileNotFoundError as exc:
        raise ConfigError(f"data file {path} not found; check --data") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read data file {path}: {exc}") from exc
    if len(rows) < 2:
        raise ConfigError(f"data file {path} needs a header row and at least one data row")
    header, body = rows[0], rows[1:]
    if label_column is not None and label_column not in header:
        raise ConfigError(f"data file {path} has no label column {label_column!r}")
    try:
        values = np.array([[float(v) for v in row] for row in body], dtype=np.float64)
    except ValueError as exc:
        raise ConfigError(f"data file {path} has a non-numeric value: {exc}") from exc
    if values.ndim != 2 or values.shape[1] != len(header) or not np.isfinite(values).all():
        raise ConfigError(f"data file {path}: every row needs {len(header)} finite numbers")
    features = [i for i, name in enumerate(header) if name != label_column]
    y = None
    if label_column is not None:
        y = values[:, header.index(label_column)].astype(np.int64)
    return Table(x=values[:, features], feature_names=tuple(header[i] for i in features), y=y)


def split_view(table: Table, test_size: float, split_seed: int) -> PartyData:
    """Apply the agreed split (same rule at every party) and standardise on training rows."""
    index = np.arange(table.x.shape[0])
    from sklearn.model_selection import train_test_split

    train_idx, test_idx = train_test_split(index, test_size=test_size, random_state=split_seed)
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
