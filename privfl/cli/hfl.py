"""`privfl hfl …`: the horizontal mode's commands (torch is imported only when one runs)."""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from privfl.cli.errors import friendly_errors, require_torch
from privfl.cli.governance import policy_option, project_option
from privfl.cli.optable import Row, TableOption, default_of, pick, row
from privfl.cli.options import (
    Group,
    job_option,
    no_progress_option,
    out_option,
    overwrite_option,
    party_option,
    pop_relay_options,
    verbose_option,
    with_relay_options,
)
from privfl.config.horizontal import (
    AGGREGATIONS,
    DATASETS,
    DEVICES,
    LOCAL_DP,
    MECHANISMS,
    PRIVACY_KEYS,
    PRIVATE_DEFAULT,
    HflConfig,
    load_hfl_job,
    with_settings,
)

F = TypeVar("F", bound=Callable[..., Any])


@click.group(cls=Group)
def hfl() -> None:
    """Horizontal FL: PyTorch clients with local DP, FedAvg/FedProx, an optional Shuffler.

    Institutions hold the same columns about different people. Each client trains
    locally, randomizes its report with a local-DP mechanism and sends it to the
    aggregator, directly or through a Shuffler that cannot read it. A privacy
    ledger states ε per weight, per client per round and in total.
    Start with `privfl hfl run-local`.
    """


def setting(*decls: str, help: str, name: str = "", **kwargs: Any) -> Row:
    """A row of :data:`EXPERIMENT`: its default shown from ``HflConfig`` field ``name``
    (else the flag's own name)."""
    name = name or decls[-1].split("/")[0].lstrip("-").replace("-", "_")
    return row(*decls, help=help, field=(HflConfig, name), **kwargs)


SHARE = click.FloatRange(0, 1, min_open=True)  # a probability or fraction in (0, 1]
POSITIVE = click.FloatRange(min=0, min_open=True)

EXPERIMENT = {
    "dataset": setting("--dataset", type=click.Choice(DATASETS), help="Data set."),
    "data_dir": row("--data-dir", help="Folder with the IDX / CIFAR-10 binary files."),
    "clients": setting("--clients", type=click.IntRange(1), help="Logical clients."),
    "rounds": setting("--rounds", type=click.IntRange(1), help="Rounds."),
    "local_epochs": setting(
        "--local-epochs", type=click.IntRange(1), help="Local epochs per round."
    ),
    "lr": setting(
        "--lr",
        type=POSITIVE,
        help=f"SGD learning rate (batch {default_of(HflConfig, 'batch_size')}).",
    ),
    "fraction": setting(
        "--fraction",
        type=SHARE,
        help="K-of-N sample per round.",
    ),
    "participation": setting(
        "--participation",
        type=SHARE,
        help="p: a client joins a round with probability p.",
    ),
    "dropout": setting(
        "--dropout",
        type=click.FloatRange(0, 1, max_open=True),
        help="q: a joined client drops out; β = p(1−q).",
    ),
    "mechanism": setting("--mechanism", type=click.Choice(MECHANISMS), help="Local randomizer."),
    "epsilon": setting(
        "--epsilon",
        type=POSITIVE,
        help="ε per weight (pnpm/duchi/pm) or per client per round (others).",
    ),
    "local_dp": setting(
        "--local-dp",
        type=click.Choice(LOCAL_DP),
        help="Private local training on each client (run-local: dpsgd unless a job file "
        "or --mechanism chooses the privacy; none = no local DP).",
    ),
    "local_noise": setting(
        "--local-noise", type=POSITIVE, help="Noise multiplier z of each local DP-SGD step."
    ),
    "aggregation": setting(
        "--aggregation",
        type=click.Choice(AGGREGATIONS),
        help="How the aggregator combines valid reports (coordinate-wise).",
    ),
    "update_clip": setting(
        "--update-clip",
        type=click.FloatRange(min=0),
        help="none/pnpm: L2 bound of a client's update; 0 = derived from the model.",
    ),
    "delta": setting(
        "--delta",
        type=click.FloatRange(0, 1, min_open=True, max_open=True),
        help="The privacy δ.",
    ),
    "topk_fraction": setting(
        "--topk-fraction",
        type=SHARE,
        help="α of the *-topk mechanisms.",
    ),
    "shuffler": setting(
        "--shuffler/--no-shuffler", help="Route sealed reports through a Shuffler."
    ),
    "fedprox_mu": setting(
        "--fedprox-mu", type=click.FloatRange(min=0), help="FedProx μ (0 = FedAvg)."
    ),
    "iid": row("--iid", is_flag=True, default=False, help="IID split (the default)."),
    "dirichlet": row(
        "--dirichlet",
        type=POSITIVE,
        help="Dirichlet(α) label-skew split (without it: IID).",
    ),
    "device": setting("--device", type=click.Choice(DEVICES), help="auto = CUDA when present."),
    "batched": setting(
        "--batched/--sequential",
        help="Train a round's clients as one stacked computation.",
    ),
    "client_rows": setting(
        "--client-rows",
        type=click.IntRange(min=0),
        help="Population study: each client draws this many rows with replacement "
        "(clients may outnumber the rows); 0 = partition the rows.",
    ),
    "seed": setting("--seed", type=int, help="The job seed."),
    "seeded_noise": row(
        "--seeded-noise",
        is_flag=True,
        help="Research only: noise from the job seed (reproducible, NOT private).",
    ),
    "budget": setting(
        "--budget",
        "epsilon_budget",
        type=POSITIVE,
        help="Stop before the total ε per client would exceed this.",
    ),
    "timeout": setting(
        "--timeout",
        "timeout_seconds",
        type=click.FloatRange(min=0.1),
        help="Longest wait for a silent peer, in s.",
    ),
    "round_timeout": setting(
        "--round-timeout",
        type=click.FloatRange(min=0.1),
        help="A client host later than this, in s, is dropped.",
    ),
}
"""The experiment's settings (`hfl run-local`, `init hfl`); each passes None unless given, so
the job file's (or HflConfig's) value stands, and shows HflConfig's default."""


