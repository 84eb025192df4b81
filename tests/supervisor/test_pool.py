"""Pool admission, the bootstrap schedule and duplicate refusal (pure logic)."""

from __future__ import annotations

import pytest

from pde_contract.records import PromptStatus
from supervisor.dedup import DuplicateFilter, MiniLMEmbedder, normalise
from supervisor.pool import BootstrapConfig, PromptRecord, TaskHistory, apply, judge, plan

GOAL = "put the green container in the bowl"
CFG = BootstrapConfig(iterations_t0=3, candidates_k=2, rollouts_n=4, eta=0.25, pool_min_m=2)


def test_candidate_judged_only_after_n_rollouts() -> None:
    p = PromptRecord(1, "x y z", PromptStatus.CANDIDATE, n_episodes=3, n_success=3)
    assert judge(p, CFG) is None
    p.n_episodes, p.n_success = 4, 1
    assert judge(p, CFG) == "pool"  # 0.25 >= eta
    p.n_success = 0
    assert judge(p, CFG) == "rejected"
    assert judge(PromptRecord(2, "a b c", PromptStatus.POOL, n_episodes=9, n_success=0), CFG) is None


def test_eta_must_be_positive() -> None:
    with pytest.raises(ValueError, match="eta"):
        BootstrapConfig(eta=0.0)


def test_bootstrap_schedule_until_pool_is_full() -> None:
    h = TaskHistory("t", GOAL, [])
    first = plan(h, CFG)
    assert (first.action, first.next_iteration, first.n_new) == ("propose", 1, 2)
    h.iteration = 1
    h.prompts = [
        PromptRecord(1, "a b c", PromptStatus.CANDIDATE, 1),
        PromptRecord(2, "d e f", PromptStatus.CANDIDATE, 1),
    ]
    h.prompts[0].n_episodes, h.prompts[0].n_success = 4, 2
    assert plan(h, CFG).action == "wait"  # #2 has no rollouts yet
    h.prompts[1].n_episodes, h.prompts[1].n_success = 4, 0
    p = plan(h, CFG)
    assert p.action == "propose" and [v for _, v in p.verdicts] == ["pool", "rejected"]
    apply(h, p)
    assert [x.status for x in h.prompts] == ["pool", "rejected"]  # the failure stays as feedback
    h.iteration = 2
    h.prompts.append(PromptRecord(3, "g h i", PromptStatus.CANDIDATE, 2, n_episodes=4, n_success=4))
    p = plan(h, CFG)
    assert p.action == "enter_rl" and "M_min" in p.reason
    apply(h, p)
    assert h.stage == "rl" and len(h.pool) == 2
    assert plan(h, CFG).action == "frozen"


def test_bootstrap_ends_when_budget_spent() -> None:
    h = TaskHistory("t", GOAL, [PromptRecord(1, "a b c", PromptStatus.REJECTED, 3, 4, 0)], iteration=3)
    p = plan(h, CFG)
    assert p.action == "enter_rl" and "budget" in p.reason


def test_normalise() -> None:
    assert normalise("Put the green container in the bowl.") == normalise("put  green container in a bowl")


def test_duplicates_refused_by_text_and_embedding(embedder: MiniLMEmbedder) -> None:
    f = DuplicateFilter(embedder, 0.99)
    out = f.screen(
        [
            "Put the green container in the bowl!",  # same text after normalising
            "put the green container into the bowl",  # near-duplicate (cosine 0.996)
            "place the green container in the bowl",  # a new verb: kept
            "place the green container in the bowl",  # repeats the previous candidate
            "bowl",  # too short
            "drop the green container inside the bowl",
        ],
        known=[GOAL],
    )
    assert out.accepted == [
        "place the green container in the bowl",
        "drop the green container inside the bowl",
    ]
    reasons = dict(out.refused)
    assert "same wording" in reasons["Put the green container in the bowl!"]
    assert "near-duplicate" in reasons["put the green container into the bowl"]
    assert "words" in reasons["bowl"]


def test_duplicate_filter_without_embedder_uses_text() -> None:
    out = DuplicateFilter(None).screen(["put the green container into the bowl"], known=[GOAL])
    assert out.accepted == ["put the green container into the bowl"]


def test_before_the_loop_wrote_its_n_no_candidate_is_judged() -> None:
    no_n = BootstrapConfig(iterations_t0=3, candidates_k=2, rollouts_n=None, eta=0.25, pool_min_m=2)
    p = PromptRecord(1, "a b c", PromptStatus.CANDIDATE, n_episodes=40, n_success=40)
    assert judge(p, no_n) is None
    waiting = plan(TaskHistory("t", GOAL, [p]), no_n)
    assert waiting.action == "wait" and "has not written its N" in waiting.reason
