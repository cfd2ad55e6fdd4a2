"""Hello's job section digests: they reveal nothing a party's own job file lacks, and a peer
that forges them cannot get another job admitted.

The digests exist only to name where two job files differ (docs/protocol.md §2.1).
Two claims hold them to that:

* **honest-but-curious receiver**: the digests are computed from the canonical job
  alone, so a site's own settings (its CSV path, id and label columns, patience,
  memory) do not reach a peer through them; the leaky arm computes them from the
  whole file, and a peer then tells two sites' data paths apart.
* **deviating guest**: it runs another job but sends the honest job's digests; the
  full fingerprint still decides, so it is refused. The leaky arm decides by the
  digests (as a receiver that trusted them would) and admits it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import memory_job, run_in_threads

import privfl.parties.vertical.handshake as handshake
import privfl.parties.vertical.host as host_module
import privfl.parties.vertical.server as server_module
from privfl.config import vertical
from privfl.config.core import differing, section_digests
from privfl.config.vertical import JobConfig, with_overrides
from privfl.errors import ConfigError
from privfl.protocol.memory import InMemoryHub


def local_variant(job: JobConfig) -> JobConfig:
    """The same job as another site writes it: its own CSV, columns, patience and memory."""
    host = replace(
        job.party("host"), data="/secret/site-b/patients.csv", id_column="mrn", label_column="y"
    )
    parties = {**job.parties, "host": host}
    return replace(job, parties=parties, liveness_grace_seconds=7.0, max_buffered_mib=64)


@pytest.mark.parametrize("leaky", [False, True], ids=["canonical", "leaky-whole-file"])
def test_section_digests_do_not_carry_site_local_settings(
    leaky: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: two sites' copies of one job, differing only in site-local settings.
    if leaky:  # the defence off: digests over the whole file, local keys included
        monkeypatch.setattr(JobConfig, "canonical_data", lambda job: vertical.to_dict(job))
    job = memory_job(1)
    theirs = local_variant(job)

    # Act: what a curious receiver compares.
    changed = differing(job.sections(), theirs.sections())

    # Assert
    if leaky:
        assert "parties.host" in changed  # the receiver learns the host's file changed
    else:
        assert changed == [] and job.fingerprint() == theirs.fingerprint()
        assert job.sections() == section_digests(vertical.canonical_data(theirs))


def forged_sections(honest: JobConfig) -> Any:
    """encode_sections as a deviating guest uses it: always the honest job's digests."""
    real = handshake.encode_sections
    return lambda _digests: real(honest.sections())


def decide_by_sections(ctx: Any, sender: str, hello: Any) -> None:
    """A receiver that trusted the digests instead of the fingerprint (the leaky arm)."""
    theirs = handshake.decode_sections(hello.job_sections)
    if differing(ctx.job.sections(), theirs):
        raise ConfigError(f"party {sender} runs a different job file")


@pytest.mark.parametrize("leaky", [False, True], ids=["fingerprint-decides", "leaky-sections"])
def test_a_guest_forging_the_digests_of_the_real_job_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, leaky: bool
) -> None:
    # Prepare: the guest trains with another learning rate but claims the real sections.
    job = memory_job(1, epochs=1, timeout=10)
    other = with_overrides(job, learning_rate=0.9)
    monkeypatch.setattr(handshake, "encode_sections", forged_sections(job))
    if leaky:
        for module in (server_module, host_module):
            monkeypatch.setattr(module, "check_hello", decide_by_sections)

    # Act
    results = run_in_threads(job, InMemoryHub(), tmp_path, jobs={"guest-1": other}, join_timeout=30)

    # Assert
    refused = [r for r in results.values() if "runs a different job file" in str(r)]
    if leaky:
        assert not refused  # admitted: the forged digests got another job past the handshake
    else:
        assert isinstance(results["server"], ConfigError) and refused
        assert other.fingerprint() in str(results["server"])  # no section names: fingerprints
