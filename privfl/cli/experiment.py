"""`privfl experiment NAME`: reproduce one source paper's tables and figures."""

from __future__ import annotations

from pathlib import Path

import click

from privfl.cli.errors import friendly_errors
from privfl.tools.experiments.catalog import names, run_named
from privfl.tools.experiments.registry import Settings

HELP = """Reproduce a source paper's experiment; write results.csv, PNG plots and report.md.

The papers are named in docs/guide.md ("The source papers").

\b
NAME is one of:
  vfl-epsilon     label-DP report, test 1: accuracy vs label-DP ε (real encrypted runs)
  vfl-lambda      label-DP report, test 2: accuracy vs λ at ε = 4
  vfl-flipback    flipback on/off at each ε
  vfl-models      linear, Poisson, multiclass, SecureBoost vs sklearn / xgboost
  hfl-mechanisms  PNPM paper: PNPM vs Duchi vs PM vs Gaussian by clients and ε
  hfl-nbafl       NbAFL (Wei et al.): loss vs ε, C, N, T, K
  hfl-shuffle     shuffle-model patent: SFD-RSS vs SFD-RAS vs DP-FedAvg vs LDP-FedAvg
  dpsgd-fsdp      FSDP paper: DP-SGD vs FSDP at ε = 2, 4, 8
  all             every experiment above, one folder each

\b
Examples:
  privfl experiment vfl-epsilon --quick
  privfl experiment all --out runs/experiments
  privfl experiment dpsgd-fsdp --data-dir ~/data/mnist   # MNIST IDX files

--quick runs a small grid (10-25 s each in CI on 2 cores; vfl-epsilon took
30 s on a 2-core machine at load 9); without it the full grid runs (1 to 25
minutes each, about an hour for all eight; docs/results.md). Digits is the
default dataset; the hfl-* and dpsgd-fsdp experiments switch to MNIST when
--data-dir is given.
"""


@click.command("experiment", help=HELP)
@click.argument("name")
@click.option("--quick", is_flag=True, help="Small grid for CI and a first look.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("runs/experiments"),
    show_default=True,
    help="Parent folder; each experiment writes OUT/NAME/.",
)
@click.option("--data-dir", default="", help="Folder with MNIST IDX files (optional).")
@click.option("--seed", default=0, show_default=True, help="Random seed of the run.")
@friendly_errors
def experiment(name: str, quick: bool, out: Path, data_dir: str, seed: int) -> None:
    todo = names() if name == "all" else [name]
    if name != "all" and name not in names():
        raise click.UsageError(
            f"unknown experiment {name!r}; choose one of: {', '.join(names())}, all"
        )
    if data_dir and not Path(data_dir).is_dir():
        raise click.UsageError(f"--data-dir {data_dir} is not a folder")
    settings = Settings(quick=quick, data_dir=data_dir, seed=seed)
    for n in todo:
        click.echo(f"running {n}{' (quick)' if quick else ''} …")
        report = run_named(n, out / n, settings)
        click.echo(f"  wrote {report.parent}/ (results.csv, report.md, plots)")
