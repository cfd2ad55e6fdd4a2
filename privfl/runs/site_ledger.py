"""The site ledger: every run's ε at this site, per project, kept across runs.

One JSON file (the policy's ``ledger``), rewritten atomically (0600) under a lock, so
two parties of one site that start together each book their run. A run is booked
when it starts, before it reads data: a run that crashes still counts. The same
job's run at the same party is booked once (a resume or a restart reuses its noise
draw); the Host's ``--redraw-labels`` draws new noise and books again. Runs compose
by basic composition: a project's spent ε is the sum of its runs' ε (δ likewise).

A Host's label draw is booked too (:class:`LedgerDraws`): the sha256 of each draw goes
into the entry that admitted it (``label_draw``), so a draw no admission covers — its
file deleted and the run resumed — is refused, and the ε a run reports is the ε its
draws were booked at (parties/label_draws.py).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from privfl.config.policy import SitePolicy
from privfl.errors import ConfigError, PrivacyBudgetExceeded
from privfl.parties.files import open_private, write_json

VERSION = 1


@dataclass(frozen=True, slots=True)
class Spend:
    """What one run spends of this site's privacy, with its unit and assumptions."""

    epsilon: float  # 0 when the run releases no DP output of this site's records
    delta: float
    kind: str  # "label DP", "LDP", "DP (zCDP)", "none"
    unit: str
    assumptions: str


@dataclass(frozen=True, slots=True)
class Booking:
    """Which run a ledger entry is: the key a second start of the same run is matched by."""

    project: str
    session: str
    fingerprint: str
    party: str
    role: str
    mode: str  # "vfl" or "hfl"


@dataclass(frozen=True)
class LedgerDraws:
    """The label draws booked for one run (job and party) in the site ledger."""

    policy: SitePolicy
    run: Booking

    def booked(self) -> list[tuple[str, float]]:
        """(sha256, ε) of each draw booked for this run, oldest first."""
        runs = read_ledger(self.policy.ledger_path())
        return [
            (str(r["label_draw"]), epsilon_of(r))
            for r in runs
            if same_run(r, self.run) and r.get("label_draw")
        ]

    def book(self, digest: str) -> None:
        """Write ``digest`` into this run's latest admission that has no draw yet."""
        path = self.policy.ledger_path()
        with locked(path):
            document = read_document(path)
            free = [
                r for r in document["runs"] if same_run(r, self.run) and not r.get("label_draw")
            ]
            if not free:
                raise ConfigError(
                    "policy: this start would draw new labels that no booking in the site "
                    f"ledger {path} covers (every admission of this job already has its "
                    "draw); start with --overwrite --redraw-labels, which books their ε"
                )
            free[-1]["label_draw"] = digest
            write_json(path, document, durable=True)


def read_document(path: Path) -> dict[str, Any]:
    """The ledger file: ``runs`` booked and ``refused`` jobs (empty when there is none yet)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {"version": VERSION, "runs": [], "refused": []}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the site ledger {path}: {exc}; restore it") from exc
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise ConfigError(f"{path} is not a privfl site ledger (version {VERSION})")
    return {"version": VERSION, "runs": data.get("runs", []), "refused": data.get("refused", [])}


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """The runs booked in ``path`` (none when it does not exist yet)."""
    runs: list[dict[str, Any]] = read_document(path)["runs"]
    return runs


def epsilon_of(entry: dict[str, Any]) -> float:
    """An entry's ε as a number (the file writes ∞ as "inf")."""
    return float(entry["epsilon"])


def spent(runs: list[dict[str, Any]], project: str) -> float:
    """ε this site has spent on ``project``: the sum over its runs (basic composition)."""
    return math.fsum(epsilon_of(r) for r in runs if r["project"] == project)


def same_run(entry: dict[str, Any], booking: Booking) -> bool:
    """Whether ``entry`` books this very run (same job, same party)."""
    return all(entry.get(k) == v for k, v in asdict(booking).items())


