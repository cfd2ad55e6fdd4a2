"""A site's own CSV keyed by an id column: read with pandas, checked, split by id, standardised.

Missing-value policy (stated in docs/guide.md and docs/deploy.md):

* a missing or empty **id** is an error (a row without an id cannot be matched);
* a missing **label** is an error (the Host cannot train on a row it cannot score);
* a missing **feature** value is allowed and replaced, after the split, by its column's
  mean over this site's training rows — that is 0 after standardisation — so it pulls
  the score neither way; the number of filled cells is logged;
* a column with no value at all in the training rows is an error.

The held-out split is agreed without talking: a row is a test row when a keyed hash of
its id (HMAC-SHA256 keyed by ``data.split_seed``) falls below ``test_size``. Every party
applies the same rule to the same intersected ids, so all agree on every row.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.data.views import PartyData
from privfl.errors import ConfigError
from privfl.models.registry import kind_named

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("privfl.data")


@dataclass(frozen=True, slots=True)
class IdTable:
    """One site's rows keyed by id; ``x`` may hold NaN for missing feature values."""

    ids: tuple[str, ...]
    x: np.ndarray
    feature_names: tuple[str, ...]
    y: np.ndarray | None = None
    exposure: np.ndarray | None = None  # Poisson, Host: exposures (not a feature)

    def take(self, order: Sequence[int]) -> IdTable:
        """The rows at ``order`` (positions in this table), in that order."""
        idx = np.asarray(order, dtype=np.int64)
        return IdTable(
            ids=tuple(self.ids[i] for i in idx),
            x=self.x[idx],
            feature_names=self.feature_names,
            y=None if self.y is None else self.y[idx],
            exposure=None if self.exposure is None else self.exposure[idx],
        )


def read_id_csv(
    path: Path,
    id_column: str | None,
    label_column: str | None = None,
    features: Sequence[str] = (),
    label_kind: str = "binary",
    exposure_column: str | None = None,
) -> IdTable:
    """Read a CSV with a header row; ``features`` empty means every other column.

    Without an id column the ids are the 1-based row numbers (rows aligned by position).
    ``label_kind``: ``binary`` (0/1), ``class`` (integers 0, 1, …) or ``real``
    (regression). ``exposure_column`` (Poisson, Host): positive exposures, not a feature.
    """
    frame = _read(path)
    columns = [str(c) for c in frame.columns]
    wanted = [*([id_column] if id_column else []), *([label_column] if label_column else [])]
    wanted += list(features) + ([exposure_column] if exposure_column else [])
    missing = [c for c in wanted if c not in columns]
    if missing:
        what = "exposure column" if missing[0] == exposure_column else "column"
        raise ConfigError(
            f"data file {path} has no {what} {missing[0]!r}; its columns are: {', '.join(columns)}"
        )
    if id_column:
        ids = _ids(frame[id_column], path, id_column)
    else:
        ids = tuple(str(i + 1) for i in range(len(frame)))
    apart = (id_column, label_column, exposure_column)
    names = list(features) or [c for c in columns if c not in apart]
    if not names:
        raise ConfigError(f"data file {path} has no feature column besides the id and label")
    x = np.column_stack([_numeric(frame[c], path, c) for c in names])
    y = None
    if label_column:
        y = _labels(frame[label_column], path, label_column, label_kind)
    exposure = None
    if exposure_column:
        exposure = _numeric(frame[exposure_column], path, exposure_column)
        if not (exposure > 0).all():  # NaN (missing) fails too
            raise ConfigError(
                f"data file {path}: every exposure in column {exposure_column!r} must be "
                "a positive number"
            )
    return IdTable(ids=ids, x=x, feature_names=tuple(names), y=y, exposure=exposure)


