"""Byte-exact golden vectors: our encoder writes, and our decoder reads, the checked-in frames."""

from __future__ import annotations

import json
from typing import Any

import pytest
from vectors import GOLDEN, examples, link_examples

from privfl.protocol import codec
from privfl.protocol.messages import MESSAGE_TYPES, PROTOCOL, VERSION
from privfl.protocol.reliable import LINK_HEADER_BYTES, unpack_frames

GOLD: dict[str, Any] = json.loads(GOLDEN.read_text())
BY_NAME = {m["name"]: m for m in GOLD["messages"]}
EXAMPLES = examples()


def test_golden_file_is_for_this_protocol_version() -> None:
    assert (GOLD["protocol"], GOLD["version"]) == (PROTOCOL, VERSION)


def test_every_message_kind_has_a_golden_vector() -> None:
    assert {h.kind for _, h, _ in EXAMPLES} == set(MESSAGE_TYPES)
    assert set(BY_NAME) == {name for name, _, _ in EXAMPLES}


@pytest.mark.parametrize(("name", "header", "body"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_encoding_is_byte_exact(name: str, header: Any, body: Any) -> None:
    frames = codec.encode(header, body)

    assert [f.hex() for f in frames] == BY_NAME[name]["frames"]


@pytest.mark.parametrize(("name", "header", "body"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_golden_frames_decode_to_the_example(name: str, header: Any, body: Any) -> None:
    frames = [bytes.fromhex(f) for f in BY_NAME[name]["frames"]]

    got_header, got_body = codec.decode(frames)

    assert got_header == header
    assert type(got_body) is type(body)
    assert codec.encode(got_header, got_body) == frames


def test_link_layer_is_byte_exact() -> None:
    link = {name: bytes.fromhex(h) for name, h in GOLD["link"].items()}

    assert link == link_examples()
    assert len(link["data_header"]) == LINK_HEADER_BYTES == len(link["ack_header"])
    assert unpack_frames(link["packed_frames"]) == [b"head", b"", b"body"]


def test_the_relay_seal_binds_both_run_nonces() -> None:
    """The golden seal opens with its own associated data, and not with another run's."""
    from nacl.bindings import crypto_aead_xchacha20poly1305_ietf_decrypt
    from nacl.exceptions import CryptoError
    from vectors import SEAL_EXAMPLE

    from privfl.protocol.seal import associated_data

    key, context, (sender, recipient, ours, theirs), _, payload, _ = SEAL_EXAMPLE
    sealed = bytes.fromhex(GOLD["link"]["relay_seal"])
    assert sealed[:16] == ours and sealed[16:32] == theirs
    aad = associated_data(context, sender, recipient, ours, theirs)
    plain = crypto_aead_xchacha20poly1305_ietf_decrypt(sealed[56:], aad, sealed[32:56], key)
    assert plain == (1).to_bytes(8, "big") + payload
    other_run = associated_data(context, sender, recipient, ours, b"C" * 16)
    with pytest.raises(CryptoError):
        crypto_aead_xchacha20poly1305_ietf_decrypt(sealed[56:], other_run, sealed[32:56], key)


def test_protocol_doc_specifies_every_message_kind() -> None:
    from pathlib import Path

    doc = (Path(__file__).parents[3] / "docs" / "protocol.md").read_text()

    for kind, cls in MESSAGE_TYPES.items():
        assert f"#### `{kind}` — {cls.__name__}" in doc, kind
        section = doc.split(f"#### `{kind}` — {cls.__name__}", 1)[1].split("####", 1)[0]
        for field in cls.__dataclass_fields__:
            assert f"`{field}`" in section, (kind, field)
