"""The ``privfl`` command line: every command calls library functions; exit codes live here."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import click

from privfl.cli.boost import boost_options, pop_boost_options, with_boost
from privfl.cli.errors import friendly_errors
from privfl.cli.governance import policy_option, project_option
from privfl.cli.optable import TableOption, default_of, pick, row
from privfl.cli.options import (
    Group,
    host_overwrite_option,
    job_option,
    no_progress_option,
    out_option,
    overwrite_option,
    party_option,
    pop_relay_options,
    verbose_option,
    with_relay_options,
)
from privfl.cli.predict import predict_cmd
from privfl.config.vertical import (
    DATASET_TASK,
    DATASETS,
    DEFAULT_DATASET,
    MODEL_KINDS,
    MULTICLASS_BATCH,
    JobConfig,
    ModelConfig,
    TrainingConfig,
    check_key_bits,
    kind_default,
    kind_tables,
    load_job,
    save_job,
    with_overrides,
)
from privfl.crypto.engine import ENGINES, POOL, Engine
from privfl.models.registry import DEFAULT_KIND, UNPROTECTED_READS, kind_named, kind_of
from privfl.runs.tables import fmt

F = TypeVar("F", bound=Callable[..., Any])


def parse_epsilon(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    """Accept a number or ``inf`` for ε."""
    if value is None:
        return None
    try:
        eps = float(value)
    except ValueError as exc:
        raise click.BadParameter("a number >= 0, or inf to switch label DP off") from exc
    if math.isnan(eps) or eps < 0:
        raise click.BadParameter("a number >= 0, or inf to switch label DP off")
    return eps


@click.group(cls=Group)
def vfl() -> None:
    """Vertical FL: Paillier-encrypted models with label DP (Server, Host, Guests)."""


DEMO_GUESTS = 1
"""Guests of the demo job `init vfl` and `run-local` write without --guests or --job."""

KIT = {
    "guests": row(
        "--guests",
        type=click.IntRange(1, 20),
        default_text=str(DEMO_GUESTS),
        help="Number of guests; the demo's guest columns are split among them.",
    ),
    "key_bits": row(
        "--key-bits",
        type=int,
        field=(JobConfig, "key_bits"),
        help="Paillier modulus size. Below 2048 needs --allow-weak-keys.",
    ),
    "allow_weak_keys": row(
        "--allow-weak-keys",
        is_flag=True,
        default=False,
        help="Permit keys under 2048 bits (tests and quick trials only).",
    ),
    "epochs": row(
        "--epochs", type=click.IntRange(1), field=(TrainingConfig, "epochs"), help="Maximum epochs."
    ),
    "label_epsilon": row(
        "--label-epsilon",
        callback=parse_epsilon,
        default_text=", ".join(
            f"{kind}: {kind_default(kind, 'label_dp.epsilon'):g}"
            for kind in ("logistic", "multiclass", "secureboost")
        )
        + f"; linear, poisson: {kind_default('linear', 'label_dp.epsilon'):g} with "
        "--label-low/--label-high, without them inf must be given",
        help="ε of label DP on the Host's labels (randomized response; regression: "
        "Laplace on the clipped labels), per label for the whole run; inf = off.",
    ),
    "seed": row("--seed", type=int, field=(JobConfig, "seed"), help="Seed of the training RNG."),
    "model": row(
        "--model",
        "model_kind",
        type=click.Choice(list(MODEL_KINDS)),
        field=(ModelConfig, "kind"),
        help="Model to train: logistic, linear, poisson (one guest), multiclass "
        f"(one-vs-rest; with one guest the separable sigmoid, in batches of {MULTICLASS_BATCH}), "
        "secureboost (gradient-boosted trees; the tree settings below).",
    ),
    "dataset": row(
        "--dataset",
        type=click.Choice(list(DATASETS)),
        default_text="the model's: " + ", ".join(dict.fromkeys(DEFAULT_DATASET.values())),
        help="Bundled demo table (counts: generated Poisson counts with an exposure "
        "column); alone, it also picks the table's model (diabetes: linear, wine and "
        "digits: multiclass, counts: poisson).",
    ),
    "classes": row(
        "--classes",
        type=click.IntRange(2),
        default_text="the bundled table's",
        help="multiclass: number of classes.",
    ),
    "label_low": row(
        "--label-low",
        type=float,
        help="linear/poisson: lower clipping bound of the Laplace label mechanism.",
    ),
    "label_high": row(
        "--label-high",
        type=float,
        help="linear/poisson: upper clipping bound of the Laplace label mechanism "
        "(regression needs both bounds, or --label-epsilon inf for no label DP).",
    ),
    "obfuscation": row(
        "--obfuscation",
        type=click.Choice(["standard", "djn"]),
        field=(JobConfig, "obfuscation"),
        help="Paillier obfuscation: standard r^n, or DJN's faster short-exponent h_s^a "
        "(an extra hardness assumption; see docs/performance.md).",
    ),
    "timeout": row(
        "--timeout",
        type=click.FloatRange(min=0.1),
        field=(JobConfig, "timeout_seconds"),
        help="Seconds any party waits for a peer before failing.",
    ),
}
"""Options `init vfl` and `vfl run-local` share: the job they write or run."""


def kit_options(func: F) -> F:
    """Options shared by `init vfl` and `vfl run-local`."""
    func = boost_options(func)  # listed after the options above
    return pick(KIT, *KIT)(func)


def build_job(base: JobConfig | None, **opts: Any) -> JobConfig:
    """A job from a file (or the demo defaults) with command-line overrides applied."""
    from privfl.runs.kits import demo_job

    boost = pop_boost_options(opts)
    allow = opts["allow_weak_keys"] or (base.allow_weak_keys if base else False)
    bits = opts["key_bits"] or (base.key_bits if base else default_of(JobConfig, "key_bits"))
    check_key_bits(bits, allow)
    dataset = opts.get("dataset")
    kind = opts.get("model_kind") or (base.model.kind if base else None)
    kind = kind or (DATASET_TASK[dataset] if dataset else "logistic")  # a table's own model
    if dataset is None:
        dataset = DEFAULT_DATASET[kind] if opts.get("model_kind") or not base else base.data.dataset
    if base is None or opts["guests"] is not None or dataset != base.data.dataset:
        template = demo_job(
            guests=opts["guests"] or DEMO_GUESTS,
            key_bits=bits,
            allow_weak_keys=allow,
            host=opts.get("host") or "127.0.0.1",
            base_port=opts.get("base_port"),
            dataset=dataset,
        )
        if base is not None:
            template = replace(base, parties=template.parties, data=template.data)
        base = template
    base = with_model(base, kind, dataset, **opts)
    base = replace(base, model=with_boost(base.model, boost))
    job = replace(base, key_bits=bits, allow_weak_keys=allow)
    if opts["epochs"] is not None:
        job = with_overrides(job, epochs=opts["epochs"])
    if opts["seed"] is not None:
        job = replace(job, seed=opts["seed"])
    if opts.get("obfuscation") is not None:
        job = replace(job, obfuscation=opts["obfuscation"])
    if opts["timeout"] is not None:
        job = replace(job, timeout_seconds=opts["timeout"])
    warn_shared(job)
    warn_unprotected(job)
    return job


def warn_unprotected(job: JobConfig) -> None:
    """One line on stderr when a regression job has no label DP (ε = inf): what a guest
    that spends its gradient requests on its residuals reads, and how to turn it on."""
    kind = job.model.kind
    if kind in UNPROTECTED_READS and not math.isfinite(job.label_dp.epsilon):
        click.echo(
            f"privfl: {kind} regression without label DP (ε = inf): a deviating guest reads "
            f"{UNPROTECTED_READS[kind]} (docs/security.md). Give the labels' public bounds "
            f"with --label-low/--label-high (label ε {kind_default(kind, 'label_dp.epsilon'):g} "
            "then, or --label-epsilon) instead of ε = inf wherever a guest might deviate.",
            err=True,
        )


def warn_shared(job: JobConfig) -> None:
    """One line on stderr when a SecureBoost job shares its instance space with the guests."""
    if "instance_space" in kind_named(job.model.kind).reads and (
        job.model.instance_space == "shared"
    ):
        from privfl.parties.vertical.secureboost.report import SHARED_READS

        click.echo(f"privfl: instance_space = shared: {SHARED_READS}", err=True)


def with_model(base: JobConfig, kind: str, table: str, **opts: Any) -> JobConfig:
    """The job's ``[model]`` and dataset from --model/--dataset/--classes/--label-*.

    Multiclass takes its class count from the bundled table unless given. Regression
    takes label DP at its default ε once --label-low/--label-high give bounds; without
    them the job is refused (config.vertical.unbounded_regression) unless it says
    ``--label-epsilon inf``, or its job file ``label_dp.epsilon = inf``.
    """
    # the kind's own defaults (SecureBoost's label ε and min_child_weight); one validated
    # replace at the end, once the kind's other settings (bounds, classes) are in place
    tables = kind_tables(base, kind)
    model = tables["model"]
    reads = kind_named(kind).reads
    training = tables.get("training", base.training)
    if "classes" in reads:
        classes = opts.get("classes") or model.classes or demo_classes(table)
        model = replace(model, classes=classes)
        from privfl.learning.glm import glm_of

        if training.batch_size == 0 and glm_of(replace(base, model=model)).separable:
            # the separable residual is the logistic gradient: full batch converges slowly
            training = replace(training, batch_size=MULTICLASS_BATCH)
    if opts.get("label_low") is not None or opts.get("label_high") is not None:
        low = opts.get("label_low")
        high = opts.get("label_high")
        model = replace(
            model,
            label_low=model.label_low if low is None else low,
            label_high=model.label_high if high is None else high,
        )
    if "exposure" in reads and table == "counts":  # the demo table's own column
        model = replace(model, exposure="exposure")
    label_dp = tables.get("label_dp", base.label_dp)
    if opts.get("label_epsilon") is not None:
        label_dp = replace(label_dp, epsilon=opts["label_epsilon"])
    data = replace(base.data, dataset=table)
    done = {"model": model, "label_dp": label_dp, "data": data, "training": training}
    return replace(base, **{**tables, **done})


def demo_classes(dataset: str) -> int:
    """Classes of a bundled table's labels (public demo data)."""
    from privfl.data.views import bundled

    labels = bundled(dataset)[2]
    return len(set(labels.tolist()))


