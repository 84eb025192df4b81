"""The VLM stand-in for the sim benchmark (SimStateProposer) and the paper's-regime premise's
independence from every proposer's vocabulary."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import msgspec
import numpy as np
import pytest

from pde_contract.episodes import EpisodeFile
from pde_contract.tasks import PAPER_TASKS
from supervisor.dedup import normalise
from supervisor.proposers import (
    OutcomeLog,
    ProposerOptions,
    RandomParaphraseProposer,
    RolloutOutcome,
    SimStateProposer,
    make_proposer,
    rule_vocabulary,
    sim_stand_in_vocabulary,
    summarize_outcomes,
    vocabulary,
)
from supervisor.vlm.base import CandidateRequest, PromptEvidence
from tests.supervisor.episodes import make_episode

ROOT = Path(__file__).resolve().parents[2]
TASK = "put_green_container_in_front_of_camera"
GOAL = "put the green container in front of the camera"
CAMERA_XY = (0.71, -0.14)


def _training(recipe: str) -> list[str]:
    table = json.loads((ROOT / "learner" / "recipes" / recipe).read_text())
    return list(table["tasks"][TASK]["wordings"])


def _new_words(recipe: str) -> frozenset[str]:
    """The words of a recipe's target training wordings that the canonical prompt does not have."""
    return vocabulary(*_training(recipe)) - vocabulary(GOAL)


# Every paper's-regime recipe: the frozen runs' and each recalibration's copy (same labels, other p).
PAPER_REGIME_RECIPES = sorted(p.name for p in (ROOT / "learner" / "recipes").glob("paper_regime*.json"))
# Premise 2, the paper's sim case: its target wordings obey the same independence rule.
SIM_CASE_RECIPE = "sim_case.json"
SIMILAR_TASK = "put_bowl_in_front_of_camera"
INDEPENDENT_RECIPES = [*PAPER_REGIME_RECIPES, SIM_CASE_RECIPE]


@pytest.mark.parametrize("recipe", INDEPENDENT_RECIPES)
def test_paper_regime_wordings_share_no_word_with_any_proposer(recipe: str) -> None:
    new = _new_words(recipe)
    assert new and not new & rule_vocabulary(), new & rule_vocabulary()
    assert not new & sim_stand_in_vocabulary(), new & sim_stand_in_vocabulary()
    # the check has teeth: the decoy recipe's wordings are built from the rule proposer's tables
    assert {"place", "carry", "transfer", "close"} <= _new_words("language_premise.json") & rule_vocabulary()


@pytest.mark.parametrize("recipe", INDEPENDENT_RECIPES)
def test_paper_regime_has_no_decoy(recipe: str) -> None:
    table = json.loads((ROOT / "learner" / "recipes" / recipe).read_text())
    for task, entry in table["tasks"].items():
        assert GOAL not in entry.get("extra", {}), f"{task} is trained with the target's canonical prompt"
        assert task == TASK or GOAL not in entry.get("wordings", [])
    assert 0.0 < table["tasks"][TASK]["canonical_prob"] < 0.2


def test_sim_case_similar_task_is_well_trained_and_its_wordings_are_its_own() -> None:
    """Premise 2: the similar task (the target with another object) is labelled with its own canonical
    prompt only; the target's wordings are a family of their own, not the first premise's 'lens' one."""
    table = json.loads((ROOT / "learner" / "recipes" / SIM_CASE_RECIPE).read_text())
    similar = PAPER_TASKS[SIMILAR_TASK]
    assert table["tasks"][SIMILAR_TASK]["canonical_prob"] == 1.0
    assert vocabulary(GOAL) ^ vocabulary(similar) == {"green", "container", "bowl"}  # the object alone
    assert not _new_words(SIM_CASE_RECIPE) & _new_words("paper_regime_main.json")
    assert not _new_words(SIM_CASE_RECIPE) & vocabulary(similar)


def _episode(
    prompt: str, held: Sequence[bool | None], xy: Sequence[tuple[float, float]], success: bool
) -> EpisodeFile:
    """A synthetic episode whose chunk states say where the hand was and whether it held an object."""
    ep = make_episode(
        task=TASK,
        canonical_prompt=GOAL,
        rollout_prompt=prompt,
        n_chunks=len(held),
        success=success,
        cameras=(),
    )
    for chunk, h, (x, y) in zip(ep.chunks, held, xy, strict=True):
        state = msgspec.structs.replace(
            chunk.observation.state, ee_position_m=np.array([x, y, 0.2]), object_held=h
        )
        chunk.observation = msgspec.structs.replace(chunk.observation, state=state)
    return ep


