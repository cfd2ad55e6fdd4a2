"""A run's audit verification as ``privfl audit verify RUN`` computes it, kept per file state.

The board shows it for every run on each visit; the logs of a finished run do not
change, so the result is kept until one of the run's ``audit.jsonl`` files changes
size or time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from privfl.errors import PrivflError
from privfl.tools.board.folders import Run

# run folder -> (the state of its logs, the result): one entry per run, however often it grows
_CACHE: dict[Path, tuple[tuple[Any, ...], dict[str, Any]]] = {}


def audit_of(run: Run) -> dict[str, Any]:
    """``ok``, the number of logs, and each finding (one line each, as the CLI prints them)."""
    logs = [
        folder / "audit.jsonl"
        for folder in run.parties.values()
        if (folder / "audit.jsonl").is_file() and not (folder / "audit.jsonl").is_symlink()
    ]
    if not logs:
        return {"ok": None, "logs": 0, "findings": [], "note": "no audit log in this run"}
    key = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in logs)
    known = _CACHE.get(run.path)
    if known is None or known[0] != key:
        known = _CACHE[run.path] = (key, _verify(run, logs))
    return known[1]


def _verify(run: Run, logs: list[Path]) -> dict[str, Any]:
    from privfl.tools.audit.verify import verify

    try:
        report = verify(logs, cross=True)
    except PrivflError as exc:
        return {"ok": False, "logs": len(logs), "findings": [str(exc)], "note": ""}
    prefix = f"{run.path}/"
    findings = [f.replace(prefix, "") for f in report.findings]
    return {"ok": report.ok, "logs": len(report.chains), "findings": findings, "note": ""}
