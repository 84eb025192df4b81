"""Settings of ``pde supervisor`` (environment prefix ``PDE_SUPERVISOR_``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pde_contract.settings import DataLayout, data_dir_field, database_url_field, tasks_file_field
from pde_contract.tasks import load_tasks

_PLACEHOLDER_KEYS = frozenset({"changeme", "change-me", "your-key-here", "sk-...", "xxx"})


class SupervisorSettings(BaseSettings):
    """Everything the supervisor reads from the environment; each field documents itself."""

    model_config = SettingsConfigDict(env_prefix="PDE_SUPERVISOR_", extra="ignore", populate_by_name=True)

    # --- where the VLM lives ------------------------------------------------------------------
    base_url: str = Field(
        default="https://api.openai.com/v1", description="any OpenAI-compatible /v1 endpoint"
    )
    model: str = Field(default="gpt-4o-mini", description="model name as the endpoint knows it")
    api_key: SecretStr = Field(
        default=SecretStr(""), description="bearer key; vLLM accepts any non-empty value"
    )
    request_timeout_s: float = Field(
        default=60.0, gt=0, description="per-request read timeout (client default: 10 min)"
    )
    connect_timeout_s: float = Field(default=5.0, gt=0)
    max_attempts: int = Field(default=4, ge=1, le=10, description="tries per request (429, 5xx, timeouts)")
    backoff_initial_s: float = Field(
        default=1.0, ge=0, description="wait before the 2nd try; doubles each time"
    )
    backoff_max_s: float = Field(
        default=30.0, ge=0, description="cap on one wait, also on a server's Retry-After"
    )
    response_format: Literal["json_schema", "json_object"] = Field(
        default="json_schema", description="json_schema where the server supports it; falls back by itself"
    )
    price_input_usd_per_mtok: float = Field(
        default=0.0, ge=0, description="for the cost column; 0 = unknown/free"
    )
    price_output_usd_per_mtok: float = Field(default=0.0, ge=0)

    # --- what the VLM sees --------------------------------------------------------------------
    camera: str = Field(default="external", description="camera whose frames make the rollout video")
    frames_per_rollout: int = Field(
        default=8, ge=8, le=16, description="sampled uniformly, last frame always in"
    )
    max_images_per_request: int = Field(
        default=16, ge=8, description="at most vLLM's --limit-mm-per-prompt image count"
    )
    image_max_side_px: int = Field(default=448, ge=64, description="frames larger than this are downscaled")
    jpeg_quality: int = Field(default=85, ge=30, le=100)

    # --- the PDE bootstrap (Appendix A.2) -------------------------------------------------------
    iterations_t0: int = Field(
        default=10, ge=1, description="prompt-search iterations before RL at the latest"
    )
    candidates_k: int = Field(default=5, ge=1, description="candidate prompts per iteration")
    # N (labelled rollouts per candidate before it is judged) is not set here: it is the episode
    # loop's PDE_LOOP_ROLLOUTS_PER_PROMPT, read from the task row where the loop writes it.
    eta: float = Field(default=0.1, gt=0, le=1, description="pool admission: measured success >= eta")
    pool_min_m: int = Field(default=3, ge=1, description="enter RL once the pool holds this many prompts")
    duplicate_cosine: float = Field(
        default=0.99, gt=0, le=1, description="refuse candidates this close (MiniLM cosine) to a known prompt"
    )

    # --- the service --------------------------------------------------------------------------
    # The shared PDE_DATABASE_URL / PDE_DATA_DIR of the compose file are read too.
    database_url: str = database_url_field("PDE_SUPERVISOR_")
    data_dir: Path = data_dir_field("PDE_SUPERVISOR_")
    tasks_file: str = tasks_file_field()
    tasks: list[str] = Field(
        default_factory=list, description="tasks to supervise (known ones); empty = all in the database"
    )
    proposer: Literal["vlm", "offline"] = Field(default="vlm", description="offline = rule-based paraphrases")
    fallback: Literal["offline", "canonical"] = Field(
        default="offline", description="VLM keeps failing: paraphrase offline, or canonical only"
    )
    max_consecutive_failures: int = Field(
        default=3, ge=1, description="VLM failures in a row before falling back"
    )
    cooldown_s: float = Field(
        default=60.0, ge=0, description="how long to stay on the fallback before retrying"
    )
    poll_interval_s: float = Field(default=1.0, gt=0)
    heartbeat_period_s: float = Field(
        default=0.5,
        gt=0,
        description="how often the state row is written: the page calls the supervisor down after "
        "PDE_UI_SERVICE_STALE_S (2 s) without it",
    )
    score_episodes: bool = Field(
        default=True, description="propose a success label for each finished episode"
    )
    workers: int = Field(default=2, ge=1, le=16, description="VLM requests in flight at once")

    @model_validator(mode="after")
    def _check(self) -> SupervisorSettings:
        key = self.api_key.get_secret_value().strip().lower()
        if key in _PLACEHOLDER_KEYS:
            raise ValueError(
                f"PDE_SUPERVISOR_API_KEY is a placeholder ({key!r}): set a real key, or any non-empty "
                "value for a local vLLM server"
            )
        known = load_tasks(self.tasks_file)  # TasksFileError names the bad field
        if self.tasks:
            known.check(self.tasks)  # UnknownTaskError lists the known tasks
        if self.frames_per_rollout > self.max_images_per_request:
            raise ValueError(
                f"frames_per_rollout={self.frames_per_rollout} exceeds max_images_per_request="
                f"{self.max_images_per_request}: raise the latter (and vLLM's --limit-mm-per-prompt)"
            )
        return self

    def vlm_configured(self) -> str:
        """Why the VLM cannot be used ("" when it can): no endpoint, no model, or no key for OpenAI."""
        if not self.base_url.strip():
            return "PDE_SUPERVISOR_BASE_URL is empty"
        if not self.model.strip():
            return "PDE_SUPERVISOR_MODEL is empty"
        if "api.openai.com" in self.base_url and not self.api_key.get_secret_value():
            return "PDE_SUPERVISOR_API_KEY is empty (api.openai.com needs a key)"
        return ""

    @property
    def media_dir(self) -> Path:
        return DataLayout(self.data_dir).media
