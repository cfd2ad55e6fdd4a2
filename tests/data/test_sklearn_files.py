"""The demo tables and the splits without sklearn equal sklearn's own, value for value."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from sklearn import datasets
from sklearn.model_selection import train_test_split

from privfl.data import sklearn_files
from privfl.data.images import stratified_split
from privfl.data.views import split_rows
from privfl.errors import ConfigError

LOADERS = {
    "breast_cancer": datasets.load_breast_cancer,
    "wine": datasets.load_wine,
    "digits": datasets.load_digits,
}


@pytest.mark.parametrize("dataset", sorted(LOADERS))
def test_each_shipped_table_is_sklearns(dataset: str) -> None:
    bunch = LOADERS[dataset]()

    found = sklearn_files.read(dataset)

    assert found is not None
    x, names, target = found
    assert x.dtype == bunch.data.dtype and np.array_equal(x, bunch.data)
    assert names == tuple(str(n) for n in bunch.feature_names)
    assert np.array_equal(target, bunch.target)


def test_another_table_is_left_to_sklearn() -> None:
    assert sklearn_files.read("diabetes") is None


@pytest.mark.parametrize("rows", [2, 3, 10, 143, 569, 1797])
@pytest.mark.parametrize("test_size", [0.1, 0.25, 0.5, 0.75, 0.9])
@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_the_split_is_train_test_split(rows: int, test_size: float, seed: int) -> None:
    index = np.arange(rows)
    try:
        want = train_test_split(index, test_size=test_size, random_state=seed)
    except ValueError:  # an empty training set: refused alike
        with pytest.raises(ConfigError, match="cannot be split"):
            split_rows(rows, test_size, seed)
        return

    got = split_rows(rows, test_size, seed)

    assert [g.tolist() for g in got] == [w.tolist() for w in want]


@pytest.mark.parametrize(
    ("dataset", "test_size", "seed"),
    [
        ("digits", 0.25, 0),
        ("digits", 0.25, 7),
        ("digits", 0.1, 3),
        ("wine", 0.3, 1),
        ("breast_cancer", 0.5, 2),
        ("wine", 0.9, 0),
    ],
)
def test_the_stratified_split_is_train_test_splits(
    dataset: str, test_size: float, seed: int
) -> None:
    labels = LOADERS[dataset]().target
    index = np.arange(len(labels))
    want = train_test_split(index, test_size=test_size, random_state=seed, stratify=labels)

    got = stratified_split(labels, test_size, seed)

    assert [g.tolist() for g in got] == [w.tolist() for w in want]


def test_a_stratified_split_with_a_class_of_one_row_is_refused() -> None:
    with pytest.raises(ConfigError, match="cannot be split"):
        stratified_split(np.array([0, 0, 0, 1, 1, 1, 2]), 0.25, 0)


# What a party process runs to load and split its rows, and the modules it must not import:
# the vertical demo needs neither sklearn nor scipy; a horizontal party (torch, the
# accountants' scipy.special) loads digits without sklearn or scipy.stats.
PARTY_LOADS = {
    "vertical": (
        "from privfl.data.views import demo_table, split_view\n"
        "for name, columns in (('breast_cancer', (0, 1)), ('digits', (5,)), ('wine', (2,))):\n"
        "    split_view(demo_table(name, columns, True), 0.25, 0)\n",
        ("sklearn", "scipy"),
    ),
    "horizontal": (
        "from privfl.parties.horizontal import aggregator, client\n"
        "from privfl.data.images import load_dataset\n"
        "load_dataset('digits')\n",
        ("sklearn", "scipy.stats"),
    ),
}


@pytest.mark.parametrize("mode", sorted(PARTY_LOADS))
def test_a_party_loads_and_splits_its_rows_without_importing_sklearn(mode: str) -> None:
    code, heavy = PARTY_LOADS[mode]
    report = f"import sys\nprint(sorted(m for m in sys.modules if m.startswith({heavy!r})))\n"

    done = subprocess.run(
        [sys.executable, "-c", code + report], capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
