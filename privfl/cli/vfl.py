"""The ``privfl`` command line: every command calls library functions; exit codes live here."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import click

from privfl.cli.errors import friendly_errors
from privfl.cli.options import (
    job_option,
    no_progress_option,
    out_option,
    party_option,
    verbose_option,
)
from privfl.cli.predict import predict_cmd
from privfl.config.vertical import JobConfig, check_key_bits, load_job, with_overrides

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


@click.group()
def vfl() -> None:
    """Vertical FL: Paillier-encrypted models with label DP (Server, Host, Guests)."""


def kit_options(func: F) -> F:
    """Options shared by `init vfl` and `vfl run-local`."""
    options = [
        click.option(
            "--guests",
            type=click.IntRange(1, 20),
            default=None,
            help="Number of guests; the demo's guest columns are split among them. [1]",
        ),
        click.option(
            "--key-bits",
            type=int,
            default=None,
            help="Paillier modulus size. Below 2048 needs --allow-weak-keys. [2048]",
        ),
        click.option(
            "--allow-weak-keys",
            is_flag=True,
            help="Permit keys under 2048 bits (tests and quick trials only).",
        ),
        click.option("--epochs", type=click.IntRange(1), default=None, help="Maximum epochs. [30]"),
        click.option(
            "--label-epsilon",
            callback=parse_epsilon,
            default=None,
            help="ε of randomized response on the Host's labels; inf = off. [8]",
        ),
        click.option("--seed", type=int, default=None, help="Seed of the training RNG. [0]"),
        click.option(
            "--obfuscation",
            type=click.Choice(["standard", "djn"]),
            default=None,
            help="Paillier obfuscation: standard r^n, or DJN's faster short-exponent h_s^a "
            "(an extra hardness assumption; see docs/performance.md). [standard]",
        ),
        click.option(
            "--timeout",
            type=click.FloatRange(min=0.1),
            default=None,
            help="Seconds any party waits for a peer before failing. [120]",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def build_job(base: JobConfig | None, **opts: Any) -> JobConfig:
    """A job from a file (or the demo defaults) with command-line overrides applied."""
    from privfl.runs.kits import demo_job

    allow = opts["allow_weak_keys"] or (base.allow_weak_keys if base else False)
    bits = opts["key_bits"] or (base.key_bits if base else 2048)
    check_key_bits(bits, allow)
    if base is None or opts["guests"] is not None:
        template = demo_job(
            guests=opts["guests"] or 1,
            key_bits=bits,
            allow_weak_keys=allow,
            host=opts.get("host") or "127.0.0.1",
            base_port=opts.get("base_port"),
        )
        if base is not None:
            template = replace(base, parties=template.parties)
        base = template
    job = replace(base, key_bits=bits, allow_weak_keys=allow)
    if opts["epochs"] is not None:
        job = with_overrides(job, epochs=opts["epochs"])
    if opts["label_epsilon"] is not None:
        job = replace(job, label_dp=replace(job.label_dp, epsilon=opts["label_epsilon"]))
    if opts["seed"] is not None:
        job = replace(job, seed=opts["seed"])
    if opts.get("obfuscation") is not None:
        job = replace(job, obfuscation=opts["obfuscation"])
    if opts["timeout"] is not None:
        job = replace(job, timeout_seconds=opts["timeout"])
    return job


@vfl.command("run-local")
@job_option("Job file to take settings from (ports and keys are made fresh).", required=False)
@kit_options
@out_option("Run directory. [runs/<timestamp>]")
@no_progress_option
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the interrupted run in --out (same kit, same ports) from the last epoch "
    "every party has a checkpoint of; other settings are taken from OUT/kit/job.toml.",
)
@friendly_errors
def run_local_cmd(
    job_file: Path | None, out: Path | None, no_progress: bool, resume: bool, **opts: Any
) -> None:
    """Run the Server, the Host and every Guest as separate processes on this machine.

    With no options: the demo of seed 004 — sklearn's breast cancer data, Host columns
    0-9 + label, Guest columns 10-29, a 75/25 split (seed 0), 30 epochs, 2048-bit
    Paillier keys, label ε = 8. The parties talk over CURVE-encrypted ZeroMQ on
    loopback with fresh keys. Outputs: OUT/summary.json and one folder per party.

    \b
    Examples:
      privfl vfl run-local
      privfl vfl run-local --guests 2 --label-epsilon 2 --epochs 10
      privfl vfl run-local --key-bits 512 --allow-weak-keys --epochs 3   # quick trial
      privfl vfl run-local --out runs/a --resume   # continue an interrupted run
    """
    from privfl.data.views import central_baseline
    from privfl.parties.session import run_dir_default
    from privfl.runs.kits import relocate
    from privfl.runs.launcher import run_local

    if resume:
        if out is None:
            raise click.UsageError("--resume needs --out, the run directory to continue")
        job = load_job(out / "kit" / "job.toml")
    else:
        base = load_job(job_file) if job_file else None
        job = relocate(build_job(base, **opts))
    out = out or run_dir_default()
    what = (
        f"SecureBoost, up to {job.model.trees} trees of depth {job.model.depth}"
        if job.model.kind == "secureboost"
        else f"label ε={job.label_dp.epsilon:g}, up to {job.training.epochs} epochs"
    )
    click.echo(
        f"privfl: {len(job.guests)} guest(s), {job.key_bits}-bit keys ({job.obfuscation}), "
        f"{what} -> {out}",
        err=True,
    )
    summary = run_local(job, out, progress=not no_progress, resume=resume)
    if job.model.kind == "secureboost":
        from privfl.parties.vertical.secureboost.report import results_table as boost_table

        click.echo(boost_table(summary, out))
        return
    baseline = None
    if all(p.columns for p in job.parties.values() if p.role != "server"):
        baseline = central_baseline(job.data.dataset, job.data.test_size, job.data.split_seed)
    click.echo(results_table(summary, baseline, out))


def results_table(summary: dict[str, Any], baseline: float | None, out: Path) -> str:
    """The end-of-run table: joint metrics, bottom models, privacy, where the files are."""

    def fmt(value: Any) -> str:
        return "n/a" if value is None else f"{value:.4f}"

    rows = [
        ("joint accuracy", fmt(summary["accuracy"])),
        ("joint precision", fmt(summary["precision"])),
        ("joint recall", fmt(summary["recall"])),
        ("joint F1", fmt(summary["f1"])),
        ("joint AUC", fmt(summary["auc"])),
        ("host bottom-model accuracy", fmt(summary["bottom_accuracy"]["host"])),
        ("guests bottom-model accuracy", fmt(summary["bottom_accuracy"]["guests_combined"])),
    ]
    if baseline is not None:
        rows.append(("centralised sklearn LR (reference)", fmt(baseline)))
    flip = summary["flip"]
    rows += [
        ("final Taylor loss", fmt(summary["loss_history"][-1])),
        ("epochs", f"{summary['epochs']} ({summary['stop_reason']})"),
        (
            "label ε / flip prob. / flipped",
            f"{summary['label_epsilon']} / {flip['probability']:.4g} / "
            f"{flip['count']} of {flip['rows']}",
        ),
        ("flipped back", str(summary["flipback"]["flipped_back"])),
        ("wall time", f"{summary['wall_seconds']:.1f} s"),
        ("outputs", str(out)),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def party_command(role: str) -> click.Command:
    """`privfl vfl server|host|guest`: run one party of a kit."""

    @job_option("The job file every party shares (from `privfl init vfl`).")
    @party_option
    @out_option("Output folder for this party. [runs/<timestamp>/<party>]")
    @click.option(
        "--data",
        "data_file",
        type=click.Path(path_type=Path),
        default=None,
        help="CSV with a header row. With --id-column, rows are matched by id (private set "
        "intersection); without, rows must be in the same order at every party. Without "
        "--data, the party's share of the bundled demo data (or `data` in the job file).",
    )
    @click.option(
        "--id-column",
        default=None,
        help="Column of record ids; only ids every party holds are used. [job file]",
    )
    @click.option("--label-column", default=None, help="Host only: the label column. [label]")
    @click.option(
        "--features",
        default=None,
        help="Feature columns to use, as a,b,c. [every column but the id and label]",
    )
    @no_progress_option
    @click.option(
        "--workers",
        type=click.IntRange(0),
        default=0,
        help="Processes for Paillier obfuscations and Xᵀ[[d]] (Host, Guest); 0 = one per core. [0]",
    )
    @verbose_option
    @click.option(
        "--resume",
        is_flag=True,
        help="Continue from the last epoch every party has a checkpoint of (in each --out); "
        "start every party with it.",
    )
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
        verbose: bool,
        resume: bool,
    ) -> None:
        from privfl.parties.session import run_dir_default, setup_logging
        from privfl.parties.vertical.inputs import parse_features, party_inputs
        from privfl.parties.vertical.runner import run_party

        job = load_job(job_file)
        spec = job.party(party)
        if spec.role != role:
            raise click.UsageError(f"party {party} is a {spec.role}; run `privfl vfl {spec.role}`")
        out = out or run_dir_default() / party
        setup_logging(out, party, verbose)
        data, table = party_inputs(
            job, party, data_file, id_column, label_column, parse_features(features)
        )
        hook = observer = None
        close = None
        if role == "host" and not no_progress:
            hook = host_progress(job.training.epochs)
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
                table=table,
                resume=resume,
                observer=observer,
            )
        finally:
            if close:
                close()
        if role == "host":
            click.echo(
                f"{party}: accuracy {result['accuracy']:.4f}, F1 {result['f1']:.4f}, "
                f"AUC {result['auc']:.4f}; outputs in {out}",
                err=True,
            )

    command.__doc__ = {
        "server": "Run the Server: key holder that decrypts masked values only.",
        "host": "Run the Host: features + labels, label DP, coordination, metrics.",
        "guest": "Run a Guest: feature columns only.",
    }[role]
    return click.command(role)(command)


def host_progress(epochs: int) -> Callable[[dict[str, Any]], None]:
    """A tqdm bar the Host advances once per epoch."""
    from tqdm import tqdm

    bar = tqdm(total=epochs, desc="encrypted training", unit="epoch", file=sys.stderr)

    def on_epoch(record: dict[str, Any]) -> None:
        bar.set_postfix(loss=f"{record['loss']:.4f}", acc=f"{record['accuracy']:.3f}")
        bar.update(1)

    return on_epoch


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
    help="First port; parties take consecutive ports. [free ports now]",
)
@site_kit_options
@friendly_errors
def init_vfl(out: Path, host_name: str, base_port: int | None, **opts: Any) -> None:
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
    """
    from privfl.cli.site import init_sites, pop_site_options
    from privfl.runs.kits import write_kit

    site = pop_site_options(opts)
    job = build_job(None, host=host_name, base_port=base_port, **opts)
    if site.parties or site.psi or site.psi_key_bits or site.feature_counts:
        job = init_sites(job, out, site)
        if site.parties:
            return
    path = write_kit(job, out)
    click.echo(f"wrote {path} and {len(job.parties)} key pairs in {out / job.keys_dir}")
    for name, spec in job.parties.items():
        click.echo(f"  {name:<10} {spec.role:<6} {spec.endpoint}")


vfl.add_command(predict_cmd)
