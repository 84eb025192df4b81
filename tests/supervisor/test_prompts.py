"""The three templates carry the paper's inputs (App. A.5) in our wording."""

from __future__ import annotations

from supervisor import prompts
from supervisor.vlm.base import (
    CandidateRequest,
    PromptEvidence,
    RolloutFrames,
    SuccessRequest,
    SummaryRequest,
)

GOAL = "put the green container in the bowl"
FRAMES = RolloutFrames([b"\xff\xd8" + bytes([i]) for i in range(8)], True)


def text(r: prompts.Rendered) -> str:
    return "\n".join(p for p in r.parts if isinstance(p, str))


def test_candidate_template_inputs() -> None:
    req = CandidateRequest(
        "t", GOAL, 0.2, "rising (10% -> 30%)", 4, 5,
        pool=[PromptEvidence("place the green container in the bowl", 0.4, 10, "drops it", [FRAMES]),
              PromptEvidence("set the green container into the bowl", 1.0, 10, "always works")],
        failed=[PromptEvidence("move the container", 0.0, 10, "wanders off")],
    )  # fmt: skip
    r = prompts.candidate_prompt(req, 8)
    t = text(r)
    assert r.n_images == 8 and "8 camera frames" in r.system and GOAL in r.system
    assert f'TASK: "{GOAL}"' in t and "20%" in t and "rising (10% -> 30%)" in t and "iteration 4" in t
    assert '"place the green container in the bowl" | success 40% over 10 rollouts | observed: drops it' in t
    assert "solved: keep it as it is" in t  # the 100% prompt is not refined
    assert '"move the container" | success 0%' in t and "wanders off" in t
    assert "Propose 5 NEW" in t and all(k in t for k in ('"new_prompts"', '"summaries"', '"analysis"'))
    # frames follow their prompt, in order, last one last
    i = r.parts.index(FRAMES.jpegs[0])
    assert r.parts[i : i + 8] == FRAMES.jpegs


def test_summary_and_success_templates() -> None:
    s = prompts.summary_prompt(SummaryRequest("t", GOAL, "place it", [FRAMES, FRAMES], 0.5), 8)
    assert s.n_images == 16 and "ONE sentence" in text(s) and '"summary"' in text(s)
    j = prompts.success_prompt(SuccessRequest("t", GOAL, "place it", FRAMES), 8)
    assert j.n_images == 8 and '"success"' in text(j) and '"reason"' in text(j) and "proposal" in text(j)


def test_the_success_template_carries_the_tasks_success_description() -> None:
    plain = text(prompts.success_prompt(SuccessRequest("t", GOAL, "place it", FRAMES), 8))
    assert "SUCCESS means" not in plain and "as SUCCESS defines it" not in plain
    described = "the container lies inside the bowl and the gripper is open"
    t = text(prompts.success_prompt(SuccessRequest("t", GOAL, "place it", FRAMES, described), 8))
    assert f"SUCCESS means: {described}" in t and "accomplish the TASK as SUCCESS defines it" in t
