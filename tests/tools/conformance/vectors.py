"""Golden vectors: one fixed example of every message kind, and of the link layer.

``python tests/tools/conformance/vectors.py`` rewrites ``golden.json`` (shipped in the package,
``privfl/tools/conformance/vectors/``) from these
examples; do that only for a deliberate wire-format change (and bump VERSION).
The test (test_golden.py) checks, byte for byte, that encoding these examples
gives the checked-in frames and that decoding the frames gives them back.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from privfl.crypto.shamir import SHARE_BYTES
from privfl.parties.vertical import joint_plan
from privfl.protocol import codec
from privfl.protocol import secagg_messages as wire
from privfl.protocol.boost_messages import (
    BoostCandidates,
    BoostDecide,
    BoostDecisions,
    BoostGradients,
    BoostHistogram,
    BoostMasked,
    BoostNodes,
    BoostPartition,
    BoostProof,
    BoostReveal,
    BoostRevealed,
    BoostSplit,
)
from privfl.protocol.hfl_messages import (
    JoinRequest,
    RoundDone,
    RoundEnd,
    RoundStart,
    Sealed,
    Shuffled,
    ShuffleWindow,
    Update,
)
from privfl.protocol.messages import (
    HEAD_LAST,
    PROTOCOL,
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
    kind_of,
)
from privfl.protocol.reliable import ACK, DATA, link_header, pack_frames
from privfl.protocol.seal import seal_frame

GOLDEN = Path(__file__).parents[3] / "privfl" / "tools" / "conformance" / "vectors" / "golden.json"
SESSION = "golden-session"
# Any odd 256-bit number will do (no one factors it here); > 2**64, so it takes the
# big-integer extension on the wire.
N = 0xC7F1A5D3B9E2F0A1C3D5E7F9A1B3C5D7E9F1A3B5C7D9E1F3A5B7C9D1E3F5A7B9
CIPHER = (N * N - 12345, 1, 2**70 + 3)
# A key's modulus proof (§6.0): eight residues below N, of the shape only (N is not
# factored here); spec.json has a real proof for a real key.
ROOTS = BigInts(tuple(N - 3 - 2 * i for i in range(8)))
# DJN: the generator h_s = (−x²)^N mod N² for x = 2 (a party would draw x at random).
H_S = pow(N - 4, N, N * N)
# PSI: an odd 1024-bit stand-in for a guest's RSA modulus (the Host refuses shorter ones),
# values in Z_N, and 256-bit tags (SHA-256 outputs).
RSA_N = 2**1023 + N
PSI_VALUES = (RSA_N - 2, 1, 2**200 + 1)
PSI_TAGS = (2**255 + 1, 7, 2**256 - 1)
# Horizontal mode: a 4-weight model; a sealed report is 60 + 32 + 4·4 = 108 bytes.
HFL_JOB = "0123456789abcdef"
TOKEN = bytes(range(32))
REPORT_KEY = bytes(range(32, 64))
SEALED = bytes((7 * i) % 256 for i in range(108))
SEALED_2 = bytes((11 * i + 5) % 256 for i in range(108))
ROWS_DIGEST = "3f" * 32  # any 64 lowercase hex digits
# The batch plan's commit and reveal (§6.1a): any 32-byte shares, and their commitments.
SHARE, SHARE_2 = "5a" * 32, "a5" * 32
COMMIT = joint_plan.commit(SESSION, "host", bytes.fromhex(SHARE))
COMMIT_2 = joint_plan.commit(SESSION, "guest-1", bytes.fromhex(SHARE_2))
SECTIONS = "data=0123456789abcdef,parties.host=fedcba9876543210,training=00112233aabbccdd"


def _messages() -> list[tuple[str, str, str, int, Message]]:
    """(name, sender, receiver, round, body) of every example."""
    rows = np.array([0, 5, 9], dtype=np.int64)
    ids = np.array([0, 1, 2, 3], dtype=np.int64)
    none = np.zeros(0, dtype=np.int64)
    weights = np.array([0.5, -0.25, 0.0, 1.0], dtype=np.float32)
    selected = np.array([0, 2], dtype=np.int64)
    topk = np.array([1, 3], dtype=np.int64)
    report = np.array([0.75, -1.5, 0.125, 2.0], dtype=np.float32)
    return [
        ("hello", "guest-1", "server", 0, Hello("guest", "ab" * 32, 426, 20)),
        ("public_key", "server", "host", 0, PublicKeyMessage(n=N, bits=256, proof=ROOTS)),
        ("batch_full", "host", "guest-1", 2, Batch(2, 0, 1, None)),
        ("batch_rows", "host", "guest-1", 3, Batch(3, 1, 4, rows)),
        ("forward", "guest-1", "host", 1, Forward(1, 0, BigInts(CIPHER), BigInts((7,)))),
        ("residual", "host", "guest-1", 1, Residual(1, 0, BigInts(CIPHER), None)),
        ("residual_others", "host", "guest-2", 1, Residual(1, 0, BigInts(CIPHER), BigInts((9,)))),
        ("cross_term", "guest-2", "host", 1, CrossTerm(1, 0, BigInts((N,)))),
        (
            "decrypt_request",
            "guest-1",
            "server",
            1,
            DecryptRequest(1, 0, "gradient", BigInts(CIPHER)),
        ),
        ("decrypted", "server", "guest-1", 1, Decrypted(1, 0, "gradient", BigInts((0, 1, N - 1)))),
        ("loss", "host", "server", 1, Loss(1, 0, 1, BigInts((N + 1,)), 3408, 80)),
        ("epoch_result", "server", "host", 1, EpochResult(1, 0.6931471805599453, False, "")),
        ("score_request", "host", "guest-1", 4, ScoreRequest(4, "test")),
        ("scores", "guest-1", "host", 4, Scores(4, "test", BigInts(CIPHER))),
        ("finish", "host", "server", 0, Finish(30, "max_epochs")),
        ("abort", "guest-1", "host", 0, Abort("guest-1: disk full")),
        ("checkpoints", "server", "host", 0, Checkpoints(np.array([3, 4, 5], dtype=np.int64))),
        ("checkpoints_none", "guest-1", "host", 0, Checkpoints(np.zeros(0, dtype=np.int64))),
        ("resume", "host", "guest-1", 0, Resume(4)),
        # PSI and prediction
        ("psi_hello_rsa", "guest-1", "host", 0, PsiHello("rsa", RSA_N, 65537, 3)),
        ("psi_hello_ecdh", "guest-2", "host", 0, PsiHello("ecdh", 0, 0, 3)),
        ("psi_query", "host", "guest-1", 0, PsiQuery(BigInts(PSI_VALUES))),
        ("psi_answer", "guest-1", "host", 0, PsiAnswer(BigInts(PSI_VALUES), BigInts(PSI_TAGS))),
        ("psi_result", "host", "guest-1", 0, PsiResult(np.array([2, 0], dtype=np.int64))),
        ("psi_result_none", "host", "guest-2", 0, PsiResult(np.zeros(0, dtype=np.int64))),
        # horizontal mode
        ("join", "clients-1", "aggregator", 0, JoinRequest(0, "clients", HFL_JOB, ids)),
        ("join_shuffler", "shuffler", "aggregator", 0, JoinRequest(0, "shuffler", HFL_JOB, none)),
        (
            "round_start",
            "aggregator",
            "clients-1",
            1,
            RoundStart(1, weights, selected, topk, TOKEN, REPORT_KEY),
        ),
        (
            "round_start_direct",
            "aggregator",
            "clients-1",
            1,
            RoundStart(1, weights, selected, topk, b"", b""),
        ),
        ("update", "clients-1", "aggregator", 1, Update(1, 2, report)),
        ("round_done", "clients-1", "aggregator", 1, RoundDone(1, 2)),
        ("sealed", "clients-1", "shuffler", 1, Sealed(1, SEALED)),
        (
            "shuffle_window",
            "aggregator",
            "shuffler",
            1,
            ShuffleWindow(1, 2, 1, 0.5, 1.0, np.zeros(4, dtype=np.float32), REPORT_KEY),
        ),
        ("shuffled", "shuffler", "aggregator", 1, Shuffled(1, 2, 108, SEALED_2 + SEALED, 1)),
        ("round_end", "aggregator", "clients-1", 10, RoundEnd(10, 0.9375, True, "rounds")),
        # performance (issue 4): a DJN key; appended so that every earlier example keeps
        # its message id and bytes (a standard key leaves h_s = 0 out: "public_key" above)
        (
            "public_key_djn",
            "server",
            "host",
            0,
            PublicKeyMessage(n=N, bits=256, h_s=H_S, proof=ROOTS),
        ),
        # conformance (issue 13): a Hello with its row commitment (rows_digest, §2.3)
        ("hello_rows", "guest-1", "host", 0, Hello("guest", "5e55", 569, 15, ROWS_DIGEST)),
        # vertical SecureBoost (docs/protocol.md §6.9), appended: earlier ids and bytes stay
        ("boost_gradients", "host", "guest-1", 0, BoostGradients(0, rows, BigInts(CIPHER))),
        ("boost_nodes", "host", "guest-1", 0, BoostNodes(0, 1, np.array([1, 2], np.int64))),
        (
            "boost_histogram",
            "guest-1",
            "host",
            0,
            BoostHistogram(0, 1, np.array([1, 2], np.int64), BigInts(CIPHER)),
        ),
        ("boost_split", "host", "guest-1", 0, BoostSplit(0, 1, 7, 12)),
        (
            "boost_partition",
            "guest-1",
            "host",
            0,
            BoostPartition(0, 1, np.array([True, False, True])),
        ),
        ("boost_decide", "host", "guest-1", 0, BoostDecide(0, 1, "test")),
        (
            "boost_decisions",
            "guest-1",
            "host",
            0,
            BoostDecisions(
                0, "test", np.array([[0, 0], [0, 2]], np.int64), np.array([[1, 0], [0, 1]], bool)
            ),
        ),
        # first hour (job-file errors): a Hello with its job's section digests, appended
        (
            "hello_sections",
            "guest-1",
            "host",
            0,
            Hello("guest", "5e55", 569, 15, ROWS_DIGEST, 426, SECTIONS),
        ),
        # SecureBoost's hidden instance space (§6.9), appended: earlier ids and bytes stay
        (
            "boost_masked",
            "host",
            "guest-1",
            0,
            BoostMasked(0, 1, np.array([1, 2], np.int64), np.array([1], np.int64), BigInts(CIPHER)),
        ),
        # busy is not dead (§6.4, §8), appended: earlier ids and bytes stay
        ("progress", "guest-1", "host", 0, Progress("encrypting scores", 212, 426)),
        # SecureBoost's Host check (§6.9, host_check), appended: earlier ids and bytes stay
        (
            "boost_proof",
            "host",
            "guest-1",
            0,
            BoostProof(
                0,
                1,
                BigInts(CIPHER[:1]),
                BigInts(CIPHER[:2]),
                BigInts((7,)),
                BigInts((5, 6)),
                BigInts((9,)),
                np.array([4], np.int64),
            ),
        ),
        # the head of the sender's audit chain (§6.4), appended
        ("audit_head", "host", "guest-1", 0, AuditHead(12, "ab" * 32)),
        # the batch plan's commit and reveal (§6.1a), appended: earlier msg_ids unchanged
        ("hello_plan", "guest-1", "host", 0, Hello("guest", "ab" * 32, 426, 9, plan_commit=COMMIT)),
        (
            "public_key_plan",
            "server",
            "guest-1",
            0,
            PublicKeyMessage(
                n=N, bits=256, plan_commits=f"host={COMMIT},guest-1={COMMIT_2}", proof=ROOTS
            ),
        ),
        ("plan_reveal_guest", "guest-1", "host", 0, PlanReveal(f"guest-1={SHARE_2}")),
        ("plan_reveal", "host", "guest-1", 0, PlanReveal(f"host={SHARE},guest-1={SHARE_2}")),
        # oblivious split selection (§6.9, hidden instance space, version 4), appended
        (
            "boost_candidates",
            "guest-1",
            "host",
            0,
            BoostCandidates(N, 0, "train", 426, 3, BigInts(CIPHER), ROOTS),
        ),
        ("boost_reveal", "host", "guest-1", 0, BoostReveal(0, 2, BigInts(CIPHER[:1]))),
        ("boost_revealed", "guest-1", "host", 0, BoostRevealed(0, 2, BigInts((N - 5,)))),
        # networked SecAgg+ (protocol v5, §6.7), appended: earlier ids and bytes stay
        *_secagg_messages(),
        # the closing exchange's last head (§11, version 5), appended
        ("audit_head_last", "host", "guest-1", 0, AuditHead(13, "cd" * 32, HEAD_LAST)),
        # a guest's pairwise mask seeds (§6.1, version 7), appended
        (
            "public_key_masks",
            "server",
            "guest-1",
            0,
            PublicKeyMessage(
                n=N,
                bits=256,
                plan_commits=f"host={COMMIT},guest-1={COMMIT_2}",
                mask_seeds=f"guest-2={SHARE}",
                proof=ROOTS,
            ),
        ),
    ]


def _secagg_messages() -> list[tuple[str, str, str, int, Message]]:
    """One round of two clients on one host: keys, shares and masks of fixed bytes."""
    ids = np.array([2, 3], dtype=np.int64)
    two = np.array([2, 2], dtype=np.int64)
    ones = np.ones(2, dtype=np.int64)
    keys = bytes(range(32)) + bytes(range(32, 64))
    sealed = bytes(range(wire.SEALED_BYTES)) * 2
    masked = np.array([[1, 2**32 - 1, 7], [0, 5, 2**31]], dtype=np.uint32)
    share = bytes(SHARE_BYTES - 1) + b"\x05"
    tag = bytes(range(64, 96))  # for the one other client host
    return [
        (
            "secagg_advertise",
            "clients-1",
            "aggregator",
            1,
            wire.SecAdvertise(1, ids, keys, keys, tag),
        ),
        (
            "secagg_neighbours",
            "aggregator",
            "clients-1",
            1,
            wire.SecNeighbours(
                1,
                ids,
                ones * 0,
                two * 2,
                two,
                two,
                np.array([4, 5, 5, 4], dtype=np.int64),
                np.array([1], dtype=np.int64),
                np.array([2], dtype=np.int64),
                ids + 2,
                ones * 0,
                keys,
                keys,
                tag,
                4,
            ),
        ),
        (
            "secagg_shares",
            "clients-1",
            "aggregator",
            1,
            wire.SecShares(1, ids, ids[::-1].copy(), sealed),
        ),
        ("secagg_masked", "clients-1", "aggregator", 1, wire.SecMasked(1, ids, masked)),
        ("secagg_survivors", "aggregator", "clients-1", 1, wire.SecSurvivors(1, ids)),
        (
            "secagg_consistency",
            "clients-1",
            "aggregator",
            1,
            wire.SecConsistency(1, np.array([1], dtype=np.int64), tag * len(wire.VIEW_PARTS)),
        ),
        (
            "secagg_unmask",
            "clients-1",
            "aggregator",
            1,
            wire.SecUnmask(1, ids, ids[::-1].copy(), np.array([True, False]), share * 2),
        ),
    ]


def examples() -> list[tuple[str, Header, Message]]:
    """Every example with its envelope (message ids count from 1 in list order)."""
    out = []
    for msg_id, (name, sender, receiver, round_, body) in enumerate(_messages(), start=1):
        header = Header(PROTOCOL, VERSION, SESSION, sender, receiver, round_, msg_id, kind_of(body))
        out.append((name, header, body))
    return out


# A relay seal (§15): shared key 0..31, session and fingerprint, alice → bob, both run
# nonces, sequence number 1, the packed frames above, an XChaCha20 nonce of 24 × 0x07.
SEAL_EXAMPLE = (
    bytes(range(32)),
    b"session-1\0" + b"f" * 64,
    ("alice", "bob", b"A" * 16, b"B" * 16),
    1,
    pack_frames([b"head", b"", b"body"]),
    b"\x07" * 24,
)


def link_examples() -> dict[str, bytes]:
    """Link-layer frames: a DATA header, an ACK header, a packed payload, a relay seal."""
    return {
        "data_header": link_header(DATA, 0x0102030405060708, 1, 0, 2),
        "ack_header": link_header(ACK, 0x0102030405060708, 1),
        "packed_frames": pack_frames([b"head", b"", b"body"]),
        "relay_seal": seal_frame(*SEAL_EXAMPLE),
    }


def render() -> dict[str, Any]:
    """The golden file's content."""
    return {
        "protocol": PROTOCOL,
        "version": VERSION,
        "messages": [
            {
                "name": name,
                "kind": str(header.kind),
                "frames": [frame.hex() for frame in codec.encode(header, body)],
            }
            for name, header, body in examples()
        ],
        "link": {name: blob.hex() for name, blob in link_examples().items()},
    }


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(render(), indent=1) + "\n")
    print(f"wrote {GOLDEN}", file=sys.stderr)
