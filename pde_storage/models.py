"""SQLAlchemy 2 ORM models. The schema itself is created only by the Alembic migrations in
``pde_storage/migrations`` (a test checks that models and migrations agree)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# The largest id a row can have in every supported database: the id columns are ``Integer``,
# PostgreSQL's 32-bit INTEGER (SQLite's holds 64 bits). A larger number sent to PostgreSQL is an
# out-of-range error, not "no such row": callers that take ids from outside check this first.
ROW_ID_MAX = 2**31 - 1


class Base(DeclarativeBase):
    pass


class Task(Base):
    __tablename__ = "tasks"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    canonical_prompt: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # PDE state (Algorithm 1): "bootstrap" (prompt-posterior search, policy frozen) or "rl".
    stage: Mapped[str] = mapped_column(String(20), default="bootstrap")
    iteration: Mapped[int] = mapped_column(Integer, default=0)
    alpha: Mapped[float] = mapped_column(Float, default=1.0)
    ema_success: Mapped[float | None] = mapped_column(Float, nullable=True)
    # N, rollouts per prompt in the bootstrap stage: written by the episode loop (its setting is
    # the one home of N), read by the supervisor, which judges a candidate after N labels.
    rollouts_per_prompt: Mapped[int | None] = mapped_column(Integer, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Prompt(Base):
    __tablename__ = "prompts"
    __table_args__ = (UniqueConstraint("task_id", "text", name="uq_prompts_task_text"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"), index=True)
    text: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(20))  # canonical | candidate | pool | rejected
    source: Mapped[str] = mapped_column(String(20))  # canonical | vlm | offline | operator
    iteration: Mapped[int] = mapped_column(Integer, default=0)
    summary: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Episode(Base):
    __tablename__ = "episodes"
    __table_args__ = (Index("ix_episodes_task_status", "task_id", "status"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"))
    prompt_id: Mapped[int] = mapped_column(ForeignKey("prompts.id"), index=True)
    # Texts are copied so an episode still says what was run if a prompt row is later edited.
    rollout_prompt: Mapped[str] = mapped_column(Text)
    canonical_prompt: Mapped[str] = mapped_column(Text)
    policy_version: Mapped[int] = mapped_column(Integer)
    stage: Mapped[str] = mapped_column(String(20))
    # running | awaiting_label | labelled | aborted | discarded
    status: Mapped[str] = mapped_column(String(20))
    seed: Mapped[int | None] = mapped_column(Integer, nullable=True)
    success: Mapped[bool | None] = mapped_column(Boolean, nullable=True)  # latest authoritative label
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    labelled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Relative to the store's media_dir, so a database can move with its media folder.
    file_path: Mapped[str] = mapped_column(Text, default="")
    video_paths: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    n_chunks: Mapped[int] = mapped_column(Integer, default=0)
    abort_reason: Mapped[str] = mapped_column(Text, default="")
    # Discarded by the operator (bad reset, someone in the scene): kept with its labels, excluded
    # from training and statistics; restoring it puts back status_before_discard.
    discarded_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    discard_reason: Mapped[str] = mapped_column(Text, default="", server_default="")
    status_before_discard: Mapped[str] = mapped_column(String(20), default="", server_default="")
    note: Mapped[str] = mapped_column(Text, default="", server_default="")
    # A person's takeovers during the episode (EpisodeFile.interventions) and the rows they
    # commanded, written with the episode file (0 without any, and for episodes from before).
    n_interventions: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    n_person_rows: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class ChunkRow(Base):
    """Per-chunk timing; the arrays themselves stay in the episode file."""

    __tablename__ = "chunks"
    __table_args__ = (UniqueConstraint("episode_id", "index", name="uq_chunks_episode_index"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    episode_id: Mapped[int] = mapped_column(ForeignKey("episodes.id"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    observation_time_s: Mapped[float] = mapped_column(Float)
    n_steps: Mapped[int] = mapped_column(Integer)
    inference_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    sent_time_s: Mapped[float | None] = mapped_column(Float, nullable=True)


class Label(Base):
    __tablename__ = "labels"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    episode_id: Mapped[int] = mapped_column(ForeignKey("episodes.id"), index=True)
    success: Mapped[bool] = mapped_column(Boolean)
    source: Mapped[str] = mapped_column(String(20))  # operator | simulator | vlm
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # Who gave an operator label (the name set once per browser on the page); "" otherwise.
    operator: Mapped[str] = mapped_column(String(100), default="", server_default="")


class Checkpoint(Base):
    __tablename__ = "checkpoints"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer, unique=True)
    path: Mapped[str] = mapped_column(Text)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # Set when the loop's retention removed the file: the row keeps the version's metrics, and
    # says that ``path`` no longer exists.
    pruned_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class SupervisorCall(Base):
    __tablename__ = "supervisor_calls"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(40))
    model: Mapped[str] = mapped_column(String(200))
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    completion_tokens: Mapped[int] = mapped_column(Integer)
    cost_usd: Mapped[float] = mapped_column(Float)
    latency_s: Mapped[float] = mapped_column(Float)
    ok: Mapped[bool] = mapped_column(Boolean)
    error: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Metric(Base):
    __tablename__ = "metrics"
    __table_args__ = (Index("ix_metrics_name_step", "name", "step"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    value: Mapped[float] = mapped_column(Float)
    step: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Intent(Base):
    """An operator's request to a service (e.g. "start_episode" from the page to the loop)."""

    __tablename__ = "intents"
    __table_args__ = (Index("ix_intents_kind_consumed", "kind", "consumed_at"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(40))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    consumed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Why a reader could not take it (an unknown kind, a malformed payload); such a row is
    # consumed, so nobody retries it, and kept to be seen.
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class ServiceState(Base):
    """Each service's last heartbeat and what it is doing (for the page's health panel)."""

    __tablename__ = "service_states"
    name: Mapped[str] = mapped_column(String(60), primary_key=True)
    state: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
