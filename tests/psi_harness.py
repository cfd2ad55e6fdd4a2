"""A Host and its guests running the PSI stage in threads over one in-memory hub."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from helpers import run_parties

from privfl.config.vertical import DEFAULT_MAX_IDS, DataConfig, JobConfig, PartySpec
from privfl.data.tables import IdTable
from privfl.parties.session import PartyContext
from privfl.parties.vertical.psi import align
from privfl.protocol.channel import Channel
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import Message


def job_of(
    guests: int, method: str, caps: dict[str, int] | None = None, timeout: float = 20
) -> JobConfig:
    """A job with a Host, ``guests`` guests, 1024-bit PSI RSA keys and optional id caps."""
    caps = caps or {}
    names = ["server", "host", *[f"guest-{i + 1}" for i in range(guests)]]
    parties = {
        n: PartySpec(n, n.split("-")[0], f"mem://{n}", max_ids=caps.get(n, DEFAULT_MAX_IDS))
        for n in names
    }
    return JobConfig(
        session=uuid.uuid4().hex,
        parties=parties,
        key_bits=512,
        allow_weak_keys=True,
        timeout_seconds=timeout,
        data=DataConfig(psi=method, psi_key_bits=1024),
    )


def tables(guests: int, seed: int = 1) -> tuple[dict[str, IdTable], set[str]]:
    """Each site holds 80 of 100 ids (its own 20 missing), shuffled; features encode the id."""
    rng = np.random.default_rng(seed)
    universe = [f"patient-{i:03d}" for i in range(100)]
    sites = ["host", *[f"guest-{i + 1}" for i in range(guests)]]
    out, held = {}, []
    for k, site in enumerate(sites):
        ids = [u for j, u in enumerate(universe) if not 20 * k <= j < 20 * (k + 1)]
        ids = [ids[i] for i in rng.permutation(len(ids))]
        x = np.array([[float(i.split("-")[1])] for i in ids])
        out[site] = IdTable(ids=tuple(ids), x=x, feature_names=(f"{site}-x",))
        held.append(set(ids))
    return out, set.intersection(*held)


def id_table(ids: list[str]) -> IdTable:
    """A one-feature table of these ids."""
    return IdTable(ids=tuple(ids), x=np.zeros((len(ids), 1)), feature_names=("x",))


def context_of(job: JobConfig, name: str, hub: InMemoryHub, min_shared: int = 0) -> PartyContext:
    """What a party of ``job`` holds to run the stage over ``hub`` (``min_shared``: its
    site policy's least intersection)."""
    channel = Channel(hub.transport(name), session=job.session, timeout=job.timeout_seconds)
    return PartyContext(name=name, job=job, channel=channel, out=Path("."), min_shared=min_shared)


def send_as(job: JobConfig, hub: InMemoryHub, name: str, body: Message, to: str = "") -> Channel:
    """A (deviating) party sends ``body`` (to the Host by default); its channel, for replies."""
    channel = context_of(job, name, hub).channel
    channel.send(to or job.host, body)
    return channel


def run_stage(
    job: JobConfig,
    sites: dict[str, IdTable],
    hub: InMemoryHub,
    deviant: Callable[[], object] | None = None,
    min_shared: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Each site's aligned table, or the exception it stopped with.

    ``deviant`` runs once the honest sites' inboxes are open, before they start: a
    deviating party sends its messages there (with :func:`send_as`).
    """
    least = min_shared or {}
    contexts = {n: context_of(job, n, hub, least.get(n, 0)) for n in sites}
    if deviant is not None:
        deviant()
    return run_parties(sites, lambda name: align(contexts[name], sites[name]), join=60)
