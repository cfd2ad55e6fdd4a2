"""The Shuffler (docs/protocol.md §6.7, §7.8): adaptive window, dummy padding, CSPRNG permutation.

It holds no key that opens a report: it sees ciphertexts of one fixed size. It
admits a report only with an unused client token of the round (single use) and at
most ``cap`` reports per client host, so one host cannot flood the window, and
only if the host was given the round the aggregator committed to (round digest),
so the aggregator cannot tag hosts.
Window: initial deadline ``n·β·t_i``, extended by ``t_i`` per arrival, hard
deadline ``n·t_i`` (all from the moment the aggregator opens the round); fewer
than ``min_reports`` arrivals are padded with dummies (the previous global model
under a random, hence invalid, token); the batch is permuted with a CSPRNG.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privfl.config.horizontal import HflJob
from privfl.crypto.sealing import seal, sealed_size
from privfl.parties.files import private_dir
from privfl.parties.horizontal.channels import (
    expect_round,
    make_channel,
    open_hfl_audit,
    open_listener,
    try_expect,
)
from privfl.parties.horizontal.integrity import check_round_digest, tell_hosts_on_refusal
from privfl.parties.session import run_role
from privfl.protocol.channel import Channel, body_as
from privfl.protocol.hfl_messages import (
    TOKEN_BYTES,
    JoinRequest,
    RoundEnd,
    Sealed,
    Shuffled,
    ShuffleWindow,
)
from privfl.protocol.messages import Kind

log = logging.getLogger("privfl.parties.horizontal.shuffler")


@dataclass
class Window:
    """The adaptive window's state for one round (pure; times in seconds since it opened)."""

    expected: int
    beta: float
    slot: float
    deadline: float = 0.0
    hard: float = 0.0
    arrived: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.deadline = self.expected * self.beta * self.slot
        self.hard = self.expected * self.slot

    def add(self, blob: bytes) -> None:
        self.arrived.append(blob)
        self.deadline = min(self.hard, self.deadline + self.slot)

    def closed(self, elapsed: float) -> bool:
        return len(self.arrived) >= self.expected or elapsed >= self.deadline


@dataclass
class Admission:
    """Which sealed reports of a round the Shuffler takes (pure; one per token, caps per host)."""

    digests: set[bytes]
    caps: dict[str, int]
    used: set[bytes] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, window: ShuffleWindow) -> Admission:
        blob = window.token_digests or b""
        digests = {blob[i : i + TOKEN_BYTES] for i in range(0, len(blob), TOKEN_BYTES)}
        return cls(digests, parse_caps(window.host_caps))

    def refuse(self, host: str, token: bytes | None) -> str | None:
        """Why the report is refused (None: admitted, its token now spent)."""
        if self.counts.get(host, 0) >= self.caps.get(host, 0):
            return f"{host} is over its cap of {self.caps.get(host, 0)} report(s)"
        if token is None:
            return "no client token"
        digest = hashlib.sha256(token).digest()
        if digest not in self.digests:
            return "no valid client token"
        if digest in self.used:
            return "client token already used"
        self.used.add(digest)
        self.counts[host] = self.counts.get(host, 0) + 1
        return None


def parse_caps(text: str) -> dict[str, int]:
    """``"clients-1:3,clients-2:2"`` → ``{"clients-1": 3, "clients-2": 2}`` (bad entries: 0)."""
    caps: dict[str, int] = {}
    for item in filter(None, text.split(",")):
        name, _, count = item.partition(":")
        caps[name] = int(count) if count.isdigit() else 0
    return caps


def pad_and_permute(
    arrived: list[bytes], window: ShuffleWindow, session: str, rng: secrets.SystemRandom
) -> tuple[list[bytes], int]:
    """Pad to ``min_reports`` with sealed dummies carrying random tokens; shuffle uniformly."""
    batch = list(arrived)
    padded = max(0, window.min_reports - len(batch))
    for _ in range(padded):
        batch.append(
            seal(
                window.dummy,
                secrets.token_bytes(TOKEN_BYTES),
                window.report_key,
                session,
                window.round,
            )
        )
    rng.shuffle(batch)
    return batch, padded