WORKERS = row(
    "--workers",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Processes for Paillier obfuscations and Xᵀ[[d]] (Host, Guest); 0 = one per core. "
    "Server: decryption workers with 2 or more (0, 1: in its own process).",
)
"""Each party's --workers; run-local passes its own to every party it starts."""


@vfl.command("run-local")
@job_option("Job file to take settings from (ports and keys are made fresh).", required=False)
@kit_options
@out_option("Run directory.", default_text="runs/<timestamp>")
@no_progress_option
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the interrupted run in --out (same kit, same ports) from the last epoch "
    "every party has a checkpoint of; the job is OUT/kit/job.toml. Of the options above only "
    "--timeout (this machine's patience, not part of the job's fingerprint) may be given; "
    "the others would change the job and are refused.",
)
@host_overwrite_option
@pick({"workers": WORKERS}, "workers")
@friendly_errors
def run_local_cmd(
    job_file: Path | None,
    out: Path | None,
    no_progress: bool,
    resume: bool,
    overwrite: bool,
    workers: int,
    **opts: Any,
) -> None:
    """Run the Server, the Host and every Guest as separate processes on this machine.

    With no options: the label-DP report's demo — sklearn's breast cancer data, Host columns
    0-9 + label, Guest columns 10-29, a 75/25 split (seed 0), 30 epochs, 2048-bit
    Paillier keys, label DP at the model's default ε (--label-epsilon). The parties talk
    over CURVE-encrypted ZeroMQ on loopback with fresh keys. Outputs: OUT/summary.json
    and one folder per party. On a bundled table it then fits the centralised references
    (sklearn; xgboost too for SecureBoost, when importable), prints them and records them
    in summary.json. The printed wall time is the whole command's, start-up and key
    generation included.

    \b
    Examples:
      privfl vfl run-local
      privfl vfl run-local --guests 2 --label-epsilon 2 --epochs 10
      privfl vfl run-local --key-bits 512 --allow-weak-keys --epochs 3   # quick trial
      privfl vfl run-local --model secureboost --trees 3 --depth 2
      privfl vfl run-local --out runs/a --resume   # continue an interrupted run
      privfl vfl run-local --out runs/a --overwrite   # replace the run in runs/a
    """
    from privfl.parties.session import run_dir_default
    from privfl.runs.clock import process_started
    from privfl.runs.kits import relocate
    from privfl.runs.launcher import run_local
    from privfl.runs.outdir import claim
    from privfl.runs.references import demo_references
    from privfl.runs.references import record as record_references

    if resume:
        if out is None:
            raise click.UsageError("--resume needs --out, the run directory to continue")
        job = resumed_job(out, job_file, opts)
    else:
        base = load_job(job_file) if job_file else None
        job = relocate(build_job(base, **opts))
    out = out or run_dir_default()
    claim(out, resume=resume, overwrite=overwrite)
    rounds, unit = kind_of(job).rounds_of(job)
    what = f"{kind_of(job).title}, label ε={job.label_dp.epsilon:g}, up to {rounds} {unit}s"
    click.echo(
        f"privfl: {len(job.guests)} guest(s), {job.key_bits}-bit keys ({job.obfuscation}), "
        f"{what} -> {out}",
        err=True,
    )
    started = process_started()
    summary = run_local(
        job, out, progress=not no_progress, resume=resume, started=started, workers=workers
    )
    # Fitted after the run, so the centralised references never slow the parties down;
    # the wall time is the whole command's, so it counts them too.
    references = demo_references(job)
    record_references(job, out, summary, references, started)
    kind = kind_of(job)
    click.echo(kind.load(kind.report)(summary, references, out))


