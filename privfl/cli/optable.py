"""The options table: each flag's type, help and shown default declared once.

A row's shown default is read from the config dataclass field the option sets, never
written a second time; options that pass ``None`` (so that a job file's value stands)
still show that default, in click's own ``[default: X]`` style. Each command picks the
rows its role uses (:func:`pick`), so no page lists an option its role refuses.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


class TableOption(click.Option):
    """An option whose ``[default: X]`` shows what applies when it is not given.

    The option itself may pass ``None`` (a job file's value, else the config's, then
    applies); ``shown`` is that value in words, rendered where click renders defaults.
    """

    def __init__(self, *decls: Any, shown: str = "", **kwargs: Any) -> None:
        super().__init__(*decls, **kwargs)
        self.shown = shown

    def get_help_extra(self, ctx: click.Context) -> Any:
        extra = super().get_help_extra(ctx)
        if self.shown:
            extra["default"] = self.shown
        return extra


def default_of(config: type, name: str) -> Any:
    """The default of field ``name`` of the dataclass ``config``."""
    for item in dataclasses.fields(config):
        if item.name == name:
            if item.default is not dataclasses.MISSING:
                return item.default
            if item.default_factory is not dataclasses.MISSING:
                return item.default_factory()
    raise KeyError(f"{config.__name__} has no field {name!r}")


def shown(value: Any, decls: tuple[str, ...] = ()) -> str:
    """A default as help shows it: ``inf``; ``batched`` for ``--batched/--sequential``."""
    if isinstance(value, bool):
        pair = next((d for d in decls if "/" in d), "")
        if pair:
            on, off = pair.split("/")
            return (on if value else off).lstrip("-")
        return ""
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:g}"
    return str(value)


@dataclasses.dataclass(frozen=True)
class Row:
    """One option: click's declarations and arguments, its help, where its default lives."""

    decls: tuple[str, ...]
    help: str
    field: tuple[type, str] | None = None  # (config dataclass, field): the default shown
    default_text: str = ""  # else: what applies without the option, in words
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def option(self, hidden: bool = False) -> Callable[[F], F]:
        """The click decorator of this row (``hidden``: accepted, but not listed)."""
        text = self.default_text
        if self.field is not None:
            text = shown(default_of(*self.field), self.decls)
        kwargs = {"default": None, **self.kwargs, "hidden": hidden}
        return click.option(*self.decls, cls=TableOption, shown=text, help=self.help, **kwargs)


def row(
    *decls: str,
    help: str,
    field: tuple[type, str] | None = None,
    default_text: str = "",
    **kwargs: Any,
) -> Row:
    """A table row; ``kwargs`` go to :func:`click.option` (``default`` is None unless given)."""
    return Row(decls, help, field, default_text, kwargs)


def pick(table: Mapping[str, Row], *names: str, hidden: bool = False) -> Callable[[F], F]:
    """A decorator adding the rows ``names`` of ``table``, shown in ``--help`` in that order.

    ``hidden``: accepted but not listed, for an option another role owns that this one
    still parses (to refuse it in words, or because one start line serves every role).
    """

    def decorate(func: F) -> F:
        for name in reversed(names):
            func = table[name].option(hidden)(func)
        return func

    return decorate
