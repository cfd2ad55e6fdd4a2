"""What every role of both modes does alike: its context, keys, logging, and failing cleanly.

:func:`run_role` is the one place where a party that stops — on an error, an Abort
from a peer, a timeout or Ctrl-C — logs why (once, to its log file: the command line
prints the one-line error), tells the peers it stopped so they fail fast instead of
waiting out their timeout, and closes its sockets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from privfl.config.core import JobFile
from privfl.config.vertical import JobConfig
from privfl.errors import ConfigError
from privfl.parties.files import open_private
from privfl.parties.label_draws import DrawBook
from privfl.protocol.channel import Channel, interrupted
from privfl.protocol.keys import (
    PUBLIC_SUFFIX,
    SECRET_SUFFIX,
    KeyRing,
    fingerprint,
    load_public_key,
)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FILE_ONLY = {"file_only": True}  # a log record the console leaves to the party log
log = logging.getLogger("privfl.party")


@dataclass(frozen=True, slots=True)
class PartyContext:
    """A party's identity, job, channel and output folder."""

    name: str
    job: JobConfig
    channel: Channel
    out: Path
    resume: bool = False  # continue from the last checkpoint all parties hold
    checkpoints: bool = True  # False for sessions with nothing to resume (prediction)
    # Fewest shared ids this site trains on: its policy's [psi] min_intersection (0 = none).
    min_shared: int = 0
    # Where a label holder books its label draws: the site ledger (None: no site policy).
    draws: DrawBook | None = None
    plots: bool = True  # False: the Host draws no training.png / importance.png

    @property
    def peers(self) -> list[str]:
        return [n for n in self.job.parties if n != self.name]


def keyring(job: JobFile[Any], name: str, peers: Collection[str]) -> KeyRing:
    """Our CURVE key pair and the public keys of ``peers``, from the job's key folder."""
    folder = job.keys_path()
    ring = KeyRing.from_files(
        name,
        folder / f"{name}{SECRET_SUFFIX}",
        {peer: folder / f"{peer}{PUBLIC_SUFFIX}" for peer in peers},
    )
    check_own_public(folder / f"{name}{PUBLIC_SUFFIX}", ring)
    return ring


def check_own_public(path: Path, ring: KeyRing) -> None:
    """Refuse a secret key that does not go with our own public ``.key`` (kits hold it).

    The peers were given that ``.key``: with any other pair we could never complete a
    CURVE handshake, and they would only see us never connect.
    """
    if path.exists() and load_public_key(path) != ring.public:
        raise ConfigError(
            f"{path} ({fingerprint(load_public_key(path))}) does not match our secret key "
            f"({fingerprint(ring.public)}); the peers know us by that .key: restore the "
            "secret key that goes with it, or give every peer the .key of the new pair"
        )


class Aborts(Protocol):
    """What :func:`run_role` needs of a channel: telling peers that we stopped."""

    def abort(self, peers: Collection[str], error: BaseException) -> None: ...


class Closes(Protocol):
    def close(self) -> None: ...


@contextmanager
def run_role(
    name: str,
    channel: Aborts,
    peers: Callable[[], Collection[str]],
    closing: Collection[Closes] = (),
    linger_seconds: float = 0.0,
) -> Iterator[None]:
    """Run one role's body: on any failure log it, tell ``peers()`` and re-raise; always close.

    ``peers`` is called at the moment of failure, so a role whose peer set changes
    (the aggregator's live clients) tells the peers it has then. ``linger_seconds``
    lets the last messages leave before the sockets close.
    """
    try:
        yield
    except BaseException as exc:
        log_stop(name, exc)
        channel.abort(peers(), exc)
        raise
    finally:
        if linger_seconds:
            time.sleep(linger_seconds)
        for item in closing:
            item.close()


def log_stop(name: str, error: BaseException) -> None:
    """One line in the party log (the command line prints its own): why the party stopped."""
    if isinstance(error, KeyboardInterrupt):
        log.error("%s", interrupted(name), extra=FILE_ONLY)
    else:
        log.error("%s stopped: %s", name, error, extra=FILE_ONLY)


def setup_logging(out: Path, name: str, verbose: bool = False) -> Path:
    """INFO and up to ``out/party.log``; warnings (or INFO with verbose) to stderr."""
    path = out / "party.log"
    open_private(path, "a").close()  # 0600 before the handler opens it (files.py)
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    for handler in list(root.handlers):
        root.removeHandler(handler)
    file_handler = logging.FileHandler(path)
    file_handler.setFormatter(logging.Formatter(LOG_FORMAT))
    console = logging.StreamHandler()
    console.setLevel(logging.INFO if verbose else logging.WARNING)
    console.setFormatter(logging.Formatter(f"{name}: %(message)s"))
    console.addFilter(lambda record: not getattr(record, "file_only", False))
    root.addHandler(file_handler)
    root.addHandler(console)
    return path


def run_dir_default() -> Path:
    """``runs/<timestamp>``, the default output folder of every command."""
    return Path("runs") / time.strftime("%Y%m%d-%H%M%S")
