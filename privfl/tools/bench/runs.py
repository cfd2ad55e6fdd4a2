"""Real runs for the benchmark: every party its own OS process, as ``privfl vfl run-local`` does.

Per-epoch wall time comes from the Host's metrics (training step plus evaluation, as a
user sees it); peak memory per party from the kernel's high-water mark (``VmHWM``) of the
party process and of its worker processes, sampled while it runs. Per-epoch CPU seconds
are every party's and worker's CPU time between the Host's epoch records: unlike wall
time, a busy machine does not inflate them.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from privfl.config.vertical import DataConfig
from privfl.runs.kits import demo_job, write_kit
from privfl.runs.launcher import EpochProgress, start_parties, supervise
from privfl.tools.bench.relayed import relay_process, relayed_job
from privfl.tools.bench.workload import TEST_SIZE, Workload, write_csv

POLL_SECONDS = 0.2
MARK_POLL_SECONDS = 0.02
"""How often the Host's metrics file is checked for a new record: at one, every known
process's CPU time is read afresh, so an epoch's (or tree's) CPU is bounded to within
about this of its end, not to within the full scan's ``POLL_SECONDS`` (0.2 s at 2 busy
cores is 0.4 CPU-s, 5 % of a 2048-bit DJN epoch at 2,000 rows)."""


@dataclass
class RunResult:
    """One real run: seconds per epoch; peak memory (MiB) and CPU seconds per party."""

    obfuscation: str
    epoch_seconds: list[float]
    wall_seconds: float
    per_party: dict[str, dict[str, float]] = field(default_factory=dict)  # MiB, CPU s
    accuracy: float | None = None
    epoch_cpu_seconds: list[float] = field(default_factory=list)  # every process, per epoch
    # CPU seconds per primitive, the mean of measurements just before and just after the run
    # (report._real_run): the floor's prices under the load the run itself had
    primitives_cpu: dict[str, float] = field(default_factory=dict)
    pricing: dict[str, Any] = field(default_factory=dict)  # stages.Pricing.as_dict()
    # Per party, its own process's and its workers' CPU seconds in each epoch
    party_epoch_cpu: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    @property
    def steady_epoch(self) -> float:
        """Median epoch after the first (which also starts the worker processes)."""
        later = self.epoch_seconds[1:] or self.epoch_seconds
        return float(statistics.median(later))

    @property
    def steady_epoch_cpu(self) -> float:
        """Median CPU seconds of every party and worker per epoch after the first."""
        later = self.epoch_cpu_seconds[1:] or self.epoch_cpu_seconds or [0.0]
        return float(statistics.median(later))

    def as_dict(self) -> dict[str, Any]:
        return {
            "obfuscation": self.obfuscation,
            "epoch_seconds": self.epoch_seconds,
            "steady_epoch_seconds": self.steady_epoch,
            "wall_seconds": self.wall_seconds,
            "per_party": self.per_party,
            "accuracy": self.accuracy,
            "epoch_cpu_seconds": self.epoch_cpu_seconds,
            "steady_epoch_cpu_seconds": self.steady_epoch_cpu,
            "primitives_cpu_seconds": self.primitives_cpu,
            "pricing": self.pricing,
            "party_epoch_cpu_seconds": self.party_epoch_cpu,
            "steady_party_cpu_seconds": self.steady_party_cpu,
        }

    @property
    def steady_party_cpu(self) -> dict[str, dict[str, float]]:
        """Per party, the median CPU seconds of its own process and of its workers per
        epoch after the first: where an epoch's CPU beyond the floor's arithmetic is spent
        (the party processes' own share is codec, checks, bookkeeping and evaluation)."""
        return {
            name: {part: float(statistics.median(v[1:] or v or [0.0])) for part, v in split.items()}
            for name, split in self.party_epoch_cpu.items()
        }


def _hwm_kib(pid: int) -> int:
    """The process's peak resident set (VmHWM) in KiB; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used so far; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _children(pid: int) -> list[int]:
    """Direct children of a process."""
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    except (OSError, ValueError):
        pass
    return found


def _descendants(pid: int) -> list[int]:
    """Every process below a party: its worker pool, or a local Ray cluster's workers."""
    found, todo = [], _children(pid)
    while todo:
        proc = todo.pop()
        found.append(proc)
        todo += _children(proc)
    return found


def _records(metrics: Path | None) -> int:
    """How many epochs the Host has recorded so far."""
    try:
        return len(metrics.read_text().splitlines()) if metrics else 0
    except OSError:
        return 0


class LineTally:
    """How many lines of a growing file hold ``marker`` so far (read on from where the last
    count stopped, whole lines only)."""

    def __init__(self, path: Path, marker: bytes) -> None:
        self.path, self.marker = path, marker
        self.count = self._offset = 0

    def update(self) -> int:
        """The count, after reading the lines added since the last call."""
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except OSError:
            return self.count
        whole = data[: data.rfind(b"\n") + 1]
        self._offset += len(whole)
        self.count += sum(1 for line in whole.splitlines() if self.marker in line)
        return self.count


class MemoryWatch:
    """Samples each party's and its workers' VmHWM and CPU time until stopped (Linux /proc).

    ``metrics``: the Host's metrics.jsonl; each time it gains a record (checked every
    ``MARK_POLL_SECONDS``), the CPU seconds of every process so far are read and noted
    (``epoch_cpu``); memory and new workers are scanned every ``POLL_SECONDS``.
    ``starts``: a file whose lines with a marker start an epoch (``start_cpu``, noted
    likewise), e.g. the Host's audit line of each tree's gradients.
    """

    def __init__(
        self, pids: dict[str, int], metrics: Path | None = None, starts: LineTally | None = None
    ) -> None:
        self.pids = pids
        self.metrics = metrics
        self.starts = starts
        self.epoch_cpu: list[float] = []  # every process's CPU seconds at each epoch's end
        self.start_cpu: list[float] = []  # and at each start ``starts`` marks
        # per party, (its own process's, it and its workers') CPU seconds at each epoch's end
        self.epoch_party: list[dict[str, tuple[float, float]]] = []
        self.party: dict[str, int] = dict.fromkeys(pids, 0)
        self.workers: dict[str, dict[int, int]] = {name: {} for name in pids}
        self.cpu: dict[str, dict[int, float]] = {name: {} for name in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_scan = 0.0
        while not self._stop.is_set():
            if time.monotonic() >= next_scan:
                self._scan()
                next_scan = time.monotonic() + POLL_SECONDS
            started = self.starts.update() if self.starts is not None else 0
            if started > len(self.start_cpu):
                self.start_cpu += [self._read()] * (started - len(self.start_cpu))
            records = _records(self.metrics)
            if records > len(self.epoch_cpu):
                self._mark(records - len(self.epoch_cpu))
            self._stop.wait(MARK_POLL_SECONDS if self.metrics is not None else POLL_SECONDS)

    def _scan(self) -> None:
        """Every party's and worker's peak memory and CPU time; workers started since."""
        for name, pid in self.pids.items():
            self.party[name] = max(self.party[name], _hwm_kib(pid))
            cpu = self.cpu[name]
            for proc in [pid, *_descendants(pid)]:
                cpu[proc] = max(cpu.get(proc, 0.0), _cpu_seconds(proc))
                if proc != pid:
                    seen = self.workers[name].get(proc, 0)
                    self.workers[name][proc] = max(seen, _hwm_kib(proc))

    def _read(self) -> float:
        """Every known process's CPU seconds now, in total (each process's noted too)."""
        for cpu in self.cpu.values():
            for proc, seen in cpu.items():
                cpu[proc] = max(seen, _cpu_seconds(proc))
        return sum(sum(c.values()) for c in self.cpu.values())

    def _mark(self, new: int) -> None:
        """``new`` records: every known process's CPU seconds now, in total and per party,
        once per record (two that appeared between checks share the later mark)."""
        total = self._read()
        party = {
            name: (self.cpu[name].get(pid, 0.0), sum(self.cpu[name].values()))
            for name, pid in self.pids.items()
        }
        self.epoch_cpu += [total] * new
        self.epoch_party += [party] * new

    def per_epoch_cpu(self) -> list[float]:
        """CPU seconds of every party and worker in each recorded epoch (the first from the
        start: it also includes the key exchange and the workers' start)."""
        marks = [0.0, *self.epoch_cpu]
        return [round(b - a, 3) for a, b in itertools.pairwise(marks)]

    def per_epoch_party_cpu(self) -> dict[str, dict[str, list[float]]]:
        """Per party, the CPU seconds of its own process (``own``) and of its workers
        (``workers``) in each recorded epoch."""
        marks = [dict.fromkeys(self.pids, (0.0, 0.0)), *self.epoch_party]
        split = {
            name: [
                (b[name][0] - a[name][0], b[name][1] - a[name][1])
                for a, b in itertools.pairwise(marks)
            ]
            for name in self.pids
        }  # (own, own + workers) per epoch
        return {
            name: {
                "own": [round(own, 3) for own, _ in epochs],
                "workers": [round(total - own, 3) for own, total in epochs],
            }
            for name, epochs in split.items()
        }

    def stop(self) -> dict[str, dict[str, float]]:
        """Per party: peak MiB of the party process, of it plus its workers, CPU seconds."""
        self._stop.set()
        self._thread.join()
        return {
            name: {
                "party": round(self.party[name] / 1024, 1),
                "with_workers": round(
                    (self.party[name] + sum(self.workers[name].values())) / 1024, 1
                ),
                "cpu_seconds": round(sum(self.cpu[name].values()), 2),
            }
            for name in self.pids
        }


@dataclass(frozen=True)
class Workers:
    """Where the Host's and Guest's workers run: ``count`` per party (0 = one per core)
    in their own pools, or on the Ray cluster at ``ray_address`` (its head ``ray_pid``,
    watched like a party: its processes' CPU time and memory are the workers'), or with
    ``cuda`` their obfuscators and the Server's decryptions on this machine's GPU."""

    count: int = 0
    ray_address: str | None = None
    ray_pid: int = 0
    cuda: bool = False

    def args(self) -> list[str]:
        """The data holders' command-line options."""
        engine = ["--engine", "ray", "--ray-address", self.ray_address] if self.ray_address else []
        return ["--workers", str(self.count), *engine, *(["--engine", "cuda"] if self.cuda else [])]


def run_parties(
    workload: Workload,
    bits: int,
    obfuscation: str,
    epochs: int,
    out: Path,
    workers: Workers | None = None,
    batch_size: int = 0,
    *,
    relayed: bool = False,
) -> RunResult:
    """Train ``epochs`` epochs with Server, Host and one Guest as processes on loopback.

    ``batch_size`` 0 trains on the full batch; a mini-batch keeps one batch's
    ciphertexts in flight at a time (what memory per row then depends on).
    ``relayed``: every party behind a relay process (tools/bench/relayed.py)."""
    workers = workers or Workers()
    job = demo_job(guests=1, key_bits=bits, allow_weak_keys=True, epochs=epochs)
    job = replace(
        job,
        obfuscation=obfuscation,
        timeout_seconds=600.0,
        data=DataConfig(test_size=TEST_SIZE, split_seed=0),
        # run every epoch asked for
        training=replace(job.training, tolerance=0.0, batch_size=batch_size),
    )
    extra: dict[str, list[str]] = {name: workers.args() for name in (job.host, *job.guests)}
    if workers.cuda:
        extra[job.server] = ["--engine", "cuda"]  # its decryptions on the GPU too
    if workload.tables is not None:
        tables = workload.tables
        specs = {
            name: replace(
                spec,
                columns=(),
                feature_count=tables[name].x.shape[1] if name in tables else 0,
            )
            for name, spec in job.parties.items()
        }
        job = replace(job, parties=specs)
        for name, table in workload.tables.items():
            path = write_csv(table, out / "data" / f"{name}.csv")
            extra[name] += ["--data", str(path)]
    job = relayed_job(job) if relayed else job
    start = time.monotonic()
    job_path = write_kit(job, out / "kit")
    metrics = out / job.host / "metrics.jsonl"
    # A reused --out holds the last run's records: the watch would take them for this
    # run's epochs (per-epoch CPU of 0) before the Host starts a new file.
    metrics.unlink(missing_ok=True)
    with relay_process(job_path, out / "relay") if relayed else nullcontext():
        parties = start_parties(job, job_path, out, extra)
        pids = {p.name: p.process.pid for p in parties}
        watched = pids | ({"ray": workers.ray_pid} if workers.ray_pid else {})
        memory = MemoryWatch(watched, metrics)
        try:
            supervise(parties, EpochProgress(metrics, epochs, False))
        finally:
            peak = memory.stop()
    wall = time.monotonic() - start
    summary = json.loads((out / job.host / "summary.json").read_text())
    return RunResult(
        obfuscation + (" relayed" if relayed else ""),
        list(summary["epoch_seconds"]),
        round(wall, 3),
        peak,
        summary["accuracy"],
        memory.per_epoch_cpu(),
        party_epoch_cpu=memory.per_epoch_party_cpu(),
    )
