"""CPU cost of the SecureBoost Host check per tree: prover (Host) and verifier (guest).

``python benchmarks/host_check.py [key_bits] [rows] [sample]`` times the level-0 proof
of ``sample`` honest rows and one hidden level's masked proof (one direct node over
the same rows), and scales each linearly to ``rows`` (every row's proof is
independent; the batched checks are linear in the rows too). Process CPU seconds.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from privfl.crypto.paillier import generate_keypair
from privfl.parties.vertical.secureboost import proofs
from privfl.parties.vertical.secureboost.common import Layout, row_plaintexts
from privfl.protocol import fresh


def cpu(fn, *args):  # type: ignore[no-untyped-def]
    start = time.process_time()
    out = fn(*args)
    return out, time.process_time() - start


def main(bits: int = 1024, rows: int = 426, sample: int = 40) -> None:
    public, private = generate_keypair(bits)
    layout, bounds = Layout(rows, bits), proofs.Bounds()
    rng = np.random.default_rng(0)
    g = rng.integers(-(1 << 20), 1 << 20, sample)
    plain = row_plaintexts(g, rng.integers(0, 1 << 18, sample), layout)
    cts = fresh.encrypt(public, plain)
    proof, prove_s = cpu(proofs.prove_rows, private, 0, cts.values, plain, layout, bounds)
    _, verify_s = cpu(proofs.verify_rows, public, proof, cts.values, layout, bounds)
    inside = [int(i % 2 == 0) for i in range(sample)]
    masked = fresh.encrypt(public, [p if k else 0 for p, k in zip(plain, inside, strict=True)])
    parents = proofs.root_flags(public, sample)
    args = (0, 1, cts.values, masked.values)
    mproof, mprove_s = cpu(proofs.prove_masked, private, *args, inside, parents)
    _, mverify_s = cpu(proofs.verify_masked, public, mproof, *args, parents)
    scale = rows / sample
    print(f"{bits}-bit key, {rows} rows (timed on {sample}, scaled ×{scale:.2f}):")
    print(f"  rows proof   : prover {prove_s * scale:7.2f} s, verifier {verify_s * scale:7.2f} s")
    print(
        f"  per masked node: prover {mprove_s * scale:7.2f} s, verifier {mverify_s * scale:7.2f} s"
    )


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
