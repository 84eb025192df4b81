"""The names of a run's curves, in one home: the loop, PPO and SFT write them (the store's metrics,
TensorBoard tags, Weights & Biases keys), the page and ``pde report`` read them. A name is built
here, never spelled at its use, so a rename cannot split a curve in two.

Also the record a run keeps of each labelled episode (``RunEpisode``, one JSON line each in the
run's folder), from which ``pde report`` builds its per-prompt table and video links without the
database."""

from __future__ import annotations

from enum import StrEnum

import msgspec

from pde_contract.records import PromptSource


class TaskCurve(StrEnum):
    """Per-task curves the loop writes after each label (x: labelled episodes so far)."""

    CANONICAL_SUCCESS = "canonical_success"
    """the canonical prompt's success over its last CANONICAL_SUCCESS_WINDOW labelled episodes"""
    ALPHA = "alpha"
    POOL_SIZE = "pool_size"
    CANDIDATES = "candidates"
    """candidate prompts awaiting their rollouts"""
    REJECTED = "rejected"
    ADMISSION_RATE = "admission_rate"
    """pool / (pool + rejected): the share of judged candidates the pool admitted"""
    EPISODE_S = "episode_s"
    """the labelled episode's wall time, start to end"""
    EMA_START = "ema_start"
    ALPHA_WINDOW_EPISODES = "alpha_window_episodes"
    ALPHA_WINDOW_SUCCESS = "alpha_window_success"


def task_metric(task: str, curve: TaskCurve) -> str:
    return f"{task}/{curve.value}"


def prompt_success_metric(task: str, prompt_id: int) -> str:
    """A prompt's success over its labelled episodes (every stage)."""
    return f"{task}/prompt_success/{prompt_id}"


def source_success_metric(task: str, source: PromptSource) -> str:
    """Success over the labelled episodes of the task's prompts written by ``source``."""
    return f"{task}/source_success/{source.value}"


PPO_PREFIX = "ppo/"
"""Every PPO statistic (learner/trainer.py: pg_loss, v_loss, approx_kl, clipfrac, the w0 and
prompt-ratio statistics, stale_lag_*) as ``ppo/<name>``, x = the policy version it made."""


def ppo_metric(stat: str) -> str:
    return f"{PPO_PREFIX}{stat}"


PPO_UPDATE_S = ppo_metric("update_s")
"""The PPO update's own time (learner/trainer.py: re-evaluation, epochs, minibatches)."""
PPO_UPDATE_WALL_S = ppo_metric("update_wall_s")
"""The whole update as the loop waited for it: trainer start to checkpoint saved."""


class SftCurve(StrEnum):
    """SFT's curves, x = optimiser step."""

    LOSS = "sft/loss"
    STEP_S = "sft/step_s"
    LEARNING_RATE = "sft/learning_rate"


class RunEpisode(msgspec.Struct, frozen=True, kw_only=True):
    """One labelled episode of a loop run, as ``<run>/episodes.jsonl`` keeps it."""

    id: int
    task: str
    prompt_id: int
    prompt: str
    prompt_source: PromptSource
    stage: str
    policy_version: int
    success: bool
    episode_s: float
    labelled_step: int
    """labelled episodes in the store when this one was labelled (the curves' x)"""
    videos: dict[str, str] = msgspec.field(default_factory=dict)
    """camera -> absolute mp4 path"""


RUN_EPISODES_FILE = "episodes.jsonl"
