"""The aggregator: opens rounds, collects reports (direct or shuffled), averages, keeps the ledger.

It listens; client hosts and the Shuffler connect to it. A host that misses a
round's deadline is dropped for that round; after MAX_MISSES rounds in a row, or
when it cannot be reached at all, it leaves the job (it may join again); the job goes on
while at least one host is left.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from privfl.config.horizontal import DELTA_REPORTS, HflJob, check_networked
from privfl.crypto.sealing import new_report_key, open_sealed
from privfl.errors import PeerUnavailable, PrivacyBudgetExceeded, ProtocolError
from privfl.learning import fedavg as engine
from privfl.learning.models import get_flat
from privfl.learning.secure_round import book_groups, distributed_extra, group_report
from privfl.learning.threads import one_compute_thread
from privfl.mechanisms.noise import NoiseSource, private_source
from privfl.mechanisms.skellam import SkellamAccountant
from privfl.parties.horizontal.channels import (
    make_channel,
    open_hfl_audit,
    open_listener,
    try_expect,
)
from privfl.parties.horizontal.integrity import round_digest
from privfl.parties.horizontal.outputs import Recorder, chance_level
from privfl.parties.horizontal.rounds import RoundHook, close_round, make_ledger
from privfl.parties.horizontal.secure_aggregator import secure_collect
from privfl.parties.session import run_role
from privfl.protocol.channel import Channel, body_as
from privfl.protocol.hfl_messages import (
    TOKEN_BYTES,
    JoinRequest,
    RoundDone,
    RoundEnd,
    RoundStart,
    Shuffled,
    ShuffleWindow,
    Update,
)
from privfl.protocol.messages import Kind

log = logging.getLogger("privfl.parties.horizontal.aggregator")
MAX_MISSES = 2


@dataclass
class Roster:
    """Who is in the job: client hosts and their logical clients, and who was dropped."""

    hosts: dict[str, set[int]] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)
    misses: dict[str, int] = field(default_factory=dict)

    def missed(self, hosts: set[str], asked: set[str]) -> None:
        """Count consecutive missed deadlines; drop a host at MAX_MISSES."""
        for host in asked:
            self.misses[host] = self.misses.get(host, 0) + 1 if host in hosts else 0
            if self.misses[host] >= MAX_MISSES:
                log.warning(
                    "%s missed %d deadlines in a row; dropped from the job", host, MAX_MISSES
                )
                self.dropped.add(host)

    def alive(self) -> dict[str, set[int]]:
        return {h: c for h, c in self.hosts.items() if h not in self.dropped}


def admit(job: HflJob, roster: Roster, sender: str, body: JoinRequest) -> bool:
    """Add a client host that runs our job; False (and a warning) for anything else."""
    if body.job_fingerprint != job.fingerprint():
        log.warning(
            "%s runs a different job (fingerprint %s); ignored", sender, body.job_fingerprint
        )
        return False
    if body.role != "clients":
        return False
    spec = job.party(sender)
    allowed = set(range(spec.first_client, spec.first_client + spec.num_clients))
    roster.hosts[sender] = {int(c) for c in body.clients} & allowed
    roster.dropped.discard(sender)
    roster.misses.pop(sender, None)
    return True


def admit_late_joins(job: HflJob, channel: Channel, roster: Roster) -> None:
    """Hosts that joined after the start take part from the next round on."""
    late = set(job.names("clients")) - set(roster.alive())
    while late and (env := try_expect(channel, {Kind.JOIN}, late, 0.01)) is not None:
        join = body_as(env.body, JoinRequest)
        if admit(job, roster, env.sender, join):
            log.info("%s joined late; it takes part from now on", env.sender)
        late.discard(env.sender)


def wait_for_joins(job: HflJob, channel: Channel, shuffler: str | None) -> Roster:
    """JoinRequests from the client hosts (and the Shuffler) in time; at least one host."""
    expected = set(job.names("clients")) | ({shuffler} if shuffler else set())
    roster, shuffler_joined = Roster(), shuffler is None
    deadline = time.monotonic() + job.config.timeout_seconds
    while expected and (left := deadline - time.monotonic()) > 0:
        env = try_expect(channel, {Kind.JOIN}, expected, left)
        if env is None:
            continue
        body = body_as(env.body, JoinRequest)
        expected.discard(env.sender)
        if body.role == "shuffler" and body.job_fingerprint == job.fingerprint():
            shuffler_joined = True
            continue
        admit(job, roster, env.sender, body)
    if not roster.hosts or not shuffler_joined:
        missing = ", ".join(sorted(expected)) or "(joined with a wrong job)"
        raise PeerUnavailable(
            f"no client host{'' if shuffler_joined else ' or Shuffler'} joined within "
            f"{job.config.timeout_seconds:g} s (missing: {missing}); "
            "start them with `privfl hfl client`"
        )
    if expected:
        log.warning("starting without %s (did not join in time)", ", ".join(sorted(expected)))
    return roster


def collect_direct(
    job: HflJob, channel: Channel, asked: dict[str, list[int]], round_: int, dims: int
) -> tuple[dict[int, np.ndarray], set[str]]:
    """Updates until every asked host says RoundDone or the deadline passes; also who missed it."""
    waiting = set(asked)
    reports: dict[int, np.ndarray] = {}
    deadline = time.monotonic() + job.config.round_timeout
    while waiting and (left := deadline - time.monotonic()) > 0:
        env = try_expect(channel, {Kind.UPDATE, Kind.ROUND_DONE}, waiting, left)
        if env is None or env.header.round != round_:
            continue
        if isinstance(env.body, RoundDone):
            waiting.discard(env.sender)
            continue
        update = body_as(env.body, Update)
        client = update.client
        if client not in asked[env.sender] or client in reports or update.report.size != dims:
            log.warning("refused an update for client %d from %s", client, env.sender)
            continue
        reports[client] = update.report
    for host in waiting:
        log.warning("round %d: %s missed the deadline; its reports are not counted", round_, host)
    return reports, waiting


def direct_released(
    got: Collection[int], missed: Collection[str], asked: dict[str, list[int]]
) -> list[int]:
    """Whom the ledger books as having released this round (no Shuffler): every client
    whose report was taken, and every asked client of a host that missed the deadline,
    whose reports may still reach the aggregator after it (read, if not averaged)."""
    late = {c for host in missed for c in asked.get(host, [])}
    return sorted(set(got) | late)


def open_batch(
    body: Shuffled,
    private: Any,
    token: bytes,
    session: str,
    round_: int,
    dims: int,
    expected: int,
    minimum: int,
) -> tuple[list[np.ndarray], int]:
    """The valid reports of a shuffled batch, and how many were dropped (dummies, others' rounds).

    Refuses the whole batch (ProtocolError) when the Shuffler repeats a sealed report,
    sends more than it may, or more reports open than clients were asked: each means
    a deviating Shuffler or client, and the round's central ε would not hold.
    """
    if body.count > max(expected, minimum):
        raise ProtocolError(
            f"round {round_}: the Shuffler sent {body.count} reports for {expected} asked "
            f"clients (minimum {minimum}); batch refused"
        )
    blobs = [body.blobs[i * body.size : (i + 1) * body.size] for i in range(body.count)]
    if len({hashlib.sha256(b).digest() for b in blobs}) != len(blobs):
        raise ProtocolError(f"round {round_}: the Shuffler replayed a sealed report; batch refused")
    opened = [open_sealed(b, private, token, session, round_, dims) for b in blobs]
    valid = [r for r in opened if r is not None]
    if len(valid) > expected:
        raise ProtocolError(
            f"round {round_}: {len(valid)} valid reports for {expected} asked clients; "
            "batch refused"
        )
    return valid, len(blobs) - len(valid)


def collect_shuffled(
    job: HflJob,
    channel: Channel,
    shuffler: str,
    round_: int,
    private: Any,
    token: bytes,
    dims: int,
    expected: int,
    minimum: int,
) -> tuple[list[np.ndarray], int]:
    """Open the Shuffler's batch; dummies and anything that fails to open are dropped."""
    wait = expected * job.config.slot_seconds + job.config.round_timeout
    env = try_expect(channel, {Kind.SHUFFLED}, {shuffler}, wait)
    if env is None or not isinstance(env.body, Shuffled) or env.body.round != round_:
        raise PeerUnavailable(
            f"no shuffled batch for round {round_} from {shuffler} within {wait:g} s; "
            "is it running?"
        )
    body = env.body
    valid, dropped = open_batch(body, private, token, job.session, round_, dims, expected, minimum)
    log.info(
        "round %d: %d sealed, %d valid, %d dropped (Shuffler padded %d)",
        round_,
        body.count,
        len(valid),
        dropped,
        body.padded,
    )
    return valid, dropped


def client_tokens(asked: dict[str, list[int]]) -> tuple[dict[str, bytes], bytes, str]:
    """One fresh single-use token per asked client: per host, all digests, the host caps."""
    tokens = {h: secrets.token_bytes(TOKEN_BYTES * len(ids)) for h, ids in asked.items()}
    digests = sorted(
        hashlib.sha256(blob[i : i + TOKEN_BYTES]).digest()
        for blob in tokens.values()
        for i in range(0, len(blob), TOKEN_BYTES)
    )
    caps = ",".join(f"{h}:{len(ids)}" for h, ids in sorted(asked.items()))
    return tokens, b"".join(digests), caps


def secure_reports(
    job: HflJob,
    setup: engine.Setup,
    channel: Channel,
    live: dict[str, list[int]],
    round_: int,
    weights: torch.Tensor,
    accountant: SkellamAccountant,
) -> tuple[list[torch.Tensor], list[int], set[str]]:
    """The round under SecAgg+ (secure_aggregator.py): one report per unmasked group (its
    noisy mean), every member of a released sum booked as the simulator books it."""
    sums, state = secure_collect(job, channel, live, round_, setup.dims)
    bound = setup.calib.update_clip
    released = [members for members, _ in sums]
    book_groups(accountant, released, job.config.ddp_noise, setup.dims, state.noise_group)
    reports = [group_report(total, len(members), weights, bound) for members, total in sums]
    return reports, sorted(c for members in released for c in members), state.missed


def run_aggregator(
    job: HflJob, name: str, out: Path, on_round: RoundHook | None = None, plots: bool = True
) -> dict[str, Any]:
    """Run every round to the end (or the budget) and write the run's outputs in ``out``
    (``plots`` False: all but training.png)."""
    one_compute_thread()
    cfg = job.config
    check_networked(cfg)
    setup = engine.make_setup(cfg)
    ledger = make_ledger(setup)
    recorder = Recorder(cfg, out, chance_level(setup.data.y_test), plots=plots)
    shuffler = job.names("shuffler")[0] if cfg.shuffler else None
    peers = job.names("clients") + ([shuffler] if shuffler else [])
    transport = open_listener(job, name, peers)
    audit = open_hfl_audit(job, name, out, peers)
    channel = make_channel(job, transport, audit, peers)
    roster = Roster()

    def alive_peers() -> list[str]:
        return [*roster.alive(), *([shuffler] if shuffler else [])]

    # linger: let the last messages leave before the sockets close
    with audit, run_role(name, channel, alive_peers, [transport], linger_seconds=0.2):
        roster = wait_for_joins(job, channel, shuffler)
        accountant = SkellamAccountant(setup.dims, cfg.delta)
        stop_reason = train(
            job, setup, channel, roster, ledger, recorder, shuffler, on_round, accountant
        )
        extra = {
            "device": str(setup.device),
            "transport": "zmq+curve",
            "shuffler": bool(shuffler),
            "dropped_hosts": sorted(roster.dropped),
        }
        if cfg.secure_aggregation:
            extra |= distributed_extra(accountant, cfg.secagg_bounds)
        summary = recorder.summary(ledger, stop_reason, extra)
        untold = set()
        for peer in [*job.names("clients"), *([shuffler] if shuffler else [])]:
            try:
                channel.send(
                    peer,
                    RoundEnd(ledger.rounds, summary["accuracy"] or 0.0, True, stop_reason),
                    ledger.rounds,
                )
            except PeerUnavailable:
                log.warning("could not tell %s that the job finished", peer)
                untold.add(peer)
        # Those it could not reach, or dropped, are not waited for; one whose connection
        # closed, within the grace (Listener.departed_peers); else a round's window.
        audit.settle(gone=untold | roster.dropped, timeout=job.config.round_timeout)
        return summary


def train(
    job: HflJob,
    setup: engine.Setup,
    channel: Channel,
    roster: Roster,
    ledger: Any,
    recorder: Recorder,
    shuffler: str | None,
    on_round: RoundHook | None,
    accountant: SkellamAccountant,
) -> str:
    cfg = job.config
    weights = get_flat(setup.model)
    last_update: torch.Tensor | None = None
    private, report_key = new_report_key() if shuffler else (None, b"")
    source: NoiseSource = private_source()  # server noise (NbAFL σ_D), never from the job
    for round_ in range(1, cfg.rounds + 1):
        admit_late_joins(job, channel, roster)
        alive = roster.alive()
        if not alive:
            raise PeerUnavailable("every client host has dropped out; see their logs")
        selected = engine.sample_clients(cfg, round_)
        asked = {h: [c for c in selected if c in clients] for h, clients in alive.items()}
        asked = {h: ids for h, ids in asked.items() if ids}
        try:
            ledger.check_next([c for ids in asked.values() for c in ids])
        except PrivacyBudgetExceeded as exc:
            return f"privacy budget: {exc}"
        indices = engine.report_indices(setup, last_update, round_)
        token = secrets.token_bytes(TOKEN_BYTES) if shuffler else b""
        tokens, digests, caps = client_tokens(asked) if shuffler else ({}, None, "")
        w32 = weights.float().cpu().numpy()
        expected = sum(len(ids) for ids in asked.values())
        minimum = cfg.min_reports or max(1, round(expected * cfg.beta))
        public = indices.cpu().numpy().astype(np.int64)
        if shuffler:
            dummy = np.zeros_like(w32) if cfg.mechanism in DELTA_REPORTS else w32
            # the same round for every host, which the Shuffler holds each host's reports to
            digest = round_digest(job.session, round_, token, report_key, w32, public)
            window = ShuffleWindow(
                round_, expected, minimum, cfg.beta, cfg.slot_seconds, dummy, report_key,
                digests, caps, digest,
            )  # fmt: skip
            channel.send(shuffler, window, round_)
        for host, ids in list(asked.items()):
            start = RoundStart(
                round_, w32, np.array(ids, np.int64), public, token, report_key, tokens.get(host)
            )
            try:
                channel.send(host, start, round_)
            except PeerUnavailable as exc:
                log.warning("round %d: %s; dropped from the job", round_, exc)
                roster.dropped.add(host)
        participants = [c for ids in asked.values() for c in ids]
        if shuffler:
            valid, dropped = collect_shuffled(
                job, channel, shuffler, round_, private, token, setup.dims, expected, minimum
            )
            reports = [torch.from_numpy(r).to(setup.device) for r in valid]
            reported: list[int] | None = None  # hidden by the Shuffler: all asked are booked
        elif cfg.secure_aggregation:  # the aggregator sees only the groups' noisy sums
            live = {h: ids for h, ids in asked.items() if h not in roster.dropped}
            reports, reported, missed = secure_reports(
                job, setup, channel, live, round_, weights, accountant
            )
            roster.missed(missed, set(live))
            dropped = 0
        else:
            live = {h: ids for h, ids in asked.items() if h not in roster.dropped}
            got, missed = collect_direct(job, channel, live, round_, setup.dims)
            roster.missed(missed, set(live))
            reports = [torch.from_numpy(got[c]).to(setup.device) for c in sorted(got)]
            reported, dropped = direct_released(got, missed, live), 0
        new, record = close_round(
            setup,
            weights,
            indices,
            reports,
            round_,
            participants,
            reported,
            ledger,
            recorder,
            on_round,
            source,
            invalid_reports=dropped,
            hosts=len(roster.alive()),
        )
        last_update, weights = new - weights, new
        log.info(
            "round %d: %d valid report(s), %d refused, accuracy %.4f",
            round_, record["reports"], record["refused_reports"], record["accuracy"],
        )  # fmt: skip
    return "rounds"
