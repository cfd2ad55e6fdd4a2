"""Attack: in a DJN job, the key holder reads the obfuscators back out of what it receives.

Whoever holds a Paillier key's factors can take the n-th root of any ciphertext's
obfuscator, so a ciphertext it receives shows it the *product* of every obfuscator that
went into it. Re-randomising with ``r^n``, ``r`` uniform over Z_n*, makes that product
uniform. DJN's ``h_s^a`` does not: it lies in ``<h>``, a subgroup the key holder chose,
and the peers only check that ``h_s`` is a unit (no peer can test its order without the
factors). Both SecureBoost keys are held by a party that also receives ciphertexts
under them:

- **The guest's candidate key** (hidden instance space, ``boost_reveal``): the Host
  masked the won candidate's ciphertexts under the guest's DJN ``h_s``. A deviating
  guest makes its key with an ``h`` of prime order ℓ and encrypts its candidates with
  obfuscators it keeps; raising a request's n-th root part to ℓ removes the Host's
  ``h^a`` and leaves its candidate's own obfuscator, or 1 for a dummy: it reads which
  candidate won at every split node, and whether any did.
- **The Host's key** (``boost_histogram``): a guest re-randomised its packed bin sums
  under the Host's DJN ``h_s``. A deviating Host makes its key the same way and gives
  a few target rows an obfuscator ``w_j·h_s^a`` (``w_j`` of a small prime order, the
  other rows honest ``h_s^a``) beside honest, in-range plaintexts — nothing the Host
  check looks at: the n-th root part of each bin sum, raised to ℓ, names the bin of each
  target row in every guest column.

Defended: both re-randomise with full-length ``r^n`` whatever the job's obfuscation
(``fresh.for_key_holder``). Leaky arm: the key holder's ``h_s`` as before.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import replace

import numpy as np
import pytest
from helpers import memory_job, party_data

from privfl.config.vertical import ModelConfig
from privfl.crypto import djn
from privfl.crypto.engine import POOL
from privfl.crypto.gmp import mpz, powmod
from privfl.crypto.paillier import PrivateKey, PublicKey
from privfl.learning import secureboost as sb
from privfl.parties.vertical.keyproof import prove_key
from privfl.parties.vertical.secureboost import guest as boost_guest
from privfl.parties.vertical.secureboost import oblivious, reveal
from privfl.parties.vertical.secureboost.common import Layout, row_plaintexts
from privfl.parties.vertical.secureboost.guest import GuestBoost, step
from privfl.protocol import fresh
from privfl.protocol.bigints import BigInts
from privfl.protocol.boost_messages import (
    BoostCandidates,
    BoostGradients,
    BoostHistogram,
    BoostMasked,
)

BITS = 512  # the tests' key size (allow_weak_keys)
ELL = 2**61 - 1  # the prime order of the crafted h: h_s^a = 1 with probability 2^-61
MARKS = (1099511627791, 1099511627803, 1099511627831, 1099511627873)  # 41-bit primes
GUEST = "guest-1"


def prime_with(factor: int, bits: int) -> int:
    """A ``bits``-bit prime ``p`` with ``factor | p − 1``, top two bits set."""
    lo, hi = -(-3 * 2 ** (bits - 2) // (2 * factor)), 2**bits // (2 * factor)
    while True:
        p = 2 * factor * (lo + secrets.randbelow(hi - lo)) + 1
        if mpz(p).is_prime(40):
            return p


def of_order(order: int, prime: int) -> int:
    """An element of exactly ``order`` (a prime dividing ``prime − 1``) mod ``prime``."""
    while True:
        x = pow(secrets.randbelow(prime - 3) + 2, (prime - 1) // order, prime)
        if x != 1:
            return x


def crt(a: int, p: int, b: int, q: int) -> int:
    return (a * q * pow(q, -1, p) + b * p * pow(p, -1, q)) % (p * q)


def crafted_key() -> tuple[PublicKey, PrivateKey, list[int]]:
    """A key pair with a DJN ``h`` of order ℓ (mod p; 1 mod q), and one marker ``w_j`` of
    order ``MARKS[j]`` per target row (mod q; 1 mod p)."""
    half = BITS // 2
    p, q = prime_with(ELL, half), prime_with(math.prod(MARKS), half)
    n = p * q
    h = crt(of_order(ELL, p), p, 1, q)
    marks = [crt(1, p, of_order(m, q), q) for m in MARKS]
    public = PublicKey.from_n(n, int(powmod(mpz(h), mpz(n), mpz(n) * n)))  # a peer's check
    return public, PrivateKey(public, p, q), marks


def root_part(private: PrivateKey, c: int) -> int:
    """The key holder's view of a ciphertext's obfuscator: ``c·(1 + n)^−m = r^n mod n²``."""
    n = private.public_key.n
    (m,) = private.decrypt([c])
    return c * (1 - n * m) % (n * n)


def djn_left_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The leaky arm: re-randomise under the key holder's own ``h_s``, as before."""
    monkeypatch.setattr(fresh, "for_key_holder", lambda key: key)


# --- the guest reads which candidate won ------------------------------------------------


