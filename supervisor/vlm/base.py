"""The VLM boundary: three questions the supervisor asks about rollouts.

Requests carry frames that are already sampled and JPEG-encoded (``supervisor.frames``), so an
implementation only builds its request and parses the answer. Every call, good or bad, yields a
``CallRecord`` (tokens, cost, latency) that the service stores.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RolloutFrames:
    """Frames of one rollout in temporal order (first = start, last = end)."""

    jpegs: list[bytes]
    success: bool | None = None  # authoritative label, when known


@dataclass(frozen=True)
class PromptEvidence:
    """One prompt as the candidate-generation template lists it."""

    text: str
    success_rate: float | None  # measured from operator/simulator labels; None = not yet run
    n_episodes: int = 0
    summary: str = ""
    rollouts: list[RolloutFrames] = field(default_factory=list)


@dataclass(frozen=True)
class CandidateRequest:
    task: str
    goal: str  # the canonical prompt p_g
    canonical_ema_success: float | None
    canonical_trend: str  # "rising" / "falling" / "flat" / "unknown"
    iteration: int
    n_new: int  # K
    pool: list[PromptEvidence]  # prompts that worked (s >= eta)
    failed: list[PromptEvidence]  # negative feedback (s < eta)


@dataclass(frozen=True)
class SummaryRequest:
    task: str
    goal: str
    prompt: str
    rollouts: list[RolloutFrames]
    success_rate: float | None


@dataclass(frozen=True)
class SuccessRequest:
    task: str
    goal: str
    rollout_prompt: str
    rollout: RolloutFrames
    success_description: str = ""  # the lab's words for success (tasks file); "": judge by the goal


@dataclass(frozen=True)
class CallRecord:
    kind: str  # "candidates" / "summary" / "success"
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    latency_s: float
    ok: bool
    error: str = ""
    attempts: int = 1


@dataclass(frozen=True)
class CandidateResult:
    new_prompts: list[str]
    summaries: dict[str, str]
    analysis: str
    source: str  # "vlm" / "offline"


@dataclass(frozen=True)
class SummaryResult:
    summary: str


@dataclass(frozen=True)
class SuccessResult:
    success: bool
    reason: str


class VLMError(RuntimeError):
    """The VLM gave no usable answer after the retry policy; ``retryable`` says if later may work."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


CallSink = Callable[[CallRecord], None]


class VLM(ABC):
    """A vision-language model that watches rollouts. Raises ``VLMError`` when it cannot answer."""

    model: str = ""

    def __init__(self, on_call: CallSink | None = None) -> None:
        self._on_call = on_call

    def set_call_sink(self, on_call: CallSink | None) -> None:
        """Where each CallRecord goes (called from whichever thread made the request)."""
        self._on_call = on_call

    def _record(self, record: CallRecord) -> None:
        if self._on_call is not None:
            self._on_call(record)

    @abstractmethod
    def propose_prompts(self, request: CandidateRequest) -> CandidateResult:
        """New wordings of the task, a one-line summary per listed prompt, and the reasoning."""

    @abstractmethod
    def summarize_rollouts(self, request: SummaryRequest) -> SummaryResult:
        """One sentence: what the robot attempted under this prompt and where it failed."""

    @abstractmethod
    def judge_success(self, request: SuccessRequest) -> SuccessResult:
        """A proposed success label with a one-line reason (the operator's label decides)."""
