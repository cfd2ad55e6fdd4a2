"""A client host: one process, many logical clients; connects out only."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from privfl.config.horizontal import HflJob
from privfl.crypto.sealing import seal
from privfl.learning import fedavg as engine
from privfl.learning.models import get_flat
from privfl.learning.threads import one_compute_thread
from privfl.mechanisms.noise import NoiseSource, private_source
from privfl.parties.files import private_dir
from privfl.parties.horizontal.channels import (
    expect_round,
    make_channel,
    open_hfl_audit,
    open_outbound,
    wait_until_connected,
)
from privfl.parties.horizontal.integrity import round_digest
from privfl.parties.session import run_role
from privfl.protocol.channel import body_as
from privfl.protocol.hfl_messages import (
    TOKEN_BYTES,
    JoinRequest,
    RoundDone,
    RoundEnd,
    RoundStart,
    Sealed,
    Update,
)
from privfl.protocol.messages import Kind

log = logging.getLogger("privfl.parties.horizontal.client")


def run_client_host(
    job: HflJob, name: str, out: Path, *, slow_seconds: float = 0.0
) -> dict[str, Any]:
    """Serve the aggregator's rounds for this host's logical clients until it says stop.

    ``slow_seconds`` delays every report (tests of the Shuffler's adaptive window).
    """
    one_compute_thread()
    cfg = job.config
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
    transport = open_outbound(job, name, targets)
    audit = open_hfl_audit(job, name, out, targets)
    channel = make_channel(job, transport, audit, targets)
    sent_total = 0
    with audit, run_role(name, channel, lambda: targets, [transport]):
        wait_until_connected(job, transport, aggregator)
        ids = np.array(sorted(mine), dtype=np.int64)
        channel.send(aggregator, JoinRequest(0, "clients", job.fingerprint(), ids), 0)
        log.info("%s hosts clients %d..%d on %s", name, min(mine), max(mine), setup.device)
        wait = cfg.timeout_seconds + cfg.round_timeout
        while True:
            env = expect_round(channel, {Kind.ROUND_START, Kind.ROUND_END}, {aggregator}, wait)
            if isinstance(env.body, RoundEnd):
                if env.body.stop:
                    log.info("aggregator finished: %s", env.body.reason)
                    break
                continue
            start = body_as(env.body, RoundStart)
            sent_total += serve_round(
                job, setup, channel, start, mine, aggregator, shuffler, source, slow_seconds
            )
        audit.settle()
    return {"party": name, "reports_sent": sent_total}


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
) -> int:
    """Train and randomize each selected logical client of ours; send its report.

    Through a Shuffler, each report travels with its client's single-use token and
    the digest of the round this host was given, which the Shuffler checks.
    """
    cfg = job.config
    round_ = start.round
    weights = torch.from_numpy(start.weights.copy()).to(setup.device)
    indices = torch.from_numpy(start.indices.copy()).to(setup.device)
    sent = 0
    ours = [
        (i, client)
        for i, client in enumerate(int(c) for c in start.selected)
        if client in mine and engine.joins(cfg, client, round_, source)
    ]
    # the same trainer as the simulator (batched when the job says so)
    reports = engine.client_reports(setup, [c for _, c in ours], weights, indices, round_, source)
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
    return sent
