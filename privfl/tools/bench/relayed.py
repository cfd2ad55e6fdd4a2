"""The benchmark's relayed case: the same job with every party behind a `privfl relay` process.

The relay runs as its own OS process on loopback, as on a machine of its own, so the
measured epoch pays for every extra hop, the seals and the relay's forwarding.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from privfl.config.relay import RELAY_NAME, VIA_RELAY, RelayConfig
from privfl.config.vertical import JobConfig
from privfl.errors import PrivflError
from privfl.parties.files import private_dir
from privfl.protocol.keys import generate_keypair
from privfl.protocol.transport import free_tcp_endpoints

READY_SECONDS = 120.0


def relayed_job(job: JobConfig) -> JobConfig:
    """``job`` with every party relayed through a relay on a free loopback port."""
    parties = {n: replace(p, via=VIA_RELAY, endpoint="") for n, p in job.parties.items()}
    return replace(job, parties=parties, relay=RelayConfig(endpoint=free_tcp_endpoints(1)[0]))


@contextmanager
def relay_process(job_path: Path, out: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Make the relay's key pair next to the parties', start it, wait until it listens."""
    generate_keypair(job_path.parent / "keys", RELAY_NAME, overwrite=True)
    private_dir(out)
    ready = out / "relay.ready"
    with (out / "relay.log").open("wb") as log:
        command = [sys.executable, "-m", "privfl", "relay", "--job", str(job_path)]
        process = subprocess.Popen([*command, "--ready-file", str(ready)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + READY_SECONDS
        while not ready.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise PrivflError(f"the relay did not start; see {out / 'relay.log'}")
            time.sleep(0.05)
        yield process
    finally:
        process.terminate()
        process.wait(timeout=30)
