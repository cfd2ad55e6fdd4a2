"""``privfl board``: serve a read-only page over this site's run folders (docs/deploy.md §12)."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

import click

from privfl.cli.errors import friendly_errors
from privfl.cli.governance import policy_option
from privfl.cli.optable import TableOption
from privfl.errors import ConfigError

DEFAULT_DIRS = (Path("runs"), Path("run"))
DEFAULT_BIND = "127.0.0.1:8765"
TOKEN_ENV = "PRIVFL_BOARD_TOKEN"
NO_EXTRA = "privfl board needs its web server: pip install 'privfl[board]' (starlette, uvicorn)"


@click.command()
@click.argument("run_dirs", nargs=-1, type=click.Path(path_type=Path))
@policy_option
@click.option(
    "--bind",
    default=DEFAULT_BIND,
    show_default=True,
    help="HOST:PORT to listen on (port 0: any free port). An address other than the "
    "loopback needs --token.",
)
@click.option(
    "--token",
    envvar=TOKEN_ENV,
    default=None,
    cls=TableOption,
    shown=f"${TOKEN_ENV}; required off the loopback",
    help="A secret every request must carry (Authorization: Bearer, or ?token= once).",
)
@friendly_errors
def board(
    run_dirs: tuple[Path, ...], policy_file: Path | None, bind: str, token: str | None
) -> None:
    """Serve a read-only web page over RUN_DIRS: runs, live progress, ε ledger, audit.

    RUN_DIRS: run folders (a run-local --out or a party's --out), or folders holding
    them; default ./runs and ./run. The page reads only run outputs (summaries,
    metrics, party and audit logs, plots, kit/job.toml), never data, keys or
    checkpoints. The ledger comes from the site policy (--policy, as `privfl site
    budget`). Stop it with Ctrl-C.
    """
    roots = list(run_dirs) or [d for d in DEFAULT_DIRS if d.is_dir()]
    missing = [str(d) for d in roots if not d.is_dir()]
    if not roots or missing:
        named = ", ".join(missing) or "./runs or ./run"
        raise ConfigError(f"no run folder at {named}: pass the folders that hold your runs")
    host, port = parse_bind(bind)
    loopback = is_loopback(host)
    if not loopback and not token:
        raise ConfigError(
            f"serving {host} (not the loopback) needs --token or ${TOKEN_ENV}, "
            "or bind 127.0.0.1 behind the site's reverse proxy (docs/deploy.md §12)"
        )
    try:
        import uvicorn

        from privfl.tools.board.app import Board, create_app
    except ModuleNotFoundError as exc:
        raise ConfigError(NO_EXTRA) from exc
    app = create_app(Board(roots, policy_file, token, loopback))
    sock = listen(host, port)
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"privfl board: http://{shown}:{sock.getsockname()[1]}/", nl=True)
    if token:
        click.echo("privfl board: every request needs the token (open the page with ?token=…)")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


def parse_bind(bind: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) as a host and a port number."""
    host, sep, port = bind.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"--bind {bind!r}: give HOST:PORT, e.g. {DEFAULT_BIND}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``; one line when the address is taken or foreign."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(64)
    return sock
