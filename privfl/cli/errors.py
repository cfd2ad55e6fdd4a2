"""How every command reports failure: one line on stderr, a non-zero exit, never a traceback."""

from __future__ import annotations

import functools
import importlib.util
import logging
import sys
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import click

from privfl.errors import ConfigError, PrivflError

F = TypeVar("F", bound=Callable[..., Any])
EXIT_ERROR = 1
EXIT_INTERNAL = 70
NO_TORCH = (
    "the horizontal mode needs PyTorch, which this install lacks: "
    "pip install torch==2.13.0 && pip install 'privfl[hfl]' (CPU build; a plain "
    "`pip install torch` pulls the CUDA build)"
)


def missing_torch(exc: BaseException) -> bool:
    """True when ``exc`` is torch (or one of its modules) not being installed."""
    return isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "torch"


def require_torch() -> None:
    """Refuse a horizontal command in one line, before it writes anything, when torch is absent."""
    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(NO_TORCH)


def friendly_errors(func: F) -> F:
    """Turn our errors into one line on stderr and a non-zero exit; never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except PrivflError as exc:
            if not getattr(exc, "shown", False):  # a party shows a start-up error at once
                click.echo(f"privfl: error: {exc}", err=True)
            sys.exit(EXIT_ERROR)
        except KeyboardInterrupt:
            click.echo("privfl: interrupted", err=True)
            sys.exit(130)
        except click.ClickException:
            raise  # usage errors: click prints them with the usage line
        except Exception as exc:
            if missing_torch(exc):  # a lean install ran a horizontal command
                click.echo(f"privfl: error: {NO_TORCH}", err=True)
                sys.exit(EXIT_ERROR)
            logging.getLogger("privfl").error("internal error\n%s", traceback.format_exc())
            click.echo(
                f"privfl: internal error: {type(exc).__name__}: {exc} "
                "(the party log has the traceback; please report it)",
                err=True,
            )
            sys.exit(EXIT_INTERNAL)

    wrapper.friendly_errors = True  # type: ignore[attr-defined]  # checked by tests/cli
    return wrapper  # type: ignore[return-value]
