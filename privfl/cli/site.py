"""Command-line pieces for per-site kits and key exchange (`init vfl --parties`, `keys import`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click

from privfl.cli.optable import TableOption, default_of
from privfl.cli.options import is_tcp_endpoint
from privfl.config.vertical import DataConfig, JobConfig, validate
from privfl.errors import ConfigError

SITE_OPTIONS = [
    click.option(
        "--parties",
        default=None,
        help="One folder per site instead of one kit: names such as server,host,guest-a,guest-b "
        "(roles from the names: server, host, guest*).",
    ),
    click.option(
        "--endpoint",
        "endpoints",
        multiple=True,
        metavar="NAME=tcp://ADDRESS:PORT",
        help="Where a site's inbox listens (its address as the other sites reach it). Repeat.",
    ),
    click.option(
        "--own-keys",
        is_flag=True,
        help="With --parties (the default): write no keys; each site runs `privfl keys gen` "
        "and `privfl keys import` itself, so no secret key is ever made on another machine.",
    ),
    click.option(
        "--all-keys-here",
        is_flag=True,
        help="With --parties: make EVERY site's secret key on this machine and put each in its "
        "site's folder. Risky: this machine then holds all the secret keys, and anyone who "
        "copies it (or a folder in transit) can impersonate that party — a guest could pose "
        "as the Server. Only for rehearsals, or if you trust this machine and the channel "
        "each folder travels over; delete the folders here afterwards.",
    ),
    click.option(
        "--feature-count",
        "feature_counts",
        multiple=True,
        metavar="NAME=N",
        help="How many feature columns a Host or Guest trains on (its CSV's, without id and "
        "label). Every site agrees on it; the Server decrypts gradients of that size only. "
        "Repeat per party. A count equal to the party's demo share keeps the demo columns; any "
        "other drops them, so that site passes --data.",
        cls=TableOption,
        shown="the demo's columns",
    ),
    click.option(
        "--psi",
        type=click.Choice(["rsa", "ecdh"]),
        default=None,
        cls=TableOption,
        shown=default_of(DataConfig, "psi"),
        help="Private set intersection for --id-column: ristretto255 ECDH or RSA blind signatures.",
    ),
    click.option(
        "--psi-key-bits",
        type=click.IntRange(1024),
        default=None,
        cls=TableOption,
        shown=str(default_of(DataConfig, "psi_key_bits")),
        help="RSA modulus of the PSI; under 2048 needs --allow-weak-keys.",
    ),
]


@dataclass(frozen=True)
class SiteOptions:
    """The `init vfl` options this module handles."""

    parties: list[str]
    endpoints: dict[str, str]
    all_keys_here: bool
    feature_counts: dict[str, int]
    psi: str | None
    psi_key_bits: int | None


def pop_site_options(opts: dict[str, Any]) -> SiteOptions:
    """Take this module's options out of the command's keyword arguments."""
    parties = [p.strip() for p in (opts.pop("parties") or "").split(",") if p.strip()]
    endpoints = {}
    for item in opts.pop("endpoints"):
        name, sep, url = item.partition("=")
        if not sep or not is_tcp_endpoint(url.strip()):
            raise ConfigError(f"--endpoint {item!r}: write NAME=tcp://ADDRESS:PORT")
        endpoints[name.strip()] = url.strip()
    own, everything = bool(opts.pop("own_keys")), bool(opts.pop("all_keys_here"))
    if own and everything:
        raise ConfigError("--own-keys and --all-keys-here contradict each other: choose one")
    counts = {}
    for item in opts.pop("feature_counts"):
        name, sep, value = item.partition("=")
        if not sep or not value.strip().isdigit() or int(value) < 1:
            raise ConfigError(f"--feature-count {item!r}: write NAME=N with N >= 1")
        counts[name.strip()] = int(value)
    if parties:
        from privfl.runs.site_kits import role_of

        # the template job gets one endpoint (and one demo column share) per guest named
        opts["guests"] = max(1, sum(role_of(n) == "guest" for n in parties))
    return SiteOptions(
        parties=parties,
        endpoints=endpoints,
        all_keys_here=everything,
        feature_counts=counts,
        psi=opts.pop("psi"),
        psi_key_bits=opts.pop("psi_key_bits"),
    )


def init_sites(
    job: JobConfig, out: Path, site: SiteOptions, relay: tuple[str, list[str]] = ("", [])
) -> JobConfig:
    """Apply the PSI, site and relay options (``relay``: the endpoint and who is relayed,
    from :func:`~privfl.cli.options.pop_relay_options`); with --parties write one folder
    per site and report them."""
    from privfl.runs.kits import relayed
    from privfl.runs.site_kits import site_parties, write_site_kits

    data = job.data
    data = replace(
        data, psi=site.psi or data.psi, psi_key_bits=site.psi_key_bits or data.psi_key_bits
    )
    job = replace(job, data=data)
    if site.parties:
        job = replace(job, parties=site_parties(site.parties, site.endpoints, job))
    job = relayed(with_feature_counts(job, site.feature_counts), *relay)
    if not site.parties:
        validate(job)
        return job
    folders = write_site_kits(job, out, all_keys_here=site.all_keys_here)
    click.echo(f"wrote one folder per site in {out} (session {job.session}):")
    for folder, spec in zip(folders, job.parties.values(), strict=False):
        where = f"listens on {spec.endpoint}" if spec.endpoint else "connects out to the relay"
        click.echo(f"  {folder}  {spec.role:<6} {where}")
    if job.relay.endpoint:
        click.echo(f"  {folders[-1]}  relay  start it first, reached at {job.relay.endpoint}")
    if site.all_keys_here:
        click.echo("every site's secret key was made HERE: give each site ONLY its own folder,")
        click.echo("delete them here afterwards, and compare FINGERPRINTS.txt by phone")
    else:
        click.echo("no keys written: at each site run `privfl keys gen` and `privfl keys import`")
        if job.relay.endpoint:
            click.echo(
                "the relay too: `privfl keys gen --party relay` where it runs; it imports "
                "every party's public key and each site imports relay.key"
            )
    return job


def with_feature_counts(job: JobConfig, counts: dict[str, int]) -> JobConfig:
    """Declare parties' feature counts.

    A count equal to the party's share of the demo split keeps those columns, so the
    same kit still runs on the demo data; any other count drops them, and that site must
    bring its own CSV (``--data``; without it the party stops saying so).
    """
    parties = dict(job.parties)
    for name, count in counts.items():
        spec = job.party(name)
        if spec.role == "server":
            raise ConfigError("--feature-count: the server holds no features")
        columns = spec.columns if count == len(spec.columns) else ()
        parties[name] = replace(spec, columns=columns, feature_count=count)
    return replace(job, parties=parties)
