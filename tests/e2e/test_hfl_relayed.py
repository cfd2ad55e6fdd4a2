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
import tomli_w
from relayed_kit import start_relay

from privfl.protocol.transport import free_tcp_endpoints

ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def relayed_hfl_kit(tmp_path: Path) -> Path:
    made = processes.privfl(
        "init", "hfl", "--out", str(tmp_path / "kit"), "--shuffler", "--clients", "4",
        "--client-processes", "2", "--rounds", "2", "--timeout", "60",
        env=ONE_THREAD, timeout=180,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    keys = tmp_path / "kit" / "keys"
    assert processes.privfl("keys", "gen", "--party", "relay", "--out", str(keys)).returncode == 0
    path = tmp_path / "kit" / "job.toml"
    data = tomllib.loads(path.read_text())
    for table in data["parties"].values():
        table["via"], table["endpoint"] = "relay", ""
    data["relay"] = {"endpoint": free_tcp_endpoints(1)[0]}
    path.write_text(tomli_w.dumps(data))
    return path


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
