"""What both job files share: parties by name, the key folder, TOML in and out, and the
canonical encoding the job fingerprint hashes (docs/protocol.md §2.1).

``config/vertical.py`` (``JobConfig``) and ``config/horizontal.py`` (``HflJob``) are
frozen dataclasses that inherit :class:`JobFile` and say only what differs: their
settings, their party spec and which of their keys are fingerprinted.
"""

from __future__ import annotations

import hashlib
import math
import tomllib
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import rfc8785
import tomli_w

from privfl.config.relay import RelayConfig
from privfl.errors import ConfigError


class Party(Protocol):
    """What every party spec of a job has: a name and a role."""

    @property
    def name(self) -> str: ...

    @property
    def role(self) -> str: ...

    @property
    def via(self) -> str: ...


P = TypeVar("P", bound=Party)


class JobFile(Generic[P]):
    """Party lookup, the key folder and the fingerprint, for a dataclass with these fields."""

    __slots__ = ()
    session: str
    parties: dict[str, P]
    keys_dir: str
    relay: RelayConfig  # config/relay.py: where the relay is, if any party is relayed
    source: Path | None  # the file it was read from, to resolve keys_dir

    def party(self, name: str) -> P:
        """The named party, or a ConfigError that lists the parties the job knows."""
        if name not in self.parties:
            known = ", ".join(sorted(self.parties))
            raise ConfigError(f"the job has no party named {name!r}; its parties are: {known}")
        return self.parties[name]

    def names(self, role: str) -> list[str]:
        """Names of the parties with this role, in job-file order."""
        return [p.name for p in self.parties.values() if p.role == role]

    def keys_path(self) -> Path:
        """The folder of CURVE key files, relative to the job file."""
        base = self.source.parent if self.source else Path.cwd()
        return base / self.keys_dir

    def canonical_data(self) -> dict[str, Any]:
        """What every party must agree on, as plain data (before :func:`canonical`)."""
        raise NotImplementedError

    def canonical(self) -> bytes:
        """The canonical encoding of what every party must agree on."""
        return canonical(self.canonical_data())

    def fingerprint(self) -> str:
        """SHA-256 (hex) of :meth:`canonical`: what every party's Hello or join carries."""
        return fingerprint(self.canonical())

    def sections(self) -> dict[str, str]:
        """:func:`section_digests` of this job: what lets a peer name where two jobs differ."""
        return section_digests(self.canonical_data())


def finite(value: Any) -> Any:
    """``value`` with every infinite float replaced by ``"inf"`` or ``"-inf"``."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def canonical(data: dict[str, Any]) -> bytes:
    """RFC 8785 JSON of ``data`` with ±∞ as ``"inf"``/``"-inf"`` (docs/protocol.md §2.1)."""
    try:
        return bytes(rfc8785.dumps(finite(data)))
    except rfc8785.CanonicalizationError as exc:
        raise ConfigError(f"the job cannot be fingerprinted: {exc}; use smaller numbers") from exc


def fingerprint(encoded: bytes) -> str:
    """SHA-256 (64 lowercase hex digits) of a canonical encoding."""
    return hashlib.sha256(encoded).hexdigest()


SECTION_DIGITS = 16
"""Hex digits of each section digest: enough to tell two sections apart, not to authenticate
(the full fingerprint does that)."""


def section_digests(data: dict[str, Any]) -> dict[str, str]:
    """A short digest per top-level key of the canonical data, and per party.

    ``{"training": "…", "parties.host": "…"}``: each is the first 16 hex digits of the
    SHA-256 of the canonical encoding of ``{key: value}`` (``{"parties": {name: table}}``
    for a party). Every party holds the whole job, so they reveal nothing it lacks.
    """
    digests = {}
    for key, value in data.items():
        parts = value.items() if key == "parties" else [(None, value)]
        for name, part in parts:
            section = {key: {name: part}} if name is not None else {key: part}
            label = f"{key}.{name}" if name is not None else key
            digests[label] = fingerprint(canonical(section))[:SECTION_DIGITS]
    return digests


def encode_sections(digests: dict[str, str]) -> str:
    """``name=digest`` pairs, sorted, joined by commas (docs/protocol.md §2.1)."""
    return ",".join(f"{name}={digest}" for name, digest in sorted(digests.items()))


def decode_sections(text: str) -> dict[str, str]:
    """The inverse of :func:`encode_sections` (``""`` gives ``{}``)."""
    pairs = (item.partition("=") for item in text.split(",") if item)
    return {name: digest for name, _, digest in pairs}


def differing(ours: dict[str, str], theirs: dict[str, str]) -> list[str]:
    """The section names whose digests differ or that only one side has, sorted."""
    return sorted(n for n in ours.keys() | theirs.keys() if ours.get(n) != theirs.get(n))


def read_toml(path: Path, missing: str) -> dict[str, Any]:
    """A job file's TOML; a missing (``missing`` says what to do) or unreadable one is a
    ConfigError."""
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"job file {path} not found; {missing}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read job file {path}: {exc}; give a TOML text file") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"job file {path} is not valid TOML: {exc}") from exc


def write_toml(data: dict[str, Any], path: Path) -> None:
    """Write ``data`` as TOML, making the folder if needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(data))
