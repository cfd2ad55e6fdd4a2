"""The one codec: messages to msgpack frames and back, with size limits and no pickle.

Frames are ``[header, body]``. The header is decoded and checked on its own first so
a message from the wrong session or of an unknown kind is refused before its body
is parsed. Big integers travel fixed-width (ciphertexts are ``2·|n|`` bits), numpy
arrays as dtype + shape + buffer with a dtype allow-list.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Sequence
from typing import Any

import msgpack
import numpy as np

from privfl.errors import ProtocolError
from privfl.protocol.messages import (
    MESSAGE_TYPES,
    PROTOCOL,
    VERSION,
    BigInts,
    Header,
    Kind,
    Message,
    kind_of,
)

MAX_FRAME_BYTES = 64 * 1024 * 1024
MAX_HEADER_BYTES = 4096
MAX_INT_BYTES = 1024  # 8192-bit integers: room for ciphertexts of 4096-bit keys
ALLOWED_DTYPES = frozenset({"<i8", "<i4", "<u4", "<f8", "<f4", "|b1", "|u1"})
_EXT_NDARRAY, _EXT_BIGINTS, _EXT_BIGINT = 1, 2, 3
_INT64 = (-(2**63), 2**63 - 1)
_HEADER_KEYS = ("protocol", "version", "session", "sender", "receiver", "round", "msg_id", "kind")


def _default(obj: object) -> msgpack.ExtType:
    """Pack the types msgpack does not know natively."""
    if isinstance(obj, np.ndarray):
        if obj.dtype.str not in ALLOWED_DTYPES:
            raise ProtocolError(f"dtype {obj.dtype.str} is not allowed on the wire")
        data = np.ascontiguousarray(obj).tobytes()
        return msgpack.ExtType(_EXT_NDARRAY, msgpack.packb([obj.dtype.str, list(obj.shape), data]))
    if isinstance(obj, BigInts):
        width = max((v.bit_length() + 7) // 8 for v in obj.values) if obj.values else 1
        width = max(width, 1)
        blob = b"".join(v.to_bytes(width, "big") for v in obj.values)
        return msgpack.ExtType(_EXT_BIGINTS, width.to_bytes(4, "big") + blob)
    if isinstance(obj, int):  # only ints outside int64 reach here
        size = (obj.bit_length() + 8) // 8
        return msgpack.ExtType(_EXT_BIGINT, obj.to_bytes(size, "big", signed=True))
    raise ProtocolError(f"cannot encode {type(obj).__name__}")


def _ext_hook(code: int, data: bytes) -> object:
    """Unpack our extension types, refusing anything malformed."""
    if code == _EXT_NDARRAY:
        dtype, shape, buffer = msgpack.unpackb(data, max_bin_len=MAX_FRAME_BYTES)
        if dtype not in ALLOWED_DTYPES or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise ProtocolError(f"array of dtype {dtype!r} / shape {shape!r} refused")
        array = np.frombuffer(buffer, dtype=np.dtype(dtype))
        return array.reshape(shape).copy()
    if code == _EXT_BIGINTS:
        width = int.from_bytes(data[:4], "big")
        blob = data[4:]
        if len(data) < 4 or not 1 <= width <= MAX_INT_BYTES or len(blob) % width:
            raise ProtocolError("malformed big-integer vector")
        return BigInts(
            tuple(int.from_bytes(blob[i : i + width], "big") for i in range(0, len(blob), width))
        )
    if code == _EXT_BIGINT:
        if len(data) > MAX_INT_BYTES + 1:  # signed: a full-width value needs a sign byte
            raise ProtocolError("integer too large")
        return int.from_bytes(data, "big", signed=True)
    raise ProtocolError(f"unknown extension type {code}")


def _wrap_int(value: Any) -> Any:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if is_int and not _INT64[0] <= value <= _INT64[1]:
        return _BigIntBox(value)
    return value


class _BigIntBox:
    """Routes an out-of-range int to the extension encoder."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value


def _unpack(frame: bytes, limit: int) -> Any:
    if len(frame) > limit:
        raise ProtocolError(f"frame of {len(frame)} bytes exceeds the {limit}-byte limit")
    try:
        return msgpack.unpackb(
            frame,
            ext_hook=_ext_hook,
            raw=False,
            strict_map_key=True,
            max_str_len=limit,
            max_bin_len=limit,
            max_array_len=limit,
            max_map_len=64,
            max_ext_len=limit,
        )
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack raises many types on malformed input
        raise ProtocolError(f"malformed frame: {exc}") from exc


