"""Job-file tables checked against the config dataclasses: one line per mistake, naming the key.

Both modes build their settings here, so a typo, a wrongly typed value or a missing
key reads the same in ``job.toml`` of either mode: ``training.epoch is not a key of
[training]; did you mean training.epochs?``. The schema is the dataclasses themselves
(field names, annotations, defaults): nothing here repeats a key.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from collections.abc import Iterable
from typing import Any, TypeVar

from privfl.errors import ConfigError

T = TypeVar("T")
# Fields set by the loader, never read from the file (the party's name is its table's key).
NOT_IN_FILE = frozenset({"source", "name"})
_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def suggest(key: str, known: Iterable[str], where: str = "") -> str:
    """``; did you mean training.epochs?`` for the closest known key, else the known keys."""
    options = sorted(known)
    close = difflib.get_close_matches(key, options, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {dotted(where, close[0])}?"
    return f"; the known keys are {', '.join(options)}"


def dotted(where: str, key: str) -> str:
    """``training.epochs`` (or ``session`` at the top level)."""
    return f"{where}.{key}" if where else key


def check_keys(table: dict[str, Any], known: Iterable[str], where: str) -> None:
    """Refuse a key (or table) the schema does not have, suggesting the closest one."""
    known = list(known)
    for key in table:
        if key not in known:
            what = "table" if isinstance(table[key], dict) else "key"
            place = f"[{where}]" if where else "the job file"
            raise ConfigError(
                f"unknown {what} {dotted(where, key)} in {place}{suggest(key, known, where)}"
            )


def require_table(value: Any, where: str) -> dict[str, Any]:
    """``value`` if it is a TOML table, else a ConfigError naming ``where``."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a table ([{where}]), not {describe(value)}")
    return value


def describe(value: Any) -> str:
    """A short, user-facing name of a TOML value's type, with the value."""
    kinds = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return f"{kinds.get(type(value), type(value).__name__)} ({value!r})"


def build(cls: type[T], table: Any, where: str, **given: Any) -> T:
    """An instance of the dataclass ``cls`` from a TOML table at ``where``.

    Every key must be a field (else a did-you-mean), every value of the field's type
    (ints for floats are fine, ``"inf"`` for ±∞ too); fields without a default must be
    present. ``given`` are fields the loader sets itself (a party's name).
    """
    table = require_table(table, where)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in NOT_IN_FILE}  # type: ignore[arg-type]
    check_keys(table, fields, where)
    hints = typing.get_type_hints(cls)
    values = dict(given)
    for name, field in fields.items():
        if name in given:
            continue
        if name in table:
            values[name] = convert(table[name], hints[name], dotted(where, name))
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            place = f"[{where}]" if where else "the job file"
            raise ConfigError(f"{dotted(where, name)} is missing; {place} must set it")
    return cls(**values)


def convert(value: Any, hint: Any, key: str) -> Any:
    """``value`` as the annotated type ``hint``; a ConfigError naming ``key`` if it is not."""
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        if not isinstance(value, list):
            raise ConfigError(f"{key} must be a list of {plural(item)}, not {describe(value)}")
        return tuple(convert(v, item, f"{key}[{i}]") for i, v in enumerate(value))
    if hint is float and value in ("inf", "-inf"):
        return math.inf if value == "inf" else -math.inf
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in _TYPE_NAMES and type(value) is hint:
        return value
    if hint in _TYPE_NAMES:
        raise ConfigError(f"{key} must be {_TYPE_NAMES[hint]}, not {describe(value)}")
    raise ConfigError(f"{key} cannot be read from a job file")  # pragma: no cover


def plural(hint: Any) -> str:
    """``integers`` for ``int``: the items of a list."""
    return {int: "integers", str: "strings", float: "numbers"}.get(hint, "values")
