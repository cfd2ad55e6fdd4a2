"""Datasets for the horizontal mode (digits; MNIST/Fashion-MNIST IDX; CIFAR-10 binaries), splits."""

from __future__ import annotations

import gzip
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privfl.data import sklearn_files
from privfl.errors import ConfigError

IDX_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
CIFAR_TRAIN = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
CIFAR_TEST = ("test_batch.bin",)


@dataclass(frozen=True, slots=True)
class Dataset:
    """Train and test arrays: x as float32 (N, C, H, W) or (N, F), y as int64."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def load_dataset(name: str, data_dir: str = "", test_size: float = 0.25, seed: int = 0) -> Dataset:
    """Load a dataset by name; the file-based ones read from ``data_dir``."""
    if name == "digits":
        pixels, target = _digits()
        x = (pixels / 16.0).astype(np.float32)
        y = target.astype(np.int64)
        train, test = stratified_split(y, test_size, seed)
        return Dataset(x[train], y[train], x[test], y[test], 10)
    if not data_dir:
        raise ConfigError(f"dataset {name} is read from files: pass --data-dir DIR")
    folder = Path(data_dir)
    if name in ("mnist", "fmnist"):
        x_tr, y_tr = _read_idx_pair(folder, *IDX_FILES["train"])
        x_te, y_te = _read_idx_pair(folder, *IDX_FILES["test"])
        return Dataset(x_tr[:, None], y_tr, x_te[:, None], y_te, 10)
    x_tr, y_tr = _read_cifar(folder, CIFAR_TRAIN)
    x_te, y_te = _read_cifar(folder, CIFAR_TEST)
    return Dataset(x_tr, y_tr, x_te, y_te, 10)


def _digits() -> tuple[np.ndarray, np.ndarray]:
    """sklearn's digits (pixels 0–16, labels), from its file when it is where sklearn keeps it."""
    shipped = sklearn_files.read("digits")
    if shipped is not None:
        return shipped[0], shipped[2]
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return np.asarray(bunch.data), np.asarray(bunch.target)


def _approximate_mode(counts: np.ndarray, draws: int, rng: np.random.RandomState) -> np.ndarray:
    """sklearn's ``utils.extmath._approximate_mode``: per class, its share of ``draws``
    rounded down, the rest to the largest remainders (ties broken by ``rng``)."""
    continuous = counts / counts.sum() * draws
    floored = np.floor(continuous)
    need = int(draws - floored.sum())
    remainder = continuous - floored
    for value in np.sort(np.unique(remainder))[::-1] if need > 0 else ():
        (tied,) = np.where(remainder == value)
        chosen = rng.choice(tied, size=min(len(tied), need), replace=False)
        floored[chosen] += 1
        need -= len(chosen)
        if need == 0:
            break
    return np.asarray(floored, dtype=np.int64)


def stratified_split(
    labels: np.ndarray, test_size: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Training and test positions: ``train_test_split(…, stratify=labels)``'s rule in numpy
    (``StratifiedShuffleSplit``; tests/data/test_sklearn_files.py checks it against sklearn).

    A client host that imported sklearn for it would spend about 3 CPU seconds starting.
    """
    rows = len(labels)
    n_test = math.ceil(test_size * rows)
    n_train = rows - n_test
    _, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    if not 0 < n_test < rows or counts.min() < 2 or min(n_train, n_test) < len(counts):
        raise ConfigError(f"{rows} rows of {len(counts)} classes cannot be split at {test_size}")
    by_class = np.split(np.argsort(inverse, kind="stable"), np.cumsum(counts)[:-1])
    rng = np.random.RandomState(seed)
    in_train = _approximate_mode(counts, n_train, rng)
    in_test = _approximate_mode(counts - in_train, n_test, rng)
    train: list[int] = []
    test: list[int] = []
    for members, a, b in zip(by_class, in_train, in_test, strict=True):
        shuffled = members.take(rng.permutation(len(members)), mode="clip")
        train.extend(shuffled[:a])
        test.extend(shuffled[a : a + b])
    return rng.permutation(train), rng.permutation(test)


def _open(folder: Path, stem: str) -> bytes:
    for path in (folder / stem, folder / f"{stem}.gz"):
        if path.exists():
            raw = path.read_bytes()
            return gzip.decompress(raw) if path.suffix == ".gz" else raw
    raise ConfigError(
        f"{folder / stem}[.gz] not found; put the dataset's original files in {folder}"
    )


def read_idx(raw: bytes) -> np.ndarray:
    """Parse an IDX file (magic 0x0000 08 <ndim>, big-endian sizes, unsigned bytes)."""
    if len(raw) < 4 or raw[:3] != b"\x00\x00\x08":
        raise ConfigError("not an IDX file of unsigned bytes")
    ndim = raw[3]
    dims = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    body = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise ConfigError(f"IDX file holds {body.size} bytes, its header promises {dims}")
    return body.reshape(dims)


def _read_idx_pair(folder: Path, images: str, labels: str) -> tuple[np.ndarray, np.ndarray]:
    x = read_idx(_open(folder, images)).astype(np.float32) / 255.0
    y = read_idx(_open(folder, labels)).astype(np.int64)
    if x.ndim != 3 or len(x) != len(y):
        raise ConfigError(f"{images} and {labels} in {folder} do not match")
    return x, y


def _read_cifar(folder: Path, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10 binary batches: records of 1 label byte + 3072 pixel bytes (CHW)."""
    xs, ys = [], []
    for name in names:
        raw = np.frombuffer(_open(folder, name), dtype=np.uint8)
        if raw.size % 3073:
            raise ConfigError(f"{folder / name} is not a CIFAR-10 binary batch")
        records = raw.reshape(-1, 3073)
        ys.append(records[:, 0].astype(np.int64))
        xs.append(records[:, 1:].reshape(-1, 3, 32, 32).astype(np.float32) / 255.0)
    return np.concatenate(xs), np.concatenate(ys)


def split_clients(
    y: np.ndarray, clients: int, dirichlet: float, rng: np.random.Generator
) -> list[np.ndarray]:
    """Row indices per client: IID (``dirichlet = 0``) or Dirichlet(α) label skew."""
    if clients > len(y):
        raise ConfigError(f"{clients} clients but only {len(y)} training rows; use fewer clients")
    if dirichlet == 0:
        return [np.sort(part) for part in np.array_split(rng.permutation(len(y)), clients)]
    shards: list[list[int]] = [[] for _ in range(clients)]
    for label in np.unique(y):
        rows = rng.permutation(np.flatnonzero(y == label))
        shares = rng.dirichlet(np.full(clients, dirichlet))
        cuts = (np.cumsum(shares)[:-1] * len(rows)).astype(int)
        for client, part in enumerate(np.split(rows, cuts)):
            shards[client].extend(part.tolist())
    # Every client needs at least one row; lend from the largest shard.
    for client in range(clients):
        if not shards[client]:
            donor = max(range(clients), key=lambda c: len(shards[c]))
            shards[client].append(shards[donor].pop())
    return [np.sort(np.asarray(s, dtype=np.int64)) for s in shards]