RESUME_LOCAL = {"timeout": "timeout_seconds"}
"""run-local options --resume applies: site-local job keys, outside the fingerprint, so the
checkpoints still match (LOCAL_JOB_KEYS in privfl/config/vertical.py)."""


def resumed_job(out: Path, job_file: Path | None, opts: dict[str, Any]) -> JobConfig:
    """OUT's kit job with the site-local options given applied (and written back to the kit,
    which every party reads); any other option given is refused, each named, in one line."""
    from click.core import ParameterSource

    from privfl.errors import ConfigError

    ctx = click.get_current_context()
    given = [n for n in opts if ctx.get_parameter_source(n) is not ParameterSource.DEFAULT]
    refused = [n for n in given if n not in RESUME_LOCAL] + (["job_file"] if job_file else [])
    if refused:
        flags = {p.name: p.opts[0] for p in ctx.command.params}
        named = ", ".join(flags.get(n, n) for n in refused)
        raise ConfigError(
            f"--resume continues the run in {out} with its own job ({out / 'kit' / 'job.toml'}); "
            f"{named} would change that job: drop {'it' if len(refused) == 1 else 'them'}, or "
            "start a new run without --resume (only --timeout may change on a resume)"
        )
    path = out / "kit" / "job.toml"
    job = load_job(path)
    changes = {RESUME_LOCAL[n]: opts[n] for n in given}
    if changes:
        job = replace(job, **changes)
        save_job(job, path)
        shown = ", ".join(f"{key} = {value:g}" for key, value in changes.items())
        click.echo(f"privfl: resuming with {shown} (written to {path})", err=True)
    return job


