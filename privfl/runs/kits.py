"""Job kits of both modes: a job.toml naming every party and one CURVE key pair per party."""

from __future__ import annotations

import os
import uuid
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from privfl.config.horizontal import HflConfig, HflJob, HflParty, save_hfl_job
from privfl.config.relay import RELAY_NAME, VIA_RELAY, RelayConfig
from privfl.config.vertical import (
    DataConfig,
    JobConfig,
    LabelDPConfig,
    PartySpec,
    TrainingConfig,
    save_job,
)
from privfl.data.views import demo_columns
from privfl.errors import ConfigError
from privfl.parties.files import FILE_MODE, private_dir
from privfl.protocol.keys import generate_keypair
from privfl.protocol.transport import free_tcp_endpoints

AGGREGATOR, SHUFFLER = "aggregator", "shuffler"  # the names of a local horizontal job

J = TypeVar("J", JobConfig, HflJob)


def demo_job(
    *,
    guests: int = 1,
    key_bits: int = 2048,
    allow_weak_keys: bool = False,
    epochs: int = 30,
    label_epsilon: float | None = None,  # None: LabelDPConfig's (logistic's default)
    seed: int = 0,
    host: str = "127.0.0.1",
    base_port: int | None = None,
    timeout_seconds: float = 120.0,
    dataset: str = "breast_cancer",
) -> JobConfig:
    """A job for the bundled demo: seed 004's column split, one endpoint per party.

    With ``base_port`` the parties listen on consecutive ports from it; without, on
    free loopback ports picked now.
    """
    names = ["server", "host", *[f"guest-{i + 1}" for i in range(guests)]]
    columns = demo_columns(guests, dataset)
    if base_port is None:
        endpoints = free_tcp_endpoints(len(names), host)
    else:
        endpoints = [f"tcp://{host}:{base_port + i}" for i in range(len(names))]
    parties = {
        name: PartySpec(
            name=name,
            role=name.split("-")[0],
            endpoint=endpoint,
            columns=columns.get(name, ()),
        )
        for name, endpoint in zip(names, endpoints, strict=True)
    }
    return JobConfig(
        session=uuid.uuid4().hex,
        parties=parties,
        key_bits=key_bits,
        allow_weak_keys=allow_weak_keys,
        timeout_seconds=timeout_seconds,
        seed=seed,
        training=TrainingConfig(epochs=epochs),
        label_dp=LabelDPConfig() if label_epsilon is None else LabelDPConfig(epsilon=label_epsilon),
        data=DataConfig(dataset=dataset),
    )


def relocate(job: JobConfig, host: str = "127.0.0.1") -> JobConfig:
    """The same job on fresh loopback ports with a fresh session id (for run-local)."""
    endpoints = free_tcp_endpoints(len(job.parties), host)
    parties = {
        name: replace(spec, endpoint=endpoint)
        for (name, spec), endpoint in zip(job.parties.items(), endpoints, strict=True)
    }
    return replace(job, parties=parties, session=uuid.uuid4().hex, source=None)


def local_hfl_job(config: HflConfig, client_processes: int = 2, host: str = "127.0.0.1") -> HflJob:
    """A loopback horizontal job: the aggregator, the Shuffler if asked, hosts sharing the
    clients (``client_processes`` of them, so ``--clients 100`` is not 100 processes)."""
    hosts = max(1, min(client_processes, config.clients))
    endpoints = free_tcp_endpoints(2, host)
    parties = {AGGREGATOR: HflParty(AGGREGATOR, "aggregator", endpoints[0])}
    if config.shuffler:
        parties[SHUFFLER] = HflParty(SHUFFLER, "shuffler", endpoints[1])
    base, extra = divmod(config.clients, hosts)
    first = 0
    for i in range(hosts):
        count = base + (1 if i < extra else 0)
        name = f"clients-{i + 1}"
        parties[name] = HflParty(name, "clients", "", first, count)
        first += count
    return HflJob(session=uuid.uuid4().hex, config=config, parties=parties)


def relayed(job: J, endpoint: str, names: Collection[str] = ()) -> J:
    """The job with ``names`` (all parties if none) behind the relay at ``endpoint``.

    Exactly what docs/deploy.md §2a has a site write by hand: each such party gets
    ``via = "relay"`` and no endpoint, and the job a ``[relay]`` table (site-local, so
    the fingerprint is the hand-edited job's). No endpoint: the job as it is.
    """
    if not endpoint:
        return job
    unknown = sorted(set(names) - set(job.parties))
    if unknown:
        raise ConfigError(
            f"--relayed names {unknown[0]!r}, which is not in the job; "
            f"its parties are {', '.join(job.parties)}"
        )
    chosen = set(names or job.parties)
    parties = {
        name: replace(spec, via=VIA_RELAY, endpoint="") if name in chosen else spec
        for name, spec in job.parties.items()
    }
    return replace(job, parties=parties, relay=RelayConfig(endpoint=endpoint))


def key_names(job: JobConfig | HflJob) -> list[str]:
    """Whose key pairs a kit holds: every party's, and the relay's when the job has one."""
    return [*job.parties, *([RELAY_NAME] if job.relay.endpoint else [])]


def write_kit(job: JobConfig | HflJob, directory: Path) -> Path:
    """Write ``job.toml`` and ``keys/<name>.key[_secret]`` under ``directory`` (the relay's
    pair too when the job is relayed: `privfl relay` runs from this folder); return the job."""
    keys = private_dir(directory / job.keys_dir)  # new folders 0700, the run's own among them
    for name in key_names(job):
        generate_keypair(keys, name, overwrite=True)
    path = directory / "job.toml"
    if isinstance(job, HflJob):
        save_hfl_job(job, path)
    else:
        save_job(job, path)
    os.chmod(path, FILE_MODE)  # endpoints and the session: the sites' business only
    return path