def _read(path: Path) -> pd.DataFrame:
    import pandas as pd  # only a party with its own CSV file pays for pandas

    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except FileNotFoundError as exc:
        raise ConfigError(f"data file {path} not found; check --data") from exc
    except (OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise ConfigError(f"cannot read data file {path} as CSV: {exc}") from exc
    except pd.errors.EmptyDataError as exc:
        raise ConfigError(f"data file {path} is empty; it needs a header row and data") from exc
    if frame.empty:
        raise ConfigError(f"data file {path} needs a header row and at least one data row")
    return frame


def _ids(column: pd.Series, path: Path, name: str) -> tuple[str, ...]:
    ids = column.str.strip()
    empty = ids == ""
    if empty.any():
        line = int(np.flatnonzero(empty.to_numpy())[0]) + 2
        raise ConfigError(f"data file {path}: line {line} has an empty id in column {name!r}")
    duplicated = ids.duplicated(keep="first")
    if duplicated.any():
        line = int(np.flatnonzero(duplicated.to_numpy())[0]) + 2
        raise ConfigError(
            f"data file {path}: {int(duplicated.sum())} duplicate id(s) in column {name!r}, "
            f"the first on line {line}; ids must be unique"
        )
    return tuple(str(i) for i in ids)


MISSING = ("", "NA", "N/A", "NaN", "nan", "null", "NULL", "?")


def _numeric(column: pd.Series, path: Path, name: str) -> np.ndarray:
    """Floats with NaN where the cell is missing; anything else non-numeric is an error."""
    text = column.str.strip()
    missing = text.isin(MISSING)
    import pandas as pd

    values = pd.to_numeric(text.where(~missing), errors="coerce")
    bad = values.isna() & ~missing
    if bad.any():
        line = int(np.flatnonzero(bad.to_numpy())[0]) + 2
        raise ConfigError(
            f"data file {path}: column {name!r} has a non-numeric value {text[bad].iloc[0]!r} "
            f"on line {line}; use numbers, or leave the cell empty for a missing value"
        )
    array: np.ndarray = values.to_numpy(dtype=np.float64)
    if np.isinf(array).any():
        raise ConfigError(f"data file {path}: column {name!r} holds an infinite value")
    return array


def _labels(column: pd.Series, path: Path, name: str, kind: str = "binary") -> np.ndarray:
    values = _numeric(column, path, name)
    if np.isnan(values).any():
        line = int(np.flatnonzero(np.isnan(values))[0]) + 2
        raise ConfigError(f"data file {path}: the label is missing on line {line}")
    if kind == "real":
        return values
    if kind == "class":
        if (values < 0).any() or (values % 1 != 0).any():
            raise ConfigError(
                f"data file {path}: label column {name!r} must hold class numbers 0, 1, 2, …"
            )
        return values.astype(np.int64)
    if not np.isin(values, (0.0, 1.0)).all():
        raise ConfigError(f"data file {path}: label column {name!r} must hold 0 or 1 only")
    return values.astype(np.int64)


def held_out_mask(ids: Sequence[str], test_size: float, split_seed: int) -> np.ndarray:
    """True for the held-out rows: HMAC-SHA256(key=split_seed, id) below ``test_size``."""
    key = f"privfl-split-{split_seed}".encode()
    draws = [
        int.from_bytes(hmac.new(key, i.encode(), hashlib.sha256).digest()[:8], "big") / 2.0**64
        for i in ids
    ]
    return np.asarray(draws) < test_size


def split_and_standardise(table: IdTable, test_size: float, split_seed: int) -> PartyData:
    """Split aligned rows by id, standardise on the training rows, fill missing values."""
    test = held_out_mask(table.ids, test_size, split_seed)
    if test.all() or not test.any():
        raise ConfigError(
            f"the {len(test)} shared rows leave an empty training or test split; "
            "more shared ids are needed (or change data.test_size)"
        )
    x_train, x_test = table.x[~test], table.x[test]
    empty = np.isnan(x_train).all(axis=0)
    if empty.any():
        name = table.feature_names[int(np.flatnonzero(empty)[0])]
        raise ConfigError(f"column {name!r} has no value in the training rows; drop it")
    mean = np.nanmean(x_train, axis=0)
    scale = np.nanstd(x_train, axis=0)
    scale[scale == 0] = 1.0  # a constant column stays zero instead of dividing by zero
    filled = int(np.isnan(table.x).sum())
    if filled:
        log.info("filled %d missing feature values with their training mean", filled)
    y = table.y
    return PartyData(
        feature_names=table.feature_names,
        x_train=np.nan_to_num((x_train - mean) / scale, nan=0.0),
        x_test=np.nan_to_num((x_test - mean) / scale, nan=0.0),
        mean=mean,
        scale=scale,
        y_train=None if y is None else y[~test],
        y_test=None if y is None else y[test],
        train_ids=tuple(i for i, held in zip(table.ids, test, strict=True) if not held),
        test_ids=tuple(i for i, held in zip(table.ids, test, strict=True) if held),
        offset_train=None if table.exposure is None else np.log(table.exposure[~test]),
        offset_test=None if table.exposure is None else np.log(table.exposure[test]),
    )


def standardise_with(table: IdTable, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Rows standardised with a saved model's statistics; missing values become 0."""
    rows: np.ndarray = np.nan_to_num((table.x - mean) / scale, nan=0.0)
    return rows


@dataclass(frozen=True, slots=True)
class SiteData:
    """Where a site's rows come from: command-line flags over its ``[parties.<name>]`` keys."""

    path: Path | None
    id_column: str | None
    label_column: str | None
    features: tuple[str, ...]
    label_kind: str = "binary"  # binary, class or real (read_id_csv)
    exposure_column: str | None = None


def site_data(
    job: JobConfig,
    name: str,
    path: Path | None = None,
    id_column: str | None = None,
    label_column: str | None = None,
    features: Sequence[str] = (),
) -> SiteData:
    """Merge flags with the job file; a relative ``data`` path is relative to the job file."""
    spec = job.party(name)
    if path is None and spec.data:
        base = job.source.parent if job.source else Path.cwd()
        path = base / spec.data
    label = label_column or spec.label_column or None
    if spec.role == "host":
        label = label or "label"
    elif label:
        raise ConfigError(f"{name} is a guest: only the host holds a label column")
    kind = job.model.kind
    return SiteData(
        path=path,
        id_column=id_column or spec.id_column or None,
        label_column=label,
        features=tuple(features) or spec.features,
        label_kind=kind_named(kind).label_type,
        exposure_column=exposure_column_of(job, name),
    )


def exposure_column_of(job: JobConfig, name: str) -> str | None:
    """The column of exposures this party reads: the Host's ``[model] exposure``, for a kind
    that reads one (Poisson)."""
    host = job.party(name).role == "host"
    reads = "exposure" in kind_named(job.model.kind).reads
    return (job.model.exposure or None) if host and reads else None


def load_id_table(site: SiteData) -> IdTable | None:
    """The site's id-keyed table, or None when it has no id column (position-aligned rows)."""
    if site.id_column is None:
        return None
    if site.path is None:
        raise ConfigError("--id-column needs --data FILE (or `data` in the job file)")
    return read_id_csv(
        site.path,
        site.id_column,
        site.label_column,
        site.features,
        site.label_kind,
        site.exposure_column,
    )
