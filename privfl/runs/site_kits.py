"""Per-site kits: one folder per party with its job file, its own keys, its peers' public keys.

``privfl init vfl --parties server,host,guest-a --out DIR`` writes::

    DIR/<site>/job.toml          the shared job (same fingerprint at every site)
    DIR/<site>/start.sh          runs this site's party; extra flags are passed on
    DIR/<site>/keys/             empty: the site makes its key pair and imports its peers'

and with ``--all-keys-here`` also::

    DIR/<site>/keys/<site>.key_secret   this site's CURVE secret key (0600)
    DIR/<site>/keys/<peer>.key   every party's public key (its own included)
    DIR/<site>/FINGERPRINTS.txt  each public key's fingerprint, to compare by phone

A relayed job (``--relay``) adds ``DIR/relay/`` (its job file, and with
``--all-keys-here`` the relay's key pair and every party's public key); each site's
``keys/`` then also holds the relay's public key.

By default the key files are left out: each site runs ``privfl keys gen`` and
``privfl keys import`` itself, so no secret key is ever made on another machine. With
``all_keys_here`` every key pair is made here and each site's secret key goes into
its folder (simpler, but this machine then held every party's secret key).
"""

from __future__ import annotations

import shutil
import stat
from dataclasses import replace
from pathlib import Path

from privfl.config.vertical import JobConfig, PartySpec, save_job
from privfl.errors import ConfigError
from privfl.protocol.keys import (
    PUBLIC_SUFFIX,
    SECRET_SUFFIX,
    check_party_name,
    fingerprint,
    generate_keypair,
    load_public_key,
)
from privfl.runs.kits import key_names

START = """#!/bin/sh
# Start {name} ({role}) of privfl job {session}. Extra flags go to the party, e.g.
#   ./start.sh --data /secure/{name}.csv --id-column patient_id
cd "$(dirname "$0")" || exit 1
exec privfl vfl {role} --job job.toml --party {name} --out "run/$(date +%Y%m%d-%H%M%S)" "$@"
"""


def role_of(name: str) -> str:
    """``server``, ``host``, or ``guest`` for names starting with ``guest``."""
    check_party_name(name)
    if name in ("server", "host"):
        return name
    if name.startswith("guest"):
        return "guest"
    raise ConfigError(
        f"cannot tell the role of party {name!r}: name them server, host and guest-<site>"
    )


def site_parties(
    names: list[str], endpoints: dict[str, str], template: JobConfig
) -> dict[str, PartySpec]:
    """The parties of ``names`` with their endpoints; demo columns kept for a rehearsal."""
    if len(set(names)) != len(names):
        raise ConfigError("--parties names a party twice")
    unknown = set(endpoints) - set(names)
    if unknown:
        raise ConfigError(f"--endpoint names {sorted(unknown)[0]!r}, which is not in --parties")
    guests = [n for n in names if role_of(n) == "guest"]
    demo = [s for s in template.parties.values() if s.role == "guest"]
    spare = list(template.parties.values())
    specs = {}
    for i, name in enumerate(names):
        role = role_of(name)
        columns = template.party(template.host).columns if role == "host" else ()
        if role == "guest" and len(demo) == len(guests):
            columns = demo[guests.index(name)].columns
        endpoint = endpoints.get(name) or spare[i % len(spare)].endpoint
        specs[name] = PartySpec(name=name, role=role, endpoint=endpoint, columns=columns)
    return specs


def write_site_kits(job: JobConfig, out: Path, *, all_keys_here: bool = False) -> list[Path]:
    """One folder per party, and ``relay/`` when the job is relayed; returns the folders.

    The relay's folder holds the job file, and with ``all_keys_here`` the relay's own
    key pair and every party's public key (what `privfl relay` admits); each site gets
    the relay's public key only.
    """
    central = out / ".keys-being-made"
    names = key_names(job)
    if all_keys_here:
        for name in names:
            generate_keypair(central, name, overwrite=True)
    folders = []
    try:
        for name in names:
            folder = out / name
            keys = folder / job.keys_dir
            keys.mkdir(parents=True, exist_ok=True)
            save_job(replace(job, source=None), folder / "job.toml")
            if name in job.parties:
                write_start(folder, name, job.party(name).role, job.session)
            if all_keys_here:
                for peer in names:
                    shutil.copy2(central / f"{peer}{PUBLIC_SUFFIX}", keys)
                shutil.copy2(central / f"{name}{SECRET_SUFFIX}", keys)
                write_fingerprints(keys, folder / "FINGERPRINTS.txt")
            folders.append(folder)
    finally:
        shutil.rmtree(central, ignore_errors=True)
    return folders


def write_start(folder: Path, name: str, role: str, session: str) -> None:
    """The site's ``start.sh``, executable."""
    start = folder / "start.sh"
    start.write_text(START.format(name=name, role=role, session=session))
    start.chmod(start.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def write_fingerprints(keys: Path, path: Path) -> None:
    """``name  fingerprint`` for every public key in ``keys``."""
    lines = [
        f"{p.name[: -len(PUBLIC_SUFFIX)]:<16} {fingerprint(load_public_key(p))}"
        for p in sorted(keys.glob(f"*{PUBLIC_SUFFIX}"))
    ]
    path.write_text("\n".join(lines) + "\n")


def import_public_key(
    source: Path, into: Path, *, name: str | None = None, force: bool = False
) -> tuple[Path, str]:
    """Copy a peer's public key into a site's key folder after checking it; returns its
    path there and its fingerprint. A file holding a secret key is refused."""
    import zmq.auth

    try:
        _, secret = zmq.auth.load_certificate(source)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{source} is not a CURVE public key file: {exc}") from exc
    if secret is not None:
        raise ConfigError(f"{source} holds a SECRET key: never copy it; import the .key file")
    public = load_public_key(source)
    party = name or source.name.removesuffix(PUBLIC_SUFFIX)
    check_party_name(party)
    into.mkdir(parents=True, exist_ok=True)
    target = into / f"{party}{PUBLIC_SUFFIX}"
    if target.exists() and not force:
        if load_public_key(target) == public:
            return target, fingerprint(public)
        raise ConfigError(f"{target} already holds another key for {party}; pass --force")
    shutil.copyfile(source, target)
    return target, fingerprint(public)
