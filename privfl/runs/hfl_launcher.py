"""`privfl hfl run-local`: aggregator, optional Shuffler and client hosts as OS processes.

Logical clients are spread over a few client-host processes (``--client-processes``,
default 2), so ``--clients 100`` does not mean 100 processes. A client host that
fails does not stop the run (the aggregator drops it); the aggregator failing does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from privfl.errors import ConfigError, PrivflError
from privfl.config.horizontal import HflConfig, HflJob, HflParty, save_hfl_job
from privfl.runs.launcher import POLL_SECONDS, EpochProgress, PartyProcess, last_error, stop_all
from privfl.parties.files import write_json
from privfl.protocol.keys import generate_keypair
from privfl.protocol.transport import free_tcp_endpoints

AGGREGATOR, SHUFFLER = "aggregator", "shuffler"


def local_job(config: HflConfig, client_processes: int = 2, host: str = "127.0.0.1") -> HflJob:
    """A loopback job: the aggregator, the Shuffler if asked, hosts sharing the clients."""
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


def write_hfl_kit(job: HflJob, directory: Path) -> Path:
    """``directory/job.toml`` and a CURVE key pair per party; returns the job file."""
    keys = directory / job.keys_dir
    for name in job.parties:
        generate_keypair(keys, name, overwrite=True)
    path = directory / "job.toml"
    save_hfl_job(job, path)
    return path


def spawn(job_path: Path, name: str, role: str, folder: Path, extra: list[str]) -> PartyProcess:
    """Start ``privfl hfl <role> --job … --party NAME --out folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    console = folder / "console.log"
    handle = console.open("wb")
    command = [sys.executable, "-m", "privfl", "hfl", role, "--job", str(job_path), "--party", name]
    command += ["--out", str(folder), *extra]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env)
    return PartyProcess(name, process, console, handle)


def start_all(job: HflJob, job_path: Path, out: Path) -> list[PartyProcess]:
    """Aggregator first (it listens), then the Shuffler, then the client hosts."""
    started = [spawn(job_path, AGGREGATOR, "aggregator", out / AGGREGATOR, ["--no-progress"])]
    if SHUFFLER in job.parties:
        started.append(spawn(job_path, SHUFFLER, "shuffler", out / SHUFFLER, []))
    for name in job.names("clients"):
        started.append(spawn(job_path, name, "client", out / name, []))
    return started


def watch(parties: list[PartyProcess], progress: EpochProgress, grace: float) -> None:
    """Wait for the aggregator; the others get ``grace`` seconds after it to exit on their own."""
    aggregator = parties[0]
    try:
        while aggregator.process.poll() is None:
            progress.update()
            time.sleep(POLL_SECONDS)
        progress.update()
        deadline = time.monotonic() + grace
        while any(p.process.poll() is None for p in parties) and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
    finally:
        stop_all(parties)
        progress.close()
    if aggregator.process.returncode != 0:
        raise PrivflError(
            f"the aggregator failed: {last_error(aggregator.console)} (log: {aggregator.console})"
        )


def preflight(config: HflConfig) -> None:
    """Refuse what every party would refuse anyway, before starting any process."""
    from privfl.learning.models import pick_device

    pick_device(config.device)
    if config.dataset != "digits" and not (config.data_dir and Path(config.data_dir).is_dir()):
        raise ConfigError(
            f"dataset {config.dataset} is read from files: pass --data-dir DIR (an existing folder)"
        )


def run_local(job: HflJob, out: Path, *, progress: bool = True) -> dict[str, Any]:
    """Write a kit under ``out/kit``, run every party, gather ``out/summary.json``."""
    preflight(job.config)
    start = time.monotonic()
    job_path = write_hfl_kit(job, out / "kit")
    parties = start_all(job, job_path, out)
    bar = EpochProgress(
        out / AGGREGATOR / "metrics.jsonl",
        job.config.rounds,
        progress,
        desc="federated rounds",
        unit="round",
    )
    watch(parties, bar, grace=10.0)
    summary: dict[str, Any] = json.loads((out / AGGREGATOR / "summary.json").read_text())
    summary["aggregator_wall_seconds"] = summary["wall_seconds"]
    summary["wall_seconds"] = round(time.monotonic() - start, 3)
    summary["processes"] = {p.name: p.process.returncode for p in parties}
    write_json(out / "summary.json", summary)
    return summary