def test_outcome_from_episode_reads_grasp_and_release_point() -> None:
    # held over chunks 1-2, let go after chunk 2 at (0.41, -0.14): 0.30 m short of the camera region
    ep = _episode(
        GOAL, [False, True, True, False], [(0.5, 0.0), (0.5, 0.0), (0.41, -0.14), (0.4, 0.0)], False
    )
    o = RolloutOutcome.from_episode(ep, CAMERA_XY)
    assert (o.success, o.grasped, o.held_at_end) == (False, True, False)
    assert o.release_to_goal_m == pytest.approx(0.30)
    assert o.failure(off_target_m=0.07) == "off_target"
    assert (
        RolloutOutcome.from_episode(_episode(GOAL, [False] * 2, [(0.5, 0)] * 2, False), None).failure(0.07)
        == "no_grasp"
    )
    assert (
        RolloutOutcome.from_episode(_episode(GOAL, [False, True], [(0.5, 0)] * 2, False), None).failure(0.07)
        == "kept_holding"
    )
    unknown = RolloutOutcome.from_episode(_episode(GOAL, [None] * 2, [(0.5, 0)] * 2, True), CAMERA_XY)
    assert unknown.grasped is None and unknown.failure(0.07) == "none"
    assert summarize_outcomes([o]) == (
        "0/1 succeeded; the hand held the object in 1/1, still held it at the end in 0; "
        "let go 0.30 m from the destination on average"
    )


def _request(pool: Sequence[str] = (), failed: Sequence[str] = (), n_new: int = 4) -> CandidateRequest:
    return CandidateRequest(
        task=TASK,
        goal=GOAL,
        canonical_ema_success=0.1,
        canonical_trend="flat",
        iteration=1,
        n_new=n_new,
        pool=[PromptEvidence(p, 0.5, 4) for p in pool],
        failed=[PromptEvidence(p, 0.0, 4) for p in failed],
    )


def _log(prompt: str, held: list[bool], n: int = 3) -> OutcomeLog:
    log = OutcomeLog(CAMERA_XY)
    for _ in range(n):
        log.add(_episode(prompt, held, [(0.5, 0.0)] * len(held), False))
    return log


def test_stand_in_stresses_the_step_that_failed() -> None:
    never = SimStateProposer(_log(GOAL, [False, False, False]), seed=0).propose(_request())
    assert never.source == "offline" and "stand-in" in never.analysis and len(never.new_prompts) == 4
    assert all(p.startswith(("grasp ", "grab ")) for p in never.new_prompts), never.new_prompts
    assert "no_grasp" in never.analysis
    kept = SimStateProposer(_log(GOAL, [False, True, True]), seed=0).propose(_request()).new_prompts
    assert all("release it" in p or "open the fingers" in p for p in kept), kept
    # a failed prompt's rollouts count too, and it gets a summary line
    log = _log("deliver the green bin facing the camera", [False, True, True])
    out = SimStateProposer(log, seed=0).propose(_request(failed=["deliver the green bin facing the camera"]))
    assert "kept_holding" in out.analysis and "deliver the green bin facing the camera" in out.summaries


def test_stand_in_proposals_are_new_on_topic_and_from_its_own_words() -> None:
    log = _log(GOAL, [False, False])
    for seed in range(5):
        req = _request(pool=["take the green container facing the camera"], failed=["shift the green bin"])
        out = SimStateProposer(log, seed=seed).propose(req).new_prompts
        norms = [normalise(p) for p in out]
        assert len(set(norms)) == len(out) == 4
        assert not set(norms) & {normalise(GOAL), normalise("take the green container facing the camera")}
        for p in out:
            assert "camera" in p and ("green container" in p or "green bin" in p), p
            assert vocabulary(p) <= sim_stand_in_vocabulary() | vocabulary(GOAL), p
            assert not vocabulary(p) & _new_words("paper_regime.json"), p
    a = SimStateProposer(log, seed=3).propose(_request()).new_prompts
    assert a == SimStateProposer(log, seed=3).propose(_request()).new_prompts


def test_stand_in_without_outcomes_rewords_plainly_and_skips_unknown_goals() -> None:
    out = SimStateProposer(lambda _: [], seed=1).propose(_request(n_new=3)).new_prompts
    assert len(out) == 3 and all(
        p.split()[0] in {"position", "deliver", "relocate", "shift", "take"} for p in out
    )
    other = CandidateRequest("t", "open the top drawer", None, "unknown", 1, 3, [], [])
    assert SimStateProposer(lambda _: [], seed=1).propose(other).new_prompts == []


def test_rule_proposer_outputs_stay_inside_rule_vocabulary() -> None:
    proposer = RandomParaphraseProposer(seed=0)
    for _ in range(50):
        assert vocabulary(proposer.paraphrase(GOAL)) <= rule_vocabulary() | vocabulary(GOAL)


def test_stand_in_is_a_named_proposer_that_needs_outcomes() -> None:
    log = _log(GOAL, [False, False])
    proposer = make_proposer("standin", ProposerOptions(seed=2, outcomes=log))
    assert isinstance(proposer, SimStateProposer)
    assert (
        proposer.propose(_request()).new_prompts
        == SimStateProposer(log, seed=2).propose(_request()).new_prompts
    )
    with pytest.raises(ValueError, match="reads rollout outcomes"):
        make_proposer("standin", ProposerOptions(seed=2))
