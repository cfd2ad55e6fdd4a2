"""The party under test as every conformance script receives it: one argument, one shape."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from privfl.config.vertical import JobConfig
from privfl.tools.conformance.peer import Report


@dataclass(frozen=True, slots=True)
class PredictInputs:
    """The files the party under test predicts with (each optional: fewer known answers)."""

    model: Path | None = None
    data: Path | None = None
    predictions: Path | None = None  # a Host's output CSV


NO_FILES = PredictInputs()


@dataclass(frozen=True, slots=True)
class Target:
    """Which party of which job a script plays against, the ending it drives the session
    to (``finish``, ``violation`` or a named refusal), where it records its checks, the
    party's process when the kit started it, and (prediction sessions) the party's files."""

    job: JobConfig
    party: str
    ending: str
    report: Report
    process: subprocess.Popen[bytes] | None = None
    inputs: PredictInputs = NO_FILES

    def parts(self) -> tuple[JobConfig, str, str, Report, subprocess.Popen[bytes] | None]:
        """``(job, party, ending, report, process)``, as the scripts unpack them."""
        return self.job, self.party, self.ending, self.report, self.process


Script = Callable[[Target], None]
