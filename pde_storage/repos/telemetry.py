"""Checkpoints, supervisor calls and metrics: the telemetry aggregate (append-only logs)."""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select

from pde_storage.errors import ConflictError, InvalidArgumentError, NotFoundError
from pde_storage.models import Checkpoint, Metric, SupervisorCall
from pde_storage.repos.base import Repository, as_utc, as_utc_opt, json_safe, utc_now
from pde_storage.rows import CheckpointRow, SupervisorCallRow

# The resume point's place in a checkpoint row's metrics column (where it always was; rows from
# before CheckpointRow.trained_through_episode_id read the same).
_TRAINED_THROUGH_KEY = "trained_through_episode_id"


class TelemetryRepository(Repository):
    """Policy checkpoints (versions only go up), the supervisor's VLM calls (tokens, cost,
    latency) and named metric series."""

    def add_checkpoint(
        self,
        version: int,
        path: str | Path,
        metrics: dict[str, Any] | None = None,
        trained_through_episode_id: int | None = None,
    ) -> CheckpointRow:
        stored = dict(metrics or {})
        if trained_through_episode_id is not None:
            stored[_TRAINED_THROUGH_KEY] = int(trained_through_episode_id)
        with self._write() as s:
            if s.scalars(select(Checkpoint).where(Checkpoint.version == version)).first() is not None:
                raise ConflictError(f"checkpoint version {version} already exists; versions only go up")
            c = Checkpoint(
                version=int(version),
                path=str(path),
                metrics=json_safe(stored),
                created_at=utc_now(),
            )
            s.add(c)
        return self._checkpoint_row(c)

    def latest_checkpoint(self) -> CheckpointRow | None:
        with self._read() as s:
            c = s.scalars(select(Checkpoint).order_by(Checkpoint.version.desc()).limit(1)).first()
            return None if c is None else self._checkpoint_row(c)

    def checkpoints(self) -> list[CheckpointRow]:
        """Every version, oldest first, the pruned ones too (``pruned_at`` set: no file)."""
        with self._read() as s:
            return [
                self._checkpoint_row(c) for c in s.scalars(select(Checkpoint).order_by(Checkpoint.version))
            ]

    def mark_checkpoint_pruned(self, version: int) -> CheckpointRow:
        """Record that ``version``'s file was removed; its row and metrics stay. Marking twice keeps
        the first time (a retention pass that died before removing the file marks it again)."""
        with self._write() as s:
            c = s.scalars(select(Checkpoint).where(Checkpoint.version == version)).first()
            if c is None:
                raise NotFoundError(f"no checkpoint version {version} in the database")
            if c.pruned_at is None:
                c.pruned_at = utc_now()
            s.flush()
            return self._checkpoint_row(c)

    @staticmethod
    def _checkpoint_row(c: Checkpoint) -> CheckpointRow:
        metrics = dict(c.metrics)
        through = metrics.pop(_TRAINED_THROUGH_KEY, None)
        return CheckpointRow(
            c.version,
            c.path,
            metrics,
            as_utc(c.created_at),
            as_utc_opt(c.pruned_at),
            trained_through_episode_id=None if through is None else int(through),
        )

    def record_supervisor_call(
        self,
        kind: str,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
        cost_usd: float,
        latency_s: float,
        ok: bool,
        error: str = "",
    ) -> SupervisorCallRow:
        with self._write() as s:
            c = SupervisorCall(
                kind=kind,
                model=model,
                prompt_tokens=int(prompt_tokens),
                completion_tokens=int(completion_tokens),
                cost_usd=float(cost_usd),
                latency_s=float(latency_s),
                ok=bool(ok),
                error=error,
                created_at=utc_now(),
            )
            s.add(c)
            s.flush()
            return self._call_row(c)

    @staticmethod
    def _call_row(c: SupervisorCall) -> SupervisorCallRow:
        return SupervisorCallRow(
            c.id,
            c.kind,
            c.model,
            c.prompt_tokens,
            c.completion_tokens,
            c.cost_usd,
            c.latency_s,
            c.ok,
            c.error,
            as_utc(c.created_at),
        )

    def supervisor_calls(self, limit: int = 100) -> list[SupervisorCallRow]:
        with self._read() as s:
            q = select(SupervisorCall).order_by(SupervisorCall.id.desc()).limit(limit)
            return [self._call_row(c) for c in s.scalars(q)]

    def add_metric(self, name: str, value: float, step: int) -> None:
        value = float(value)
        if not math.isfinite(value):
            raise InvalidArgumentError(f"metric {name!r}: value {value} is not finite")
        with self._write() as s:
            s.add(Metric(name=name, value=value, step=int(step), created_at=utc_now()))

    def metrics(self, name: str) -> list[tuple[int, float, datetime]]:
        with self._read() as s:
            q = select(Metric).where(Metric.name == name).order_by(Metric.step, Metric.id)
            return [(m.step, m.value, as_utc(m.created_at)) for m in s.scalars(q)]

    def metric_names(self) -> list[str]:
        with self._read() as s:
            return list(s.scalars(select(Metric.name).distinct().order_by(Metric.name)))
