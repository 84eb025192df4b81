"""Intents and service states: the tables the services pass messages through (the kinds are
in ``pde_storage.intents``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from pde_storage.models import Intent, ServiceState
from pde_storage.repos.base import Repository, as_utc, as_utc_opt, json_safe, utc_now
from pde_storage.rows import IntentRow, ServiceStateRow


class IntentRepository(Repository):
    """Intents: one-shot requests (the page's Start and Abort, the loop's "prompt rollouts
    done"), each consumed by exactly one reader. Service states: each service's latest
    self-report (heartbeat, phase, switches such as the run control), one row per name."""

    @staticmethod
    def _intent_row(i: Intent) -> IntentRow:
        return IntentRow(i.id, i.kind, dict(i.payload or {}), as_utc(i.created_at), as_utc_opt(i.consumed_at))

    def add_intent(self, kind: str, payload: dict[str, Any] | None = None) -> IntentRow:
        with self._write() as s:
            i = Intent(
                kind=kind, payload=json_safe(dict(payload or {})), created_at=utc_now(), consumed_at=None
            )
            s.add(i)
            s.flush()
            return self._intent_row(i)

    def pending_intents(self, kind: str) -> list[IntentRow]:
        with self._read() as s:
            q = select(Intent).where(Intent.kind == kind, Intent.consumed_at.is_(None)).order_by(Intent.id)
            return [self._intent_row(i) for i in s.scalars(q)]

    def take_intent(self, kind: str) -> IntentRow | None:
        """Consume the oldest pending intent of ``kind`` (exactly one consumer gets it)."""
        with self._write() as s:
            q = (
                select(Intent)
                .where(Intent.kind == kind, Intent.consumed_at.is_(None))
                .order_by(Intent.id)
                .limit(1)
                .with_for_update(skip_locked=True)
            )
            i = s.scalars(q).first()
            if i is None:
                return None
            i.consumed_at = utc_now()
            return self._intent_row(i)

    def discard_intents(self, kind: str) -> int:
        """Mark every pending intent of ``kind`` consumed (e.g. stale clicks from before a restart)."""
        with self._write() as s:
            q = select(Intent).where(Intent.kind == kind, Intent.consumed_at.is_(None)).with_for_update()
            items = list(s.scalars(q))
            now = utc_now()
            for i in items:
                i.consumed_at = now
            return len(items)

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
