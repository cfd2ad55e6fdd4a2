"""The kit plays the other roles for every GLM kind's guest, host and server
(models/registry.py).

One honest run per kind and role (our party must pass every check, the kind's own
among them) and one broken guest per kind, whose bug a check named for that kind must
catch (``broken_guest.py``). Real processes, CURVE sockets, 512-bit keys.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_scripted_peer import check, cli, init

# One worker makes the kits for every test here (--dist loadgroup, tests/conftest.py).
pytestmark = pytest.mark.xdist_group("kinds_conformance")

BROKEN = [sys.executable, str(Path(__file__).with_name("broken_guest.py"))]
KINDS = {  # regression without label DP, said explicitly: the host script knows its labels
    "linear": ["--model", "linear", "--label-epsilon", "inf"],
    "poisson": ["--model", "poisson", "--label-epsilon", "inf"],
    "multiclass-taylor": ["--dataset", "wine", "--guests", "2"],  # auto: Taylor with two
    "multiclass-separable": ["--dataset", "wine"],  # auto: separable with one guest
}
# What the kit checks that is the kind's own (every kind also gets the common checks).
OWN_CHECKS = {
    "linear": ["epoch 1: forward.scores holds the linear blocks z at 2^32, b·k values each"],
    "poisson": [
        "epoch 1: forward.scores holds the poisson blocks exp(z) at 2^16 | z at 2^32",
        "epoch 1: forward.scores block exp(z) is exp(z) of the scores at scale 2^16",
    ],
    "multiclass-taylor": [
        "epoch 1: the gradient request is packed: ⌈features·k / slots(n)⌉ ciphertexts (k = 3)",
        "epoch 1: cross_term is Σ z·others at scale 2^48",
    ],
    "multiclass-separable": [
        "epoch 1: forward.scores block σ(z + 4) is σ(z + 4) of the scores at scale 2^16",
        "epoch 1: forward.sum_squares is Σz² at scale 2^48 (z at 2^16)",
    ],
}
# The host's checks that are the kind's own (Poisson and separable: the common ones).
HOST_CHECKS = {
    "linear": ["first batch's squared loss is mean(½ r²), r = z_H − y (z_g = 0)"],
    "poisson": [  # its kit has ε = inf, so the kit knows the labels the host trains on
        "first residual + y is a positive rate μ = exp(z_H + offset) (z_g = 0, ε = inf)",
        "first residual's z_H = log μ − offset is linear in the host's columns and not 0",
        "first batch's Poisson loss is mean(μ − y·log μ) of the first residual (z_g = 0)",
    ],
    "multiclass-taylor": [
        "first batch's Taylor loss is mean(log 2 + (4d)²/8 − 1/2) (z_g = 0), summed over the "
        "k classes",
        "first residual 4d = z_H − 4ỹ + 2 is not ±2: the host starts private",
    ],
    "multiclass-separable": [
        "first residual is not σ̂(0) − ỹ (two values per class): the host starts private",
        "every loss the host sends is ≥ 0 (the separable fit of the cross-entropy)",
    ],
}
# A bug per kind and the check that names it.
BUGS = {
    "linear": ("gradient-scale-4", "FAIL  epoch 1: forward scores are X[batch.indices]·θ₁"),
    "poisson": (
        "exp-at-2^32",
        "FAIL  epoch 0: forward.scores block exp(z) is exp(z) of the scores at scale 2^16",
    ),
    "multiclass-taylor": (
        "class-major-scores",
        "FAIL  epoch 1: forward scores are X[batch.indices]·θ₁",
    ),
    "multiclass-separable": (
        "basis-out-of-order",
        "FAIL  epoch 0: forward.scores block σ(z + 4) is σ(z + 4) of the scores at scale 2^16",
    ),
}


def make_kind_kit(folder: Path, options: list[str], epochs: int = 2) -> Path:
    """A demo kit of the kind ``options`` choose, 512-bit keys, 2 epochs.

    Two epochs are what the guest and server scripts play; a host under test trains the
    job's, and the host script checks its first batch and residual, and counts (every
    epoch trained, a test request per epoch; no flipback is due before epoch 5): the
    hosts' kits train one (the kind's own checks are its first batch's; epochs after
    the first are logistic's run in test_scripted_peer.py).
    """
    return init(folder, "--epochs", str(epochs), "--timeout", "20", *options)


@pytest.fixture(scope="module")
def kits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kind-kits")
    return {kind: make_kind_kit(root / kind, options) for kind, options in KINDS.items()}


@pytest.fixture(scope="module")
def host_kits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kind-host-kits")
    return {kind: make_kind_kit(root / kind, options, 1) for kind, options in KINDS.items()}


@pytest.mark.parametrize("kind", list(KINDS))
def test_our_guest_conforms_for_every_glm_kind(
    kits: dict[str, Path], tmp_path: Path, kind: str
) -> None:
    # Act
    checker = check(kits[kind], tmp_path / "g", "guest", "guest-1", "finish", cli("vfl"))

    # Assert: every check passed, the kind's own among them.
    output = checker.stdout + checker.stderr
    assert checker.returncode == 0 and "FAIL" not in checker.stdout, output
    for name in OWN_CHECKS[kind]:
        assert f"PASS  {name}" in checker.stdout, checker.stdout


@pytest.mark.parametrize("kind", list(KINDS))
def test_our_host_conforms_for_every_glm_kind(
    host_kits: dict[str, Path], tmp_path: Path, kind: str
) -> None:
    # Act
    checker = check(host_kits[kind], tmp_path / "h", "host", "host", "finish", cli("vfl"))

    # Assert
    output = checker.stdout + checker.stderr
    assert checker.returncode == 0 and "FAIL" not in checker.stdout, output
    assert "PASS  the host trained every epoch" in checker.stdout, checker.stdout
    for name in HOST_CHECKS[kind]:
        assert f"PASS  {name}" in checker.stdout, checker.stdout


# The server sees only k and whether flipback runs: one kind of each (k = 1 without
# flipback, k = 3) covers what differs from logistic's run in test_scripted_peer.py.
@pytest.mark.parametrize("kind", ["linear", "multiclass-taylor"])
def test_our_server_conforms_for_the_glm_kinds(
    kits: dict[str, Path], tmp_path: Path, kind: str
) -> None:
    # Act: the played Host and guests size every request by the kind's k
    checker = check(kits[kind], tmp_path / "s", "server", "server", "finish", cli("vfl"))

    # Assert
    output = checker.stdout + checker.stderr
    assert checker.returncode == 0 and "FAIL" not in checker.stdout, output
    assert "PASS  gradient decryption is correct" in checker.stdout, checker.stdout


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_kit_catches_a_broken_guest_of_every_glm_kind(
    kits: dict[str, Path], tmp_path: Path, kind: str
) -> None:
    # Prepare
    bug, caught_by = BUGS[kind]

    # Act
    checker = check(kits[kind], tmp_path / "g", "guest", "guest-1", "finish", [*BROKEN, bug, "vfl"])

    # Assert
    assert checker.returncode == 1, checker.stdout + checker.stderr
    assert caught_by in checker.stdout and "Traceback" not in checker.stdout, checker.stdout
