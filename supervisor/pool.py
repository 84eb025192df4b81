"""The prompt pool and compressed history of one task, and the bootstrap schedule (App. A.1-A.2).

Pure logic over small dataclasses: the service loads a ``TaskHistory`` from the store, asks
``plan`` what to do, and writes the decisions back. Nothing here talks to a database or a VLM.

Success rates come only from authoritative labels (operator or simulator) of bootstrap-stage
rollouts, as the store counts them (``TaskRepository.prompts(task, stage="bootstrap")``, the counts
the page shows too). The VLM's own verdict is a proposal and never counts: one false positive would
admit a useless prompt to the pool.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pde_contract.records import PromptStatus, Stage


@dataclass(frozen=True)
class BootstrapConfig:
    """Appendix A.2 defaults: T0 = 10 iterations x K = 5 candidates (x N rollouts each)."""

    iterations_t0: int = 10
    candidates_k: int = 5
    # N: the episode loop's rollouts per prompt, as it wrote it on the task row (its setting is
    # the one home of N); None until it has: no candidate is judged before.
    rollouts_n: int | None = None
    eta: float = 0.1  # admit when measured success >= eta; must be > 0
    pool_min_m: int = 3  # enter RL once the pool has this many prompts

    def __post_init__(self) -> None:
        if not 0 < self.eta <= 1:
            raise ValueError(f"eta={self.eta}: the admission threshold must be in (0, 1]")
        for name in ("iterations_t0", "candidates_k", "rollouts_n", "pool_min_m"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be at least 1")


@dataclass
class PromptRecord:
    """One entry of the compressed history H_g: (prompt, summary, measured success)."""

    id: int
    text: str
    status: PromptStatus
    iteration: int = 0
    n_episodes: int = 0  # bootstrap rollouts with an authoritative label
    n_success: int = 0
    summary: str = ""

    @property
    def success_rate(self) -> float | None:
        return self.n_success / self.n_episodes if self.n_episodes else None


@dataclass
class TaskHistory:
    task: str
    canonical: str
    prompts: list[PromptRecord]
    stage: Stage = Stage.BOOTSTRAP
    iteration: int = 0  # prompt-search iterations started so far

    def with_status(self, *statuses: PromptStatus) -> list[PromptRecord]:
        return [p for p in self.prompts if p.status in statuses]

    @property
    def pool(self) -> list[PromptRecord]:
        return self.with_status(PromptStatus.POOL)

    @property
    def failed(self) -> list[PromptRecord]:
        return self.with_status(PromptStatus.REJECTED)

    @property
    def candidates(self) -> list[PromptRecord]:
        return self.with_status(PromptStatus.CANDIDATE)

    def known_texts(self) -> list[str]:
        """Every wording already tried or queued, the canonical prompt included."""
        return [self.canonical, *(p.text for p in self.prompts)]


def judge(record: PromptRecord, cfg: BootstrapConfig) -> PromptStatus | None:
    """``pool`` / ``rejected`` once a candidate has N labelled rollouts, else None (keep waiting)."""
    if (
        record.status != PromptStatus.CANDIDATE
        or cfg.rollouts_n is None
        or record.n_episodes < cfg.rollouts_n
    ):
        return None
    rate = record.n_success / record.n_episodes
    return PromptStatus.POOL if rate >= cfg.eta else PromptStatus.REJECTED


@dataclass
class Plan:
    """What the supervisor should do next for one task."""

    verdicts: list[tuple[PromptRecord, PromptStatus]] = field(default_factory=list)
    action: Literal["wait", "propose", "enter_rl", "frozen"] = "wait"
    reason: str = ""
    next_iteration: int = 0
    n_new: int = 0


def plan(history: TaskHistory, cfg: BootstrapConfig) -> Plan:
    """Judge the candidates that have their N rollouts, then: wait, propose, or enter RL."""
    if history.stage == Stage.RL:
        return Plan(action="frozen", reason="RL stage: the pool is frozen")
    verdicts = [(p, v) for p in history.candidates if (v := judge(p, cfg)) is not None]
    judged = {p.id for p, _ in verdicts}
    waiting = [p for p in history.candidates if p.id not in judged]
    n_pool = len(history.pool) + sum(v == PromptStatus.POOL for _, v in verdicts)
    if waiting:
        n = cfg.rollouts_n if cfg.rollouts_n is not None else "N (the loop has not written its N yet)"
        need = ", ".join(f"#{p.id} {p.n_episodes}/{n}" for p in waiting)
        return Plan(verdicts, "wait", f"candidates still need labelled rollouts: {need}")
    if n_pool >= cfg.pool_min_m:
        return Plan(verdicts, "enter_rl", f"pool has {n_pool} prompts (M_min = {cfg.pool_min_m})")
    if history.iteration >= cfg.iterations_t0:
        return Plan(
            verdicts, "enter_rl", f"search budget spent ({cfg.iterations_t0} iterations), pool has {n_pool}"
        )
    return Plan(
        verdicts,
        "propose",
        f"iteration {history.iteration + 1}/{cfg.iterations_t0}, pool has {n_pool}",
        next_iteration=history.iteration + 1,
        n_new=cfg.candidates_k,
    )


def apply(history: TaskHistory, p: Plan) -> None:
    """Record the plan's verdicts in the history (the service persists the same changes)."""
    for record, status in p.verdicts:
        record.status = status
    if p.action == "enter_rl":
        history.stage = Stage.RL