def collect(
    channel: Channel, hosts: list[str], window: ShuffleWindow, first_wait: float = 0.0
) -> list[bytes]:
    """Sealed reports of this round that arrive before the window closes.

    The window's clock starts at the round's first admitted report, not when the
    aggregator opened it: clients on a busy machine may take longer than the window
    to train, and a window that closed before any of them reported would take busy
    clients for absent ones. ``first_wait`` bounds the wait for that first report
    (the job's round timeout; 0 starts the clock at once).

    Wrong rounds and sizes, reused or unknown tokens and reports over a host's cap
    are dropped (and logged). A report whose round digest differs from the
    aggregator's commitment stops the run (ProtocolError): the aggregator gave that
    host another round than the others, which would let it link reports to hosts.
    """
    state = Window(window.expected, window.beta, window.slot_seconds)
    admission = Admission.of(window)
    size = sealed_size(len(window.dummy))
    opened: float | None = None  # the window's clock: from the first admitted report
    give_up = time.monotonic() + first_wait
    while True:
        now = time.monotonic()
        if opened is None and now >= give_up:
            opened = now  # nothing came within the round timeout: the window runs anyway
        if opened is not None and state.closed(now - opened):
            break
        wait = give_up - now if opened is None else state.deadline - (now - opened)
        env = try_expect(channel, {Kind.SEALED}, hosts, max(wait, 0.0))
        if env is None:
            continue
        sealed = body_as(env.body, Sealed)
        if sealed.round != window.round or len(sealed.blob) != size:
            log.warning(
                "dropped a sealed report from %s (round %d, %d bytes)",
                env.sender,
                sealed.round,
                len(sealed.blob),
            )
            continue
        check_round_digest(window.round_digest, env.sender, sealed.round_digest, window.round)
        reason = admission.refuse(env.sender, sealed.token)
        if reason is not None:
            log.warning("refused a sealed report from %s: %s", env.sender, reason)
            continue
        if opened is None:
            opened = time.monotonic()
        state.add(sealed.blob)
    return state.arrived


def run_shuffler(job: HflJob, name: str, out: Path) -> dict[str, Any]:
    """Forward one shuffled batch per round until the aggregator stops."""
    private_dir(out)
    aggregator = job.names("aggregator")[0]
    hosts = job.names("clients")
    transport = open_listener(job, name, hosts)
    # The Shuffler listens for clients and connects out to the aggregator.
    from privfl.parties.horizontal.channels import open_outbound, wait_until_connected

    upstream = open_outbound(job, name, [aggregator])
    audit = open_hfl_audit(job, name, out, [*hosts, aggregator])
    inbox = make_channel(job, transport, audit, hosts)
    outbox = make_channel(job, upstream, audit, [aggregator])
    with (
        audit,
        run_role(name, outbox, lambda: [aggregator], [transport, upstream], linger_seconds=0.2),
    ):
        wait_until_connected(job, upstream, aggregator)
        outbox.send(
            aggregator, JoinRequest(0, "shuffler", job.fingerprint(), np.zeros(0, np.int64)), 0
        )
        with tell_hosts_on_refusal(inbox, hosts):
            rounds = serve_windows(job, inbox, outbox, aggregator, hosts)
        # A client host whose connection closed ends the wait within the grace
        # (Listener.departed_peers); one that hangs with its connection up, a round's
        # window per step at most.
        audit.settle(timeout=job.config.round_timeout)
    return {"party": name, "rounds": rounds}


def serve_windows(
    job: HflJob, inbox: Channel, outbox: Channel, aggregator: str, hosts: list[str]
) -> int:
    """One shuffled batch per window until the aggregator's stop; how many were forwarded."""
    rng = secrets.SystemRandom()
    rounds = 0
    while True:
        env = expect_round(
            outbox,
            {Kind.SHUFFLE_WINDOW, Kind.ROUND_END},
            {aggregator},
            job.config.timeout_seconds + job.config.round_timeout,
        )
        if isinstance(env.body, RoundEnd):
            if env.body.stop:
                return rounds
            continue
        window = body_as(env.body, ShuffleWindow)
        arrived = collect(inbox, hosts, window, job.config.round_timeout)
        batch, padded = pad_and_permute(arrived, window, job.session, rng)
        size = sealed_size(len(window.dummy))
        outbox.send(
            aggregator,
            Shuffled(window.round, len(batch), size, b"".join(batch), padded),
            window.round,
        )
        log.info(
            "round %d: %d report(s) arrived, %d dummies, forwarded %d",
            window.round,
            len(arrived),
            padded,
            len(batch),
        )
        rounds += 1
