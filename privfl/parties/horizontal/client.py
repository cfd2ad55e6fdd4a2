"""A client host: one process, many logical clients; connects out only."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from zmq.utils import z85

from privfl.config.horizontal import HflConfig, HflJob, check_networked
from privfl.crypto.sealing import seal
from privfl.learning import fedavg as engine
from privfl.learning.fedavg import noise_source
from privfl.learning.models import get_flat
from privfl.learning.secure_round import client_input
from privfl.learning.threads import one_compute_thread
from privfl.mechanisms.noise import NoiseSource, private_source
from privfl.parties.files import private_dir
from privfl.parties.horizontal.advert_tags import HostKeys
from privfl.parties.horizontal.channels import (
    expect_round,
    make_channel,
    open_hfl_audit,
    open_outbound,
    wait_until_connected,
)
from privfl.parties.horizontal.guard import RoundGuard
from privfl.parties.horizontal.integrity import round_digest
from privfl.parties.horizontal.secure_host import ROUND_KINDS, HostRound, serve_secure_round
from privfl.parties.session import keyring, run_role
from privfl.protocol.channel import Channel, Envelope, body_as
from privfl.protocol.hfl_messages import (
    TOKEN_BYTES,
    JoinRequest,
    RoundDone,
    RoundEnd,
    RoundStart,
    Sealed,
    Update,
)

log = logging.getLogger("privfl.parties.horizontal.client")


def run_client_host(
    job: HflJob, name: str, out: Path, *, slow_seconds: float = 0.0
) -> dict[str, Any]:
    """Serve the aggregator's rounds for this host's logical clients until it says stop.

    ``slow_seconds`` delays every report (tests of the Shuffler's adaptive window).
    """
    one_compute_thread()
    cfg = job.config
    check_networked(cfg)
    spec = job.party(name)
    mine = set(range(spec.first_client, spec.first_client + spec.num_clients))
    aggregator = job.names("aggregator")[0]
    shuffler = job.names("shuffler")[0] if cfg.shuffler else None
    setup = engine.make_setup(cfg)
    # This process's CSPRNG: every noise draw and participation coin of its clients.
    source = private_source()
    # One throw-away local step before joining: torch's first call is slow, and a
    # first round that runs late would miss the Shuffler's window for no reason.
    engine.train_clients(setup, [min(mine)], get_flat(setup.model), 0, source)
    private_dir(out)
    targets = [aggregator] + ([shuffler] if shuffler else [])
    host_keys = load_host_keys(job, name) if cfg.secure_aggregation else None
    transport = open_outbound(job, name, targets)
    audit = open_hfl_audit(job, name, out, targets)
    channel = make_channel(job, transport, audit, targets)
    sent_total = 0
    with audit, run_role(name, channel, lambda: targets, [transport]):
        wait_until_connected(job, transport, aggregator)
        ids = np.array(sorted(mine), dtype=np.int64)
        channel.send(aggregator, JoinRequest(0, "clients", job.fingerprint(), ids), 0)
        log.info("%s hosts clients %d..%d on %s", name, min(mine), max(mine), setup.device)
        wait = host_wait(cfg)
        host = Serving(job, setup, channel, mine, aggregator, shuffler, source, host_keys)
        guard = RoundGuard.of(setup, aggregator)
        early: Envelope | None = None  # a round's message that cut a secure round short
        while True:
            env = early or expect_round(channel, ROUND_KINDS, {aggregator}, wait)
            early = None
            if isinstance(env.body, RoundEnd):
                if env.body.stop:
                    log.info("aggregator finished: %s", env.body.reason)
                    break
                continue
            sent, early = serve_start(host, guard, body_as(env.body, RoundStart), slow_seconds)
            sent_total += sent
        audit.settle()
    return {"party": name, "reports_sent": sent_total}


@dataclass(frozen=True, slots=True)
class Serving:
    """What a client host serves every round with: its job, model, link and clients."""

    job: HflJob
    setup: engine.Setup
    channel: Channel
    mine: set[int]
    aggregator: str
    shuffler: str | None
    source: NoiseSource  # this process's CSPRNG
    keys: HostKeys | None  # secure aggregation: this host's keys for the advert tags


def serve_start(
    host: Serving, guard: RoundGuard, start: RoundStart, slow_seconds: float = 0.0
) -> tuple[int, Envelope | None]:
    """Serve one ``round_start`` if the guard admits it (the job's rounds, in order, and its
    ε budget; ProtocolError otherwise, nothing released), plain or under SecAgg+; returns
    the reports (or masked inputs) sent and a next round's message that came first."""
    asked = guard.admit(start, host.mine)
    if host.keys is not None:  # secure aggregation: one masked input per client that took part
        masked, early = serve_secure(
            host.job, host.setup, host.channel, start, host.mine, host.aggregator,
            host.source, host.keys,
        )  # fmt: skip
        guard.book(asked, masked)
        return len(masked), early
    released = serve_round(
        host.job, host.setup, host.channel, start, host.mine, host.aggregator, host.shuffler,
        host.source, slow_seconds,
    )  # fmt: skip
    guard.book(asked, released)
    return len(released), None


def load_host_keys(job: HflJob, name: str) -> HostKeys:
    """Our CURVE secret key and every other client host's public key, raw, from the job's
    key folder: secure aggregation tags each advert for every other host with them."""
    order = tuple(job.names("clients"))
    ring = keyring(job, name, [h for h in order if h != name])
    peers = {p: z85.decode(k) for p, k in ring.peers.items()}
    return HostKeys(name, z85.decode(ring.secret), peers, order)


def host_wait(cfg: HflConfig) -> float:
    """How long a host waits for the aggregator's next message: its timeout plus the
    windows of one round (five under secure aggregation: the round's and one per stage;
    a host left out mid-round hears again only when the others are done)."""
    return cfg.timeout_seconds + cfg.round_timeout * (5 if cfg.secure_aggregation else 1)


def seal_report(session: str, start: RoundStart, index: int, report: np.ndarray) -> Sealed:
    """The ``sealed`` message of the round's ``index``-th selected client.

    Its report sealed for the aggregator under the round token, its single-use client
    token, and the digest of the round this host was given (the Shuffler checks that
    every host was given the same one).
    """
    blob = seal(report, start.token, start.report_key, session, start.round)
    tokens = start.client_tokens or b""
    token = tokens[index * TOKEN_BYTES : (index + 1) * TOKEN_BYTES] or None
    digest = round_digest(
        session, start.round, start.token, start.report_key, start.weights, start.indices
    )
    return Sealed(start.round, blob, token, digest)


def train_ours(
    job: HflJob, setup: engine.Setup, start: RoundStart, mine: set[int], source: NoiseSource
) -> tuple[list[tuple[int, int]], list[torch.Tensor], torch.Tensor]:
    """Our selected clients that join (position in ``selected``, id), their reports and
    the weights they started from; the same trainer as the simulator (batched when the
    job says so)."""
    weights = torch.from_numpy(start.weights.copy()).to(setup.device)
    indices = torch.from_numpy(start.indices.copy()).to(setup.device)
    ours = [
        (i, client)
        for i, client in enumerate(int(c) for c in start.selected)
        if client in mine and engine.joins(job.config, client, start.round, source)
    ]
    clients = [c for _, c in ours]
    reports = engine.client_reports(setup, clients, weights, indices, start.round, source)
    return ours, reports, weights


def serve_secure(
    job: HflJob,
    setup: engine.Setup,
    channel: Channel,
    start: RoundStart,
    mine: set[int],
    aggregator: str,
    source: NoiseSource,
    keys: HostKeys,
) -> tuple[list[int], Envelope | None]:
    """Our clients' round under SecAgg+ (secure_host.py): each one's input is its update
    clipped, quantized and given its Skellam share as in the simulator, from this
    process's CSPRNG; returns the clients whose masked inputs were sent and a next round's
    message that came first, if any."""
    cfg = job.config
    ours, reports, weights = train_ours(job, setup, start, mine, source)
    updates = {c: r - weights for (_, c), r in zip(ours, reports, strict=True)}

    def inputs(client: int, size: int) -> np.ndarray:
        noise = noise_source(cfg, source, start.round, client, 5)
        return client_input(updates[client], setup.calib.update_clip, cfg.ddp_noise, size, noise)

    ids = sorted(updates)
    given = round_digest(
        job.session, start.round, start.token, start.report_key, start.weights, start.indices
    )  # the hosts agree on it before they unmask: one model for every host
    host = HostRound.start(
        start.round, job.session, setup.dims, ids, cfg.secagg_group, keys, model=given
    )
    early = serve_secure_round(channel, aggregator, host, inputs, host_wait(cfg))
    log.info("round %d: sent %d masked input(s)", start.round, len(host.masked))
    return list(host.masked), early


def serve_round(
    job: HflJob,
    setup: engine.Setup,
    channel: Any,
    start: RoundStart,
    mine: set[int],
    aggregator: str,
    shuffler: str | None,
    source: NoiseSource,
    slow_seconds: float,
) -> list[int]:
    """Train and randomize each selected logical client of ours; send its report; the
    clients that released one.

    Through a Shuffler, each report travels with its client's single-use token and
    the digest of the round this host was given, which the Shuffler checks.
    """
    round_ = start.round
    sent = 0
    ours, reports, _ = train_ours(job, setup, start, mine, source)
    for (i, client), noisy in zip(ours, reports, strict=True):
        report = noisy.float().cpu().numpy()
        if slow_seconds:
            time.sleep(slow_seconds)
        if shuffler is not None:
            channel.send(shuffler, seal_report(job.session, start, i, report), round_)
        else:
            channel.send(aggregator, Update(round_, client, report), round_)
        sent += 1
    if shuffler is None:
        channel.send(aggregator, RoundDone(round_, sent), round_)
    log.info("round %d: sent %d report(s)", round_, sent)
    return [client for _, client in ours]