def host_line(party: str, result: dict[str, Any], out: Path) -> str:
    """The Host's one-line result after `privfl vfl host`: its kind's report metrics."""
    kind = kind_named(result.get("model", {}).get("kind", DEFAULT_KIND))
    shown = ", ".join(f"{NAMES.get(m, m)} {fmt(result.get(m))}" for m in kind.report_metrics)
    return f"{party}: {kind.name}: {shown}; outputs in {out}"


NAMES = {"f1": "F1", "auc": "AUC"}


PARTY = {
    "data": row(
        "--data",
        "data_file",
        type=click.Path(path_type=Path),
        default_text="the party's share of the bundled demo data, or `data` in the job file",
        help="CSV with a header row. With --id-column, rows are matched by id (private set "
        "intersection); without, rows must be in the same order at every party.",
    ),
    "id_column": row(
        "--id-column",
        default_text="the job file's",
        help="Column of record ids; only ids every party holds are used.",
    ),
    "label_column": row(
        "--label-column", default_text="the job file's, else label", help="The label column."
    ),
    "features": row(
        "--features",
        help="Feature columns to use, as a,b,c.",
        default_text="every column but the id and the Host's label",
    ),
    "workers": WORKERS,
    "engine": row(
        "--engine",
        type=click.Choice(ENGINES),
        default=POOL.kind,
        show_default=True,
        help="Where this party's --workers run: processes on this machine, its site's own "
        "Ray cluster (pip install 'privfl[ray]'; every node this institution's), or 'cuda': "
        "obfuscators and decryptions on this machine's GPU (pip install 'privfl[cuda]').",
    ),
    "ray_address": row(
        "--ray-address",
        default_text="a cluster of this machine alone",
        help="With --engine ray: 'auto' (the cluster this machine joined with `ray start`) or "
        "ray://HEAD:10001.",
    ),
    "ray_private_key": row(
        "--ray-private-key",
        is_flag=True,
        default=False,
        help="With --engine ray, key holder only (GLM Server, SecureBoost Host): also send the "
        "private primes to the cluster's workers for decryptions. Off: they stay on this machine.",
    ),
    "resume": row(
        "--resume",
        is_flag=True,
        default=False,
        help="Continue from the last epoch every party has a checkpoint of (in each --out); "
        "start every party with it.",
    ),
    "no_plots": row(
        "--no-plots",
        is_flag=True,
        default=False,
        help="Draw no training.png or importance.png (metrics.jsonl and summary.json hold "
        "their numbers): a headless site that never opens them saves the plotting.",
    ),
    "redraw_labels": row(
        "--redraw-labels",
        is_flag=True,
        default=False,
        help="Draw the label noise anew instead of reusing this job's draw saved in --out "
        "(start over without --resume). Spends label ε again: summary.json books the sum "
        "over all draws.",
    ),
    "forget_reveals": row(
        "--forget-reveals",
        is_flag=True,
        default=False,
        help="SecureBoost, hidden instance space: start over this job's record of the "
        "decryptions this guest gave the Host (reveal-ledger.jsonl in --out; start over "
        "without --resume), e.g. after the Host drew new labels. The Host may then read one "
        "more candidate set per split node: the record books each such start.",
    ),
}
"""Options of `privfl vfl server|host|guest`; the Host's own (the label) show on its page only."""


