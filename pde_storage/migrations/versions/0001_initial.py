"""initial schema: tasks, prompts, episodes, chunks, labels, checkpoints, supervisor calls,
metrics, operator intents, service states

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _ts(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("canonical_prompt", sa.Text, nullable=False),
        _ts("created_at"),
        sa.Column("stage", sa.String(20), nullable=False),
        sa.Column("iteration", sa.Integer, nullable=False),
        sa.Column("alpha", sa.Float, nullable=False),
        sa.Column("ema_success", sa.Float, nullable=True),
        _ts("updated_at"),
    )
    op.create_table(
        "prompts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("task_id", sa.Integer, sa.ForeignKey("tasks.id"), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("source", sa.String(20), nullable=False),
        sa.Column("iteration", sa.Integer, nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        _ts("created_at"),
        _ts("updated_at"),
        sa.UniqueConstraint("task_id", "text", name="uq_prompts_task_text"),
    )
    op.create_index("ix_prompts_task_id", "prompts", ["task_id"])
    op.create_table(
        "episodes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("task_id", sa.Integer, sa.ForeignKey("tasks.id"), nullable=False),
        sa.Column("prompt_id", sa.Integer, sa.ForeignKey("prompts.id"), nullable=False),
        sa.Column("rollout_prompt", sa.Text, nullable=False),
        sa.Column("canonical_prompt", sa.Text, nullable=False),
        sa.Column("policy_version", sa.Integer, nullable=False),
        sa.Column("stage", sa.String(20), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("seed", sa.Integer, nullable=True),
        sa.Column("success", sa.Boolean, nullable=True),
        _ts("created_at"),
        _ts("finished_at", nullable=True),
        _ts("labelled_at", nullable=True),
        sa.Column("file_path", sa.Text, nullable=False),
        sa.Column("video_paths", sa.JSON, nullable=False),
        sa.Column("n_chunks", sa.Integer, nullable=False),
        sa.Column("abort_reason", sa.Text, nullable=False),
    )
    op.create_index("ix_episodes_prompt_id", "episodes", ["prompt_id"])
    op.create_index("ix_episodes_task_status", "episodes", ["task_id", "status"])
    op.create_table(
        "chunks",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("episode_id", sa.Integer, sa.ForeignKey("episodes.id"), nullable=False),
        sa.Column("index", sa.Integer, nullable=False),
        sa.Column("observation_time_s", sa.Float, nullable=False),
        sa.Column("n_steps", sa.Integer, nullable=False),
        sa.Column("inference_s", sa.Float, nullable=True),
        sa.Column("sent_time_s", sa.Float, nullable=True),
        sa.UniqueConstraint("episode_id", "index", name="uq_chunks_episode_index"),
    )
    op.create_index("ix_chunks_episode_id", "chunks", ["episode_id"])
    op.create_table(
        "labels",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("episode_id", sa.Integer, sa.ForeignKey("episodes.id"), nullable=False),
        sa.Column("success", sa.Boolean, nullable=False),
        sa.Column("source", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        _ts("created_at"),
    )
    op.create_index("ix_labels_episode_id", "labels", ["episode_id"])
    op.create_table(
        "checkpoints",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("version", sa.Integer, nullable=False, unique=True),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("metrics", sa.JSON, nullable=False),
        _ts("created_at"),
    )
    op.create_table(
        "supervisor_calls",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("prompt_tokens", sa.Integer, nullable=False),
        sa.Column("completion_tokens", sa.Integer, nullable=False),
        sa.Column("cost_usd", sa.Float, nullable=False),
        sa.Column("latency_s", sa.Float, nullable=False),
        sa.Column("ok", sa.Boolean, nullable=False),
        sa.Column("error", sa.Text, nullable=False),
        _ts("created_at"),
    )
    op.create_table(
        "metrics",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("value", sa.Float, nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        _ts("created_at"),
    )
    op.create_index("ix_metrics_name_step", "metrics", ["name", "step"])
    op.create_table(
        "intents",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
        _ts("created_at"),
        _ts("consumed_at", nullable=True),
    )
    op.create_index("ix_intents_kind_consumed", "intents", ["kind", "consumed_at"])
    op.create_table(
        "service_states",
        sa.Column("name", sa.String(60), primary_key=True),
        sa.Column("state", sa.JSON, nullable=False),
        _ts("updated_at"),
    )


def downgrade() -> None:
    for table in (
        "service_states",
        "intents",
        "metrics",
        "supervisor_calls",
        "checkpoints",
        "labels",
        "chunks",
        "episodes",
        "prompts",
        "tasks",
    ):
        op.drop_table(table)
