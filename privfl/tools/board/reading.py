"""What the board shows of one run, read from its folder: status, metrics, job, audit.

Every function takes a :class:`~privfl.tools.board.folders.Run` and returns plain data
(JSON-ready). Nothing here writes, and nothing reads a file that
:mod:`~privfl.tools.board.folders` does not name: party logs, metrics, summaries,
audit logs and the job file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from privfl.errors import PrivflError
from privfl.tools.board.folders import Run

# Shown in the runs table when the summary (else the last metrics record) has them.
METRICS = ("accuracy", "auc", "f1", "rmse", "r2", "deviance", "loss")
CURVES = ("loss", "accuracy", "auc", "f1")
TAIL_BYTES = 4096
LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+ (\w+) ([\w.]+): (.*)$")


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def summary_of(run: Run) -> dict[str, Any] | None:
    """The run-local summary, else the summary of the party that keeps the metrics."""
    host = run.host
    for path in [run.path / "summary.json", *([host / "summary.json"] if host else [])]:
        if path.is_file() and not path.is_symlink():
            return read_json(path)
    return None


def records(run: Run) -> list[dict[str, Any]]:
    """Every complete record of ``metrics.jsonl`` (a line still being written is skipped)."""
    host = run.host
    if host is None or (host / "metrics.jsonl").is_symlink():
        return []
    found = []
    for line in (host / "metrics.jsonl").read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            found.append(record)
    return found


def log_lines(folder: Path, *, last: bool) -> list[str]:
    """The first or the last few lines of a party's log (without reading all of it)."""
    path = folder / "party.log"
    if not path.is_file() or path.is_symlink():
        return []
    with path.open("rb") as handle:
        if last:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - TAIL_BYTES))
        chunk = handle.read(TAIL_BYTES).decode(errors="replace")
    lines = chunk.splitlines()
    return lines[1:] if last and len(chunk) == TAIL_BYTES and len(lines) > 1 else lines


def parse_line(line: str) -> dict[str, str]:
    match = LOG_LINE.match(line)
    if match is None:
        return {"time": "", "level": "", "message": line}
    time, level, _, message = match.groups()
    return {"time": time, "level": level, "message": message}


def status_of(run: Run, summary: dict[str, Any] | None) -> tuple[str, str]:
    """``finished`` (a summary), ``failed`` (a party logged why it stopped), else ``running``."""
    for name, folder in run.parties.items():
        for line in log_lines(folder, last=True):
            parsed = parse_line(line)
            if parsed["level"] in ("ERROR", "CRITICAL"):
                return "failed", f"{name}: {parsed['message']}"
    if summary is not None:
        return "finished", str(summary.get("stop_reason", ""))
    return "running", ""


def times_of(run: Run, status: str) -> tuple[str, str]:
    """Start (first log line of any party) and end (last one, once the run is over)."""
    firsts, lasts = [], []
    for folder in run.parties.values():
        head, tail = log_lines(folder, last=False), log_lines(folder, last=True)
        firsts += [t for t in [parse_line(head[0])["time"]] if t] if head else []
        lasts += [t for t in [parse_line(tail[-1])["time"]] if t] if tail else []
    start = min(firsts, default="")
    return start, (max(lasts, default="") if status != "running" else "")


def model_of(run: Run, summary: dict[str, Any] | None) -> str:
    if summary is not None:
        if isinstance(summary.get("model"), dict) and "kind" in summary["model"]:
            return str(summary["model"]["kind"])
        if "mechanism" in summary:
            return f"horizontal, {summary['mechanism']}"
    job = job_of(run)
    return str(job.get("model", ""))


def metrics_of(summary: dict[str, Any] | None, last: dict[str, Any] | None) -> dict[str, float]:
    source = summary if summary is not None else (last or {})
    return {k: source[k] for k in METRICS if isinstance(source.get(k), int | float)}


def overview(run: Run) -> dict[str, Any]:
    """One row of the runs table."""
    summary = summary_of(run)
    status, reason = status_of(run, summary)
    start, end = times_of(run, status)
    done = records(run)
    return {
        "id": run.id,
        "path": str(run.path),
        "model": model_of(run, summary),
        "dataset": str((summary or {}).get("dataset", "")),
        "parties": list(run.parties),
        "status": status,
        "reason": reason,
        "started": start,
        "ended": end,
        "metrics": metrics_of(summary, done[-1] if done else None),
    }


def job_of(run: Run) -> dict[str, Any]:
    """The job file's text, its fingerprint, its model and planned epochs or rounds."""
    path = run.job_file
    if path is None:
        return {}
    from privfl.config.horizontal import load_hfl_job
    from privfl.config.vertical import load_job

    info: dict[str, Any] = {"file": "kit/job.toml", "text": path.read_text(errors="replace")}
    try:
        job = load_job(path)
        info |= {"model": job.model.kind, "planned": job.training.epochs, "unit": "epoch"}
    except (PrivflError, ValueError, KeyError, TypeError):
        try:
            hjob = load_hfl_job(path)
        except (PrivflError, ValueError, KeyError, TypeError) as exc:
            return info | {"error": f"not a job file privfl reads: {exc}"}
        job = hjob  # type: ignore[assignment]
        info |= {"model": f"horizontal, {hjob.config.mechanism}", "planned": hjob.config.rounds}
        info["unit"] = "round"
    return info | {"fingerprint": job.fingerprint(), "project": job.project or ""}


def audited_jobs(run: Run) -> dict[str, str]:
    """The job fingerprint each party's audit log opened its session with."""
    found = {}
    for name, folder in run.parties.items():
        path = folder / "audit.jsonl"
        if not path.is_file() or path.is_symlink():
            continue
        with path.open(errors="replace") as handle:
            first = handle.readline()
        try:
            found[name] = str(json.loads(first).get("job", ""))
        except (ValueError, AttributeError):
            found[name] = ""
    return found


def live(run: Run) -> dict[str, Any]:
    """What the live view polls: status, progress, the curves, each party's last log line."""
    summary = summary_of(run)
    status, reason = status_of(run, summary)
    done = records(run)
    job = job_of(run)
    planned = job.get("planned") or (summary or {}).get("max_epochs") or None
    unit = job.get("unit") or ("round" if done and "round" in done[0] else "epoch")
    steps = [_step(r, i, unit) for i, r in enumerate(done)]
    return {
        "id": run.id,
        "status": status,
        "reason": reason,
        "unit": unit,
        "done": len(done),
        "planned": planned,
        "steps": steps,
        "curves": {k: [r.get(k) for r in done] for k in CURVES if any(k in r for r in done)},
        "parties": {name: _last_line(folder) for name, folder in run.parties.items()},
        "references": (summary or {}).get("references", []),
    }


def _step(record: dict[str, Any], index: int, unit: str) -> int:
    """Epochs are 0-based in metrics.jsonl, rounds 1-based: show both from 1."""
    value = record.get(unit)
    if not isinstance(value, int):
        return index + 1
    return value + 1 if unit == "epoch" else value


def _last_line(folder: Path) -> dict[str, str]:
    lines = log_lines(folder, last=True)
    return parse_line(lines[-1]) if lines else {"time": "", "level": "", "message": ""}
