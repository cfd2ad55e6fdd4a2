"""Job kits: a job.toml naming every party and one CURVE key pair per party."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

from privfl.config.vertical import (
    DataConfig,
    JobConfig,
    LabelDPConfig,
    PartySpec,
    TrainingConfig,
    save_job,
)
from privfl.data.views import demo_columns
from privfl.protocol.keys import generate_keypair
from privfl.protocol.transport import free_tcp_endpoints


def demo_job(
    *,
    guests: int = 1,
    key_bits: int = 2048,
    allow_weak_keys: bool = False,
    epochs: int = 30,
    label_epsilon: float = 8.0,
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
        label_dp=LabelDPConfig(epsilon=label_epsilon),
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


def write_kit(job: JobConfig, directory: Path) -> Path:
    """Write ``job.toml`` and ``keys/<name>.key[_secret]`` under ``directory``; return the job."""
    keys = directory / job.keys_dir
    keys.mkdir(parents=True, exist_ok=True)
    for name in job.parties:
        generate_keypair(keys, name, overwrite=True)
    path = directory / "job.toml"
    save_job(job, path)
    return path
