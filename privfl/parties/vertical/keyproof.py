"""A Paillier key's modulus proof as its sender makes it and each receiver checks it.

Every public key a party sends (the Server's ``public_key``, the SecureBoost Host's, a
guest's ``boost_candidates`` key) carries ``proof``: the N-th roots of
:mod:`privfl.crypto.modulus_proof`, bound to the session, the message kind and the
sender, so a proof cannot be replayed for another key, run or party.
"""

from __future__ import annotations

from privfl.crypto import modulus_proof
from privfl.crypto.paillier import PrivateKey, private_primes
from privfl.errors import CryptoError, ProtocolError
from privfl.protocol.bigints import BigInts


def role(kind: str, sender: str) -> str:
    """What the proof is bound to besides N and the session: the message kind and sender."""
    return f"{kind}/{sender}"


def prove_key(private: PrivateKey, *, session: str, kind: str, sender: str) -> BigInts:
    """The proof that our own key's modulus is a Paillier modulus (CRT, a few ms)."""
    p, q = private_primes(private)
    n = private.public_key.n
    return BigInts(modulus_proof.prove(n, p, q, session=session, role=role(kind, sender)))


def check_key(n: int, proof: BigInts, *, session: str, kind: str, sender: str) -> None:
    """Refuse ``sender``'s key (ProtocolError, one line) unless its proof verifies."""
    try:
        modulus_proof.verify(n, proof.values, session=session, role=role(kind, sender))
    except CryptoError as exc:
        raise ProtocolError(
            f"{sender}'s Paillier key is refused ({exc}); nothing under it is used. Check "
            f"that {sender} runs privfl with protocol 6, whose keys carry a modulus proof; "
            "a key that fails it is not a Paillier modulus and could read its peers' noise"
        ) from exc
