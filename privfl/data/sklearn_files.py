"""sklearn's bundled demo tables read from the files sklearn ships, without importing sklearn.

Importing sklearn costs a party process about 2.5 CPU seconds (it imports scipy.stats),
more than a one-epoch demo run spends on its Paillier work at test key sizes; a demo
party needs only the rows. The readers below follow sklearn's own loaders
(``sklearn/datasets/_base.py``: ``load_csv_data``, ``load_gzip_compressed_csv_data``)
and name the columns as they do; tests/data/test_sklearn_files.py checks each table
against sklearn's loader, value for value. Where the files are not where sklearn keeps
them, ``read`` returns None and the caller loads through sklearn.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np

_CANCER = (
    "radius", "texture", "perimeter", "area", "smoothness", "compactness", "concavity",
    "concave points", "symmetry", "fractal dimension",
)  # fmt: skip
BREAST_CANCER_NAMES = (
    *(f"mean {name}" for name in _CANCER),
    *(f"{name} error" for name in _CANCER),
    *(f"worst {name}" for name in _CANCER),
)
WINE_NAMES = (
    "alcohol", "malic_acid", "ash", "alcalinity_of_ash", "magnesium", "total_phenols",
    "flavanoids", "nonflavanoid_phenols", "proanthocyanins", "color_intensity", "hue",
    "od280/od315_of_diluted_wines", "proline",
)  # fmt: skip
DIGITS_NAMES = tuple(f"pixel_{row}_{column}" for row in range(8) for column in range(8))


def data_folder() -> Path | None:
    """sklearn's ``datasets/data`` folder, found without running sklearn's ``__init__``."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data"
    return folder if folder.is_dir() else None


def _headed_csv(path: Path, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray] | None:
    """``load_csv_data``'s format: a ``rows,columns,class names…`` line, then the rows."""
    with path.open(encoding="utf-8") as handle:
        head = handle.readline().split(",")
        table = np.loadtxt(handle, delimiter=",", dtype=np.float64, ndmin=2)
    rows, columns = int(head[0]), int(head[1])
    if table.shape != (rows, columns + 1) or columns != len(names):
        return None
    return table[:, :-1], table[:, -1].astype(int)


def read(dataset: str) -> tuple[np.ndarray, tuple[str, ...], np.ndarray] | None:
    """``(x, feature names, integer labels)`` of breast_cancer, wine or digits; else None."""
    folder = data_folder()
    if folder is None:
        return None
    if dataset == "digits":
        path = folder / "digits.csv.gz"
        if not path.is_file():
            return None
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            table = np.loadtxt(handle, delimiter=",", dtype=np.float64, ndmin=2)
        if table.shape[1] != len(DIGITS_NAMES) + 1:
            return None
        return table[:, :-1], DIGITS_NAMES, table[:, -1].astype(int)
    files = {"breast_cancer": ("breast_cancer.csv", BREAST_CANCER_NAMES)}
    files["wine"] = ("wine_data.csv", WINE_NAMES)
    if dataset not in files or not (folder / files[dataset][0]).is_file():
        return None
    name, names = files[dataset]
    found = _headed_csv(folder / name, names)
    return None if found is None else (found[0], names, found[1])
