"""``privfl relay``: the one process that binds a port, for sites that open none."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import click

from privfl.cli.errors import friendly_errors
from privfl.cli.optable import TableOption
from privfl.config.core import JobFile, read_toml
from privfl.config.relay import RELAY_NAME
from privfl.errors import ConfigError
from privfl.protocol.keys import PUBLIC_SUFFIX, SECRET_SUFFIX, load_public_key, load_secret_keypair
from privfl.protocol.relay import Relay

log = logging.getLogger("privfl.relay")


def load_any_job(path: Path) -> JobFile[Any]:
    """A vertical or a horizontal job file (a horizontal one has an ``[hfl]`` table)."""
    if "hfl" in read_toml(path, "give the job file the parties use"):
        from privfl.config.horizontal import load_hfl_job

        return load_hfl_job(path)
    from privfl.config.vertical import load_job

    return load_job(path)


@click.command("relay")
@click.option(
    "--job", "job_path", type=click.Path(path_type=Path), required=True, help="The job file."
)
@click.option(
    "--bind",
    default=None,
    help="Where to listen, e.g. tcp://0.0.0.0:443.",
    cls=TableOption,
    shown="the job's relay endpoint",
)
@click.option(
    "--key",
    type=click.Path(path_type=Path),
    default=None,
    help="The relay's secret key file (default: relay.key_secret in the job's key folder).",
)
@click.option("--ready-file", type=click.Path(path_type=Path), default=None, hidden=True)
@friendly_errors
def relay(job_path: Path, bind: str | None, key: Path | None, ready_file: Path | None) -> None:
    """Carry sealed messages between the job's parties; they connect out to it.

    It admits exactly the job's parties' keys, cannot open what they seal for each
    other, and learns who sends to whom, how much and when (docs/security.md).
    Runs until Ctrl-C or SIGTERM.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    job = load_any_job(job_path)
    keys = job.keys_path()
    endpoint = bind or job.relay.endpoint
    if not endpoint:
        raise ConfigError("no endpoint to listen on: pass --bind tcp://0.0.0.0:PORT")
    public, secret = load_secret_keypair(key or keys / f"{RELAY_NAME}{SECRET_SUFFIX}")
    parties = {name: load_public_key(keys / f"{name}{PUBLIC_SUFFIX}") for name in job.parties}
    server = Relay(endpoint, public, secret, parties)
    stop_on_signals(server)
    log.info("relay for %s listening on %s", ", ".join(sorted(parties)), server.endpoint)
    if ready_file is not None:  # tests wait for this instead of a fixed delay
        ready_file.write_text(server.endpoint)
    try:
        server.serve()
    finally:
        server.close()


def stop_on_signals(server: Relay) -> None:
    """SIGTERM and SIGINT end :meth:`Relay.serve` cleanly."""
    if threading.current_thread() is not threading.main_thread():
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        server.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
