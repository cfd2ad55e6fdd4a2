"""``privfl vfl run-local``: every party as its own OS process on loopback, watched to the end."""

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

from privfl.config.vertical import JobConfig
from privfl.errors import PrivflError
from privfl.runs.kits import write_kit
from privfl.parties.session import write_json

POLL_SECONDS = 0.2
GRACE_SECONDS = 10.0  # after one party fails, how long the others get to notice and exit


@dataclass
class PartyProcess:
    """A running party and where its console output goes."""

    name: str
    process: subprocess.Popen[bytes]
    console: Path
    handle: IO[bytes]


def start_parties(
    job: JobConfig, job_path: Path, out: Path, extra: dict[str, list[str]] | None = None
) -> list[PartyProcess]:
    """Spawn one ``privfl vfl <role>`` process per party (Server first, so it listens early).

    ``extra`` appends arguments per party name (e.g. ``--data`` for the benchmark).
    """
    order = sorted(job.parties.values(), key=lambda p: ("server", "host", "guest").index(p.role))
    started = []
    for spec in order:
        folder = out / spec.name
        folder.mkdir(parents=True, exist_ok=True)
        console = folder / "console.log"
        handle = console.open("wb")
        command = [
            sys.executable,
            "-m",
            "privfl",
            "vfl",
            spec.role,
            "--job",
            str(job_path),
            "--party",
            spec.name,
            "--out",
            str(folder),
            "--no-progress",
            *(extra or {}).get(spec.name, []),
        ]
        process = subprocess.Popen(
            command,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        started.append(PartyProcess(spec.name, process, console, handle))
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
            self.bar.set_postfix(loss=f"{record['loss']:.4f}", acc=f"{record['accuracy']:.3f}")
            self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def watch(parties: list[PartyProcess], progress: EpochProgress) -> None:
    """Wait for every party; on the first failure give the rest a grace period, then stop them."""
    failed: PartyProcess | None = None
    deadline = float("inf")
    try:
        while any(p.process.poll() is None for p in parties):
            progress.update()
            if failed is None:
                failed = next((p for p in parties if p.process.poll() not in (None, 0)), None)
                if failed is not None:
                    deadline = time.monotonic() + GRACE_SECONDS
            if time.monotonic() > deadline:
                break
            time.sleep(POLL_SECONDS)
        progress.update()
    finally:
        stop_all(parties)
        progress.close()
    failed = failed or next((p for p in parties if p.process.returncode != 0), None)
    if failed is not None:
        raise PrivflError(
            f"party {failed.name} failed: {last_error(failed.console)} (log: {failed.console})"
        )


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
    job: JobConfig, out: Path, *, progress: bool = True, resume: bool = False
) -> dict[str, Any]:
    """Write a kit under ``out/kit``, run every party, and gather ``out/summary.json``.

    ``resume``: reuse the kit already in ``out/kit`` and start every party with --resume.
    """
    start = time.monotonic()
    job_path = out / "kit" / "job.toml" if resume else write_kit(job, out / "kit")
    parties = start_parties(
        job, job_path, out, {name: ["--resume"] for name in job.parties} if resume else None
    )
    boost = job.model.kind == "secureboost"
    total, unit = (job.model.trees, "tree") if boost else (job.training.epochs, "epoch")
    metrics = out / job.host / "metrics.jsonl"
    watch(parties, EpochProgress(metrics, total, progress, unit=unit))
    summary: dict[str, Any] = json.loads((out / job.host / "summary.json").read_text())
    summary["host_wall_seconds"] = summary["wall_seconds"]
    summary["wall_seconds"] = round(time.monotonic() - start, 3)
    summary["parties"] = {name: str(out / name) for name in job.parties}
    write_json(out / "summary.json", summary)
    return summary