def experiment_options(func: F) -> F:
    """The experiment's settings; every one defaults to the job file's (or the built-in) value."""
    return pick(EXPERIMENT, *EXPERIMENT)(func)


client_processes_option = click.option(
    "--client-processes",
    type=click.IntRange(1, 64),
    default=2,
    show_default=True,
    help="Client host processes (parties) that share the logical clients.",
)
"""`hfl run-local` and `init hfl`: how many client hosts the job has."""


def build_config(job_file: Path | None, opts: dict[str, Any]) -> HflConfig:
    """The job file's settings (or the defaults) with the command line on top."""
    base = load_hfl_job(job_file).config if job_file else HflConfig()
    iid = opts.pop("iid")
    if iid and opts.get("dirichlet"):
        raise click.UsageError("--iid and --dirichlet exclude each other")
    if iid:
        opts["dirichlet"] = 0.0
    return with_settings(base, **opts)


def private_by_default(job_file: Path | None, opts: dict[str, Any]) -> bool:
    """run-local without a job file or a privacy option runs :data:`PRIVATE_DEFAULT`
    (a setting given on the command line, such as ``--clients``, stays)."""
    if job_file is not None or any(opts.get(key) is not None for key in PRIVACY_KEYS):
        return False
    for key, value in PRIVATE_DEFAULT.items():
        if opts.get(key) is None:
            opts[key] = value
    return True


@hfl.command("run-local")
@job_option("Take settings from this job file.", required=False)
@experiment_options
@client_processes_option
@out_option("Run directory.", default_text="runs/<timestamp>")
@no_progress_option
@overwrite_option
@friendly_errors
def run_local_cmd(
    job_file: Path | None,
    client_processes: int,
    out: Path | None,
    no_progress: bool,
    overwrite: bool,
    **opts: Any,
) -> None:
    """Run the aggregator, the optional Shuffler and the client hosts as processes on this machine.

    Defaults: sklearn's digits, IID clients on 2 client processes, 10 rounds of
    5 local epochs, an MLP with one hidden layer of 256, private: DP-SGD on each of
    10 clients (noise multiplier 1, ε = 19.4 per row; `--local-dp none` for a run
    without privacy, 20 clients unless --clients), a coordinate-wise trimmed mean at
    the aggregator. CURVE-encrypted
    ZeroMQ on loopback with fresh keys. Outputs: OUT/summary.json (accuracy, the
    ε figures, …), OUT/aggregator/{metrics.jsonl,training.png,checkpoint.pt}.

    \b
    Examples:
      privfl hfl run-local
      privfl hfl run-local --local-dp none          # no privacy (ε = ∞)
      privfl hfl run-local --mechanism pnpm --epsilon 1 --clients 100
      privfl hfl run-local --mechanism laplace-topk --epsilon 2 --shuffler
      privfl hfl run-local --mechanism gaussian --epsilon 4 --fraction 0.5 --budget 20
    """
    from privfl.parties.session import run_dir_default
    from privfl.runs.clock import process_started
    from privfl.runs.kits import local_hfl_job
    from privfl.runs.launcher import run_local_hfl
    from privfl.runs.outdir import claim

    require_torch()
    private = private_by_default(job_file, opts)
    config = build_config(job_file, opts)
    out = out or run_dir_default()
    claim(out, overwrite=overwrite, can_resume=False)
    job = local_hfl_job(config, client_processes)
    click.echo(
        f"privfl: {config.clients} clients on {len(job.names('clients'))} process(es), "
        f"{config.dataset}, mechanism {config.mechanism}"
        f"{f', local {config.local_dp}' if config.local_dp != 'none' else ''}, "
        f"{config.rounds} rounds"
        f"{', via a Shuffler' if config.shuffler else ''} -> {out}",
        err=True,
    )
    if private:
        click.echo(
            f"privfl: private by default: DP-SGD on every client (noise multiplier "
            f"{config.local_noise:g}, clip {config.local_clip:g}, {config.clients} clients); "
            "--local-dp none runs without privacy",
            err=True,
        )
    summary = run_local_hfl(job, out, progress=not no_progress, started=process_started())
    click.echo(results(summary, out))


