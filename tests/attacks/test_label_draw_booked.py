"""Attack (operator, insider): make the Host draw its labels again, unbooked, or cheat its ε.

The Host saves its one label draw in ``OUT/label-draw.json`` and reuses it on every start
(tests/attacks/test_resume_keeps_flips.py). The file is the Host's own, so its operator
can delete it and ``--resume``: the Host draws new labels, the guests train on a third
noising of the same true labels (a majority of 3 reads 0.869 of them at ε = 1, against
0.742 for one), and the site ledger, which booked the run once, never hears of it. Or
the operator edits the file's ``epsilons`` and the run reports a smaller ε.

Defended: each draw's sha256 is booked in the site ledger against the admission that
covered it (runs/site_ledger.py ``LedgerDraws``); a missing or edited file with a booked
draw is refused with one line, and the ε reported is the ledger's. Leaky arm: no ledger
booking (the Host alone keeps the record, as before): 3 draws exposed, 2 booked; the
edited ε is reported.

The Host's start is played as the CLI plays it (``admit`` as ``book_vertical`` does, then
``label_draws.take``), on a real site policy and ledger file; the draw is the shipped
randomized response on 400 labels.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from privfl.config.policy import load_policy
from privfl.errors import ConfigError
from privfl.mechanisms.label_dp import private_generator, randomized_response
from privfl.parties import label_draws
from privfl.parties.label_draws import FILE_NAME, LabelDraw
from privfl.runs.site_ledger import Booking, LedgerDraws, Spend, admit, read_ledger

EPSILON = 1.0
ROWS = 400
TRUE = np.random.default_rng(7).integers(0, 2, ROWS)
JOB = "f" * 64
RUN = Booking("sepsis", "session-1", JOB, "host", "host", "vfl")
SPEND = Spend(EPSILON, 0.0, "label DP", "per label, whole run", "")


def draw() -> tuple[np.ndarray, dict[str, object]]:
    """One noising of the true labels from the OS CSPRNG, as the Host draws it."""
    return randomized_response(TRUE, EPSILON, private_generator()), {"epsilon": EPSILON}


@pytest.fixture
def site(tmp_path: Path) -> LedgerDraws:
    policy = tmp_path / "policy.toml"
    policy.write_text("[projects.sepsis]\nmax_epsilon = 10\n")
    return LedgerDraws(load_policy(policy), RUN)


def start(
    out: Path, site: LedgerDraws, *, booked: bool, resume: bool, redraw: bool = False
) -> LabelDraw:
    """The Host's start: admitted by the ledger (again on a redraw), then its draw."""
    admit(site.policy, RUN, SPEND, again=redraw)
    book = site if booked else None
    return label_draws.take(
        out, JOB, EPSILON, draw, rows=ROWS, resume=resume, redraw=redraw, book=book
    )


def host_entries(site: LedgerDraws) -> list[dict[str, object]]:
    return [e for e in read_ledger(site.policy.ledger_path()) if e["party"] == "host"]


def delete_and_resume(tmp_path: Path, site: LedgerDraws, *, booked: bool) -> list[LabelDraw]:
    """A first start, an operator's redraw, then the file deleted and the run resumed."""
    out = tmp_path / "host"
    out.mkdir()
    draws = [start(out, site, booked=booked, resume=False)]
    draws.append(start(out, site, booked=booked, resume=False, redraw=True))
    (out / FILE_NAME).unlink()
    draws.append(start(out, site, booked=booked, resume=True))
    return draws


def test_a_deleted_draw_is_refused_and_no_third_noising_is_drawn(
    tmp_path: Path, site: LedgerDraws
) -> None:
    with pytest.raises(ConfigError) as refused:
        delete_and_resume(tmp_path, site, booked=True)

    line = str(refused.value)
    assert "is missing" in line and "--redraw-labels" in line and "\n" not in line
    entries = host_entries(site)
    assert len(entries) == 2 and all(e.get("label_draw") for e in entries)  # 2 draws, 2 booked
    assert not (tmp_path / "host" / FILE_NAME).exists()  # nothing new was drawn and saved


def test_leaky_arm_unbooked_the_resume_draws_a_third_noising(
    tmp_path: Path, site: LedgerDraws
) -> None:
    draws = delete_and_resume(tmp_path, site, booked=False)

    assert len({d.labels.tobytes() for d in draws}) == 3  # 3 noisings (two equal: 0.61^400)
    assert len(host_entries(site)) == 2  # 2 booked


@pytest.mark.parametrize("booked", [True, False], ids=["booked", "leaky-unbooked"])
def test_an_edited_epsilon_is_refused_or_else_reported(
    tmp_path: Path, site: LedgerDraws, booked: bool
) -> None:
    out = tmp_path / "host"
    out.mkdir()
    start(out, site, booked=booked, resume=False)
    record = json.loads((out / FILE_NAME).read_text())
    (out / FILE_NAME).write_text(json.dumps(record | {"epsilons": [0.1]}))

    if booked:
        with pytest.raises(ConfigError, match=r"does not match the label draw the site ledger"):
            start(out, site, booked=True, resume=True)
    else:
        assert start(out, site, booked=False, resume=True).epsilon == 0.1  # the lie reported


def test_the_reported_epsilon_is_the_ledgers_booking(tmp_path: Path, site: LedgerDraws) -> None:
    out = tmp_path / "host"
    out.mkdir()
    first = start(out, site, booked=True, resume=False)
    again = start(out, site, booked=True, resume=True)
    redrawn = start(out, site, booked=True, resume=False, redraw=True)

    assert first.epsilon == again.epsilon == EPSILON and again.reused
    assert redrawn.epsilons == (EPSILON, EPSILON)
    assert [e["label_draw"] for e in host_entries(site)] == [
        label_draws.draw_digest(JOB, d.labels) for d in (first, redrawn)
    ]


def test_without_a_ledger_a_resume_with_checkpoints_and_no_draw_is_refused(
    tmp_path: Path,
) -> None:
    out = tmp_path / "host"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "epoch-1.json").write_text("{}")

    with pytest.raises(ConfigError, match="is missing, yet this job has checkpoints"):
        label_draws.take(out, JOB, EPSILON, draw, rows=ROWS, resume=True, redraw=False)