def admit(policy: SitePolicy, booking: Booking, spend: Spend, *, again: bool = False) -> bool:
    """Book the run unless it would pass the project's budget; True if it was booked now.

    Raises PrivacyBudgetExceeded naming the budget. ``again``: book even if this run is
    in the ledger already (new noise drawn for it).
    """
    path = policy.ledger_path()
    with locked(path):
        document = read_document(path)
        runs = document["runs"]
        if not again and any(same_run(r, booking) for r in runs):
            return False
        try:
            check_budget(policy, booking.project, spend.epsilon, runs)
        except PrivacyBudgetExceeded as exc:
            document["refused"].append(refusal(policy, booking, str(exc)))
            write_json(path, document, durable=True)
            raise
        runs.append({**entry(booking, spend), "policy_sha256": policy_digest(policy)})
        write_json(path, document, durable=True)
    return True


PREDICTION = Spend(
    0.0,
    0.0,
    "none",
    "one prediction session",
    "scores new rows with the trained model, post-processing of the training run's "
    "release: no training label is read, so no ε is spent",
)


def admit_prediction(policy: SitePolicy, booking: Booking) -> int:
    """Book one prediction session of this job at this party (ε 0), unless the site's
    ``[prediction] max_sessions`` are used up; the session's number."""
    path = policy.ledger_path()
    cap = policy.prediction.max_sessions
    with locked(path):
        document = read_document(path)
        held = sum(same_run(r, booking) for r in document["runs"])
        if cap and held >= cap:
            reason = (
                f"policy: this job has had {held} prediction session(s) at {booking.party}, "
                f"this site's maximum ({policy.file} [prediction] max_sessions)"
            )
            document["refused"].append(refusal(policy, booking, reason))
            write_json(path, document, durable=True)
            raise ConfigError(reason)
        document["runs"].append(
            {**entry(booking, PREDICTION), "policy_sha256": policy_digest(policy)}
        )
        write_json(path, document, durable=True)
    return held + 1


def note_refusal(policy: SitePolicy, booking: Booking, reason: str) -> None:
    """Keep a job this site's policy refused in the ledger, for the office to read."""
    path = policy.ledger_path()
    with locked(path):
        document = read_document(path)
        document["refused"].append(refusal(policy, booking, reason))
        write_json(path, document, durable=True)


def refusal(policy: SitePolicy, booking: Booking, reason: str) -> dict[str, Any]:
    """The ledger's record of a refused job: when, which job and party, the rule's line."""
    return {
        "refused": datetime.now(UTC).isoformat(timespec="seconds"),
        **asdict(booking),
        "reason": reason,
        "policy_sha256": policy_digest(policy),
    }


def check_budget(
    policy: SitePolicy, project: str, epsilon: float, runs: list[dict[str, Any]]
) -> None:
    """Refuse a run whose ε would take the project past this site's budget for it."""
    budget = policy.projects.get(project)
    if budget is None or epsilon == 0:
        return
    before = spent(runs, project)
    if before + epsilon > budget.max_epsilon:
        raise PrivacyBudgetExceeded(
            f"policy: this run's ε {epsilon:g} would take project {project!r} from {before:g} "
            f"to {before + epsilon:g}, past this site's budget {budget.max_epsilon:g} "
            f"({policy.file} [projects.{project}] max_epsilon; `privfl site budget` lists the runs)"
        )


def entry(booking: Booking, spend: Spend) -> dict[str, Any]:
    """The ledger's record of one run (∞ written as "inf": JSON has no infinity)."""
    record: dict[str, Any] = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        **asdict(booking),
        **asdict(spend),
    }
    if math.isinf(spend.epsilon):
        record["epsilon"] = "inf"
    return record


def policy_digest(policy: SitePolicy) -> str:
    """SHA-256 of the policy file's bytes: which version of the policy admitted the run."""
    if policy.source is None:
        return ""
    return hashlib.sha256(policy.source.read_bytes()).hexdigest()


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path``'s lock file (0600) while booking."""
    with open_private(path.with_name(path.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
