"""``privfl vfl predict``: score new rows with a trained model; every party takes part."""

from __future__ import annotations

from pathlib import Path

import click

from privfl.cli.errors import friendly_errors
from privfl.cli.governance import book_prediction, policy_option, vertical_gate_telling
from privfl.cli.options import job_option, out_option, party_option, verbose_option
from privfl.config.vertical import JobConfig, load_job


@click.command("predict")
@job_option("The job file of the training run (same parties, endpoints and keys).")
@party_option
@click.option(
    "--model",
    type=click.Path(path_type=Path),
    default=None,
    help="This party's training output folder (its model.json). Not for the server.",
)
@click.option(
    "--data",
    "data_file",
    type=click.Path(path_type=Path),
    default=None,
    help="CSV of the rows to score, with this party's model columns (a Poisson host: and "
    "the exposure column the job names). Not for the server.",
)
@click.option(
    "--id-column",
    default=None,
    help="Column of record ids; rows are matched by private set intersection. "
    "Without one (here or in the job file), rows must be in the same order everywhere.",
)
@out_option(
    "Host: the predictions CSV (logistic: id, probability, label; multiclass: id, p_0.., "
    "label; linear: id, prediction; poisson: id, rate, prediction = rate x exposure, or "
    "id, rate when the job names no exposure column). Every party writes party.log "
    "in this file's folder.",
    default_text="runs/<timestamp>/<party>/predictions.csv",
)
@click.option(
    "--allow-repeat-prediction",
    "allow_repeat",
    is_flag=True,
    default=False,
    help="Guest of a hidden-instance-space SecureBoost model: predict rows it predicted "
    "before with this model (refused by default: each session may give a deviating host "
    "one more candidate set per node of them; booked in the model's predictions.jsonl).",
)
@verbose_option
@policy_option
@friendly_errors
def predict_cmd(
    job_file: Path,
    party: str,
    model: Path | None,
    data_file: Path | None,
    id_column: str | None,
    out: Path | None,
    allow_repeat: bool,
    verbose: bool,
    policy_file: Path | None,
) -> None:
    """Score new rows with the joint model: start the Server, the Host and every Guest.

    Each party applies its own saved weights to its own columns. The guests' partial
    scores travel encrypted; the Host learns only their sum (decrypted by the Server
    under a mask), adds its own part and writes id, probability and predicted label
    (the model's own columns for the other kinds: docs/protocol.md §6.8).

    \b
    Example (one terminal per party):
      privfl vfl predict --job kit/job.toml --party server
      privfl vfl predict --job kit/job.toml --party guest-1 --model run/guest-1 \\
          --data new-guest.csv --id-column patient_id
      privfl vfl predict --job kit/job.toml --party host --model run/host \\
          --data new-host.csv --id-column patient_id --out predictions.csv
    """
    from privfl.models.registry import kind_of
    from privfl.parties.session import run_dir_default, setup_logging

    job = load_job(job_file)
    kind = kind_of(job)
    if allow_repeat and (kind.is_glm or job.party(party).role != "guest"):
        raise click.UsageError("--allow-repeat-prediction is for a guest of a SecureBoost model")
    # bound by the same rules as training; each session is booked (ε 0: no training label
    # is read) and counted against the site's [prediction] max_sessions
    policy = vertical_gate_telling(job, party, policy_file)
    book_prediction(policy, job, party)
    out = out or run_dir_default() / party / "predictions.csv"
    setup_logging(out.parent, party, verbose)
    kind.load(kind.predict)(job, party, model, data_file, id_column, out, allow_repeat)


def party_files(
    job: JobConfig, party: str, model: Path | None, data_file: Path | None
) -> tuple[Path, Path] | None:
    """A Host's or guest's ``--model`` folder and ``--data`` file (the Server takes none)."""
    role = job.party(party).role
    if role == "server":
        return None
    if model is None or data_file is None:
        raise click.UsageError(f"{party} ({role}) needs --model DIR and --data FILE")
    return model, data_file


def predict_glm(
    job: JobConfig,
    party: str,
    model: Path | None,
    data_file: Path | None,
    id_column: str | None,
    out: Path,
    allow_repeat: bool = False,  # SecureBoost's only: predict_cmd refuses it here
) -> None:
    """One party's side of a GLM prediction session (the registry's, models/registry.py)."""
    from privfl.parties.vertical.predict import load_model, predict_party, prediction_rows
    from privfl.parties.vertical.runner import open_transport

    saved, table, by_id = None, None, False
    files = party_files(job, party, model, data_file)
    if files is not None:
        saved = load_model(files[0], party)
        table, by_id = prediction_rows(job, party, saved, files[1], id_column)
    result = predict_party(
        job,
        party,
        out,
        model=saved,
        table=table,
        by_id=by_id,
        transport=open_transport(job, party),
    )
    if job.party(party).role == "host":
        click.echo(f"{party}: {result['rows']} predictions in {out}", err=True)


def predict_boost(
    job: JobConfig,
    party: str,
    model: Path | None,
    data_file: Path | None,
    id_column: str | None,
    out: Path,
    allow_repeat: bool = False,
) -> None:
    """One party's side of a SecureBoost prediction session (each decides its own nodes)."""
    from privfl.parties.vertical.runner import open_transport
    from privfl.parties.vertical.secureboost.predict import (
        boost_rows,
        load_boost_model,
        predict_boost_party,
    )

    saved, table, by_id = None, None, False
    files = party_files(job, party, model, data_file)
    if files is not None:
        saved = load_boost_model(files[0], party)
        table, by_id = boost_rows(job, party, saved, files[1], id_column)
    result = predict_boost_party(
        job, party, out, model=saved, table=table, by_id=by_id,
        transport=open_transport(job, party), allow_repeat=allow_repeat,
    )  # fmt: skip
    if job.party(party).role == "host":
        click.echo(f"{party}: {result['rows']} predictions in {out}", err=True)
    elif result.get("repeat"):
        held = result["repeat"] + 1
        click.echo(
            f"{party}: prediction session {held} of this model over these rows "
            f"(--allow-repeat-prediction): a deviating host may hold {held} candidate sets "
            "per node of them",
            err=True,
        )
