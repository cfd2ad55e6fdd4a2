"""A relay nobody can reach is named, with what to ask IT, by the party itself within 20 s."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from processes import spawn
from relayed_kit import make_relayed_kit

from privfl.config.vertical import load_job

# Not ``serial``: the bound is measured on the party's own log, from its first line to its
# error, and almost all of it is the relay's 12 s reach window (a wait, no work): beside
# a load average of 9.7, 11.7 s. The party's start-up, slowed by load, lies outside it.


def stamp(line: str) -> float:
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_a_party_that_cannot_reach_the_relay_says_so_within_20_s(tmp_path: Path) -> None:
    # Prepare: a relayed kit with a 600 s timeout; no relay runs at its endpoint.
    job = make_relayed_kit(tmp_path, "--timeout", "600")
    relay = load_job(job).relay.endpoint

    # Act
    guest = spawn(
        "vfl", "guest", "--job", str(job), "--party", "guest-1", "--out", str(tmp_path / "g"),
        "--no-progress", log=tmp_path / "guest-1.log",
    )  # fmt: skip
    code = guest.wait(timeout=120)

    # Assert: one line, on this party, naming the relay and what to ask for.
    text = (tmp_path / "guest-1.log").read_text()
    assert code != 0 and "Traceback" not in text, text
    errors = [line for line in text.splitlines() if line.startswith("privfl: error:")]
    where = relay.split("://")[1]
    assert errors == [
        f"privfl: error: guest-1 cannot reach the relay at {relay} (connection refused): ask "
        f"your IT to allow outbound TCP to {where}, and the relay operator whether the relay "
        "runs there"
    ], errors
    log = (tmp_path / "g" / "party.log").read_text().splitlines()
    stopped = next(line for line in log if " ERROR privfl.party: " in line)
    assert stamp(stopped) - stamp(log[0]) < 20, log
