"""A party that cannot read its data tells its peers it stopped — not what its data holds.

Before its transport is up, a party whose CSV has a bad cell sends every peer an
Abort (parties/vertical/startup.py). The reader's error quotes the cell; a curious
peer (here the Server, over a real CURVE inbox) reads whatever the Abort carries.
Defended, the Abort says only that the party could not read its data; the leaky arm
sends the error's own text, and the Server reads the cell.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from processes import WEAK, privfl_here

from privfl.config.vertical import JobConfig, load_job
from privfl.data.views import read_csv
from privfl.errors import ConfigError, PeerAborted
from privfl.parties.vertical import startup
from privfl.parties.vertical.runner import open_transport
from privfl.parties.vertical.startup import DATA_FAILED, telling_peers
from privfl.protocol.channel import Channel
from privfl.protocol.messages import Kind

CELL = "Jane-Doe-1961-04-02"  # a name and birth date pasted into a feature column


def kit(tmp_path: Path) -> JobConfig:
    made = privfl_here("init", "vfl", "--out", str(tmp_path / "kit"), *WEAK)
    assert made.returncode == 0, made.stderr
    return load_job(tmp_path / "kit" / "job.toml")


@pytest.mark.parametrize("defended", [True, False])
def test_a_bad_cell_does_not_reach_the_peers_in_the_start_up_abort(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, defended: bool
) -> None:
    # Prepare: the Server listens; the guest's CSV holds a personal value in a number column.
    monkeypatch.setattr(startup, "REACH_SECONDS", 3.0)  # the Host is not running
    job = kit(tmp_path)
    data = tmp_path / "guest.csv"
    data.write_text(f"a,b\n1.0,2.0\n3.0,{CELL}\n")
    server = open_transport(job, "server")
    try:
        channel = Channel(server, session=job.session, timeout=30)

        # Act: the guest fails reading it and tells its peers; the Server reads the Abort.
        reason = DATA_FAILED if defended else None  # leaky arm: the error's own text
        with pytest.raises(ConfigError, match=CELL), telling_peers(job, "guest-1", None, reason):
            read_csv(data, None)
        with pytest.raises(PeerAborted) as told:
            channel.expect({Kind.HELLO}, {"guest-1"}, timeout=30)
    finally:
        server.close()

    # Assert: the Server hears that guest-1 stopped; the cell only without the defence.
    assert "peer guest-1 stopped: guest-1: " in str(told.value)
    assert (CELL in str(told.value)) is not defended, told.value
