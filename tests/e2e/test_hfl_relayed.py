"""A horizontal run with every party behind the relay: aggregator, Shuffler, client hosts.

Real processes, real CURVE and seals. The Shuffler holds two relayed connections (one
towards the client hosts, one towards the aggregator); the relay routes each.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import processes
import pytest
from relayed_kit import relayed_hfl_kit, start_relay

ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # as tests/e2e/test_hfl_processes.py


@pytest.mark.slow  # about a minute on a loaded 2-core machine (torch in five processes)
def test_a_fully_relayed_horizontal_run_with_a_shuffler_trains_to_the_end(tmp_path: Path) -> None:
    # Prepare
    job = relayed_hfl_kit(tmp_path)
    start_relay(tmp_path, job)
    names = tomllib.loads(job.read_text())["parties"]

    # Act
    procs = {}
    for name, table in names.items():
        role = {"aggregator": "aggregator", "shuffler": "shuffler"}.get(table["role"], "client")
        args = ["--job", str(job), "--party", name, "--out", str(tmp_path / name)]
        args += ["--no-plots"]  # the aggregator's: no check reads it (the others draw none)
        procs[name] = processes.spawn(
            "hfl", role, *args, log=tmp_path / f"{name}.log", env=ONE_THREAD
        )
    codes = {name: p.wait(timeout=300) for name, p in procs.items()}

    # Assert: every party finished; every round's reports came through the Shuffler.
    logs = {n: (tmp_path / f"{n}.log").read_text()[-1500:] for n in procs}
    assert codes == {n: 0 for n in procs}, logs
    metrics = (tmp_path / "aggregator" / "metrics.jsonl").read_text()
    records = [json.loads(line) for line in metrics.splitlines()]
    assert len(records) == 2 and all(r["reports"] > 0 for r in records)
    relay_log = (tmp_path / "relay.log").read_text()
    assert all(f"{n} is connected" in relay_log for n in procs)
