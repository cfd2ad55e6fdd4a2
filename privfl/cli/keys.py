"""`privfl keys gen|import|fingerprint`: the CURVE key pairs that authenticate each party."""

from __future__ import annotations

from pathlib import Path

import click

from privfl.cli.errors import friendly_errors
from privfl.cli.options import Group


@click.group(cls=Group)
def keys() -> None:
    """CURVE key pairs that authenticate each party."""


@keys.command("gen")
@click.option("--party", required=True, help="Party name (becomes the key file name).")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Key folder.")
@click.option("--force", is_flag=True, help="Replace an existing key pair.")
@friendly_errors
def keys_gen(party: str, out: Path, force: bool) -> None:
    """Generate a CURVE key pair; share NAME.key, keep NAME.key_secret (mode 0600)."""
    from privfl.protocol.keys import fingerprint, generate_keypair, load_public_key

    public, secret = generate_keypair(out, party, overwrite=force)
    click.echo(f"public key {public}\nsecret key {secret} (mode 0600, never share it)")
    click.echo(f"fingerprint {fingerprint(load_public_key(public))} (compare it out of band)")


@keys.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--into",
    type=click.Path(path_type=Path),
    required=True,
    help="This site's key folder (e.g. SITE/keys).",
)
@click.option("--force", is_flag=True, help="Replace a different key already there.")
@friendly_errors
def keys_import(files: tuple[Path, ...], into: Path, force: bool) -> None:
    """Import peers' PUBLIC keys (NAME.key files) into this site's key folder.

    Prints each key's fingerprint: compare it with the one its owner's
    `privfl keys gen` printed, over a channel you trust (phone, video call).
    Secret key files are refused.
    """
    from privfl.runs.site_kits import import_public_key

    for source in files:
        target, print_ = import_public_key(source, into, force=force)
        click.echo(f"imported {target}  fingerprint {print_}")


@keys.command("fingerprint")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@friendly_errors
def keys_fingerprint(files: tuple[Path, ...]) -> None:
    """Print the fingerprint of each public key file, to compare out of band."""
    from privfl.protocol.keys import fingerprint, load_public_key

    for path in files:
        click.echo(f"{path}  {fingerprint(load_public_key(path))}")