def party_options(role: str) -> Callable[[F], F]:
    """The options of one vertical party's command, in ``--help`` order."""
    host = role == "host"
    options = [
        job_option("The job file every party shares (from `privfl init vfl`)."),
        party_option,
        out_option("Output folder for this party.", default_text="runs/<timestamp>/<party>"),
        pick(PARTY, "data", "id_column"),
        pick(PARTY, "label_column", hidden=not host),  # the others ignore it, as before
        pick(PARTY, "features"),
        no_progress_option,
        pick(PARTY, "workers", "engine", "ray_address", "ray_private_key"),
        verbose_option,
        pick(PARTY, "resume"),
        host_overwrite_option if host else overwrite_option,
        policy_option,
        pick(PARTY, "redraw_labels", hidden=not host),  # the others refuse it in words
        pick(PARTY, "no_plots", hidden=not host),  # the others draw nothing anyway
        pick(PARTY, "forget_reveals", hidden=role != "guest"),  # a guest's own record
    ]

    def decorate(func: F) -> F:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def party_command(role: str) -> click.Command:
    """`privfl vfl server|host|guest`: run one party of a kit."""

    @party_options(role)
    @friendly_errors
    def command(
        job_file: Path,
        party: str,
        out: Path | None,
        data_file: Path | None,
        id_column: str | None,
        label_column: str | None,
        features: str | None,
        no_progress: bool,
        workers: int,
        engine: str,
        ray_address: str | None,
        ray_private_key: bool,
        verbose: bool,
        resume: bool,
        overwrite: bool,
        policy_file: Path | None,
        redraw_labels: bool,
        no_plots: bool,
        forget_reveals: bool,
    ) -> None:
        from privfl.cli.governance import book_vertical, draw_book, vertical_gate_telling
        from privfl.parties.session import run_dir_default, setup_logging
        from privfl.parties.vertical.inputs import parse_features, party_inputs
        from privfl.parties.vertical.runner import run_party
        from privfl.parties.vertical.startup import DATA_FAILED, telling_peers
        from privfl.runs.outdir import claim

        job = load_job(job_file)
        spec = job.party(party)
        if spec.role != role:
            raise click.UsageError(f"party {party} is a {spec.role}; run `privfl vfl {spec.role}`")
        if role == "host":  # whose labels a regression job without label DP leaves open
            warn_unprotected(job)
        if redraw_labels and role != "host":
            raise click.UsageError("--redraw-labels is for the host, which draws the label noise")
        if forget_reveals and (role != "guest" or resume):
            raise click.UsageError(
                "--forget-reveals is for a guest starting a job over: drop --resume"
                if role == "guest"
                else "--forget-reveals is for a guest, which keeps the record of its decryptions"
            )
        policy = vertical_gate_telling(job, party, policy_file)  # before data, inbox, messages
        out = out or run_dir_default() / party
        engine_ = Engine(engine, ray_address, ray_private_key)  # before any file is written
        claim(out, resume=resume, overwrite=overwrite)
        setup_logging(out, party, verbose)
        with telling_peers(job, party, out):  # booked when it starts: a crash still counts
            book_vertical(policy, job, party, again=redraw_labels)
        with telling_peers(job, party, out, DATA_FAILED):  # peers hear of it, not its cells
            data, table = party_inputs(
                job, party, data_file, id_column, label_column, parse_features(features)
            )
        hook = observer = None
        close = None
        if role == "host" and not no_progress:
            hook, close = host_progress(job.training.epochs)
        elif not no_progress:
            from privfl.parties.progress import party_progress

            observer, bar = party_progress(role, job.training.epochs)
            close = bar.close
        try:
            result = run_party(
                job,
                party,
                out,
                data=data,
                on_epoch=hook,
                workers=workers,
                engine=engine_,
                table=table,
                resume=resume,
                observer=observer,
                redraw_labels=redraw_labels,
                forget_reveals=forget_reveals,
                min_shared=policy.psi.min_intersection if policy else 0,
                draw_book=draw_book(policy, job, party),
                plots=not no_plots,
            )
        finally:
            if close:
                close()
        if role == "host":
            click.echo(host_line(party, result, out), err=True)

    command.__doc__ = {
        "server": "Run the Server: key holder that decrypts masked values only.",
        "host": "Run the Host: features + labels, label DP, coordination, metrics.",
        "guest": "Run a Guest: feature columns only.",
    }[role]
    return click.command(role)(command)


