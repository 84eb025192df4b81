"""What every repository shares: the backend (a write engine, a read engine, the media folder) and
the conversions between stored values and rows."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from pde_storage import db
from pde_storage.errors import InvalidArgumentError, NotFoundError, StoredValueError
from pde_storage.models import Task


def utc_now() -> datetime:
    return datetime.now(UTC)


def as_utc(t: datetime) -> datetime:
    # SQLite hands back naive datetimes; everything stored is UTC.
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def as_utc_opt(t: datetime | None) -> datetime | None:
    return None if t is None else as_utc(t)


def json_safe(value: Any) -> Any:
    """JSON columns: numpy scalars become Python numbers and NaN/inf become null (PostgreSQL's
    JSON type refuses NaN, and SQLite would store text no JSON parser reads back)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


WordT = TypeVar("WordT", bound=StrEnum)


def choice(what: str, value: str, words: type[WordT], allowed: Iterable[WordT] | None = None) -> WordT:
    """An argument (the word or the member) as a member of ``words``; anything else, or a member
    not ``allowed``, is refused with the choices."""
    allowed = tuple(words if allowed is None else allowed)
    if value not in allowed:
        raise InvalidArgumentError(f"{what} {value!r} is not one of {', '.join(allowed)}")
    return words(value)


def choices(what: str, values: str | Iterable[str] | None, words: type[WordT]) -> list[WordT] | None:
    """A filter argument (one word, several, or None: no filter) as members of ``words``."""
    if values is None:
        return None
    return [choice(what, v, words) for v in ([values] if isinstance(values, str) else values)]


def stored(words: type[WordT], value: str, column: str, row_id: int) -> WordT:
    """A word read from ``column`` of row ``row_id`` as a member of ``words``. One this version does
    not know raises here, naming the column, rather than reaching code that branches on it."""
    try:
        return words(value)
    except ValueError:
        raise StoredValueError(
            f"{column} of row {row_id} holds {value!r}, not a value of {words.__name__} "
            f"({', '.join(words)}): a newer version of PDE wrote it, or someone edited the row; "
            "run the newer version, or correct the row"
        ) from None


class Backend:
    """The database (one engine for writes, one for reads) and the media folder of one Store.

    Writes take SQLite's lock at BEGIN; reads never block writers (WAL)."""

    def __init__(self, url: str, media_dir: str | Path, *, migrate: bool = True) -> None:
        self.url = db.normalise_url(url)
        self.media_dir = Path(media_dir).resolve()
        self.media_dir.mkdir(parents=True, exist_ok=True)
        self.write_engine: Engine = db.make_engine(self.url, immediate=True)
        self.read_engine: Engine = db.make_engine(self.url)
        if migrate:
            db.upgrade(self.write_engine)

    def close(self) -> None:
        self.write_engine.dispose()
        self.read_engine.dispose()

    @contextmanager
    def write(self) -> Iterator[Session]:
        """One write transaction (committed on leaving, rolled back on an exception)."""
        with Session(self.write_engine, expire_on_commit=False) as s, s.begin():
            yield s

    @contextmanager
    def read(self) -> Iterator[Session]:
        with Session(self.read_engine, expire_on_commit=False) as s, s.begin():
            yield s


class Repository:
    """Base of the per-aggregate repositories: each method is one short transaction on the
    backend and returns plain rows (``pde_storage.rows``), never ORM objects."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    @property
    def media_dir(self) -> Path:
        return self.backend.media_dir

    def _write(self) -> AbstractContextManager[Session]:
        return self.backend.write()

    def _read(self) -> AbstractContextManager[Session]:
        return self.backend.read()

    @staticmethod
    def _task(s: Session, name: str, *, lock: bool = False) -> Task:
        """The task row by name (every aggregate refers to tasks by name)."""
        q = select(Task).where(Task.name == name)
        if lock:
            q = q.with_for_update()
        t = s.scalars(q).first()
        if t is None:
            known = ", ".join(s.scalars(select(Task.name).order_by(Task.name))) or "none yet"
            raise NotFoundError(f"unknown task {name!r} (known: {known}); create it with ensure_task")
        return t