def results(summary: dict[str, Any], out: Path) -> str:
    """Accuracy, rounds, time and the privacy ledger, one fact per line."""
    rows = [
        ("test accuracy", f"{summary['accuracy']:.4f}"),
        ("test loss", f"{summary['loss']:.4f}"),
        ("rounds", f"{summary['rounds']} ({summary['stop_reason']})"),
        (
            "reports in the last round",
            str(summary["reports_history"][-1] if summary["reports_history"] else 0),
        ),
        ("privacy", str(summary.get("privacy", ""))),
        ("wall time", f"{summary['wall_seconds']:.1f} s"),
        ("outputs", str(out)),
    ]
    if summary.get("warning"):
        rows.insert(1, ("WARNING", str(summary["warning"])))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    return "\n".join([*lines, "privacy ledger:", *(f"  {line}" for line in summary["ledger"])])


def role_command(role: str) -> click.Command:
    """`privfl hfl aggregator|client|shuffler --job FILE --party NAME`."""

    @job_option("The shared job file (`privfl init hfl`).")
    @party_option
    @out_option("Output folder.", default_text="runs/<timestamp>/<party>")
    # Only the aggregator draws a bar; the others accept the flag unlisted, so that one
    # start line (runs/launcher.py) serves every role.
    @click.option(
        "--no-progress", is_flag=True, hidden=role != "aggregator", help="No progress bar."
    )
    @click.option(
        "--no-plots",
        is_flag=True,
        hidden=role != "aggregator",  # the others draw nothing anyway
        help="Draw no training.png (metrics.jsonl and summary.json hold its numbers): a "
        "headless site that never opens it saves the plotting.",
    )
    @click.option(
        "--slow",
        type=click.FloatRange(min=0),
        default=0.0,
        hidden=True,
        help="Test aid: delay each report.",
    )
    @verbose_option
    @overwrite_option
    @policy_option
    @friendly_errors
    def command(
        job_file: Path,
        party: str,
        out: Path | None,
        no_progress: bool,
        no_plots: bool,
        slow: float,
        verbose: bool,
        overwrite: bool,
        policy_file: Path | None,
    ) -> None:
        from privfl.cli.governance import book_hfl, hfl_gate
        from privfl.parties.session import run_dir_default, setup_logging
        from privfl.runs.outdir import claim

        job = load_hfl_job(job_file)
        spec = job.party(party)
        wanted = {"aggregator": "aggregator", "client": "clients", "shuffler": "shuffler"}[role]
        if spec.role != wanted:
            raise click.UsageError(
                f"party {party} is a {spec.role}; run the matching `privfl hfl` command"
            )
        if role != "shuffler":  # the Shuffler forwards sealed bytes: no torch
            require_torch()
        policy = hfl_gate(job, party, policy_file)  # before any data, socket or message
        out = out or run_dir_default() / party
        claim(out, overwrite=overwrite, can_resume=False)
        setup_logging(out, party, verbose)
        book_hfl(policy, job, party)  # booked when it starts: a crash still counts
        if role == "aggregator":
            from privfl.parties.horizontal.aggregator import run_aggregator

            hook = None if no_progress else round_progress(job.config.rounds)
            summary = run_aggregator(job, party, out, hook, plots=not no_plots)
            click.echo(results(summary, out), err=True)
        elif role == "client":
            from privfl.parties.horizontal.client import run_client_host

            run_client_host(job, party, out, slow_seconds=slow)
        else:
            from privfl.parties.horizontal.shuffler import run_shuffler

            run_shuffler(job, party, out)

    command.__doc__ = {
        "aggregator": "Run the aggregator: opens rounds, averages reports, keeps the ledger.",
        "client": "Run a client host: trains and randomizes its clients; connects out only.",
        "shuffler": "Run the Shuffler: collects sealed reports, pads, permutes, forwards.",
    }[role]
    return click.command(role)(command)


