"""``privfl vfl run-local`` and ``privfl hfl run-local``: every party as its own OS process on
loopback, supervised to the end.

Vertical: every party matters; the first that fails ends the run (the others get a
grace period to notice). Horizontal: logical clients are spread over a few
client-host processes, and a client host that fails does not stop the run (the
aggregator drops it); the aggregator failing does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tqdm import tqdm

from privfl.config.horizontal import HflConfig, HflJob, check_networked
from privfl.config.vertical import JobConfig
from privfl.errors import ConfigError, PrivflError
from privfl.models.registry import kind_of
from privfl.parties.files import open_private, private_dir, write_json
from privfl.runs.kits import AGGREGATOR, SHUFFLER, write_kit

POLL_SECONDS = 0.2
GRACE_SECONDS = 10.0  # after one party fails, how long the others get to notice and exit


@dataclass
class PartyProcess:
    """A running party and where its console output goes."""

    name: str
    process: subprocess.Popen[bytes]
    console: Path
    handle: IO[bytes]


def spawn(
    mode: str,
    role: str,
    job_path: Path,
    name: str,
    folder: Path,
    extra: list[str],
    env: dict[str, str] | None = None,
) -> PartyProcess:
    """Start ``privfl <mode> <role> --job … --party NAME --out folder [extra]``."""
    private_dir(folder)
    console = folder / "console.log"
    handle = open_private(console, "wb")
    command = [sys.executable, "-m", "privfl", mode, role, "--job", str(job_path), "--party", name]
    command += ["--out", str(folder), *extra]
    process = subprocess.Popen(
        command,
        stdout=handle,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    return PartyProcess(name, process, console, handle)


def start_parties(
    job: JobConfig, job_path: Path, out: Path, extra: dict[str, list[str]] | None = None
) -> list[PartyProcess]:
    """Spawn one ``privfl vfl <role>`` process per party (Server first, so it listens early).

    ``extra`` appends arguments per party name (e.g. ``--data`` for the benchmark).
    A party not resuming gets ``--overwrite``: its folder holds the console log spawn
    opened, and the caller has already claimed ``out`` (runs/outdir.py).
    """
    order = sorted(job.parties.values(), key=lambda p: ("server", "host", "guest").index(p.role))
    started = []
    for spec in order:
        args = ["--no-progress", *(extra or {}).get(spec.name, [])]
        if "--resume" not in args:
            args.append("--overwrite")
        started.append(spawn("vfl", spec.role, job_path, spec.name, out / spec.name, args))
    return started


def start_hfl_parties(job: HflJob, job_path: Path, out: Path) -> list[PartyProcess]:
    """Aggregator first (it listens), then the Shuffler, then the client hosts."""
    one_thread = {"OMP_NUM_THREADS": "1"}
    started = [
        spawn(
            "hfl",
            "aggregator",
            job_path,
            AGGREGATOR,
            out / AGGREGATOR,
            ["--no-progress", "--overwrite"],
            one_thread,
        )
    ]
    fresh = ["--overwrite"]  # the folder holds the console log spawn opened
    if SHUFFLER in job.parties:
        started.append(
            spawn("hfl", "shuffler", job_path, SHUFFLER, out / SHUFFLER, fresh, one_thread)
        )
    for name in job.names("clients"):
        started.append(spawn("hfl", "client", job_path, name, out / name, fresh, one_thread))
    return started


def last_error(console: Path) -> str:
    """The one-line error a failed party printed (its last non-empty console line)."""
    lines = [line.strip() for line in console.read_text(errors="replace").splitlines()]
    lines = [line for line in lines if line]
    return lines[-1] if lines else "exited without a message"


class EpochProgress:
    """A progress bar fed by a metrics.jsonl file as epochs (or rounds) complete."""

    def __init__(
        self,
        metrics: Path,
        epochs: int,
        enabled: bool,
        desc: str = "encrypted training",
        unit: str = "epoch",
    ) -> None:
        self.metrics = metrics
        self.seen = 0
        self.bar = tqdm(
            total=epochs,
            desc=desc,
            unit=unit,
            disable=not enabled,
            file=sys.stderr,
            dynamic_ncols=True,
        )

    def update(self) -> None:
        if not self.metrics.exists():
            return
        lines = self.metrics.read_text().splitlines()
        for line in lines[self.seen :]:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                return  # a line still being written; read it next time
            self.seen += 1
            self.bar.set_postfix(**postfix(record))
            self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def supervise(
    parties: list[PartyProcess],
    progress: EpochProgress,
    *,
    essential: list[PartyProcess] | None = None,
    grace: float = GRACE_SECONDS,
) -> None:
    """Wait for the ``essential`` parties (default: all); then stop whatever still runs.

    The first essential party to fail gives the others ``grace`` seconds, then the
    run ends with its one-line error. Once every essential party has exited, the
    others get ``grace`` seconds to exit on their own. A party that is not essential
    (a horizontal client host) may fail without failing the run.
    """
    essential = parties if essential is None else essential
    failed: PartyProcess | None = None
    deadline = float("inf")
    try:
        while any(p.process.poll() is None for p in essential):
            progress.update()
            if failed is None:
                failed = next((p for p in essential if p.process.poll() not in (None, 0)), None)
                if failed is not None:
                    deadline = time.monotonic() + grace
            if time.monotonic() > deadline:
                break
            time.sleep(POLL_SECONDS)
        progress.update()
        wait_for_exit([p for p in parties if p not in essential], grace)
    except KeyboardInterrupt:
        # The terminal's Ctrl-C reached every party too: each stops cleanly on its own
        # (tells its peers, shuts its workers down), which a SIGTERM now would cut short.
        wait_for_exit(parties, grace)
        raise
    finally:
        stop_all(parties)
        progress.close()
    failed = failed or next((p for p in essential if p.process.returncode != 0), None)
    if failed is not None:
        raise PrivflError(
            f"party {failed.name} failed: {last_error(failed.console)} (log: {failed.console})"
        )


def wait_for_exit(parties: list[PartyProcess], seconds: float) -> None:
    """Wait up to ``seconds`` for the ``parties`` to exit on their own."""
    deadline = time.monotonic() + seconds
    while any(p.process.poll() is None for p in parties) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)


def stop_all(parties: list[PartyProcess]) -> None:
    """Terminate whatever still runs (then kill), and close the console files."""
    for p in parties:
        if p.process.poll() is None:
            p.process.send_signal(signal.SIGTERM)
    for p in parties:
        try:
            p.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.process.kill()
            p.process.wait()
        p.handle.close()


def run_local(
    job: JobConfig,
    out: Path,
    *,
    progress: bool = True,
    resume: bool = False,
    started: float | None = None,
    workers: int = 0,
) -> dict[str, Any]:
    """Write a kit under ``out/kit``, run every party, and gather ``out/summary.json``.

    ``resume``: reuse the kit already in ``out/kit`` and start every party with --resume.
    ``started``: the ``time.time()`` that ``wall_seconds`` counts from (the command's
    own process start, runs.clock); by default this call's. ``workers``: each party's
    ``--workers`` (0: one per core).
    """
    start = time.time() if started is None else started
    job_path = out / "kit" / "job.toml" if resume else write_kit(job, out / "kit")
    args = ["--workers", str(workers), *(["--resume"] if resume else [])]
    parties = start_parties(job, job_path, out, dict.fromkeys(job.parties, args))
    total, unit = kind_of(job).rounds_of(job)
    metrics = out / job.host / "metrics.jsonl"
    try:
        supervise(parties, EpochProgress(metrics, total, progress, unit=unit))
    except PrivflError as exc:
        raise PrivflError(for_run_local(str(exc), out)) from exc
    summary: dict[str, Any] = json.loads((out / job.host / "summary.json").read_text())
    summary["host_wall_seconds"] = summary["wall_seconds"]
    summary["wall_seconds"] = round(time.time() - start, 3)
    summary["parties"] = {name: str(out / name) for name in job.parties}
    write_json(out / "summary.json", summary)
    return summary


def for_run_local(error: str, out: Path) -> str:
    """A party's error as run-local's user can act on it: the party commands' --overwrite
    and --redraw-labels are not run-local's, whose --overwrite starts a new kit."""
    if "--redraw-labels" not in error:
        return error
    return (
        f"{error}. With run-local (which has no --redraw-labels): `privfl vfl run-local --out "
        f"{out} --overwrite` starts a new run in that folder, with a new kit, new keys and a "
        "new label draw, whose label ε is spent anew"
    )


