"""A hidden-mode guest's decryptions, kept per job across every start (``reveal-ledger.jsonl``).

A guest decrypts one ``boost_reveal`` per split node; a count kept in memory only would
start empty at every start, and a Host that had the job started again (a ``--resume``
after an older checkpoint, a stop within a tree, an ``--overwrite``) would have each
regrown node decrypted again, with another candidate in it: one more candidate set per
split node and start. So the guest keeps, in ``OUT/reveal-ledger.jsonl`` (mode 0600,
bound to the job fingerprint), its candidate key, the seed of its candidate sets' pads
(oblivious.pack) and every answer it gave: a header line, then one line per answer,
appended and synced before the answer is sent (a torn last line was never sent). Every
start of the job then sends the same candidate plaintexts (fresh ciphertexts) under the
same key; an honest Host masks a node's request the same way at every start (its own
seed, oblivious.masks), so a regrown node decrypts to the answer the guest gave before.
Anything else is another request for a node already answered: refused, the new
decryption never sent.

The file is kept by ``--overwrite``, as the Host's label draw is; it is started anew
only for another job (a new fingerprint: the operators changed the job file) on a
start that is not a resume, or on the operator's ``--forget-reveals``, which the file
books (``forgotten``): every such start allows the Host one more set per split node.

The key in the file opens this guest's own candidate sets only (its own columns,
binned); it protects them from the Host and is kept like the data it was made from.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privfl.crypto.paillier import PrivateKey, PublicKey, generate_keypair, private_primes
from privfl.errors import ConfigError, CryptoError, ProtocolError
from privfl.parties.files import open_private, write_text
from privfl.parties.vertical.secureboost.oblivious import SEED_BYTES

log = logging.getLogger("privfl.guest")
FILE_NAME = "reveal-ledger.jsonl"
FORMAT = 1


@dataclass
class Ledger:
    """This guest's candidate key, pad seed and answers for one job (``path`` None: none kept)."""

    key: PrivateKey
    seed: bytes | None
    fingerprint: str = ""
    path: Path | None = None
    answers: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)
    forgotten: int = 0  # --forget-reveals starts of this job
    replayed: int = 0  # this start: requests answered as before

    def answer(self, tree: int, node: int, plain: list[int]) -> tuple[int, ...]:
        """``plain``, the decryption of a request for ``(tree, node)``, if it may be sent:
        booked before it is (the first time), or equal to what was sent before."""
        before = self.answers.get((tree, node))
        if before is not None:
            if tuple(plain) != before:
                raise ProtocolError(
                    f"the host deviated from the protocol: it asked again for tree {tree} "
                    f"node {node}, answered at an earlier start of this job, with another "
                    f"request; the session stops (if the host drew new labels, a party changed "
                    f"its data or the host lost its reveal-masks.json: start over with "
                    f"--overwrite --forget-reveals)"
                )
            self.replayed += 1
            return before
        self.answers[(tree, node)] = tuple(plain)
        self.append(tree, node, tuple(plain))
        return tuple(plain)

    def save(self) -> None:
        """The whole ledger, atomically: its header line, then one line per answer."""
        if self.path is None:
            return
        lines = [json.dumps(self.header())]
        lines += [json.dumps(entry(t, n, a)) for (t, n), a in sorted(self.answers.items())]
        write_text(self.path, "\n".join(lines), durable=True)

    def append(self, tree: int, node: int, values: tuple[int, ...]) -> None:
        """One answer, appended and synced before it is sent (a torn last line: never sent)."""
        if self.path is None:
            return
        with open_private(self.path, "a") as handle:
            handle.write("\n" + json.dumps(entry(tree, node, values)))
            handle.flush()
            os.fsync(handle.fileno())

    def header(self) -> dict[str, Any]:
        p, q = private_primes(self.key)
        assert self.seed is not None
        return {
            "format": FORMAT,
            "job": self.fingerprint,
            "key": {"p": str(p), "q": str(q), "h_s": str(self.key.public_key.h_s)},
            "seed": self.seed.hex(),
            "forgotten": self.forgotten,
        }


def entry(tree: int, node: int, values: tuple[int, ...]) -> dict[str, Any]:
    return {"tree": tree, "node": node, "values": [str(v) for v in values]}


def unkept(bits: int, obfuscation: str) -> Ledger:
    """A fresh key and CSPRNG pads, kept nowhere (a prediction session: docs/security.md)."""
    return Ledger(generate_keypair(bits, obfuscation)[1], None)


def open_ledger(
    out: Path,
    fingerprint: str,
    bits: int,
    obfuscation: str,
    *,
    resume: bool,
    forget: bool = False,
) -> Ledger:
    """This job's ledger from ``out``, or a new one (fresh key and seed) saved before use.

    Another job's is replaced on a start that is not a resume and refused on one;
    ``forget`` (the operator's ``--forget-reveals``) starts this job's anew and books it.
    """
    path = out / FILE_NAME
    saved, lines = read(path) if path.exists() else (None, [])
    if saved is not None and saved["job"] != fingerprint:
        if resume:
            raise ConfigError(
                f"{path} is of another job than this one; --resume continues the job that "
                "made it: use its job file, or start this job with --overwrite"
            )
        log.warning("%s holds another job's answers; starting this job's", path)
        saved = None
    forgotten = int(saved["forgotten"]) if saved is not None else 0
    if saved is not None and not forget:
        ledger = _from_record(saved, lines, path)
        ledger.save()  # rewritten whole: a torn last line (never sent) must not stay inside
        log.info("hidden mode: %d answers of earlier starts of this job kept", len(ledger.answers))
        return ledger
    if saved is not None:
        forgotten += 1
        log.warning(
            "hidden mode: forgetting %d answers of this job (--forget-reveals, %d so far): "
            "the host may read one more candidate set per split node",
            len(lines),
            forgotten,
        )
    key = generate_keypair(bits, obfuscation)[1]
    ledger = Ledger(key, secrets.token_bytes(SEED_BYTES), fingerprint, path, forgotten=forgotten)
    ledger.save()
    return ledger


def read(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A ledger file's header and answers; a torn last line (never sent) is dropped."""
    try:
        lines = path.read_text().split("\n")
        header = json.loads(lines[0])
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise ValueError("unknown format")
        answers = []
        for i, line in enumerate(lines[1:], start=2):
            try:
                answers.append(json.loads(line))
            except ValueError:
                if i < len(lines):
                    raise ValueError(f"line {i} is damaged") from None
        known: dict[str, Any] = header
        return known, answers
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{path} is unreadable ({exc}): restore it from your backup, or start over with "
            "--overwrite --forget-reveals"
        ) from exc


def _from_record(header: dict[str, Any], lines: list[dict[str, Any]], path: Path) -> Ledger:
    try:
        key = header["key"]
        p, q, h_s = int(key["p"]), int(key["q"]), int(key["h_s"])
        answers = {
            (int(a["tree"]), int(a["node"])): tuple(int(v) for v in a["values"]) for a in lines
        }
        private = PrivateKey(PublicKey(p * q, h_s), p, q)
        seed = bytes.fromhex(str(header["seed"]))
        forgotten = int(header["forgotten"])
    except (KeyError, TypeError, ValueError, CryptoError) as exc:
        raise ConfigError(
            f"{path} is damaged ({exc}): restore it from your backup, or start over with "
            "--overwrite --forget-reveals"
        ) from exc
    if len(seed) != SEED_BYTES:
        raise ConfigError(f"{path} is damaged (its seed): restore it from your backup")
    return Ledger(private, seed, str(header["job"]), path, answers, forgotten)
