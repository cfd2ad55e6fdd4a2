"""Vectors of the gaps an outside implementer hit: `[model]` in the fingerprint, the RSA-PSI
tag, the batch plan, the Poisson demo table (docs/protocol.md §2.1, §6.5, §6.2, §6.8).

``python tests/tools/conformance/spec_vectors.py`` writes ``spec.json`` in
``privfl/tools/conformance/vectors/``; test_spec_vectors.py checks that our code still gives
exactly these values. Regenerate only for a deliberate change (a new protocol version).
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import gmpy2
import numpy as np

from privfl.config.core import read_toml
from privfl.config.vertical import canonical_job, from_dict
from privfl.crypto import guest_masks, modulus_proof, psi_rsa
from privfl.data.views import count_table, demo_columns
from privfl.learning.taylor import batch_plan
from privfl.mechanisms.label_dp import flipback
from privfl.parties.vertical import joint_plan, keyproof
from privfl.tools.conformance.vectors import DIR

BASE = """session = "model-example"
key_bits = 2048

[training]
epochs = 5

[parties.server]
role = "server"
endpoint = "tcp://10.0.0.1:5551"

[parties.host]
role = "host"
endpoint = "tcp://10.0.0.2:5552"
feature_count = 4

[parties.guest-1]
role = "guest"
endpoint = "tcp://10.0.0.3:5553"
feature_count = 3
"""
# One [model] table per kind; keys left out take their defaults.
MODELS = {
    "logistic": '[model]\nkind = "logistic"\n',
    "linear": '[model]\nkind = "linear"\nlabel_low = -1.5\nlabel_high = 2\n',
    "poisson_exposure": '[model]\nkind = "poisson"\nexposure = "years"\nlabel_high = 20\n',
    "multiclass_taylor": '[model]\nkind = "multiclass"\nclasses = 3\nsigmoid = "taylor"\n',
    "multiclass_separable": '[model]\nkind = "multiclass"\nclasses = 3\nsigmoid = "separable"\n',
    "secureboost_shared": '[model]\nkind = "secureboost"\ntrees = 5\ninstance_space = "shared"\n',
    "secureboost_hidden": '[model]\nkind = "secureboost"\ninstance_space = "hidden"\n',
    "secureboost_default": '[model]\nkind = "secureboost"\n',
}
# A deterministic 1024-bit RSA-PSI key (a real one is fresh per session): p, q the next
# primes after fixed 512-bit numbers (N has 1024 bits), e the next prime after 2^1024 + 12345.
RSA_P = int(gmpy2.next_prime((3 << 510) + 0x1D3))
RSA_Q = int(gmpy2.next_prime((3 << 510) + (1 << 400) + 0x2B7))
RSA_E = int(gmpy2.next_prime((1 << 1024) + 12345))
PSI_SESSION = "psi-example"
PSI_IDS = ["1", "alice@example.org", "ÄÖÜ-42"]
# A deterministic 1024-bit Paillier key's modulus proof (§6.0; a real key is fresh per
# session): p, q the next primes after fixed 512-bit numbers.
PROOF_P = int(gmpy2.next_prime((3 << 510) + 0x5A5))
PROOF_Q = int(gmpy2.next_prime((5 << 509) + (1 << 300) + 0x3C3))
PROOF_SESSION, PROOF_SENDER = "proof-example", "server"
BATCH_CASES = [(0, 10, 4, 1), (0, 10, 4, 3), (7, 9, 3, 1), (42, 5, 0, 1)]


def model_job(toml_text: str) -> Any:
    """The job of BASE plus one [model] table, read as `privfl` reads a job file."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.toml"
        path.write_text(toml_text, encoding="utf-8")
        return from_dict(read_toml(path, ""), source=path)


def models_vector() -> list[dict[str, Any]]:
    """Per model kind: the job file, its canonical encoding and fingerprint."""
    out = []
    for name, table in MODELS.items():
        text = BASE + "\n" + table
        job = model_job(text)
        out.append(
            {
                "name": name,
                "toml": text,
                "canonical": canonical_job(job).decode("utf-8"),
                "fingerprint": job.fingerprint(),
            }
        )
    return out


