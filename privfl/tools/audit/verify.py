"""Read the audit logs, check them, and export them with the result for a reviewer.

:func:`verify` reads every log it is given (a party's run folder, a folder of party
folders, an ``audit.jsonl`` itself, or an export), checks each chain
(:mod:`.chain`) and cross-checks the logs of each session (:mod:`.crosscheck`).
:func:`export` writes the logs and that result into one file a reviewer can check
again with ``privfl audit verify FILE``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from privfl.errors import ConfigError
from privfl.parties.audit import FILE_NAME
from privfl.parties.files import write_json
from privfl.tools.audit.anchors import check_anchors
from privfl.tools.audit.chain import Chain, read_chain
from privfl.tools.audit.crosscheck import cross_check

EXPORT_FORMAT = "privfl-audit-export/1"


@dataclass(frozen=True)
class Report:
    """What :func:`verify` read and found; ``ok`` when nothing was found."""

    chains: list[Chain]
    findings: list[str]
    texts: dict[str, str]
    notes: list[str] = field(default_factory=list)  # what the check cannot tell

    @property
    def ok(self) -> bool:
        return not self.findings


def verify(paths: Sequence[Path], *, cross: bool = True, anchors: bool = True) -> Report:
    """Check every log under ``paths``; ``cross``: also check them against each other
    (matched messages, and the chain heads each party recorded of its peers' logs;
    ``anchors`` False leaves the heads out, as the leaky arm of the rewrite test)."""
    texts = read_logs(paths)
    chains = [read_chain(name, text) for name, text in texts.items()]
    findings = [f for chain in chains for f in chain.findings]
    notes: list[str] = []
    if cross:
        findings += cross_check(s for chain in chains for s in chain.sessions)
    if cross and anchors:
        anchored = check_anchors(chains, texts)
        findings += anchored.findings
        notes = anchored.notes
    elif not cross:
        notes = [
            f"{chain.log}: checked alone (--chains-only): a rewrite of the whole chain "
            "cannot be told; pass the peers' run folders"
            for chain in chains
        ]
    return Report(chains, findings, texts, notes)


def read_logs(paths: Sequence[Path]) -> dict[str, str]:
    """Each log's name (its path as given) and its whole text."""
    texts: dict[str, str] = {}
    seen: set[Path] = set()  # one file given twice (``run`` and ``./run/host``) is read once
    for path in paths:
        if path.is_file() and path.name != FILE_NAME:
            texts.update(_from_export(path))
            continue
        found = [path] if path.is_file() else _logs_under(path)
        if not found:
            raise ConfigError(f"no {FILE_NAME} in {path}: pass a party's run folder (its --out)")
        for log in found:
            if log.resolve() not in seen:
                seen.add(log.resolve())
                texts[str(log)] = log.read_text(errors="replace")
    return texts


def _logs_under(folder: Path) -> list[Path]:
    """A party's folder holds the log; a run-local folder holds one folder per party."""
    if (folder / FILE_NAME).is_file():
        return [folder / FILE_NAME]
    return sorted(folder.glob(f"*/{FILE_NAME}")) if folder.is_dir() else []


def _from_export(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
        if data.get("format") != EXPORT_FORMAT:
            raise ValueError(data.get("format"))
        return {str(log["path"]): str(log["text"]) for log in data["logs"]}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"{path} is neither an {FILE_NAME} nor a privfl audit export; pass a party's "
            "run folder or the file `privfl audit export` wrote"
        ) from exc


def export(report: Report, out: Path) -> None:
    """One file for a reviewer: every log's text, its sessions and the verification result."""
    logs = [
        {
            "path": chain.log,
            "sessions": [
                {"party": s.party, "session": s.session, "job": s.job, "outcome": s.outcome}
                for s in chain.sessions
            ],
            "text": report.texts[chain.log],
        }
        for chain in report.chains
    ]
    write_json(
        out,
        {
            "format": EXPORT_FORMAT,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "verification": {"ok": report.ok, "findings": report.findings},
            "logs": logs,
        },
    )
