"""Which task and prompt to roll out next (Algorithm 1 + the two-stage schedule of App. A.2).

Bootstrap stage (policy frozen): first N rollouts of the canonical prompt (the baseline the
supervisor compares against), then N rollouts of each candidate the supervisor proposed; nothing
to do means waiting for the supervisor. RL stage (pool frozen): one draw from
alpha * delta(canonical) + (1 - alpha) * Uniform(pool) per episode, via learner.mixture.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

import msgspec

from pde_contract.records import PromptStatus, Stage
from pde_contract.service_state import LoopState
from pde_storage import EpisodeRow, PromptRow
from pde_storage.protocols import TaskReader


@dataclass(frozen=True)
class Plan:
    """The episode in hand: what runs, and what the page shows of it (``LoopState``)."""

    task: str
    prompt_id: int
    prompt: str
    canonical_prompt: str
    stage: Stage
    why: str  # shown on the operator page
    seed: int | None = None  # the scene's, once drawn (``with_seed``)
    practice: bool = False  # the page's practice mode: nothing of the episode is stored

    def with_seed(self, seed: int) -> Plan:
        return dataclasses.replace(self, seed=seed)

    @staticmethod
    def of_episode(ep: EpisodeRow, why: str) -> Plan:
        """The plan a stored episode ran (one awaiting its label after a restart)."""
        return Plan(ep.task, ep.prompt_id, ep.rollout_prompt, ep.canonical_prompt, ep.stage, why, ep.seed)

    def shown_in(self, state: LoopState) -> LoopState:
        """``state`` with this plan as the episode in hand."""
        return msgspec.structs.replace(
            state,
            task=self.task,
            canonical_prompt=self.canonical_prompt,
            prompt=self.prompt,
            prompt_id=self.prompt_id,
            stage="practice" if self.practice else str(self.stage),
            why=self.why,
            seed=self.seed,
            practice=self.practice,
        )


def _bootstrap_plan(task: str, prompts: list[PromptRow], n_per_prompt: int, iteration: int) -> Plan | None:
    canon = next(p for p in prompts if p.status == PromptStatus.CANONICAL)
    if canon.n_finished < n_per_prompt:
        return Plan(
            task,
            canon.id,
            canon.text,
            canon.text,
            Stage.BOOTSTRAP,
            f"canonical baseline {canon.n_finished + 1}/{n_per_prompt}",
        )
    # A round's candidates count once the supervisor has written the round's iteration on the
    # task (after all of them): which candidate gets which episode, and so which scene, does not
    # depend on when the loop looked while the supervisor was still adding them.
    todo = [
        p
        for p in prompts
        if p.status == PromptStatus.CANDIDATE and p.n_finished < n_per_prompt and p.iteration <= iteration
    ]
    if not todo:
        return None
    p = min(todo, key=lambda q: (q.n_finished, q.id))
    return Plan(
        task,
        p.id,
        p.text,
        canon.text,
        Stage.BOOTSTRAP,
        f"candidate rollout {p.n_finished + 1}/{n_per_prompt}",
    )


def _rl_plan(task: str, prompts: list[PromptRow], alpha: float, rng: random.Random) -> Plan:
    from learner.mixture import sample_prompt  # the learner's mixture (alpha-delta + uniform pool)

    canon = next(p for p in prompts if p.status == PromptStatus.CANONICAL)
    pool = [p for p in prompts if p.status == PromptStatus.POOL]
    text = sample_prompt(canon.text, [p.text for p in pool], alpha, rng)
    chosen = canon if text == canon.text else next(p for p in pool if p.text == text)
    kind = PromptStatus.CANONICAL if chosen is canon else PromptStatus.POOL
    return Plan(
        task, chosen.id, chosen.text, canon.text, Stage.RL, f"mixture draw ({kind}, alpha {alpha:.2f})"
    )


def choose_next(store: TaskReader, tasks: list[str], n_per_prompt: int, rng: random.Random) -> Plan | None:
    """The next episode's plan; None when every task waits for the supervisor. Among tasks with
    something to run, the one with the fewest finished episodes goes first (balanced batches)."""
    options: list[tuple[int, int, Plan]] = []
    for order, task in enumerate(tasks):
        prompts = store.prompts(task)
        state = store.task_state(task)
        plan = (
            _rl_plan(task, prompts, state.alpha, rng)
            if state.stage == Stage.RL
            else _bootstrap_plan(task, prompts, n_per_prompt, state.iteration)
        )
        if plan is not None:
            options.append((sum(p.n_finished for p in prompts), order, plan))
    return min(options, key=lambda o: (o[0], o[1]))[2] if options else None