def postfix(record: dict[str, Any]) -> dict[str, str]:
    """The progress bar's loss and headline metric of one epoch record."""
    shown = {"loss": f"{record['loss']:.4f}"}
    for key, label in (("accuracy", "acc"), ("rmse", "rmse"), ("deviance", "dev")):
        if isinstance(record.get(key), int | float):
            shown[label] = f"{record[key]:.3f}"
            break
    return shown


def preflight(config: HflConfig) -> None:
    """Refuse what every horizontal party would refuse anyway, before starting any process."""
    from privfl.learning.models import pick_device

    check_networked(config)
    pick_device(config.device)
    if config.dataset != "digits" and not (config.data_dir and Path(config.data_dir).is_dir()):
        raise ConfigError(
            f"dataset {config.dataset} is read from files: pass --data-dir DIR (an existing folder)"
        )


def run_local_hfl(
    job: HflJob, out: Path, *, progress: bool = True, started: float | None = None
) -> dict[str, Any]:
    """Write a kit under ``out/kit``, run every party, gather ``out/summary.json``.

    ``started``: as for ``run_local``, the time ``wall_seconds`` counts from.
    """
    preflight(job.config)
    start = time.time() if started is None else started
    job_path = write_kit(job, out / "kit")
    parties = start_hfl_parties(job, job_path, out)
    bar = EpochProgress(
        out / AGGREGATOR / "metrics.jsonl",
        job.config.rounds,
        progress,
        desc="federated rounds",
        unit="round",
    )
    supervise(parties, bar, essential=parties[:1])
    summary: dict[str, Any] = json.loads((out / AGGREGATOR / "summary.json").read_text())
    summary["aggregator_wall_seconds"] = summary["wall_seconds"]
    summary["wall_seconds"] = round(time.time() - start, 3)
    summary["processes"] = {p.name: p.process.returncode for p in parties}
    write_json(out / "summary.json", summary)
    return summary
