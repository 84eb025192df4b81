"""Settings of the episode loop (env prefix PDE_LOOP_; the shared PDE_DATABASE_URL, PDE_DATA_DIR
and PDE_ROBOT_CMD_ENDPOINT are read too)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, PrivateAttr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from learner.checkpoint_files import Retention
from learner.device import check_device_spec
from learner.mixture import AlphaSchedule
from learner.policies.pi05_options import Trainable
from learner.policies.registry import DEFAULT_POLICY
from learner.policy_args import check_policy_args, pi05_options
from learner.ppo_config import PPOConfig
from pde_contract.settings import (
    data_dir_field,
    database_url_field,
    robot_cmd_endpoint_field,
    tasks_file_field,
    wandb_project_field,
)
from pde_contract.tasks import HEADLINE_TASKS, TaskCatalogue, load_tasks

_ALPHA = AlphaSchedule()  # the one home of the alpha schedule's defaults
_RETENTION = Retention()  # the one home of the checkpoint retention's defaults
# Settings that were the loop's own before PPOConfig was nested (ppo): a clear error, not a silent no-op.
_MOVED_TO_PPO = ("ratio_variant", "learning_rate", "value_learning_rate", "noise_learning_rate")


class LoopSettings(BaseSettings):
    # env_nested_delimiter: PDE_LOOP_PPO__CLIP_COEF sets ppo.clip_coef; "null" is None there.
    model_config = SettingsConfigDict(
        env_prefix="PDE_LOOP_", env_nested_delimiter="__", env_parse_none_str="null", populate_by_name=True
    )

    database_url: str = database_url_field("PDE_LOOP_")
    """SQLAlchemy URL of the shared database (sqlite:///... or postgresql+psycopg://...)."""
    data_dir: Path = data_dir_field("PDE_LOOP_")
    """Episode files and videos go to <data_dir>/media, checkpoints to <data_dir>/checkpoints."""
    robot_cmd_endpoint: str = robot_cmd_endpoint_field("PDE_LOOP_")
    tasks_file: str = tasks_file_field()
    """PDE_TASKS_FILE: the lab's own tasks (pde_contract/tasks.py); empty: the paper's ten only."""
    wandb_project: str = wandb_project_field("PDE_LOOP_")
    """W&B project that also gets the run's curves (TensorBoard files are written regardless)."""
    tasks: list[str] = list(HEADLINE_TASKS)
    """Tasks to train: names of the paper's ten or of the tasks file."""
    auto_start: bool = False
    """Start each episode without waiting for the operator's "scene reset — start" (simulation)."""
    auto_label: bool = False
    """Label each episode with the simulator's success check instead of waiting for the operator."""
    rollouts_per_prompt: int = 10
    """N: rollouts of each candidate prompt (and of the canonical prompt) in the bootstrap stage.
    Its one home: the loop writes it on each task's row, where the supervisor reads it."""
    batch_size: int = 64
    """Labelled RL-stage rollouts per PPO update."""
    max_chunks: int = 30
    """Longest episode, in action chunks, for a task whose entry in the tasks file sets none."""
    max_episodes: int | None = None
    """Stop after this many episodes (None: run until stopped)."""
    prompt_search: bool = True
    """False: plain PPO on the canonical prompt. Each task goes straight to the RL stage with an
    empty pool (no bootstrap episodes, nothing for the supervisor to do): the action-noise baseline
    of bench/bench_pde.py, and a lab that wants RL without a prompt search."""
    synchronous_updates: bool = False
    """True: once a PPO update starts, wait for it and swap its weights in before the next episode
    (every batch on-policy, and the update schedule independent of how fast PPO trains: the sim
    benchmark). Episodes are still not bit-reproducible across machines or under load: a sim episode
    paced in real time depends on when the policy's chunks arrive. False (a lab): the robot keeps
    collecting while the update trains, and its weights come in between later episodes."""
    relabel_search_successes: bool = False
    """True: a task's first PPO batch also trains on its successful bootstrap rollouts of candidate
    prompts, relabelled with the canonical prompt as if rolled out under it (their behaviour
    log-probs are re-evaluated under the canonical prompt at the update's start, so their first
    ratio is 1). With alpha_min = 1 and ppo.ratio_variant 'plain' this is the relabel baseline: the
    search's successes as data, then plain PPO on the canonical prompt."""
    rollouts_per_scene: int = 1
    """Consecutive episodes that share one scene seed. A real arm cannot re-create a scene, so a
    lab runs 1 (a fresh scene per episode; PPO's advantage baseline is then the batch's mean).
    The simulator can lay one scene out k times, which makes PPO's advantages scene-grouped
    (learner.trainer.advantage_groups)."""
    beta: float = _ALPHA.beta
    """EMA factor of the canonical prompt's success (adaptive alpha)."""
    consolidation_target: float = _ALPHA.consolidation_target
    """c in alpha = clip(s_bar / c, alpha_min, 1)."""
    alpha_min: float = _ALPHA.alpha_min
    """Floor on alpha: the canonical prompt keeps this share of RL rollouts."""
    alpha_window: int = _ALPHA.window
    """s_t(p_g): the canonical prompt's success over its last this many labelled episodes."""
    ema_start: float | None = Field(None, ge=0.0, le=1.0)
    """s_bar_0 when a task enters RL; None: the canonical prompt's success over its bootstrap
    rollouts (its N = rollouts_per_prompt episodes)."""
    poll_period_s: float = 0.01
    """The first pause of each wait for the operator's start intent and label; the pause doubles
    while nothing comes, up to 10x this (learner/loop/core.py: POLL_BACKOFF_FACTOR)."""
    heartbeat_period_s: float = 0.5
    """How often the loop's state is written for the page's health panel while it waits: the page
    calls the loop down after PDE_UI_SERVICE_STALE_S (2 s) without one, so a killed loop is
    bannered within 3 s and a Start is refused, not queued."""
    error_backoff_s: float = 2.0
    """Pause after a robot error (e.g. e-stop latched) before trying again."""
    final_update_timeout_s: float = 600.0
    """On a clean stop, how long to wait for a running PPO update to finish and be saved."""
    checkpoint_keep_trainer_state: int = Field(_RETENTION.keep_trainer_state, ge=0)
    """The newest this many checkpoints keep the trainer's (Adam) state, which only resuming needs;
    older ones are rewritten without it once a newer one is saved (π0.5 'all': about 27 GB less per
    version, estimated from its parameter count). 0: every version keeps it."""
    checkpoint_keep_versions: int = Field(_RETENTION.keep_versions, ge=0)
    """The newest this many checkpoint files stay; older ones are removed (their rows stay in the
    database, marked pruned). Version 0, the actor's version and those of episodes still running or
    awaiting a label always stay. 0: every version stays."""
    torch_threads: int | None = None
    """CPU threads for torch in this process (None: torch's default). 1 keeps inference latency
    steady on a small, busy CPU where OpenMP threads spin against other processes."""
    seed: int = 0
    """Seeds the prompt sampler, the per-episode scene seeds and (unless set itself) ppo.seed."""
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    """The trainer's PPO hyper-parameters, every field of learner/ppo_config.py's PPOConfig (one
    docstring each; its defaults are the loop's): PDE_LOOP_PPO__<FIELD>, e.g.
    PDE_LOOP_PPO__RATIO_VARIANT=plain, PDE_LOOP_PPO__LEARNING_RATE=1e-5, PDE_LOOP_PPO__TARGET_KL=null
    (null: None, where the field allows it). ppo.seed (minibatch shuffling) is ``seed`` unless
    PDE_LOOP_PPO__SEED sets it."""
    device: str = Field("auto", validation_alias=AliasChoices("PDE_LEARNER_DEVICE", "PDE_LOOP_DEVICE"))
    """Where the actor's and the trainer's policies run: auto (CUDA if torch sees a GPU, else CPU),
    cpu, cuda or cuda:N. Checkpoints load onto it; episodes and checkpoints on disk stay CPU data."""
    actor_device: str = Field(
        "", validation_alias=AliasChoices("PDE_LEARNER_ACTOR_DEVICE", "PDE_LOOP_ACTOR_DEVICE")
    )
    """Where the actor's policy runs when not on ``device`` (e.g. cuda:1: the trainer keeps cuda:0
    to itself); empty: on ``device``. The trainer's new weights are copied there at each swap."""

    # The policy (the flags of learner/policy_args.py, same names): how a first run without a
    # checkpoint makes version 0. A run that resumes from data_dir/checkpoints uses that policy.
    policy: str = DEFAULT_POLICY
    """A row of learner/policies/registry.py's POLICY_KINDS. small (also when empty): the checkpoints'
    policy (`pde learner sft` made version 0); pi05:
    version 0 is made from the π0.5 checkpoint directory ``init`` when there is no checkpoint yet."""
    init: str = ""
    """The π0.5 checkpoint directory (docs/pi05.md); policy pi05 only. A checkpoint trained with
    pi05_trainable expert or lora names it for its frozen part: keep it at this path."""
    pi05_trainable: Trainable | None = None
    """π0.5: all, no_vision, expert or lora (None or empty: Pi05Options' default)."""
    pi05_lora_rank: int | None = None
    """π0.5: the LoRA rank with pi05_trainable lora (None or empty: Pi05Options' default)."""
    pi05_flow_steps: int | None = None
    """π0.5: flow-SDE denoising steps (None or empty: Pi05Options' default)."""
    bf16: bool | None = None
    """π0.5 under bfloat16 autocast (None or empty: Pi05Options' default)."""
    gradient_checkpointing: bool | None = None
    """π0.5: recompute layers in backward (None or empty: Pi05Options' default)."""

    distributed: Literal["ddp", "fsdp"] = "ddp"
    """Under ``torchrun --nproc_per_node N``: how the PPO update is spread over the N ranks. 'ddp':
    a whole replica and Adam state on every GPU (π0.5 fits an 80 GB GPU so); 'fsdp': PyTorch FSDP
    shards weights, gradients and Adam state over the ranks (π0.5 per transformer block), for GPUs
    that cannot hold a replica. The update is the same (learner/distributed.py)."""

    _catalogue: TaskCatalogue = PrivateAttr()

    @property
    def catalogue(self) -> TaskCatalogue:
        """The known tasks (the paper's ten and the tasks file's), read once at validation."""
        return self._catalogue

    def max_chunks_of(self, task: str) -> int:
        return self._catalogue.get(task).max_chunks or self.max_chunks

    def checkpoint_retention(self) -> Retention:
        return Retention(self.checkpoint_keep_trainer_state, self.checkpoint_keep_versions)

    def alpha_schedule(self, ema_success: float) -> AlphaSchedule:
        """The alpha schedule with these settings, its EMA at ``ema_success``."""
        return AlphaSchedule(
            beta=self.beta,
            consolidation_target=self.consolidation_target,
            alpha_min=self.alpha_min,
            ema_success=ema_success,
            window=self.alpha_window,
        )

    @model_validator(mode="before")
    @classmethod
    def _ppo_seed_and_moved_names(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        moved = [n for n in _MOVED_TO_PPO if n in data or f"PDE_LOOP_{n.upper()}" in os.environ]
        if moved:
            raise ValueError(
                "the PPO settings moved under ppo: "
                + ", ".join(f"PDE_LOOP_{n.upper()} is now PDE_LOOP_PPO__{n.upper()} (ppo.{n})" for n in moved)
            )
        ppo = data.get("ppo")
        if ppo is None or isinstance(ppo, dict):  # a PPOConfig given whole keeps its own seed
            data = {**data, "ppo": {"seed": data.get("seed", 0), **(ppo or {})}}
        return data

    @field_validator("device")
    @classmethod
    def _known_device(cls, v: str) -> str:
        return check_device_spec(v)

    @field_validator("actor_device")
    @classmethod
    def _known_actor_device(cls, v: str) -> str:
        return check_device_spec(v) if v.strip() else ""

    # compose passes an unset .env variable as "": the default, as for an absent flag
    @field_validator("policy", mode="before")
    @classmethod
    def _empty_policy_is_default(cls, v: object) -> object:
        return DEFAULT_POLICY if isinstance(v, str) and not v.strip() else v

    @field_validator(
        "pi05_trainable", "pi05_lora_rank", "pi05_flow_steps", "bf16", "gradient_checkpointing", mode="before"
    )
    @classmethod
    def _empty_option_is_default(cls, v: object) -> object:
        return None if isinstance(v, str) and not v.strip() else v

    @model_validator(mode="after")
    def _policy_fits(self) -> LoopSettings:
        if msg := check_policy_args(self, "PDE_LOOP_"):
            raise ValueError(msg)
        pi05_options(self)  # Pi05Options refuses a bad value (e.g. lora rank 0) here, not at load
        return self

    @model_validator(mode="after")
    def _known_tasks(self) -> LoopSettings:
        self._catalogue = load_tasks(self.tasks_file)  # TasksFileError names the bad field
        self._catalogue.check(self.tasks)  # UnknownTaskError lists the known tasks
        return self

    @field_validator("rollouts_per_prompt", "batch_size", "max_chunks", "alpha_window", "rollouts_per_scene")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError(f"must be >= 1, got {v}")
        return v
