"""A Ray cluster of this machine alone for the benchmark's ``--engine ray`` runs.

Started with ``ray start --head --block`` in its own process group, so that every Ray
process (its GCS, raylet and the parties' worker actors) descends from one process the
benchmark can watch for CPU time and memory, and stop by that group alone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from privfl.errors import ConfigError
from privfl.tools.bench.runs import Workers

AUTH_MODE = "RAY_AUTH_MODE"
START_SECONDS = 300.0  # a cold start on a busy machine; the wait ends as soon as it listens


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def local_ray(cpus: int, log: Path) -> Iterator[tuple[str, int]]:
    """A Ray head of ``cpus`` CPUs on loopback: yields its address and its process id."""
    try:
        import ray  # noqa: F401  (only to say how to install it)
    except ImportError as exc:
        raise ConfigError("--engine ray needs Ray: pip install 'privfl[ray]'") from exc
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="privfl-ray-")  # short: Ray's socket paths have a limit
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [
        *(sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block"),
        *(f"--port={port}", f"--num-cpus={cpus}", "--node-ip-address=127.0.0.1"),
        *("--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"),
    ]
    with log.open("wb") as console:
        head = subprocess.Popen(
            command, stdout=console, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + START_SECONDS
        while not _listening(port):
            if head.poll() is not None or time.monotonic() > deadline:
                raise ConfigError(f"the benchmark's Ray head did not start: see {log}")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}", head.pid
    finally:
        _stop(head)
        shutil.rmtree(temp, ignore_errors=True)


def _stop(head: subprocess.Popen[bytes]) -> None:
    """Stop the head, then whatever is left of its group (ours alone: it was started in it)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(head.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        head.wait(timeout=60)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(head.pid, signal.SIGKILL)
    head.wait()


@contextmanager
def bench_workers(engine: str, cores: int, out: Path) -> Iterator[Workers]:
    """The data holders' workers: their own pools, or one Ray cluster for the whole bench."""
    if engine != "ray":
        yield Workers(cores, cuda=engine == "cuda")
        return
    # Ray's token authentication (~/.ray/auth_token), for the head and every party we start.
    saved = os.environ.get(AUTH_MODE)
    os.environ[AUTH_MODE] = "token"
    try:
        with local_ray(cores, out / "ray-head.log") as (address, pid):
            yield Workers(cores, address, pid)
    finally:
        if saved is None:
            os.environ.pop(AUTH_MODE)
        else:
            os.environ[AUTH_MODE] = saved
