"""The ``PDE_*`` environment variables: one check for every service. pydantic-settings ignores a
variable no field reads, so a misspelt one (``PDE_ROBOT_WORKSPACE_MIN`` for ``..._MIN_M``) would
leave its setting at the default without a word. ``pde <command>`` refuses any ``PDE_*`` variable
that is not in ``KNOWN_VARIABLES`` and names the nearest known one.

``KNOWN_VARIABLES`` (pde_contract/environment_names.py) holds every name the project reads, in
every service: a compose stack or an env file may hand one service another's variables, and the
shared ones (``PDE_DATABASE_URL``, ``PDE_DATA_DIR``, ...) are read by several. It is written from
the settings classes by ``python -m pde.environment --write``; tests/contract/test_environment.py
fails when it is out of date, so each setting keeps its one home in its settings class.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, get_args, get_origin, get_type_hints

from pydantic import AliasChoices, BaseModel
from pydantic_settings import BaseSettings

from pde_contract.environment_names import KNOWN_VARIABLES, OPEN_PREFIXES

PREFIX = "PDE_"


class UnknownVariableError(ValueError):
    """``PDE_*`` variables that no setting reads; the message names each and its nearest known name."""

    def __init__(self, unknown: list[UnknownVariable]) -> None:
        self.unknown = unknown
        lines = [f"  {u.name}" + (f": did you mean {u.nearest}?" if u.nearest else "") for u in unknown]
        super().__init__(
            f"{len(unknown)} unknown PDE_* environment variable(s), which no setting reads (each would "
            "be ignored and its setting left at the file's or the default value):\n"
            + "\n".join(lines)
            + "\nrename or unset them (docs/lab-setup.md, section 3, lists where settings come from)"
        )


@dataclass(frozen=True, slots=True)
class UnknownVariable:
    name: str
    nearest: str | None  # the closest known name (difflib), None when none is close


def is_known(
    name: str, known: Iterable[str] = KNOWN_VARIABLES, open_prefixes: Iterable[str] = OPEN_PREFIXES
) -> bool:
    # pydantic-settings matches names case-insensitively (case_sensitive=False, its default).
    upper = name.upper()
    return upper in set(known) or any(upper.startswith(p) for p in open_prefixes)


def unknown_variables(
    environ: Mapping[str, str] | None = None,
    known: Iterable[str] = KNOWN_VARIABLES,
    open_prefixes: Iterable[str] = OPEN_PREFIXES,
) -> list[UnknownVariable]:
    """The ``PDE_*`` variables of ``environ`` (default: this process's) that no setting reads."""
    env = os.environ if environ is None else environ
    names = sorted(known)
    prefixes = tuple(open_prefixes)
    out = []
    for name in sorted(env):
        if not name.upper().startswith(PREFIX) or is_known(name, names, prefixes):
            continue
        close = difflib.get_close_matches(name.upper(), names, n=1, cutoff=0.7)
        out.append(UnknownVariable(name, close[0] if close else None))
    return out


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Raise ``UnknownVariableError`` when ``environ`` holds a ``PDE_*`` variable no setting reads."""
    unknown = unknown_variables(environ)
    if unknown:
        raise UnknownVariableError(unknown)


def settings_variables(cls: type[BaseSettings]) -> tuple[set[str], set[str]]:
    """The environment variables a settings class reads: (names, open prefixes). Nested models
    under ``env_nested_delimiter`` add ``<FIELD>__<SUBFIELD>``; a dict field there takes any key
    (an open prefix ``<FIELD>__``)."""
    config = cls.model_config
    prefix = str(config.get("env_prefix", "")).upper()
    delimiter = config.get("env_nested_delimiter") or ""
    names: set[str] = set()
    open_prefixes: set[str] = set()
    for field_name, field in cls.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            own = {str(c).upper() for c in alias.choices if isinstance(c, str)}
        elif isinstance(alias, str):
            own = {alias.upper()}
        else:
            own = {f"{prefix}{field_name.upper()}"}
        names |= own
        if delimiter:
            for name in own:
                _nested(field.annotation, f"{name}{delimiter.upper()}", delimiter, names, open_prefixes)
    return names, open_prefixes


def _nested(annotation: Any, stem: str, delimiter: str, names: set[str], open_prefixes: set[str]) -> None:
    for t in (annotation, *get_args(annotation)):
        if isinstance(t, type) and issubclass(t, BaseModel):
            fields = {n: f.annotation for n, f in t.model_fields.items()}
        elif isinstance(t, type) and dataclasses.is_dataclass(t):
            hints = get_type_hints(t)
            fields = {f.name: hints[f.name] for f in dataclasses.fields(t)}
        elif t is dict or get_origin(t) is dict:
            open_prefixes.add(stem)
            continue
        else:
            continue
        for sub_name, sub_type in fields.items():
            names.add(f"{stem}{sub_name.upper()}")
            _nested(sub_type, f"{stem}{sub_name.upper()}{delimiter.upper()}", delimiter, names, open_prefixes)