def round_progress(rounds: int) -> Callable[[dict[str, Any]], None]:
    from tqdm import tqdm

    bar = tqdm(total=rounds, desc="federated rounds", unit="round", file=sys.stderr)

    def hook(record: dict[str, Any]) -> None:
        bar.set_postfix(acc=f"{record['accuracy']:.3f}", eps=record["epsilon_total"])
        bar.update(1)

    return hook


for _role in ("aggregator", "client", "shuffler"):
    hfl.add_command(role_command(_role))


@click.command("hfl")
@out_option("Kit folder to write.", required=True)
@job_option("Take settings from this job file.", required=False)
@experiment_options
@client_processes_option
@with_relay_options
@project_option
@overwrite_option
@friendly_errors
def init_cmd(
    out: Path,
    job_file: Path | None,
    client_processes: int,
    project: str | None,
    overwrite: bool,
    **opts: Any,
) -> None:
    """Write OUT/job.toml and CURVE keys for running each party as its own command.

    \b
    Then (aggregator first; endpoints are in the job file):
      privfl hfl aggregator --job OUT/job.toml --party aggregator
      privfl hfl client     --job OUT/job.toml --party clients-1

    With --relay, the parties open no port and connect out to `privfl relay` instead
    (start it first: privfl relay --job OUT/job.toml --bind tcp://0.0.0.0:PORT).
    """
    from privfl.config.relay import RELAY_NAME
    from privfl.runs.kits import key_names, local_hfl_job, relayed, write_kit
    from privfl.runs.outdir import claim

    relay = pop_relay_options(opts)
    claim(out, overwrite=overwrite, can_resume=False)
    if click.get_current_context().info_name == "init":
        click.echo("privfl: `privfl hfl init` is an alias of `privfl init hfl`", err=True)

    job = local_hfl_job(build_config(job_file, opts), client_processes)
    project = project or (load_hfl_job(job_file).project if job_file else "")
    job = relayed(dataclasses.replace(job, project=project), *relay)
    path = write_kit(job, out)
    click.echo(f"wrote {path} and {len(key_names(job))} key pairs")
    for name, spec in job.parties.items():
        where = spec.endpoint or ("through the relay" if spec.via else "connects out")
        if spec.role == "clients":
            where += f"; clients {spec.first_client}..{spec.first_client + spec.num_clients - 1}"
        click.echo(f"  {name:<12} {spec.role:<10} {where}")
    if job.relay.endpoint:
        click.echo(f"  {RELAY_NAME:<12} {'':<10} {job.relay.endpoint} (start it first)")


hfl.add_command(init_cmd, "init")  # the old spelling; `privfl init hfl` is the command


@hfl.command("compare")
@click.option(
    "--mechanisms", default="pnpm,duchi,pm,gaussian", show_default=True, help="Comma-separated."
)
@click.option("--epsilons", default="0.5,1,2", show_default=True, help="Comma-separated ε values.")
@click.option(
    "--clients",
    "client_counts",
    default="10,100",
    show_default=True,
    help="Comma-separated client counts.",
)
@click.option("--rounds", type=click.IntRange(1), default=10, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    cls=TableOption,
    shown="runs/<timestamp>/results-hfl.md",
    help="Markdown file to write (--out docs/results-hfl.md refreshes the repository's table).",
)
@friendly_errors
def compare_cmd(
    mechanisms: str, epsilons: str, client_counts: str, rounds: int, seed: int, out: Path | None
) -> None:
    """Run every mechanism × ε × client count in-process on digits and write a Markdown table.

    The runs use the same round functions as the networked roles, without sockets. The
    table goes to a fresh run directory unless --out names a file, so a first try never
    overwrites the measured table in docs/.
    """
    from privfl.parties.session import run_dir_default
    from privfl.tools.experiments.compare import compare

    try:
        mechs = [m.strip() for m in mechanisms.split(",") if m.strip()]
        eps = [float(e) for e in epsilons.split(",")]
        counts = [int(c) for c in client_counts.split(",")]
    except ValueError as exc:
        raise click.BadParameter(f"comma-separated numbers expected: {exc}") from exc
    bad = [m for m in mechs if m not in MECHANISMS]
    if bad or any(not (e > 0 and math.isfinite(e)) for e in eps) or any(c < 1 for c in counts):
        raise click.BadParameter(f"mechanisms from {', '.join(MECHANISMS)}; ε > 0; clients >= 1")
    text = compare(mechs, eps, counts, rounds, seed, progress=True)
    out = out or run_dir_default() / "results-hfl.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    click.echo(text)
    click.echo(f"privfl: wrote {out}", err=True)
    click.echo(f"wrote {out}", err=True)
