"""Tests for the msgpack codec: seeded round trips, refusals, fuzzing and golden vectors."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privfl.errors import ProtocolError
from privfl.protocol import codec
from privfl.protocol.messages import (
    MESSAGE_TYPES,
    PROTOCOL,
    VERDICTS,
    VERSION,
    Abort,
    AuditHead,
    Batch,
    BigInts,
    Checkpoints,
    CrossTerm,
    Decrypted,
    DecryptRequest,
    EpochResult,
    Finish,
    Forward,
    Header,
    Hello,
    Kind,
    Loss,
    Message,
    PlanReveal,
    Progress,
    PsiAnswer,
    PsiHello,
    PsiQuery,
    PsiResult,
    PublicKeyMessage,
    Residual,
    Resume,
    ScoreRequest,
    Scores,
)

SEEDS = range(4)
MAX_UNSIGNED = 2 ** (8 * codec.MAX_INT_BYTES) - 1  # widest BigInts element the wire accepts
# A signed single int needs a sign bit, so the widest one is one bit narrower.
MAX_SIGNED = 2 ** (8 * codec.MAX_INT_BYTES - 1) - 1


# ---------------------------------------------------------------- builders


def _ciphertext(rng: random.Random) -> int:
    """A ciphertext-sized value: mod n² of a 2048-bit key (4096 bits), or a 2048-bit residue."""
    bits = rng.choice([2048, 4096])
    return rng.getrandbits(bits) | (1 << (bits - 1))


def _bigints(rng: random.Random, size: int) -> BigInts:
    """Random big values with a zero and a one mixed in (they must survive fixed width)."""
    values = [_ciphertext(rng) for _ in range(size)]
    if size >= 2:
        values[rng.randrange(size)] = 0
        values[rng.randrange(size)] = 1
    return BigInts(tuple(values))


def _indices(np_rng: np.random.Generator, allow_none: bool) -> np.ndarray | None:
    if allow_none:
        return None
    return np_rng.integers(0, 2**63 - 1, size=int(np_rng.integers(0, 50)), dtype=np.int64)


def _text(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefε∞ é\n\x00") for _ in range(rng.randrange(0, 30)))


def _float(rng: random.Random) -> float:
    return rng.choice([math.inf, -math.inf, 0.0, -0.0, 5e-324, rng.uniform(-1e300, 1e300)])


def _build(kind: Kind, seed: int) -> Message:
    """A valid message of `kind` with seeded random contents (odd seeds pick the None options)."""
    rng = random.Random(f"{kind}-{seed}")
    np_rng = np.random.default_rng(seed)
    epoch, n_batches = rng.randrange(0, 1000), rng.randrange(1, 50)
    batch = rng.randrange(n_batches)
    size = rng.randrange(0, 12)
    builders: dict[Kind, Callable[[], Message]] = {
        Kind.HELLO: lambda: Hello(
            role=rng.choice(["server", "host", "guest"]),
            job_fingerprint=f"{rng.getrandbits(256):064x}",
            rows=rng.randrange(0, 2**32),
            features=rng.randrange(0, 500),
        ),
        Kind.PUBLIC_KEY: lambda: _public_key(rng),
        Kind.PLAN_REVEAL: lambda: PlanReveal(
            ",".join(f"p{i}={rng.getrandbits(256):064x}" for i in range(1 + seed % 3))
        ),
        Kind.BATCH: lambda: Batch(epoch, batch, n_batches, _indices(np_rng, seed % 2 == 1)),
        Kind.FORWARD: lambda: Forward(epoch, batch, _bigints(rng, size), _bigints(rng, 1)),
        Kind.RESIDUAL: lambda: Residual(
            epoch, batch, _bigints(rng, size), None if seed % 2 else _bigints(rng, size)
        ),
        Kind.CROSS_TERM: lambda: CrossTerm(epoch, batch, _bigints(rng, 1)),
        Kind.DECRYPT_REQUEST: lambda: DecryptRequest(
            epoch, batch, rng.choice(["gradient", "scores"]), _bigints(rng, size)
        ),
        Kind.DECRYPTED: lambda: Decrypted(
            epoch, batch, rng.choice(["gradient", "scores"]), _bigints(rng, size)
        ),
        Kind.LOSS: lambda: Loss(
            epoch,
            batch,
            n_batches,
            _bigints(rng, 1),
            denominator=8 * rng.randrange(1, 2**32),  # the bounds of privfl.protocol.bounds
            scale_bits=rng.randrange(0, 128),
        ),
        Kind.EPOCH_RESULT: lambda: EpochResult(
            epoch, _float(rng), rng.choice([True, False]), rng.choice(VERDICTS)
        ),
        Kind.SCORE_REQUEST: lambda: ScoreRequest(epoch, rng.choice(["train", "test"])),
        Kind.SCORES: lambda: Scores(epoch, rng.choice(["train", "test"]), _bigints(rng, size)),
        Kind.FINISH: lambda: Finish(epochs=rng.randrange(0, 2**32), reason=_text(rng)),
        Kind.ABORT: lambda: Abort(reason=_text(rng)),
        # PSI and prediction
        Kind.PSI_HELLO: lambda: PsiHello(
            "rsa", rng.getrandbits(1024) | 1, 65537, count=rng.randrange(0, 2**32)
        ),
        Kind.PSI_QUERY: lambda: PsiQuery(_bigints(rng, size)),
        Kind.PSI_ANSWER: lambda: PsiAnswer(_bigints(rng, size), _bigints(rng, size + 1)),
        Kind.PSI_RESULT: lambda: PsiResult(
            np.array([rng.randrange(0, 2**40) for _ in range(size)], dtype=np.int64)
        ),
        **_hfl_builders(rng, np_rng, size),
        # --- checkpoint / resume (issue 3) ---
        Kind.CHECKPOINTS: lambda: Checkpoints(
            np_rng.integers(1, 2**32, size=int(np_rng.integers(0, 64)), dtype=np.int64)
        ),
        Kind.RESUME: lambda: Resume(completed=rng.randrange(0, 2**32)),
        **_boost_builders(rng, np_rng, size),
        **_secagg_builders(rng, np_rng, size),
        Kind.PROGRESS: lambda: Progress(_text(rng)[:64], size, size + rng.randrange(0, 2**20)),
        Kind.AUDIT_HEAD: lambda: AuditHead(size + 1, rng.randbytes(32).hex()),
    }
    return builders[kind]()


def _secagg_builders(
    rng: random.Random, np_rng: np.random.Generator, size: int
) -> dict[Kind, Callable[[], Message]]:
    """Builders for the networked SecAgg+ kinds (protocol v6)."""
    from privfl.crypto.shamir import SHARE_BYTES
    from privfl.protocol import secagg_messages as s

    round_ = rng.randrange(1, 2**32)
    ids = np.array(rng.sample(range(2**20), size), dtype=np.int64)  # distinct, O(size)
    degrees = np.ones(size, dtype=np.int64)
    keys = rng.randbytes(32 * size)
    return {
        Kind.SECAGG_ADVERTISE: lambda: s.SecAdvertise(round_, ids, keys, keys[::-1], keys),
        Kind.SECAGG_NEIGHBOURS: lambda: s.SecNeighbours(
            round_,
            ids,
            degrees * 0,
            degrees * 2,
            degrees,
            degrees,
            ids[::-1].copy(),
            np.arange(size, dtype=np.int64),
            degrees,
            ids,
            degrees * 0 - 1,
            keys,
            keys,
            keys,
            1 + size,
        ),
        Kind.SECAGG_SHARES: lambda: s.SecShares(
            round_, ids, ids[::-1].copy(), rng.randbytes(s.SEALED_BYTES * size)
        ),
        Kind.SECAGG_MASKED: lambda: s.SecMasked(
            round_, ids, np_rng.integers(0, 2**32, size=(size, 5)).astype(np.uint32)
        ),
        Kind.SECAGG_SURVIVORS: lambda: s.SecSurvivors(round_, ids),
        Kind.SECAGG_CONSISTENCY: lambda: s.SecConsistency(
            round_, ids, rng.randbytes(s.VIEW_BYTES * size)
        ),
        Kind.SECAGG_UNMASK: lambda: s.SecUnmask(
            round_,
            ids,
            ids[::-1].copy(),
            np_rng.integers(0, 2, size).astype(np.bool_),
            rng.randbytes(SHARE_BYTES * size),
        ),
    }


def _boost_builders(
    rng: random.Random, np_rng: np.random.Generator, size: int
) -> dict[Kind, Callable[[], Message]]:
    """Builders for the vertical SecureBoost kinds."""
    from privfl.protocol import boost_messages as b

    tree, level = rng.randrange(0, 2**32), rng.randrange(0, 20)
    nodes = np.unique(np_rng.integers(0, 2**20, size=size)).astype(np.int64)
    left = np_rng.integers(0, 2, size=(len(nodes), 7)).astype(np.bool_)
    pairs = np.stack([np.full(len(nodes), tree, np.int64), nodes], axis=1).reshape(-1, 2)
    return {
        Kind.BOOST_GRADIENTS: lambda: b.BoostGradients(
            tree, np.arange(size, dtype=np.int64) * 3, _bigints(rng, size)
        ),
        Kind.BOOST_NODES: lambda: b.BoostNodes(tree, level, nodes),
        Kind.BOOST_MASKED: lambda: b.BoostMasked(
            tree, level, nodes, nodes[: len(nodes) // 2], _bigints(rng, size)
        ),
        Kind.BOOST_HISTOGRAM: lambda: b.BoostHistogram(tree, level, nodes, _bigints(rng, size)),
        Kind.BOOST_PROOF: lambda: b.BoostProof(
            tree,
            level,
            _bigints(rng, size),
            _bigints(rng, 2 * size),
            _bigints(rng, size),
            _bigints(rng, 2 * size),
            _bigints(rng, len(nodes)),
            np.arange(len(nodes), dtype=np.int64),
        ),
        Kind.BOOST_SPLIT: lambda: b.BoostSplit(tree, int(rng.randrange(0, 2**20)), size, 3),
        Kind.BOOST_PARTITION: lambda: b.BoostPartition(
            tree, 0, np_rng.integers(0, 2, size=size).astype(np.bool_)
        ),
        Kind.BOOST_DECIDE: lambda: b.BoostDecide(tree, 1 + size, rng.choice(b.DECISION_SPLITS)),
        Kind.BOOST_DECISIONS: lambda: b.BoostDecisions(tree, "test", pairs, left),
        Kind.BOOST_CANDIDATES: lambda: b.BoostCandidates(
            2**127 + 2 * size + 1, 0, "train", 1 + size, 1, _bigints(rng, size + 1)
        ),
        Kind.BOOST_REVEAL: lambda: b.BoostReveal(tree, int(nodes[0]), _bigints(rng, size)),
        Kind.BOOST_REVEALED: lambda: b.BoostRevealed(tree, int(nodes[0]), _bigints(rng, size)),
    }


def _hfl_builders(
    rng: random.Random, np_rng: np.random.Generator, size: int
) -> dict[Kind, Callable[[], Message]]:
    """Builders for the horizontal-mode kinds."""
    from privfl.protocol import hfl_messages as h

    def vec() -> np.ndarray:
        return np_rng.normal(size=size).astype(np.float32)

    def ids() -> np.ndarray:
        return np_rng.integers(0, 1000, size=size).astype(np.int64)

    round_ = rng.randrange(1, 10_000)
    return {
        Kind.JOIN: lambda: h.JoinRequest(round_, rng.choice(h.HFL_ROLES), _text(rng), ids()),
        Kind.ROUND_START: lambda: h.RoundStart(
            round_, vec(), ids(), ids(), rng.randbytes(32), rng.randbytes(32)
        ),
        Kind.UPDATE: lambda: h.Update(round_, rng.randrange(0, 2**32), vec()),
        Kind.ROUND_DONE: lambda: h.RoundDone(round_, rng.randrange(0, 2**32)),
        Kind.SEALED: lambda: h.Sealed(round_, rng.randbytes(size)),
        Kind.SHUFFLE_WINDOW: lambda: h.ShuffleWindow(
            round_, size, size // 2, 0.5, 0.25, vec(), rng.randbytes(32)
        ),
        Kind.SHUFFLED: lambda: h.Shuffled(round_, 3, size, rng.randbytes(3 * size), 1),
        Kind.ROUND_END: lambda: h.RoundEnd(round_, rng.random(), rng.random() < 0.5, _text(rng)),
    }


def _public_key(rng: random.Random) -> PublicKeyMessage:
    bits = rng.choice([2048, 4096])
    n = rng.getrandbits(bits) | (1 << (bits - 1)) | 1
    return PublicKeyMessage(n=n, bits=bits)


def _header(kind: Kind, **overrides: Any) -> Header:
    fields: dict[str, Any] = {
        "protocol": PROTOCOL,
        "version": VERSION,
        "session": "s-1",
        "sender": "guest1",
        "receiver": "host",
        "round": 3,
        "msg_id": 42,
        "kind": kind,
    }
    return Header(**{**fields, **overrides})


def _raw_header(**overrides: Any) -> dict[str, Any]:
    """The envelope as a plain dict, to craft frames the encoder would never write."""
    head = {k: getattr(_header(Kind.ABORT), k) for k in codec._HEADER_KEYS}
    head["kind"] = "abort"
    head.update(overrides)
    return head


def _pack(obj: object) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _ndarray_ext(dtype: str, shape: list[int], buffer: bytes) -> msgpack.ExtType:
    return msgpack.ExtType(codec._EXT_NDARRAY, _pack([dtype, shape, buffer]))


def _bigints_ext(width: int, blob: bytes) -> msgpack.ExtType:
    return msgpack.ExtType(codec._EXT_BIGINTS, width.to_bytes(4, "big") + blob)


def _assert_same(actual: object, expected: object) -> None:
    """Same type and every field equal (arrays by value and dtype)."""
    assert type(actual) is type(expected)
    for f in dataclasses.fields(expected):  # type: ignore[arg-type]
        got, want = getattr(actual, f.name), getattr(expected, f.name)
        if isinstance(want, np.ndarray):
            assert isinstance(got, np.ndarray), f.name
            assert got.dtype == want.dtype and np.array_equal(got, want), f.name
        else:
            assert type(got) is type(want), f.name
            assert got == want, f.name


# ---------------------------------------------------------------- round trips


def test_every_kind_has_a_builder() -> None:
    # Prepare / act: build one message of each kind.
    built = {kind: _build(kind, 0) for kind in MESSAGE_TYPES}

    # Assert: a new kind without a builder fails here rather than going untested.
    assert {kind: type(msg) for kind, msg in built.items()} == MESSAGE_TYPES


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", list(MESSAGE_TYPES))
def test_seeded_round_trip_of_every_kind(kind: Kind, seed: int) -> None:
    # Prepare
    body = _build(kind, seed)
    header = _header(kind, round=seed, msg_id=2**63 - 1 - seed)

    # Act
    frames = codec.encode(header, body)
    got_header, got_body = codec.decode(frames)

    # Assert
    assert got_header == header
    assert type(got_header.kind) is Kind
    _assert_same(got_body, body)


def test_round_trip_covers_none_inf_and_big_values() -> None:
    # Prepare: the optional, infinite and wide cases the seeded builders may or may not hit.
    bodies: list[Message] = [
        Batch(0, 0, 1, None),
        Batch(0, 0, 1, np.array([], dtype=np.int64)),
        Residual(1, 0, BigInts(()), None),
        Residual(1, 0, BigInts((0, 0)), BigInts((MAX_UNSIGNED, 0))),
        EpochResult(1, math.inf, True, ""),
        EpochResult(1, -math.inf, False, "diverged"),
        PublicKeyMessage(n=2**4096 - 1, bits=4096),
        PublicKeyMessage(n=2**63 - 1, bits=63),  # the largest native msgpack int
        PublicKeyMessage(n=2**63 + 1, bits=64),  # the smallest that needs the extension
        PsiHello("rsa", 2**4095 + 1, 2**4096 + 1, 0),  # exponents past int64 too
    ]

    for body in bodies:
        # Act
        _, got = codec.decode(codec.encode(_header(codec.kind_of(body)), body))

        # Assert
        _assert_same(got, body)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=MAX_UNSIGNED), max_size=8), st.data())
def test_bigints_vectors_round_trip(values: list[int], data: st.DataObject) -> None:
    # Prepare
    body = Scores(
        epoch=data.draw(st.integers(0, 2**32)), split="test", scores=BigInts(tuple(values))
    )

    # Act
    _, got = codec.decode(codec.encode(_header(Kind.SCORES), body))

    # Assert
    assert got == body


@settings(max_examples=80, deadline=None)
@given(
    st.one_of(
        st.integers(min_value=0, max_value=2**64),
        st.integers(min_value=0, max_value=MAX_SIGNED // 2),
        st.sampled_from([2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**4095]),
    ),
    st.integers(min_value=-(2**70), max_value=2**70),
)
def test_public_key_big_ints_round_trip(half: int, bits: int) -> None:
    # Prepare: any odd n (2·half + 1) and any announced size it satisfies.
    n = 2 * half + 1
    body = PublicKeyMessage(n=n, bits=max(1, min(bits, n.bit_length())))

    # Act
    _, got = codec.decode(codec.encode(_header(Kind.PUBLIC_KEY), body))

    # Assert
    assert type(got) is PublicKeyMessage
    assert got.n == n and got.bits == body.bits


# ---------------------------------------------------------------- golden vectors


GOLDEN_HEADER = (
    b"\x88\xa8protocol\xa6privfl\xa7version\x07\xa7session\xa6golden\xa6sender\xa6guest1"
    b"\xa8receiver\xa4host\xa5round\x00\xa6msg_id\x01\xa4kind\xa5hello"
)
GOLDEN_HELLO = b"\x84\xa4role\xa5guest\xafjob_fingerprint\xa45e55\xa4rows\xcd\x029\xa8features\x0f"


def test_golden_hello() -> None:
    # Prepare
    header = Header(
        protocol="privfl",
        version=VERSION,
        session="golden",
        sender="guest1",
        receiver="host",
        round=0,
        msg_id=1,
        kind=Kind.HELLO,
    )
    body = Hello(role="guest", job_fingerprint="5e55", rows=569, features=15)

    # Act
    frames = codec.encode(header, body)

    # Assert: byte for byte, and the literal decodes back to the same objects.
    assert frames == [GOLDEN_HEADER, GOLDEN_HELLO]
    assert codec.decode([GOLDEN_HEADER, GOLDEN_HELLO]) == (header, body)


@pytest.mark.parametrize(
    ("body", "golden"),
    [
        # Single int past int64: ext 3, signed big-endian, (bits + 8) // 8 bytes.
        (
            PublicKeyMessage(n=2**65 + 1, bits=66),
            b"\x82\xa1n\xc7\t\x03\x02\x00\x00\x00\x00\x00\x00\x00\x01\xa4bitsB",
        ),
        # BigInts: ext 2, 4-byte big-endian width, then fixed-width big-endian values.
        (
            CrossTerm(epoch=2, batch=0, value=BigInts((258,))),
            b"\x83\xa5epoch\x02\xa5batch\x00\xa5value\xc7\x06\x02\x00\x00\x00\x02\x01\x02",
        ),
        # ndarray: ext 1 holding [dtype str, shape, raw buffer].
        (
            Batch(epoch=2, batch=1, n_batches=3, indices=np.array([3, 1], dtype=np.int64)),
            b"\x84\xa5epoch\x02\xa5batch\x01\xa9n_batches\x03\xa7indices\xc7\x19\x01\x93"
            b"\xa3<i8\x91\x02\xc4\x10\x03\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00",
        ),
    ],
)
def test_golden_extension_types(body: Message, golden: bytes) -> None:
    # Prepare
    header = _header(codec.kind_of(body), round=2)

    # Act
    _, frame = codec.encode(header, body)

    # Assert
    assert frame == golden
    _assert_same(codec.decode_body(header.kind, golden), body)


# ---------------------------------------------------------------- refusals: envelope


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"protocol": "fate"}, "we speak privfl"),
        ({"version": VERSION + 1}, "we speak privfl"),
        ({"version": True}, "version"),  # a bool is not the integer 1
        ({"version": 1.0}, "version"),
        ({"version": "1"}, "version"),
        ({"protocol": b"privfl"}, "protocol"),
        ({"kind": "gossip"}, "unknown message kind"),
        ({"kind": 3}, "kind"),
        ({"round": -1}, "round"),
        ({"msg_id": -5}, "msg_id"),
        ({"msg_id": True}, "msg_id"),
        ({"round": "0"}, "round"),
        ({"sender": 5}, "sender"),
        ({"receiver": None}, "receiver"),
        ({"session": b"s-1"}, "session"),
    ],
)
def test_bad_envelope_fields_are_refused(overrides: dict[str, Any], match: str) -> None:
    # Prepare
    frame = _pack(_raw_header(**overrides))

    # Act / assert
    with pytest.raises(ProtocolError, match=match):
        codec.decode_header(frame)


@pytest.mark.parametrize("key", ["protocol", "version", "kind", "sender", "round"])
def test_array_in_envelope_is_refused(key: str) -> None:
    # Prepare: an ndarray extension where a scalar belongs; `==` on it is not a bool.
    arr = _ndarray_ext("<i8", [2], np.arange(2, dtype=np.int64).tobytes())
    frame = _pack(_raw_header(**{key: arr}))

    # Act / assert
    with pytest.raises(ProtocolError):
        codec.decode_header(frame)


@pytest.mark.parametrize(
    "head",
    [
        {k: v for k, v in _raw_header().items() if k != "msg_id"},
        {**_raw_header(), "extra": 1},
        [],
        "privfl",
        None,
    ],
    ids=["missing-key", "extra-key", "list", "str", "nil"],
)
def test_malformed_envelope_is_refused(head: object) -> None:
    # Act / assert
    with pytest.raises(ProtocolError, match="malformed envelope"):
        codec.decode_header(_pack(head))


def test_valid_raw_envelope_is_accepted() -> None:
    # Prepare: the positive control for the crafted-envelope tests above.
    frame = _pack(_raw_header())

    # Act
    header = codec.decode_header(frame)

    # Assert
    assert header == _header(Kind.ABORT)


# ---------------------------------------------------------------- refusals: body


def _hello_fields(**overrides: Any) -> dict[str, Any]:
    return {"role": "guest", "job_fingerprint": "ab", "rows": 10, "features": 3, **overrides}


def _loss_fields(**overrides: Any) -> dict[str, Any]:
    value = _bigints_ext(1, b"\x05")
    fields = {"epoch": 0, "batch": 0, "n_batches": 1, "value": value, "denominator": 8}
    return {**fields, "scale_bits": 48, **overrides}


def _request_fields(**overrides: Any) -> dict[str, Any]:
    fields = {"epoch": 0, "batch": 0, "purpose": "gradient", "values": _bigints_ext(1, b"\x05")}
    return {**fields, **overrides}


@pytest.mark.parametrize(
    ("kind", "fields", "match"),
    [
        (Kind.HELLO, {k: v for k, v in _hello_fields().items() if k != "rows"}, "exactly"),
        (Kind.HELLO, _hello_fields(extra=1), "exactly"),
        (Kind.HELLO, _hello_fields(rows="10"), "rows"),
        (Kind.HELLO, _hello_fields(rows=True), "rows"),
        (Kind.HELLO, _hello_fields(rows=10.0), "rows"),
        (Kind.HELLO, _hello_fields(role=b"guest"), "role"),
        (Kind.HELLO, _hello_fields(role=None), "role"),
        (Kind.HELLO, _hello_fields(role="admin"), "unknown role"),
        (Kind.HELLO, _hello_fields(rows=-1), "rows must lie in"),
        (Kind.HELLO, _hello_fields(features=10**12), "features must lie in"),
        (Kind.LOSS, _loss_fields(denominator=0), "denominator must lie in"),
        (Kind.LOSS, _loss_fields(denominator=7), "denominator must lie in"),
        (Kind.LOSS, _loss_fields(denominator=12), "8 times the batch size"),
        (Kind.LOSS, _loss_fields(scale_bits=-1), "scale_bits"),
        (Kind.LOSS, _loss_fields(scale_bits=10**6), "scale_bits"),
        (Kind.LOSS, _loss_fields(epoch=-1), "epoch must lie in"),
        (Kind.DECRYPT_REQUEST, _request_fields(epoch=10**12), "epoch must lie in"),
        (Kind.DECRYPT_REQUEST, _request_fields(batch=-5), "batch must lie in"),
        (Kind.EPOCH_RESULT, {"epoch": 1, "loss": 0.5, "stop": True, "reason": "x"}, "verdict"),
        (Kind.FINISH, {"epochs": -1, "reason": ""}, "epochs must lie in"),
        (Kind.RESUME, {"completed": 2**40}, "completed epochs must lie in"),
        (Kind.EPOCH_RESULT, {"epoch": 1, "loss": 0.5, "stop": 1, "reason": ""}, "stop"),
        (Kind.EPOCH_RESULT, {"epoch": 1, "loss": "0.5", "stop": True, "reason": ""}, "loss"),
        (Kind.EPOCH_RESULT, {"epoch": 1, "loss": math.nan, "stop": True, "reason": ""}, "NaN"),
        (Kind.ABORT, {"reason": _bigints_ext(1, b"ab")}, "reason"),
        (Kind.ABORT, {b"reason": "x"}, "exactly"),
        (Kind.CROSS_TERM, {"epoch": 0, "batch": 0, "value": [1]}, "value"),
        (Kind.CROSS_TERM, {"epoch": 0, "batch": 0, "value": _bigints_ext(1, b"ab")}, "one"),
        (Kind.PUBLIC_KEY, {"n": 2**40, "bits": 41}, "odd"),
        (Kind.RESIDUAL, {"epoch": 0, "batch": 0, "residual": None, "others": None}, "residual"),
    ],
)
def test_bad_bodies_are_refused(kind: Kind, fields: Any, match: str) -> None:
    # Prepare
    frame = _pack(fields)

    # Act / assert
    with pytest.raises(ProtocolError, match=match):
        codec.decode_body(kind, frame)


@pytest.mark.parametrize(
    "indices",
    [
        _ndarray_ext("|O", [1], b"\x00" * 8),
        _ndarray_ext("<c16", [1], b"\x00" * 16),
        _ndarray_ext(">i8", [1], b"\x00" * 8),
        _ndarray_ext("<U1", [1], b"\x00" * 4),
        _ndarray_ext(["<i8"], [1], b"\x00" * 8),  # dtype not a string
        _ndarray_ext("<i8", [-1], b""),  # negative dimension
        _ndarray_ext("<i8", [3], b"\x00" * 8),  # buffer shorter than the shape
        _ndarray_ext("<i8", [1], b"\x00" * 7),  # buffer not a multiple of the item size
        _ndarray_ext("<i8", 1, b"\x00" * 8),  # shape not a list
        _ndarray_ext("<i4", [1], b"\x00" * 4),  # allowed on the wire, not as indices
        _ndarray_ext("<i8", [1, 1], b"\x00" * 8),  # indices are one-dimensional
        msgpack.ExtType(codec._EXT_NDARRAY, b"\xc1"),  # not msgpack inside
        msgpack.ExtType(codec._EXT_NDARRAY, _pack(["<i8", [1]])),  # two parts, not three
    ],
    ids=[
        "object",
        "complex",
        "big-endian",
        "unicode",
        "dtype-list",
        "negative-dim",
        "short-buffer",
        "ragged-buffer",
        "shape-int",
        "int32",
        "2d",
        "bad-inner",
        "two-parts",
    ],
)
def test_bad_arrays_are_refused(indices: msgpack.ExtType) -> None:
    # Prepare
    frame = _pack({"epoch": 0, "batch": 0, "n_batches": 1, "indices": indices})

    # Act / assert
    with pytest.raises(ProtocolError):
        codec.decode_body(Kind.BATCH, frame)


@pytest.mark.parametrize(
    "value",
    [
        _bigints_ext(2, b"\x00\x01\x02"),  # 3 bytes is not a multiple of width 2
        _bigints_ext(0, b""),  # zero width
        _bigints_ext(codec.MAX_INT_BYTES + 1, b"\x01" * (codec.MAX_INT_BYTES + 1)),
        msgpack.ExtType(codec._EXT_BIGINTS, b"\x01"),  # shorter than its width prefix
        msgpack.ExtType(codec._EXT_BIGINTS, b""),
    ],
    ids=["ragged", "zero-width", "too-wide", "short-prefix", "empty"],
)
def test_malformed_bigints_are_refused(value: msgpack.ExtType) -> None:
    # Prepare
    frame = _pack({"epoch": 0, "split": "train", "scores": value})

    # Act / assert
    with pytest.raises(ProtocolError, match="big-integer"):
        codec.decode_body(Kind.SCORES, frame)


@pytest.mark.parametrize(
    "n",
    [
        msgpack.ExtType(codec._EXT_BIGINT, b"\x01" * (codec.MAX_INT_BYTES + 2)),
        msgpack.ExtType(9, b""),  # an extension code we never defined
    ],
    ids=["int-too-large", "unknown-ext"],
)
def test_bad_extensions_are_refused(n: msgpack.ExtType) -> None:
    # Prepare
    frame = _pack({"n": n, "bits": 1})

    # Act / assert
    with pytest.raises(ProtocolError):
        codec.decode_body(Kind.PUBLIC_KEY, frame)


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\xc1",
        b"\x81\xa6reason",
        _pack({"reason": "x"}) + b"\x00",
        b"\x81\xa6reason\xa3\xff\xfe\xfd",
    ],
    ids=["empty", "never-used-byte", "truncated", "trailing-bytes", "bad-utf8"],
)
def test_malformed_msgpack_is_refused(frame: bytes) -> None:
    # Act / assert
    with pytest.raises(ProtocolError, match="malformed"):
        codec.decode_body(Kind.ABORT, frame)


def test_every_truncation_is_refused() -> None:
    # Prepare: a message with every extension type, cut at every byte.
    body = Loss(3, 0, 2, BigInts((2**4095 + 7,)), denominator=8 * 10**9, scale_bits=32)
    head, frame = codec.encode(_header(Kind.LOSS), body)

    for cut in range(len(head)):
        # Act / assert
        with pytest.raises(ProtocolError):
            codec.decode_header(head[:cut])
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            codec.decode_body(Kind.LOSS, frame[:cut])
    assert codec.decode([head, frame])[1] == body  # the whole message still decodes


@pytest.mark.parametrize("count", [0, 1, 3])
def test_wrong_number_of_frames_is_refused(count: int) -> None:
    # Prepare
    frames = codec.encode(_header(Kind.ABORT), Abort("x"))

    # Act / assert
    with pytest.raises(ProtocolError, match="2 frames"):
        codec.decode((frames * 2)[:count])


def test_frame_above_the_size_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: a limit of 64 bytes instead of allocating 64 MiB.
    monkeypatch.setattr(codec, "MAX_FRAME_BYTES", 64)
    small = codec.encode(_header(Kind.ABORT), Abort("x" * 10))
    large = codec.encode(_header(Kind.ABORT), Abort("x" * 100))

    # Act / assert: the small one passes, the large one is refused before parsing.
    assert codec.decode(small)[1] == Abort("x" * 10)
    with pytest.raises(ProtocolError, match="exceeds the 64-byte limit"):
        codec.decode(large)


def test_header_above_its_size_limit_is_refused() -> None:
    # Prepare
    head, _ = codec.encode(_header(Kind.ABORT, session="s" * codec.MAX_HEADER_BYTES), Abort(""))

    # Act / assert
    with pytest.raises(ProtocolError, match="limit"):
        codec.decode_header(head)


# ---------------------------------------------------------------- refusals: encode


def test_encode_refuses_a_kind_that_does_not_match_the_body() -> None:
    # Act / assert
    with pytest.raises(ProtocolError, match="does not match"):
        codec.encode(_header(Kind.HELLO), Abort("x"))


def test_encode_refuses_a_non_message() -> None:
    # Act / assert
    with pytest.raises(ProtocolError, match="not a protocol message"):
        codec.encode(_header(Kind.ABORT), "abort")  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", [np.complex128, object, np.dtype(">i8"), np.float16])
def test_encode_refuses_arrays_outside_the_allow_list(dtype: Any) -> None:
    # Prepare: Batch validates its indices, so smuggle a bad array past __post_init__.
    body = Batch(0, 0, 1, None)
    object.__setattr__(body, "indices", np.zeros(2, dtype=dtype))

    # Act / assert
    with pytest.raises(ProtocolError, match="not allowed"):
        codec.encode(_header(Kind.BATCH), body)


# ---------------------------------------------------------------- fuzzing


def _only_protocol_errors(call: Callable[[], object]) -> None:
    with contextlib.suppress(ProtocolError):
        call()


# Random bytes as frames: tests/protocol/test_fuzz_codec.py.


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),  # msgpack's native range
    st.floats(),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.builds(msgpack.ExtType, st.integers(0, 5), st.binary(max_size=24)),
    st.builds(
        _ndarray_ext,
        st.sampled_from(["<i8", "<f8", "|b1", "|O", ">i8", "<c8"]),
        st.lists(st.integers(-1, 3), max_size=3),
        st.binary(max_size=24),
    ),
)
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3), max_leaves=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(list(MESSAGE_TYPES)), st.data())
def test_structured_garbage_raises_only_protocol_errors(kind: Kind, data: st.DataObject) -> None:
    # Prepare: the right field names (so decoding gets past the key check) with random values.
    names = [f.name for f in dataclasses.fields(MESSAGE_TYPES[kind])]
    body = {name: data.draw(_values, label=name) for name in names}
    head = _raw_header(kind=str(kind))
    head[data.draw(st.sampled_from(codec._HEADER_KEYS), label="key")] = data.draw(_values)

    # Act / assert
    _only_protocol_errors(lambda: codec.decode_body(kind, _pack(body)))
    _only_protocol_errors(lambda: codec.decode_header(_pack(head)))


def test_a_full_width_8192_bit_integer_round_trips() -> None:
    # A DJN generator h_s < n² of a 4096-bit key may have all 8,192 bits set at the top.
    header = Header(PROTOCOL, VERSION, "s", "server", "host", 0, 1, Kind.PUBLIC_KEY)
    body = PublicKeyMessage(n=(1 << 4096) - 1, bits=4096, h_s=(1 << 8191) + 3)

    _, got = codec.decode(codec.encode(header, body))

    assert got == body
