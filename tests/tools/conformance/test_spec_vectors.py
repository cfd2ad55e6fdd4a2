"""The shipped vectors of spec.json hold: `[model]` in the fingerprint, the RSA-PSI tag and
the batch plan (docs/protocol.md §2.1, §6.5, §6.2).

Each is recomputed from our code and, where the spec defines it in a few lines, from that
definition too, so the document and the code cannot drift apart.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math

import numpy as np
import pytest
import rfc8785
from spec_vectors import BATCH_CASES, MODELS, model_job, spec_vector

from privfl.config.vertical import MODEL_OPTIONAL_KEYS, ModelConfig
from privfl.crypto import modulus_proof, psi_rsa
from privfl.tools.conformance.vectors import load

SPEC = load("spec.json")
MODEL_CASES = {m["name"]: m for m in SPEC["models"]}
# What §2.1 says a [model] table hashes as: every ModelConfig key but the optional ones.
ALWAYS = {"kind", "classes", "trees", "depth", "learning_rate", "bins", "l2", "gamma"} | {
    "min_child_weight",
    "subsample",
    "colsample",
    "early_stopping_rounds",
}


def test_our_code_still_gives_the_shipped_vectors() -> None:
    assert spec_vector() == SPEC


@pytest.mark.parametrize("name", list(MODELS))
def test_a_model_job_hashes_as_section_2_1_says(name: str) -> None:
    # Prepare
    case = MODEL_CASES[name]
    job = model_job(case["toml"])
    data = json.loads(case["canonical"])

    # Act
    model = data.get("model")

    # Assert
    assert hashlib.sha256(rfc8785.dumps(data)).hexdigest() == case["fingerprint"]
    assert job.fingerprint() == case["fingerprint"]
    assert ("training" in data) == (job.model.kind != "secureboost")
    if job.model == ModelConfig():
        assert model is None
        return
    assert set(model) - ALWAYS <= set(MODEL_OPTIONAL_KEYS)
    assert set(model) >= ALWAYS
    for key in MODEL_OPTIONAL_KEYS:
        always = key == "instance_space" and job.model.kind == "secureboost"
        differs = getattr(job.model, key) != getattr(ModelConfig(), key)
        assert (key in model) == (always or differs)
    if job.model.kind == "secureboost" and "label_dp" not in case["toml"]:
        # SecureBoost's own defaults where the file says nothing (§2.1)
        assert data["label_dp"]["epsilon"] == 2.0 and model["min_child_weight"] == 4.0


def test_the_rsa_tag_is_sha256_of_the_big_endian_signature_read_big_endian() -> None:
    # Prepare
    vec = SPEC["psi_rsa"]
    n, e, d = (int(vec[k], 16) for k in ("n", "e", "d"))
    width = (n.bit_length() + 7) // 8

    for case in vec["cases"]:
        # Act
        h = (
            int.from_bytes(
                hashlib.shake_256(vec["context"].encode() + b"\0" + case["id"].encode()).digest(
                    (n.bit_length() + 128 + 7) // 8
                ),
                "big",
            )
            % n
        )
        sig = pow(h, d, n)
        digest = hashlib.sha256(b"privfl-psi-tag" + sig.to_bytes(width, "big")).digest()

        # Assert
        assert n.bit_length() == 1024 and pow(sig, e, n) == h
        assert hex(h) == case["hash"] and hex(sig) == case["signature"]
        assert digest.hex() == case["tag_digest_bytes"]
        assert int.from_bytes(digest, "big") == int(case["tag"], 16)
        assert psi_rsa.tags([sig], n) == [int(case["tag"], 16)]
    psi_rsa.check_public(psi_rsa.RsaPublic(n=n, e=e), 1024)


@pytest.mark.parametrize("index", range(len(BATCH_CASES)))
def test_the_batch_plan_is_one_permutation_per_job_cut_in_order(index: int) -> None:
    # Prepare
    case = SPEC["batches"][index]
    rows, size, least = case["rows"], case["batch_size"], case["least"]
    order = np.random.default_rng(case["seed"]).permutation(rows).tolist()  # drawn once

    for plan in (case["epoch_0"], case["epoch_1"]):
        if size <= 0 or size >= rows:  # full batch: no draw
            assert plan == [None]
            continue
        # Act: every epoch cuts the same order
        sizes = [size] * (rows // size)
        tail = rows - sum(sizes)
        if tail >= least:
            sizes.append(tail)
        elif tail:
            sizes[-1] += tail
        starts = np.cumsum([0, *sizes]).tolist()

        # Assert
        assert plan == [order[a:b] for a, b in itertools.pairwise(starts)]


def test_the_joint_plan_is_sha256_of_the_shares_and_one_permutation_per_attempt() -> None:
    """§6.1a as an outside party would code it: hashlib and numpy, nothing of ours."""
    # Prepare
    case = SPEC["joint_plan"]
    session = case["session"].encode()
    shares = {p: bytes.fromhex(r) for p, r in case["shares"].items()}

    # Act / Assert: the commitments, the seed, each attempt's generator seed and plan.
    for party, share in shares.items():
        text = b"privfl-plan-commit\0" + session + b"\0" + party.encode() + b"\0" + share
        assert hashlib.sha256(text).hexdigest() == case["commits"][party]
    seed = hashlib.sha256(
        b"privfl-plan\0" + session + b"\0" + b"".join(shares[p] for p in case["order"])
    ).digest()
    assert seed.hex() == case["joint_seed"]
    rows = case["rows"]  # batch_size 4: batches of 4, 4, then 2
    for attempt in case["attempts"]:
        key = hashlib.sha256(seed + attempt["attempt"].to_bytes(4, "big")).digest()
        assert str(int.from_bytes(key, "big")) == attempt["generator_seed"]
        order = np.random.default_rng(int.from_bytes(key, "big")).permutation(rows).tolist()
        assert attempt["plan"] == [order[0:4], order[4:8], order[8:10]]  # 4, 4, then 2
    assert case["move_cap_426"] == math.ceil(426 / 16) and case["attempts_allowed"] == 8


def test_the_counts_table_follows_its_recipe() -> None:
    """default_rng(2024): normal (rows, 6), x1 mixed with x0, uniform exposures, Poisson y."""
    # Prepare
    vec = SPEC["counts"]
    rng = np.random.default_rng(2024)
    beta = np.array([0.4, -0.3, 0.25, 0.15, -0.2, 0.3])

    # Act
    x = rng.normal(size=(vec["rows"], 6))
    x[:, 1] = 0.6 * x[:, 0] + 0.8 * x[:, 1]
    exposure = rng.uniform(0.5, 3.0, size=vec["rows"])
    y = rng.poisson(exposure * np.exp(x @ beta - 0.3))

    # Assert
    for i, row in enumerate(vec["first_rows"]):
        assert row == {"x": x[i].tolist(), "y": float(y[i]), "exposure": float(exposure[i])}
    assert (float(y.sum()), float(exposure.sum())) == (vec["sum_y"], vec["sum_exposure"])


def test_flipback_ranks_stably_caps_the_budget_and_flips_only_disagreements() -> None:
    # Prepare
    vec = SPEC["flipback"]
    labels, probs = vec["labels"], vec["probabilities"]
    distance = [abs(p - y) for p, y in zip(probs, labels, strict=True)]

    for case in vec["cases"]:
        # Act
        budget = math.floor(case["fraction"] * len(labels))
        if case["max_flips"] is not None:
            budget = min(budget, case["max_flips"])
        ranked = sorted(range(len(labels)), key=lambda i: -distance[i])[:budget]
        want = [1 - y if i in ranked and distance[i] > 0.5 else y for i, y in enumerate(labels)]

        # Assert
        assert case["result"] == want


def test_the_modulus_proof_points_and_roots_are_as_section_6_0_defines() -> None:
    # Prepare: §6.0's definition, in a few lines: SHAKE-256 over length-prefixed fields.
    vec = SPEC["modulus_proof"]
    n = int(vec["n"], 16)
    width = (n.bit_length() + 7) // 8

    def field(data: bytes) -> bytes:
        return len(data).to_bytes(8, "big") + data

    prefix = field(b"privfl/paillier-n/v1") + field(n.to_bytes(width, "big"))
    prefix += field(vec["session"].encode()) + field(f"{vec['kind']}/{vec['sender']}".encode())

    # Act
    points = [
        int.from_bytes(hashlib.shake_256(prefix + i.to_bytes(4, "big")).digest(width + 16), "big")
        % n
        for i in range(len(vec["points"]))
    ]
    roots = [int(v, 16) for v in vec["roots"]]

    # Assert
    assert [hex(v) for v in points] == vec["points"] and len(points) == 8
    assert all(pow(s, n, n) == p for s, p in zip(roots, points, strict=True))
    assert math.gcd(n, math.prod(range(3, vec["alpha"], 2))) == 1
    modulus_proof.verify(n, roots, session=vec["session"], role=vec["role"])


def test_the_guest_masks_are_shake256_streams_that_cancel_over_guests() -> None:
    """§6.2's masks as an outside party would code them: hashlib, nothing of ours."""
    # Prepare
    vec = SPEC["guest_masks"]
    n, guests = int(vec["n"], 16), vec["guests"]
    width = (n.bit_length() + 128 + 7) // 8

    def stream(a: str, b: str) -> list[int]:
        seed = bytes.fromhex(vec["seeds"][f"{a},{b}"])
        text = f"{vec['session']}\0{a}\0{b}\0{vec['label']}".encode()
        data = hashlib.shake_256(b"privfl-guest-mask\0" + seed + text).digest(3 * width)
        return [int.from_bytes(data[i * width : (i + 1) * width], "big") % n for i in range(3)]

    # Act: + the stream of each pair a guest comes first in, − of each it comes second in.
    want = {g: [0, 0, 0] for g in guests}
    for i, a in enumerate(guests):
        for b in guests[i + 1 :]:
            for j, v in enumerate(stream(a, b)):
                want[a][j] = (want[a][j] + v) % n
                want[b][j] = (want[b][j] - v) % n

    # Assert
    assert {g: [int(m, 16) for m in ms] for g, ms in vec["masks"].items()} == want
    assert all(sum(col) % n == 0 for col in zip(*want.values(), strict=True))
