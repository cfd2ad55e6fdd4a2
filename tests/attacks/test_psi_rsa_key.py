"""A deviating guest picks an RSA key that is no permutation, to read the Host's ids.

The audit's attack: with ``p ≡ q ≡ 1 (mod e)``, raising a blinded value
``H(x)·r^e`` to ``(p−1)/e`` mod p (and likewise mod q) kills the blinding factor and
leaves an e-th root of unity that depends only on ``H(x)``: a 2·log2(e)-bit fingerprint
of every Host id, which the guest matches against hashes of guessed ids. The Host now
accepts only keys whose exponent is a prime larger than N, so it refuses this key
before it blinds (or sends) anything.
"""

from __future__ import annotations

import secrets

import gmpy2
import pytest
from psi_harness import id_table, job_of, run_stage, send_as

from privfl.crypto import psi_rsa as rsa
from privfl.errors import ProtocolError
from privfl.protocol import codec
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import PsiHello, PsiQuery

E = 65537  # prime, the usual exponent
BITS = 1024


def prime_one_mod_e(bits: int) -> int:
    """A prime p of ``bits`` bits with p ≡ 1 (mod E)."""
    while True:
        k = secrets.randbits(bits - 17) | (1 << (bits - 18))
        p = 2 * E * k + 1
        if p.bit_length() == bits and gmpy2.is_prime(p):
            return p


def trapdoor_key() -> tuple[int, int, int]:
    """(N, p, q) of exactly BITS bits with p ≡ q ≡ 1 (mod E)."""
    while True:
        p, q = prime_one_mod_e(BITS // 2), prime_one_mod_e(BITS // 2)
        if (p * q).bit_length() == BITS:
            return p * q, p, q


def fingerprint(value: int, p: int, q: int) -> tuple[int, int]:
    """What survives blinding under the trapdoor key: ``v^((p−1)/e) mod p``, same mod q."""
    return int(gmpy2.powmod(value, (p - 1) // E, p)), int(gmpy2.powmod(value, (q - 1) // E, q))


@pytest.fixture(scope="module")
def trapdoor() -> tuple[int, int, int]:
    return trapdoor_key()


def test_the_trapdoor_key_reads_blinded_ids_on_the_raw_primitive(
    trapdoor: tuple[int, int, int],
) -> None:
    """Without the key check, every blinded Host id is recognised (so the next test can fail)."""
    n, p, q = trapdoor
    public = rsa.RsaPublic(n, E)
    host_ids = [f"record-{i}" for i in range(0, 400, 4)]  # 100 ids of a guessable space
    blinded, _ = rsa.blind(rsa.full_domain_hash(host_ids, n, b"ctx"), public)

    guesses = [f"record-{i}" for i in range(400)]
    table = {
        fingerprint(h, p, q): g
        for g, h in zip(guesses, rsa.full_domain_hash(guesses, n, b"ctx"), strict=True)
    }
    found = [table.get(fingerprint(v, p, q)) for v in blinded]

    assert found == host_ids


def test_the_host_refuses_the_trapdoor_key_before_any_answer(
    trapdoor: tuple[int, int, int],
) -> None:
    n, _, _ = trapdoor
    job = job_of(1, "rsa")
    hub = InMemoryHub()
    host_ids = [f"record-{i}" for i in range(0, 400, 4)]

    results = run_stage(
        job,
        {"host": id_table(host_ids)},
        hub,
        lambda: send_as(job, hub, "guest-1", PsiHello("rsa", n, E, 400)),
    )

    assert isinstance(results["host"], ProtocolError)
    assert "guest-1" in str(results["host"]) and "prime larger than N" in str(results["host"])
    assert not [s for s in hub.sent if s.sender == "host"]  # no query: nothing to fingerprint


@pytest.mark.parametrize("exponent", ["composite above N", "prime, too long"])
def test_other_exponents_that_could_hide_a_trapdoor_are_refused(
    trapdoor: tuple[int, int, int], exponent: str
) -> None:
    n, _, _ = trapdoor
    if exponent == "composite above N":
        e = int(gmpy2.next_prime(n)) * 3  # odd, > N, but 3 | e: may share a factor with φ(N)
    else:
        e = int(gmpy2.next_prime(1 << (BITS + rsa.EXPONENT_SLACK_BITS)))  # costs the Host
    job = job_of(1, "rsa")
    hub = InMemoryHub()

    results = run_stage(
        job,
        {"host": id_table(["a", "b"])},
        hub,
        lambda: send_as(job, hub, "guest-1", PsiHello("rsa", n, e, 2)),
    )

    assert isinstance(results["host"], ProtocolError)
    assert not [s for s in hub.sent if s.sender == "host"]


def test_an_honest_guest_key_passes_and_the_intersection_is_exact() -> None:
    job = job_of(1, "rsa")
    hub = InMemoryHub()
    ids = [f"record-{i}" for i in range(50)]
    sites = {"host": id_table(ids), "guest-1": id_table([*ids[10:], "other-1", "other-2"])}

    results = run_stage(job, sites, hub)

    assert set(results["host"].ids) == set(results["guest-1"].ids) == set(ids[10:])
    bodies = [codec.decode(s.frames)[1] for s in hub.sent]
    hello = next(b for b in bodies if isinstance(b, PsiHello))
    query = next(b for b in bodies if isinstance(b, PsiQuery))
    assert hello.exponent > hello.modulus and gmpy2.is_prime(hello.exponent)
    hashes = rsa.full_domain_hash(ids, hello.modulus, f"privfl-psi/rsa/{job.session}".encode())
    assert not set(query.values.values) & set(hashes)  # the guest sees blinded values only
