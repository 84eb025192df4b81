"""Intents and service states: the tables the services pass messages through (the intents'
messages are in ``pde_contract.intents``, the states' in ``pde_contract.service_state``)."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select

from pde_contract.intents import (
    INTENT_KINDS,
    IntentError,
    IntentT,
    decode_intent,
    encode_intent,
    intent_type,
    kind_of,
)
from pde_storage.models import Intent, ServiceState
from pde_storage.repos.base import Repository, as_utc, as_utc_opt, json_safe, utc_now
from pde_storage.rows import FailedIntentRow, IntentRow, ServiceStateRow

log = logging.getLogger("pde.storage")


def _failed_row(i: Intent) -> FailedIntentRow:
    return FailedIntentRow(i.id, i.kind, dict(i.payload or {}), i.error or "", as_utc(i.created_at))


def _mark_failed(i: Intent, why: str) -> None:
    i.consumed_at, i.error = utc_now(), why
    log.error("intent #%d (%s) failed, nobody will take it: %s", i.id, i.kind, why)


def _decoded(i: Intent, kind: type[IntentT]) -> IntentRow[IntentT] | str:
    """The row as ``kind``, or why it is not one."""
    try:
        intent = decode_intent(i.kind, dict(i.payload or {}), kind)
    except IntentError as e:
        return str(e)
    return IntentRow(i.id, intent, as_utc(i.created_at), as_utc_opt(i.consumed_at))


class IntentRepository(Repository):
    """Intents: one-shot requests (the page's Start and Abort, the loop's "prompt rollouts
    done"), each consumed by exactly one reader, which names the message type it takes. A row
    that does not read as its type is marked failed with why (consumed, kept, logged), never
    handed out nor dropped silently. Service states: each service's latest self-report
    (heartbeat, phase, switches such as the run control), one row per name."""

    def add_intent(self, intent: IntentT) -> IntentRow[IntentT]:
        kind, payload = encode_intent(intent)
        with self._write() as s:
            i = Intent(kind=kind, payload=json_safe(payload), created_at=utc_now(), consumed_at=None)
            s.add(i)
            s.flush()
            return IntentRow(i.id, intent, as_utc(i.created_at))

    def pending_intents(self, kind: type[IntentT]) -> list[IntentRow[IntentT]]:
        """The pending intents of ``kind``, oldest first: a read (no write lock per poll), and a
        write only to mark failed a row that does not read as ``kind``."""
        with self._read() as s:
            q = select(Intent).where(Intent.kind == kind_of(kind), Intent.consumed_at.is_(None))
            decoded = [(i.id, _decoded(i, kind)) for i in s.scalars(q.order_by(Intent.id))]
        bad = {iid: why for iid, why in decoded if isinstance(why, str)}
        if bad:
            with self._write() as s:
                q = select(Intent).where(Intent.id.in_(bad), Intent.consumed_at.is_(None))
                for i in s.scalars(q.with_for_update()):
                    _mark_failed(i, bad[i.id])
        return [row for _, row in decoded if not isinstance(row, str)]

    def take_intent(self, kind: type[IntentT]) -> IntentRow[IntentT] | None:
        """Consume the oldest pending intent of ``kind`` (exactly one consumer gets it); rows on
        the way that do not read as ``kind`` are marked failed."""
        q = (
            select(Intent)
            .where(Intent.kind == kind_of(kind), Intent.consumed_at.is_(None))
            .order_by(Intent.id)
            .limit(1)
            .with_for_update(skip_locked=True)
        )
        with self._write() as s:
            while (i := s.scalars(q).first()) is not None:
                row = _decoded(i, kind)
                if isinstance(row, str):
                    _mark_failed(i, row)
                    s.flush()  # the next query must not see it pending
                    continue
                i.consumed_at = utc_now()
                return IntentRow(row.id, row.intent, row.created_at, as_utc(i.consumed_at))
            return None

    def discard_intents(self, kind: type[IntentT]) -> int:
        """Mark every pending intent of ``kind`` consumed (e.g. stale clicks from before a restart)."""
        with self._write() as s:
            q = (
                select(Intent)
                .where(Intent.kind == kind_of(kind), Intent.consumed_at.is_(None))
                .with_for_update()
            )
            items = list(s.scalars(q))
            now = utc_now()
            for i in items:
                i.consumed_at = now
            return len(items)

    def fail_unknown_intents(self) -> list[FailedIntentRow]:
        """Mark failed the pending intents of a kind no reader of this version takes (written by
        another version, or by hand), so none waits unseen for ever."""
        with self._write() as s:
            q = select(Intent).where(Intent.kind.not_in(list(INTENT_KINDS)), Intent.consumed_at.is_(None))
            items = list(s.scalars(q.with_for_update()))
            for i in items:
                try:
                    intent_type(i.kind)
                except IntentError as e:
                    _mark_failed(i, str(e))
            s.flush()
            return [_failed_row(i) for i in items]

    def failed_intents(self, limit: int = 100) -> list[FailedIntentRow]:
        """Intents no reader could take, newest first, with why."""
        with self._read() as s:
            q = select(Intent).where(Intent.error.is_not(None)).order_by(Intent.id.desc()).limit(limit)
            return [_failed_row(i) for i in s.scalars(q)]

    def set_service_state(self, name: str, state: dict[str, Any]) -> None:
        with self._write() as s:
            row = s.get(ServiceState, name, with_for_update=True)
            if row is None:
                s.add(ServiceState(name=name, state=json_safe(dict(state)), updated_at=utc_now()))
            else:
                row.state, row.updated_at = json_safe(dict(state)), utc_now()

    def service_states(self) -> dict[str, ServiceStateRow]:
        with self._read() as s:
            return {
                r.name: ServiceStateRow(r.name, dict(r.state or {}), as_utc(r.updated_at))
                for r in s.scalars(select(ServiceState).order_by(ServiceState.name))
            }