@pytest.mark.parametrize("defended", [True, False])
def test_a_guest_with_a_crafted_djn_key_cannot_tell_which_candidate_won(
    monkeypatch: pytest.MonkeyPatch, defended: bool
) -> None:
    # Prepare: the guest's candidate sets under its crafted key, with obfuscators it keeps;
    # the Host accepts them as the job's DJN key (its check of boost_candidates).
    if not defended:
        djn_left_on(monkeypatch)
    public, private, _ = crafted_key()
    data = party_data(memory_job(1))[GUEST]
    bins, rows = 8, 40
    binned = sb.bin_columns(data.x_train[:rows], sb.quantile_edges(data.x_train[:rows], bins))
    plain = oblivious.pack(oblivious.candidate_sets(binned, bins), BITS)
    r = [secrets.randbelow(public.n - 2) + 2 for _ in plain]
    values = public.encrypt_with(plain, r)
    count = oblivious.shape(rows, BITS)[1]
    job = replace(
        memory_job(1),
        key_bits=BITS,
        obfuscation="djn",
        model=ModelConfig(kind="secureboost", bins=bins),
    )
    # Its modulus is a Paillier modulus (only h_s is crafted), so it proves it.
    proof = prove_key(private, session=job.session, kind=reveal.KIND, sender=GUEST)
    body = BoostCandidates(
        public.n, public.h_s, "train", rows, len(plain) // count, BigInts(tuple(values)), proof
    )
    held = reveal.check_candidates(job, GUEST, body, "train", rows, binned.shape[1])
    n2 = public.nsquare
    mine = {
        int(powmod(powmod(mpz(r[k * count]), public.n, n2), ELL, n2)): k
        for k in range(len(r) // count)
    }
    picks = [None if j % 3 == 0 else secrets.randbelow(len(mine)) for j in range(12)]

    # Act: the Host's request per split node; the guest's read of each.
    reads = []
    for node, pick in enumerate(picks):
        request, _ = held.request(0, node, pick)
        power = int(powmod(mpz(root_part(private, request.values.values[0])), ELL, n2))
        reads.append(None if power == 1 else mine.get(power, -1))

    named = sum(read != -1 for read in reads)
    print(f"\nguest's reads, {'r^n' if defended else 'its h_s'}: {named} of {len(picks)} named")
    # Assert: leaky, every winner and every dummy named; defended, none (a uniform r
    # gives 1 or one of the guest's 217 powers with probability below 2^-200).
    if defended:
        assert reads == [-1] * len(picks)
    else:
        assert reads == picks


# --- the Host reads rows' bins from the histograms' obfuscators -------------------------


def guest_state(public: PublicKey) -> GuestBoost:
    data = party_data(memory_job(1))[GUEST]
    data = replace(data, x_train=data.x_train[:40])
    params = sb.BoostParams(trees=1, depth=3, bins=8)
    noise = boost_guest.histogram_pool(POOL, public, 1)  # what run_boost_guest builds
    return GuestBoost(data=data, key=public, params=params, group=1, noise=noise, hidden=True)


def host_reads(state: GuestBoost, private: PrivateKey, marks: list[int]) -> tuple[int, int]:
    """The deviating Host's gradients (honest, in-range plaintexts; DJN obfuscators ``h_s^a``
    times a marker ``w_j^n`` on target row j), the guest's root histogram, and the Host's
    read of its obfuscators: ``(cells right, cells tried)``."""
    public = private.public_key
    rows = len(state.data.x_train)
    layout = Layout(rows, BITS)
    plain = row_plaintexts(np.full(rows, -300, np.int64), np.full(rows, 1000, np.int64), layout)
    n, n2 = mpz(public.n), mpz(public.nsquare)
    noise = djn.obfuscators(public.n, public.h_s, rows)
    targets = [3, 11, 19, 27]
    for j, row in enumerate(targets):
        noise[row] = int(noise[row] * powmod(mpz(marks[j]), n, n2) % n2)
    at = np.arange(rows, dtype=np.int64)
    step(state, BoostGradients(0, at, fresh.encrypt(public, plain, noise)))
    root = BoostMasked(
        0, 0, np.array([0], np.int64), np.array([], np.int64), fresh.encrypt(public, [])
    )
    reply = step(state, root)
    assert isinstance(reply, BoostHistogram)
    t = state.current
    assert t is not None
    bins, per, shift = state.params.bins, layout.per_ciphertext, 1 << layout.slot
    right = 0
    for c, value in enumerate(reply.values.values):
        power = powmod(mpz(root_part(private, value)), ELL, n2)  # h^a gone: order ℓ
        for j, row in enumerate(targets):
            others = math.prod(MARKS) // MARKS[j]  # the other markers gone too
            mark = powmod(mpz(marks[j]), n * ELL * others, n2)
            seen = powmod(power, others, n2)
            slots = [k for k in range(per) if powmod(mark, shift**k, n2) == seen]
            if len(slots) == 1:
                f = c * per + slots[0]
                column, bin_ = int(t.features[f // bins]), f % bins
                right += int(state.binned["train"][row, column] == bin_)
    return right, len(targets) * len(t.features)


@pytest.mark.parametrize("defended", [True, False])
def test_a_host_with_a_crafted_djn_key_reads_no_bin_through_the_obfuscators(
    monkeypatch: pytest.MonkeyPatch, defended: bool
) -> None:
    # Prepare
    if not defended:
        djn_left_on(monkeypatch)
    public, private, marks = crafted_key()
    state = guest_state(public)

    # Act
    try:
        right, cells = host_reads(state, private, marks)
    finally:
        state.noise.close()

    # Assert: leaky, every target row's bin in every guest column; defended, none (a
    # uniform r meets one of a marker's 8 slot powers with probability 8/2^40 per
    # ciphertext and marker: below 10^-9 over the 80).
    print(f"\nHost's reads, {'r^n' if defended else 'its h_s'}: {right} of {cells} cells right")
    if defended:
        assert right == 0
    else:
        assert right == cells == 80