def encode(header: Header, body: Message) -> list[bytes]:
    """Encode a message as ``[header, body]`` frames."""
    if kind_of(body) is not header.kind:
        raise ProtocolError(f"header kind {header.kind} does not match {type(body).__name__}")
    head = {k: getattr(header, k) for k in _HEADER_KEYS}
    head["kind"] = str(header.kind)
    # A field still at its default is left out, so adding one keeps old frames unchanged.
    fields = {
        f.name: getattr(body, f.name)
        for f in dataclasses.fields(body)
        if not _at_default(getattr(body, f.name), f.default)
    }
    return [_pack(head), _pack(fields)]


def _at_default(value: object, default: object) -> bool:
    """Whether a field holds its (scalar) default, or an empty BigInts default; other arrays
    and containers are always sent."""
    if isinstance(default, BigInts) and not default.values:
        # A missing proof is then what a sender without the field sends, and the receiver
        # refuses it by its own rule (an empty proof), not as a malformed body.
        return isinstance(value, BigInts) and not value.values
    scalar = (int, float, str, bool, type(None))
    return type(value) is type(default) and isinstance(value, scalar) and value == default


def _pack(fields: dict[str, Any]) -> bytes:
    # msgpack holds ints up to 64 bits natively; bigger ones go through an extension.
    boxed = {k: _wrap_int(v) for k, v in fields.items()}

    def default(obj: object) -> msgpack.ExtType:
        return _default(obj.value if isinstance(obj, _BigIntBox) else obj)

    packed: bytes = msgpack.packb(boxed, default=default, use_bin_type=True)
    return packed


class VersionMismatch(ProtocolError):
    """An envelope of another protocol or version: refused, and kept for the channel to judge.

    The channel ends the session when the envelope names its own session and the
    authenticated sender (a peer of the job running another release); anything else
    with a foreign version (a mutated or stray frame) is refused like any bad message.
    """

    def __init__(self, protocol: str, version: int, session: str, sender: str) -> None:
        super().__init__(f"peer speaks {protocol!r} v{version}, we speak {PROTOCOL} v{VERSION}")
        self.protocol, self.version, self.session, self.sender = protocol, version, session, sender


def decode_header(frame: bytes) -> Header:
    """Decode and validate the envelope alone (version, protocol, kind, types)."""
    data = _unpack(frame, MAX_HEADER_BYTES)
    if not isinstance(data, dict) or set(data) != set(_HEADER_KEYS):
        raise ProtocolError("malformed envelope")
    # Types first: comparing a decoded array (an extension type) with == would not be a bool.
    for key in ("protocol", "session", "sender", "receiver", "kind"):
        if not isinstance(data[key], str):
            raise ProtocolError(f"envelope field {key} must be a string")
    for key in ("version", "round", "msg_id"):
        if not isinstance(data[key], int) or isinstance(data[key], bool) or data[key] < 0:
            raise ProtocolError(f"envelope field {key} must be a non-negative integer")
    if data["protocol"] != PROTOCOL or data["version"] != VERSION:
        raise VersionMismatch(data["protocol"], data["version"], data["session"], data["sender"])
    try:
        kind = Kind(data["kind"])
    except ValueError as exc:
        raise ProtocolError(f"unknown message kind {data['kind']!r}") from exc
    return Header(**{**data, "kind": kind})


def decode_body(kind: Kind, frame: bytes) -> Message:
    """Decode a body of a known kind and validate every field's type and range."""
    cls = MESSAGE_TYPES[kind]
    data = _unpack(frame, MAX_FRAME_BYTES)
    hints = typing.get_type_hints(cls)
    # A field with a default may be missing (sent by a peer that predates it).
    required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
    if not isinstance(data, dict) or not required <= set(data) <= set(hints):
        raise ProtocolError(f"{kind} body must have exactly the fields {sorted(hints)}")
    for name, value in data.items():
        if not _matches(value, hints[name]):
            raise ProtocolError(f"{kind}.{name}: {type(value).__name__} is the wrong type")
    message: Message = cls(**data)
    return message


def _matches(value: object, hint: Any) -> bool:
    """Whether a decoded value fits a field annotation (plain types and ``X | None``)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return any(_matches(value, option) for option in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def decode(frames: Sequence[bytes]) -> tuple[Header, Message]:
    """Decode ``[header, body]`` frames."""
    if len(frames) != 2:
        raise ProtocolError(f"a message has 2 frames, got {len(frames)}")
    header = decode_header(frames[0])
    return header, decode_body(header.kind, frames[1])
