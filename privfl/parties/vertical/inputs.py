"""A party's rows as the command line and the job file describe them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from privfl.config.vertical import JobConfig
from privfl.data.tables import IdTable, load_id_table, site_data
from privfl.data.views import PartyData
from privfl.errors import ConfigError
from privfl.parties.vertical.runner import load_data


def parse_features(text: str | None) -> tuple[str, ...]:
    """``a,b,c`` → ``("a", "b", "c")``; empty names are refused."""
    if not text:
        return ()
    names = tuple(n.strip() for n in text.split(","))
    if not all(names):
        raise ConfigError(f"--features {text!r} has an empty column name; write a,b,c")
    return names


def party_inputs(
    job: JobConfig,
    name: str,
    path: Path | None,
    id_column: str | None,
    label_column: str | None,
    features: Sequence[str],
) -> tuple[PartyData | None, IdTable | None]:
    """Either position-aligned rows (no id column) or an id-keyed table for the PSI stage."""
    if job.party(name).role == "server":
        return None, None
    site = site_data(job, name, path, id_column, label_column, features)
    table = load_id_table(site)
    if table is not None:
        return None, table
    if site.features:
        raise ConfigError("--features needs --id-column (the rows are matched by id)")
    return load_data(job, name, site.path, site.label_column), None
