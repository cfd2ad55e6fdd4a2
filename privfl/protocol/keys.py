"""CURVE key pairs per party: create, load and fingerprint pyzmq certificate files."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import stat
import struct
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import zmq.auth
from zmq.utils import z85

from privfl.errors import ConfigError

log = logging.getLogger(__name__)

PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"
_HINT = "run `privfl init vfl` or `privfl keys gen` to create it"
# A party name becomes a file name and a ZeroMQ routing id, so keep it boring.
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_Z85_KEY_LEN = 40
_RAW_KEY_LEN = 32


def check_party_name(name: str) -> str:
    """Return `name` if it is usable as a party name (file name and routing id), else raise."""
    if not _NAME_RE.fullmatch(name):
        raise ConfigError(
            f"party name {name!r} is not valid: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def generate_keypair(directory: Path, name: str, *, overwrite: bool = False) -> tuple[Path, Path]:
    """Write `<directory>/<name>.key` and `<name>.key_secret`; return (public_path, secret_path).

    The secret file is mode 0600 from the moment it appears under its final name:
    the pair is written in a private (0700) scratch directory next to the target
    and moved into place. An existing key pair is kept unless `overwrite` is set,
    because replacing a secret key silently would lock the party out of its peers.
    """
    check_party_name(name)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    public_path = directory / f"{name}{PUBLIC_SUFFIX}"
    secret_path = directory / f"{name}{SECRET_SUFFIX}"
    if not overwrite and (public_path.exists() or secret_path.exists()):
        raise ConfigError(
            f"key files for {name!r} already exist in {directory}; "
            "delete them or pass overwrite to replace them"
        )
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=directory))
    try:
        tmp_public, tmp_secret = zmq.auth.create_certificates(scratch, name)
        os.chmod(tmp_secret, 0o600)
        os.chmod(tmp_public, 0o644)
        os.replace(tmp_secret, secret_path)
        os.replace(tmp_public, public_path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return public_path, secret_path


def load_public_key(path: Path) -> bytes:
    """Return the z85 public key stored in the certificate file at `path`."""
    public, _ = _load(Path(path))
    return public


def load_secret_keypair(path: Path) -> tuple[bytes, bytes]:
    """Return (public, secret) z85 keys from the secret certificate file at `path`."""
    path = Path(path)
    public, secret = _load(path)
    if secret is None:
        raise ConfigError(
            f"{path} holds no secret key (is it the public .key file?); "
            f"pass the {SECRET_SUFFIX} file or {_HINT}"
        )
    _check_z85_key(secret, path)
    if zmq.curve_public(secret) != public:
        # Peers know us by the public half: with another secret we could never
        # complete a CURVE handshake, and they would only see us never connect.
        raise ConfigError(
            f"key file {path} holds a secret key that does not match its public half "
            f"({fingerprint(public)}); restore the pair the peers know, or make a new one "
            "with `privfl keys gen` and give every peer the new .key file"
        )
    _warn_if_exposed(path)
    return public, secret


def fingerprint(public_key: bytes) -> str:
    """Return a short fingerprint of a z85 public key, e.g. ``'3f2a:91c0:5b7e:d104'``.

    It is the first 16 hex digits of sha256 over the raw 32-byte key, so two
    operators can compare keys over the phone.
    """
    raw = _decode_z85_key(public_key, "the public key")
    digest = hashlib.sha256(raw).hexdigest()[:16]
    return ":".join(digest[i : i + 4] for i in range(0, 16, 4))


@dataclass(frozen=True)
class KeyRing:
    """One party's CURVE key pair plus the public keys of the peers it allows.

    `peers` maps peer name to z85 public key; it doubles as the allow-list of
    the party's inbox. The secret key is left out of `repr` so it cannot leak
    into logs or tracebacks.
    """

    name: str
    public: bytes
    secret: bytes = field(repr=False)
    peers: Mapping[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_party_name(self.name)
        _decode_z85_key(self.public, f"the public key of {self.name!r}")
        _decode_z85_key(self.secret, f"the secret key of {self.name!r}")
        for peer, key in self.peers.items():
            check_party_name(peer)
            _decode_z85_key(key, f"the public key of peer {peer!r}")
        # Freeze the allow-list too: a frozen KeyRing with a mutable dict inside
        # would let a caller widen who may talk to us after the fact.
        object.__setattr__(self, "peers", MappingProxyType(dict(self.peers)))

    @classmethod
    def from_files(
        cls, name: str, secret_path: Path, peer_public_paths: Mapping[str, Path]
    ) -> KeyRing:
        """Load our key pair from `secret_path` and each peer's public key from its file."""
        public, secret = load_secret_keypair(secret_path)
        peers = {peer: load_public_key(p) for peer, p in peer_public_paths.items()}
        return cls(name=name, public=public, secret=secret, peers=peers)


def _load(path: Path) -> tuple[bytes, bytes | None]:
    """Read a pyzmq certificate, translating every failure into one ConfigError line."""
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        what = "is missing" if not path.exists() else "is not a readable CURVE certificate"
        raise ConfigError(f"key file {path} {what}; {_HINT}") from exc
    _check_z85_key(public, path)
    return public, secret


def _check_z85_key(key: bytes, path: Path) -> None:
    """Raise ConfigError naming `path` if `key` is not a 40-character z85 CURVE key."""
    try:
        _decode_z85_key(key, "key")
    except ConfigError as exc:
        raise ConfigError(f"key file {path} holds a garbled key; {_HINT}") from exc


def _decode_z85_key(key: bytes, what: str) -> bytes:
    """Return the 32 raw bytes of a z85 CURVE key, or raise ConfigError about `what`."""
    try:
        raw = z85.decode(key) if len(key) == _Z85_KEY_LEN else b""
    except (ValueError, KeyError, TypeError, struct.error) as exc:
        raise ConfigError(f"{what} is not a valid z85 CURVE key") from exc
    if len(raw) != _RAW_KEY_LEN:
        raise ConfigError(f"{what} is not a valid z85 CURVE key (expected 40 characters)")
    return raw


def _warn_if_exposed(path: Path) -> None:
    """Log a warning when a secret key file is readable by group or others."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        log.warning("secret key file %s has mode %o; run `chmod 600 %s`", path, mode, path)
