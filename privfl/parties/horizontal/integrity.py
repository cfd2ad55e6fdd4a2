"""Round integrity in the horizontal mode: one round for every host, sane reports, a sane model.

A deviating aggregator could give each client host its own round token, report
key or global model and then tell, after the shuffle, whose report is whose. So
every host sends the Shuffler, with each sealed report, a digest of what it was
given (:func:`round_digest`), the aggregator commits to the same digest in the
Shuffler's window, and the Shuffler stops the run on any difference
(:func:`check_round_digest`). A poisoning client is refused by the mechanism's
output range (:mod:`privfl.mechanisms.ranges`); a round left with too few valid
reports, or a non-finite global model, stops the run (:func:`check_round`).
"""

from __future__ import annotations

import hashlib
import logging
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from privfl.errors import ProtocolError

if TYPE_CHECKING:
    # the simulator imports this module: keep ZeroMQ out of it; the Shuffler imports
    # it for the digest only: keep torch out of its process (tests/cli/test_startup.py)
    import torch

    from privfl.mechanisms.ranges import ReportRange
    from privfl.protocol.channel import Channel

log = logging.getLogger("privfl.parties.horizontal.integrity")
DIGEST_INFO = b"privfl hfl round v1"


def round_digest(
    session: str,
    round_: int,
    token: bytes,
    report_key: bytes,
    weights: np.ndarray,
    indices: np.ndarray,
) -> bytes:
    """SHA-256 over everything of a ``round_start`` that must be the same for every host.

    ``selected`` and ``client_tokens`` differ per host by design and are left out.
    """
    sid = session.encode()
    parts = [
        DIGEST_INFO,
        struct.pack(">Q", len(sid)),
        sid,
        struct.pack(">Q", round_),
        token,
        report_key,
        hashlib.sha256(np.ascontiguousarray(weights, dtype="<f4").tobytes()).digest(),
        hashlib.sha256(np.ascontiguousarray(indices, dtype="<i8").tobytes()).digest(),
    ]
    return hashlib.sha256(b"".join(parts)).digest()


def check_round_digest(
    committed: bytes | None, host: str, received: bytes | None, round_: int
) -> None:
    """The Shuffler's check: ``host`` got the round the aggregator committed to, else stop."""
    if committed is None or received != committed:
        raise ProtocolError(
            f"round {round_}: {host} was given another round token, report key or model than "
            "the aggregator announced to the Shuffler (an aggregator doing this can tell whose "
            "report is whose); run stopped: check the aggregator"
        )


@contextmanager
def tell_hosts_on_refusal(channel: Channel, hosts: list[str]) -> Iterator[None]:
    """The Shuffler's refusal reaches the client hosts directly (abort), then re-raises.

    An aggregator caught tagging hosts would not pass the Shuffler's abort on.
    """
    try:
        yield
    except ProtocolError as exc:
        channel.abort(hosts, exc)
        raise


def screen(
    reports: list[torch.Tensor], allowed: ReportRange, round_: int
) -> tuple[list[torch.Tensor], int]:
    """The reports inside the mechanism's range, and how many were refused (WARNING)."""
    kept = [r for r in reports if allowed.admits(r.detach().double().cpu().numpy())]
    refused = len(reports) - len(kept)
    if refused:
        log.warning(
            "round %d: refused %d report(s) outside the mechanism's output range "
            "or the update bound (a deviating or broken client)",
            round_,
            refused,
        )
    return kept, refused


def check_round(round_: int, valid: int, refused: int, minimum: int) -> None:
    """Stop the run when fewer than ``minimum`` valid reports are left to average."""
    if valid < minimum:
        raise ProtocolError(
            f"round {round_}: only {valid} valid report(s) ({refused} refused as out of range), "
            f"fewer than min_valid_reports = {minimum}; run stopped: check the client hosts' "
            "logs, or lower min_valid_reports in the job"
        )


def check_model(round_: int, weights: torch.Tensor) -> None:
    """Stop the run rather than broadcast a global model with NaN or ±∞."""
    import torch

    if not bool(torch.isfinite(weights).all()):
        raise ProtocolError(
            f"round {round_}: the global model holds NaN or infinity (training diverged, or "
            "a report was averaged that should not have been); run stopped: lower lr or "
            "check the mechanism's settings"
        )
