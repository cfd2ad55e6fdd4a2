"""The fresh-ciphertext rule (docs/protocol.md §6.0), made structural by privfl.protocol.fresh.

Known answers with a 512-bit key: Fresh vectors decrypt to what went in; nothing
else mints them; a channel refuses any ciphertext field that is not Fresh, a Fresh
vector sent before, and a received vector forwarded as it came.
"""

from __future__ import annotations

import typing
from dataclasses import fields

import pytest

from privfl.crypto.paillier import PrivateKey, PublicKey, generate_keypair
from privfl.protocol import fresh
from privfl.protocol.channel import Channel
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import (
    MESSAGE_TYPES,
    BigInts,
    CrossTerm,
    Decrypted,
    Forward,
    Kind,
    Residual,
)

CIPHERTEXT_FIELDS = {
    "Forward.scores",
    "Forward.sum_squares",
    "Residual.residual",
    "Residual.others",
    "CrossTerm.value",
    "DecryptRequest.values",
    "Loss.value",
    "Scores.scores",
    "BoostGradients.values",  # vertical SecureBoost
    "BoostHistogram.values",
    "BoostMasked.values",
    "BoostProof.values",  # the Host check's bit and indicator encryptions
    "BoostCandidates.values",  # a hidden-space guest's candidate sets under its own key
    "BoostReveal.values",  # the Host's masked request, re-randomised
}


@pytest.fixture(scope="module")
def keys() -> tuple[PublicKey, PrivateKey]:
    return generate_keypair(512)


def channels() -> tuple[Channel, Channel]:
    hub = InMemoryHub()
    a, b = hub.transport("a"), hub.transport("b")
    return Channel(a, session="s", timeout=2.0), Channel(b, session="s", timeout=2.0)


def test_every_big_integer_field_is_a_ciphertext_unless_listed() -> None:
    # A new message with a BigInts field is a ciphertext field (must be Fresh) by default.
    found = set()
    for cls in MESSAGE_TYPES.values():
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            if "BigInts" in str(hints[f.name]) and (cls, f.name) not in fresh.NOT_CIPHERTEXTS:
                found.add(f"{cls.__name__}.{f.name}")
    assert found == CIPHERTEXT_FIELDS


def test_fresh_vectors_decrypt_to_what_went_in(keys: tuple[PublicKey, PrivateKey]) -> None:
    public, private = keys
    encrypted = fresh.encrypt(public, [1, 2, 3])
    plain = public.encrypt([4, 5])
    again = fresh.rerandomize(public, plain)
    masked, masks = fresh.mask(public, plain)

    assert isinstance(encrypted, fresh.Fresh) and private.decrypt(encrypted.values) == [1, 2, 3]
    assert private.decrypt(again.values) == [4, 5] and set(again.values).isdisjoint(plain)
    opened = zip(private.decrypt(masked.values), masks, strict=True)
    assert [(v - r) % public.n for v, r in opened] == [4, 5]


def test_mask_re_randomises_last(keys: tuple[PublicKey, PrivateKey]) -> None:
    # Whoever knows c must not read the mask R from c · (1 + n·R) · r^n.
    public, _ = keys
    c = public.encrypt([7])
    masked, [mask] = fresh.mask(public, c)
    q = masked.values[0] * pow(c[0], -1, public.nsquare) % public.nsquare
    assert (q - 1) % public.n != 0
    assert (q - 1) // public.n != mask


def test_only_the_fresh_functions_mint_fresh_vectors(keys: tuple[PublicKey, PrivateKey]) -> None:
    public, _ = keys
    with pytest.raises(fresh.StaleCiphertext):
        fresh.Fresh((1, 2))
    with pytest.raises(fresh.StaleCiphertext, match="1 mod n"):
        fresh.rerandomize(public, public.encrypt([1]), [1])
    with pytest.raises(fresh.StaleCiphertext, match="1 mod n"):
        fresh.encrypt(public, [1], [1 + public.n * 5])


def test_a_channel_sends_only_fresh_ciphertexts_and_each_once(
    keys: tuple[PublicKey, PrivateKey],
) -> None:
    public, _ = keys
    a, b = channels()
    residual = public.add_plain(public.encrypt([1, 2]), [3, 4])  # c · (1 + n·m): stale

    with pytest.raises(fresh.StaleCiphertext, match=r"Residual\.residual"):
        a.send("b", Residual(0, 0, BigInts(tuple(residual)), None))
    sent = fresh.rerandomize(public, residual)
    a.send("b", Residual(0, 0, sent, None))
    with pytest.raises(fresh.StaleCiphertext, match="sent once already"):
        a.send("b", Residual(0, 0, sent, None))  # a second receiver needs its own copy
    with pytest.raises(fresh.StaleCiphertext, match=r"Residual\.others"):
        a.send("b", Residual(0, 0, fresh.rerandomize(public, residual), BigInts((5, 6))))

    received = b.expect({Kind.RESIDUAL}, {"a"}).body
    assert isinstance(received, Residual) and not isinstance(received.residual, fresh.Fresh)
    with pytest.raises(fresh.StaleCiphertext):
        b.send("a", received)  # relayed as it came: refused
    b.send("a", Decrypted(0, 0, "gradient", BigInts((1, 2))))  # plaintexts need no freshness
    c = fresh.encrypt(public, [0])
    b.send("a", Forward(0, 0, fresh.encrypt(public, [0]), c))
    b.send("a", CrossTerm(0, 0, fresh.rerandomize(public, c.values)))