def psi_rsa_vector() -> dict[str, Any]:
    """H(id), the signature H(id)^d and the tag of a few ids under a fixed key."""
    n = RSA_P * RSA_Q
    d = int(gmpy2.invert(RSA_E, (RSA_P - 1) * (RSA_Q - 1)))
    context = f"privfl-psi/rsa/{PSI_SESSION}".encode()
    hashes = psi_rsa.full_domain_hash(PSI_IDS, n, context)
    signatures = [pow(h, d, n) for h in hashes]
    tags = psi_rsa.tags(signatures, n)
    width = (n.bit_length() + 7) // 8
    return {
        "session": PSI_SESSION,
        "context": context.decode(),
        "n": hex(n),
        "e": hex(RSA_E),
        "d": hex(d),
        "cases": [
            {
                "id": i,
                "hash": hex(h),
                "signature": hex(s),
                "signature_bytes_big_endian": s.to_bytes(width, "big").hex(),
                "tag": hex(t),
                "tag_digest_bytes": t.to_bytes(32, "big").hex(),
            }
            for i, h, s, t in zip(PSI_IDS, hashes, signatures, tags, strict=True)
        ],
    }


def modulus_proof_vector() -> dict[str, Any]:
    """The hashed points and their n-th roots of a fixed key's ``public_key`` proof."""
    n = PROOF_P * PROOF_Q
    role = keyproof.role("public_key", PROOF_SENDER)
    roots = modulus_proof.prove(n, PROOF_P, PROOF_Q, session=PROOF_SESSION, role=role)
    return {
        "session": PROOF_SESSION,
        "kind": "public_key",
        "sender": PROOF_SENDER,
        "role": role,
        "n": hex(n),
        "alpha": modulus_proof.ALPHA,
        "points": [hex(v) for v in modulus_proof.points(n, PROOF_SESSION, role)],
        "roots": [hex(v) for v in roots],
    }


def batches_vector() -> list[dict[str, Any]]:
    """The Host's batch indices of epochs 0 and 1 (the same: one plan per job) for a few
    (seed, rows, batch_size, least), before any row is swapped (learning/pinning.py)."""
    out = []
    for seed, rows, size, least in BATCH_CASES:
        rng = np.random.default_rng(seed)
        plan = batch_plan(rows, size, rng, least)  # one per job: every epoch repeats it
        epochs = [plan, plan]
        plans = [[None if b is None else [int(i) for i in b] for b in plan] for plan in epochs]
        out.append(
            {
                "seed": seed,
                "rows": rows,
                "batch_size": size,
                "least": least,
                "epoch_0": plans[0],
                "epoch_1": plans[1],
            }
        )
    return out


# The batch plan's commit and reveal (§6.1a): two parties' shares, and a small plan.
PLAN_SESSION = "plan-example"
PLAN_SHARES = {"host": bytes(range(32)), "guest-1": bytes(range(32, 64))}
PLAN_CASE = (10, 4, 1)  # rows, batch_size, least


def joint_plan_vector() -> dict[str, Any]:
    """Commitments, the joint seed, and attempts 0 and 1 of a 10-row plan (§6.1a)."""
    order = list(PLAN_SHARES)
    seed = joint_plan.joint_seed(PLAN_SESSION, order, PLAN_SHARES)
    rows, size, least = PLAN_CASE
    attempts = []
    for attempt in (0, 1):
        key = hashlib.sha256(seed + attempt.to_bytes(4, "big")).digest()
        plan = joint_plan.drawn(seed, attempt, rows, size, least)
        attempts.append(
            {
                "attempt": attempt,
                "generator_seed": str(int.from_bytes(key, "big")),
                "plan": [None if b is None else [int(i) for i in b] for b in plan],
            }
        )
    return {
        "session": PLAN_SESSION,
        "order": order,
        "shares": {p: r.hex() for p, r in PLAN_SHARES.items()},
        "commits": {p: joint_plan.commit(PLAN_SESSION, p, r) for p, r in PLAN_SHARES.items()},
        "joint_seed": seed.hex(),
        "rows": rows,
        "batch_size": size,
        "least": least,
        "attempts": attempts,
        "move_cap_426": joint_plan.move_cap(426),
        "attempts_allowed": joint_plan.ATTEMPTS,
    }


