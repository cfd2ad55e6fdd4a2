"""Start one party: its data, its transport, its log; and tell the peers if it fails."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.crypto.engine import POOL, Engine
from privfl.data.tables import IdTable
from privfl.data.views import PartyData, demo_table, read_csv, split_view
from privfl.errors import ConfigError
from privfl.models.registry import kind_of
from privfl.parties.files import private_dir
from privfl.parties.label_draws import DrawBook
from privfl.parties.links import open_links
from privfl.parties.progress import Observer
from privfl.parties.session import PartyContext, run_role
from privfl.parties.vertical import psi as psi_stage
from privfl.parties.vertical.host import EpochHook
from privfl.parties.vertical.roles import RoleOptions
from privfl.parties.vertical.startup import DATA_FAILED, open_audit, telling_peers
from privfl.protocol.channel import Channel
from privfl.protocol.keys import KeyRing
from privfl.protocol.messages import Header
from privfl.protocol.reliable import ReliableTransport
from privfl.protocol.transport import Transport, ZmqTransport


def load_data(
    job: JobConfig, name: str, data_path: Path | None, label_column: str | None
) -> PartyData:
    """This party's rows: its file if given, else its share of the bundled demo table."""
    spec = job.party(name)
    wants_labels = spec.role == "host"
    if data_path is not None:
        label = (label_column or "label") if wants_labels else None
        exposure = (job.model.exposure or None) if wants_labels else None
        real = kind_of(job).label_type == "real"
        table = read_csv(data_path, label, exposure, float_labels=real)
    else:
        if not spec.columns and spec.feature_count:
            raise ConfigError(
                f"party {name} declares feature_count = {spec.feature_count} but has no data: "
                f"pass --data FILE (a CSV with an id column and {spec.feature_count} features)"
            )
        if not spec.columns:
            raise ConfigError(f"party {name} has no demo columns in the job; pass --data FILE")
        table = demo_table(job.data.dataset, spec.columns, with_labels=wants_labels)
    return split_view(table, job.data.test_size, job.data.split_seed)


def open_transport(job: JobConfig, name: str) -> ReliableTransport:
    """The party's ROUTER inbox and DEALERs (or its way through the relay: parties/links.py),
    CURVE-authenticated, with ACKs and 1 MiB chunks."""
    peers = {n: p.endpoint for n, p in job.parties.items() if n != name}
    send_timeout = min(job.timeout_seconds, 30.0)
    grace = job.liveness_grace_seconds

    def direct(ring: KeyRing) -> ZmqTransport:
        reached = {n: e for n, e in peers.items() if n in ring.peers}
        endpoint = job.party(name).endpoint
        return ZmqTransport(name, endpoint, reached, ring, send_timeout=send_timeout, grace=grace)

    return ReliableTransport(
        open_links(job, name, peers, direct, send_timeout=send_timeout, grace=grace)
    )


def run_party(
    job: JobConfig,
    name: str,
    out: Path,
    *,
    data: PartyData | None = None,
    transport: Transport | None = None,
    on_epoch: EpochHook | None = None,
    workers: int = 1,
    table: IdTable | None = None,
    observer: Observer | None = None,
    resume: bool = False,
    label_rng: np.random.Generator | None = None,
    redraw_labels: bool = False,
    forget_reveals: bool = False,
    min_shared: int = 0,
    engine: Engine = POOL,
    draw_book: DrawBook | None = None,
    plots: bool = True,
) -> dict[str, Any]:
    """Run the named party to the end of the session; on failure, tell every peer.

    ``workers`` processes compute a Host's or guest's Paillier obfuscators (0 = one per
    core), on this machine or on the party's own Ray cluster (``engine``, site-local).
    ``label_rng`` (Host, experiments only): a seeded generator for the label flips,
    which makes the run reproducible and **not private**; None draws them from the OS CSPRNG.
    With an id-keyed ``table``, the rows are first aligned by private set intersection.
    ``resume``: continue after the last epoch every party has a checkpoint of.
    ``redraw_labels`` (Host): draw the label noise anew instead of reusing the job's
    saved draw; the extra ε is booked. ``forget_reveals`` (SecureBoost guest, hidden
    instance space): start the job's record of its decryptions anew, booked in it
    (secureboost/ledger.py). ``min_shared``: the fewest ids the intersection
    may hold (this site's policy); fewer stops the run before training. ``plots``
    False (Host): no PNG plots (metrics.jsonl and summary.json hold what they draw).
    """
    role = job.party(name).role
    private_dir(out)
    # Until our own transport is up, a failure reaches the peers over an outbound one.
    if role != "server" and data is None and table is None:
        with telling_peers(job, name, out, DATA_FAILED) if transport is None else nullcontext():
            data = load_data(job, name, None, None)
    if transport is None:
        with telling_peers(job, name, out):  # the endpoint and keys are the job's: no data
            transport = open_transport(job, name)
    audit = open_audit(job, name, out)

    def observe(direction: str, peer: str, header: Header | None, frames: list[bytes]) -> None:
        audit(direction, peer, header, frames)
        if observer is not None and header is not None:
            observer(direction, peer, header, frames)

    channel = Channel(
        transport,
        session=job.session,
        timeout=job.timeout_seconds,
        observer=observe,
        max_pending_bytes=job.max_buffered_mib * 1024 * 1024,
    )
    audit.attach(channel)  # our chain's heads go to the peers, theirs into our log
    ctx = PartyContext(
        name=name,
        job=job,
        channel=channel,
        out=out,
        resume=resume,
        min_shared=min_shared,
        draws=draw_book,
        plots=plots,
    )
    kind = kind_of(job)
    party = kind.load(kind.party)  # the kind's roles (models/registry.py)
    options = RoleOptions(workers, on_epoch, label_rng, redraw_labels, engine, forget_reveals)
    # The audit log closes after run_role has sent the Aborts: a cut log lacks that line.
    # Busy is not dead: the peers hear how far our long steps are (privfl/pulse.py).
    with (
        audit,
        run_role(name, channel, lambda: ctx.peers, [transport]),
        channel.reporting(ctx.peers),
    ):
        if role == "server":
            result: dict[str, Any] = party(ctx, None, options)
            audit.settle()
            return result
        if table is not None:
            data = psi_stage.training_rows(ctx, table)
        assert data is not None
        check_feature_count(job, name, data)
        result = party(ctx, data, options)
        audit.settle()  # our last head recorded by each peer, and theirs by us
        return psi_stage.recorded(ctx, table, data, result) if role == "host" else result


def check_feature_count(job: JobConfig, name: str, data: PartyData) -> None:
    """Our own columns against the count the job declares for us (the Server enforces it)."""
    declared = job.party(name).declared_features
    have = data.x_train.shape[1]
    if declared and have != declared:
        raise ConfigError(
            f"party {name} has {have} feature columns, the job declares {declared}: set "
            f"feature_count = {have} under [parties.{name}] in every site's job.toml, or "
            "choose the columns with --features"
        )