def host_progress(epochs: int) -> tuple[Callable[[dict[str, Any]], None], Callable[[], None]]:
    """A tqdm bar the Host advances once per epoch, and what closes it (so the result line
    that follows starts on a line of its own, also when training stops early)."""
    from tqdm import tqdm

    bar = tqdm(total=epochs, desc="encrypted training", unit="epoch", file=sys.stderr)

    from privfl.runs.launcher import postfix

    def on_epoch(record: dict[str, Any]) -> None:
        bar.set_postfix(**postfix(record))
        bar.update(1)

    return on_epoch, bar.close


for _role in ("server", "host", "guest"):
    vfl.add_command(party_command(_role))


def site_kit_options(func: F) -> F:
    """`init vfl` options for per-site kits and PSI (defined in privfl.cli.site)."""
    from privfl.cli.site import SITE_OPTIONS

    for option in reversed(SITE_OPTIONS):
        func = option(func)
    return func


@click.command("vfl")
@out_option("Kit folder to write.", required=True)
@kit_options
@click.option("--host", "host_name", default="127.0.0.1", help="Address the parties listen on.")
@click.option(
    "--base-port",
    type=click.IntRange(1024, 65000),
    default=None,
    cls=TableOption,
    shown="free ports now",
    help="First port; parties take consecutive ports.",
)
@site_kit_options
@with_relay_options
@project_option
@overwrite_option
@friendly_errors
def init_vfl(
    out: Path,
    host_name: str,
    base_port: int | None,
    project: str | None,
    overwrite: bool,
    **opts: Any,
) -> None:
    """Write OUT/job.toml and OUT/keys/ for running each party as its own command.

    \b
    Then, in separate terminals (Server first):
      privfl vfl server --job OUT/job.toml --party server --out run/server
      privfl vfl host   --job OUT/job.toml --party host   --out run/host
      privfl vfl guest  --job OUT/job.toml --party guest-1 --out run/guest-1

    With --parties, one folder per site instead (OUT/<site>/job.toml, start.sh):
    each site then makes its own key pair (`privfl keys gen`) and imports its peers'
    public keys; --all-keys-here makes every site's keys here instead (risky: see its
    help). See docs/deploy.md for the walkthrough across machines.

    With --relay, the parties open no port and connect out to `privfl relay` instead
    (start it first: privfl relay --job OUT/job.toml --bind tcp://0.0.0.0:PORT); with
    --parties, OUT/relay/ is the relay's folder.
    """
    from privfl.cli.site import init_sites, pop_site_options
    from privfl.config.relay import RELAY_NAME
    from privfl.runs.kits import key_names, relayed, write_kit
    from privfl.runs.outdir import claim

    site = pop_site_options(opts)
    relay = pop_relay_options(opts)
    claim(out, overwrite=overwrite, can_resume=False)
    job = build_job(None, host=host_name, base_port=base_port, **opts)
    job = replace(job, project=project) if project else job
    if site.parties or site.psi or site.psi_key_bits or site.feature_counts:
        job = init_sites(job, out, site, relay)
        if site.parties:
            return
    else:
        job = relayed(job, *relay)
    path = write_kit(job, out)
    click.echo(f"wrote {path} and {len(key_names(job))} key pairs in {out / job.keys_dir}")
    for name, spec in job.parties.items():
        click.echo(f"  {name:<10} {spec.role:<6} {spec.endpoint or 'through the relay'}")
    if job.relay.endpoint:
        click.echo(f"  {RELAY_NAME:<10} {'':<6} {job.relay.endpoint} (start it first)")


vfl.add_command(predict_cmd)