def counts_vector() -> dict[str, Any]:
    """The bundled Poisson `counts` table: its first rows and its totals (§6.8 recipe)."""
    x, names, y, exposure = count_table()
    return {
        "rows": int(x.shape[0]),
        "names": list(names),
        "first_rows": [
            {"x": [float(v) for v in x[i]], "y": float(y[i]), "exposure": float(exposure[i])}
            for i in range(3)
        ],
        "sum_y": float(y.sum()),
        "sum_exposure": float(exposure.sum()),
        "demo_columns_one_guest": {k: list(v) for k, v in demo_columns(1, "counts").items()},
    }


# Flipback (§13): ties at the top, a candidate the model agrees with, a budget cut.
FLIP_LABELS = [1, 0, 1, 0, 1, 0, 1, 0, 1, 0]
FLIP_PROBS = [0.1, 0.9, 0.1, 0.55, 0.45, 0.2, 0.95, 0.9, 0.3, 0.4]
FLIP_CASES = [(0.4, None), (0.4, 2), (1.0, None), (0.05, None)]


def flipback_vector() -> dict[str, Any]:
    """Labels after one flipback of FLIP_LABELS under FLIP_PROBS, per (fraction, max_flips)."""
    labels, probs = np.array(FLIP_LABELS), np.array(FLIP_PROBS)
    return {
        "labels": FLIP_LABELS,
        "probabilities": FLIP_PROBS,
        "cases": [
            {
                "fraction": fraction,
                "max_flips": cap,
                "result": [int(v) for v in flipback(labels, probs, fraction, cap)],
            }
            for fraction, cap in FLIP_CASES
        ],
    }


MASK_N = (1 << 255) + 95  # any odd n: the masks need no factors
MASK_GUESTS = ("guest-1", "guest-2", "guest-3")


def guest_masks_vector() -> dict[str, Any]:
    """Each guest's zero-sum masks for 3 plaintexts of one message (§6.2, version 7)."""
    pairs = {
        (a, b): hashlib.sha256(f"{a}/{b}".encode()).digest()
        for i, a in enumerate(MASK_GUESTS)
        for b in MASK_GUESTS[i + 1 :]
    }
    what = guest_masks.label("forward", 1, 0)
    masks = {
        g: guest_masks.GuestMasks(
            "mask-example", g, MASK_GUESTS, guest_masks.seeds_of(g, pairs)
        ).masks(MASK_N, what, 3)
        for g in MASK_GUESTS
    }
    return {
        "session": "mask-example",
        "n": hex(MASK_N),
        "guests": list(MASK_GUESTS),
        "seeds": {f"{a},{b}": seed.hex() for (a, b), seed in pairs.items()},
        "label": what,
        "masks": {g: [hex(m) for m in values] for g, values in masks.items()},
    }


def spec_vector() -> dict[str, Any]:
    return {
        "models": models_vector(),
        "psi_rsa": psi_rsa_vector(),
        "batches": batches_vector(),
        "joint_plan": joint_plan_vector(),
        "counts": counts_vector(),
        "flipback": flipback_vector(),
        "modulus_proof": modulus_proof_vector(),
        "guest_masks": guest_masks_vector(),
    }


def write() -> None:
    text = json.dumps(spec_vector(), indent=1, ensure_ascii=False)
    (DIR / "spec.json").write_text(text + "\n", encoding="utf-8")
    print(f"wrote {DIR / 'spec.json'}", file=sys.stderr)


if __name__ == "__main__":
    write()
