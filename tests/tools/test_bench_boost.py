"""The SecureBoost bench's floor arithmetic and its synthetic table."""

from __future__ import annotations

import pytest

from privfl.parties.vertical.secureboost.common import Layout
from privfl.tools.bench.boost import floor_per_tree, synthetic_boost


def test_floor_adds_every_operation_and_divides_by_cores_and_trees() -> None:
    run = {
        "obfuscation": "standard",
        "encryptions": 100,
        "decryptions": 10,
        "guest_packed": 10,
        "guest_additions": 1000,
        "guest_subtractions": 50,
        "trees": 2,
        "tree_rows": 100,
        "key_bits": 1024,
    }
    costs = {
        "obfuscation_standard": 1.0,
        "obfuscation_djn": 0.1,
        "decrypt": 0.5,
        "mulmod": 0.001,
        "invert": 0.01,
        "shift": 0.002,
    }
    per = Layout(100, 1024).per_ciphertext
    total = 110 * 1.0 + 10 * 0.5 + 1000 * 0.001 + 50 * 0.011 + 10 * per * 0.002
    assert floor_per_tree(run, costs, cores=4) == pytest.approx(total / 4 / 2)


def test_synthetic_table_has_the_asked_shape() -> None:
    w = synthetic_boost(total=400, host=10, guest=20)
    assert w.host.x_train.shape == (300, 10) and w.guest.x_train.shape == (300, 20)
    assert w.host.y_train is not None and 0.2 < w.host.y_train.mean() < 0.8
