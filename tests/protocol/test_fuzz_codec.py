"""Fuzzing the codec: hypothesis round-trips of every message kind, and mutated frames that
may only ever raise the codec's own ProtocolError (never another exception, never a hang)."""

from __future__ import annotations

import contextlib
import dataclasses
import random
import typing
from typing import Any

import numpy as np
import pytest
from fuzzing import CORPUS, mutate
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from privfl.errors import ProtocolError
from privfl.protocol import codec
from privfl.protocol.messages import (
    MESSAGE_TYPES,
    PROTOCOL,
    VERSION,
    BigInts,
    Header,
    Kind,
    Message,
)
from privfl.protocol.reliable import unpack_frames

WORDS = ["server", "host", "guest", "gradient", "scores", "train", "test", ""]


def strategy_for(hint: Any) -> st.SearchStrategy[Any]:
    """Values for one field annotation (small numbers often, so validation often passes)."""
    args = typing.get_args(hint)
    if args and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return st.none() | strategy_for(inner)
    if hint is bool:
        return st.booleans()
    if hint is int:
        return st.integers(0, 3) | st.integers(0, 2**80)
    if hint is float:
        return st.floats(allow_nan=False)
    if hint is str:
        return st.sampled_from(WORDS) | st.text(max_size=12)
    if hint is bytes:
        return st.binary(max_size=64)
    if hint is BigInts:
        return st.lists(st.integers(0, 2**300), max_size=3).map(lambda v: BigInts(tuple(v)))
    if hint is np.ndarray:
        return st.lists(st.integers(0, 2**40), max_size=5).map(
            lambda v: np.array(v, dtype=np.int64)
        )
    raise AssertionError(f"no strategy for {hint!r}")


@st.composite
def messages(draw: st.DrawFn) -> tuple[Header, Message]:
    kind = draw(st.sampled_from(sorted(MESSAGE_TYPES)))
    cls = MESSAGE_TYPES[kind]
    hints = typing.get_type_hints(cls)
    fields = {name: draw(strategy_for(hint)) for name, hint in hints.items()}
    try:
        body = cls(**fields)
    except ProtocolError:
        assume(False)
    header = Header(
        PROTOCOL,
        VERSION,
        draw(st.text(max_size=40)),
        draw(st.text(min_size=1, max_size=20)),
        draw(st.text(min_size=1, max_size=20)),
        draw(st.integers(0, 2**63 - 1)),
        draw(st.integers(0, 2**63 - 1)),
        kind,
    )
    return header, body


def same(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(messages())
def test_every_message_round_trips(message: tuple[Header, Message]) -> None:
    header, body = message

    frames = codec.encode(header, body)
    got_header, got_body = codec.decode(frames)

    assert got_header == header and type(got_body) is type(body)
    for field in dataclasses.fields(body):
        assert same(getattr(got_body, field.name), getattr(body, field.name)), field.name
    assert codec.encode(got_header, got_body) == frames


def test_mutated_frames_raise_only_protocol_errors() -> None:
    rng = random.Random(20261121)
    outcomes = {"decoded": 0, "refused": 0}
    for _ in range(20_000):
        frames = rng.choice(CORPUS)
        for _ in range(rng.randint(1, 3)):
            frames = mutate(rng, frames)
        try:
            codec.decode(frames)
            outcomes["decoded"] += 1
        except ProtocolError:
            outcomes["refused"] += 1

    assert outcomes["refused"] > 10_000 and outcomes["decoded"] > 0, outcomes


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.binary(max_size=300), max_size=4), st.binary(max_size=200), st.binary(max_size=200)
)
def test_random_frames_raise_only_protocol_errors(
    frames: list[bytes], head: bytes, body: bytes
) -> None:
    # Anything other than ProtocolError propagates and fails the test.
    with contextlib.suppress(ProtocolError):
        codec.decode(frames)
    with contextlib.suppress(ProtocolError):
        unpack_frames(b"".join(frames))
    with contextlib.suppress(ProtocolError):
        codec.decode([head, body])
    with contextlib.suppress(ProtocolError):
        codec.decode_header(head)
    for kind in (Kind.BATCH, Kind.PUBLIC_KEY, Kind.LOSS):
        with contextlib.suppress(ProtocolError):
            codec.decode_body(kind, body)


@pytest.mark.parametrize(
    "value",
    [
        {"dtype": "<i8", "shape": [2**40], "data": b""},
        {"dtype": "|O", "shape": [1], "data": b"x"},
        {"dtype": "<i8", "shape": [-1], "data": b""},
        {"dtype": "<i8", "shape": [3], "data": b"short"},
    ],
)
def test_hostile_arrays_are_refused(value: dict[str, Any]) -> None:
    import msgpack

    ext = msgpack.ExtType(1, msgpack.packb([value["dtype"], value["shape"], value["data"]]))
    body = msgpack.packb({"epoch": 0, "batch": 0, "n_batches": 1, "indices": ext})

    with pytest.raises(ProtocolError):
        codec.decode_body(Kind.BATCH, body)
