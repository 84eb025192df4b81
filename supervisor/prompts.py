"""The supervisor's three templates (our wording; inputs and outputs as in the paper's App. A.5).

A template renders to a system text and a list of user parts: ``str`` for text, ``bytes`` for a
JPEG frame. The VLM implementation turns parts into its own wire format.
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.vlm.base import (
    CandidateRequest,
    PromptEvidence,
    RolloutFrames,
    SuccessRequest,
    SummaryRequest,
)

Part = str | bytes

POLICY_NAME = "a vision-language-action policy (pi0.5-style) running on a Franka FR3 arm"


@dataclass(frozen=True)
class Rendered:
    system: str
    parts: list[Part]

    @property
    def n_images(self) -> int:
        return sum(isinstance(p, bytes) for p in self.parts)


def system_prompt(goal: str, frames_per_rollout: int) -> str:
    return (
        "You supervise a robot learning a manipulation task, and you know how wording changes what a "
        "language-conditioned robot policy does.\n\n"
        f"The robot is driven by {POLICY_NAME}; the instruction it receives is its only input besides "
        'the cameras. Its task is: "' + goal + '".\n\n'
        f"Rollouts are shown as {frames_per_rollout} camera frames in time order: the first frame is "
        "the start of the episode, the last one is where it ended. Follow the gripper and the objects "
        "from frame to frame to see what the robot actually did.\n\n"
        "What you do:\n"
        "- judge how far each rollout got towards the task;\n"
        "- name the failure modes you see (picked the wrong object, missed the grasp, dropped it, "
        "placed it at the wrong spot, stopped early, collided, ...);\n"
        "- compare instructions: which wording led to better behaviour and why;\n"
        "- propose new instructions worth trying.\n\n"
        "When you write an instruction:\n"
        "- name the object and where it must go without ambiguity;\n"
        "- keep the plain imperative style of tabletop benchmarks such as LIBERO;\n"
        "- vary the verb, the spatial reference and how much detail you give;\n"
        "- 5 to 15 words; never change what the task asks for.\n"
        "Answer with a single JSON object and nothing else."
    )


def _rate(rate: float | None) -> str:
    return "not measured yet" if rate is None else f"{rate:.0%}"


def _rollout_parts(rollouts: list[RolloutFrames], label: str) -> list[Part]:
    parts: list[Part] = []
    for r, rollout in enumerate(rollouts, 1):
        outcome = {True: "succeeded", False: "failed", None: "outcome unknown"}[rollout.success]
        parts.append(f"{label} rollout {r} ({outcome}), frames 1-{len(rollout.jpegs)}:")
        parts.extend(rollout.jpegs)
    return parts


def _evidence_line(p: PromptEvidence) -> str:
    line = f'- "{p.text}" | success {_rate(p.success_rate)} over {p.n_episodes} rollouts'
    if p.success_rate is not None and p.success_rate >= 1.0:
        line += " | solved: keep it as it is, do not rephrase it"
    if p.summary:
        line += f" | observed: {p.summary}"
    return line


def candidate_prompt(req: CandidateRequest, frames_per_rollout: int) -> Rendered:
    parts: list[Part] = [
        f"Prompt search, iteration {req.iteration}, task {req.task}.\n\n"
        f'TASK: "{req.goal}"\n'
        f'Canonical instruction: "{req.goal}" | success (moving average) {_rate(req.canonical_ema_success)} '
        f"| recent trend: {req.canonical_trend}\n\n"
        "Instructions in the pool (they worked at least sometimes), each with frames from its rollouts:"
    ]
    if not req.pool:
        parts.append("(the pool is empty so far)")
    for p in req.pool:
        parts.append(_evidence_line(p))
        parts.extend(_rollout_parts(p.rollouts, "its"))
    parts.append("\nInstructions that failed (avoid what made them fail):")
    parts.append("\n".join(_evidence_line(p) for p in req.failed) if req.failed else "(none yet)")
    parts.append(
        "\nWhat to do:\n"
        "1. Look at each instruction's frames: what does the robot do, and which wording gets it "
        "closest to the task?\n"
        "2. Write one line per listed instruction describing the behaviour it causes.\n"
        f"3. Propose {req.n_new} NEW instruction(s) for the same task that address the failures you "
        "saw and differ in meaning-preserving ways from every instruction above (other verbs, "
        "spatial references, levels of detail).\n\n"
        "Reply with only this JSON object:\n"
        '{"new_prompts": ["..."], '
        '"summaries": {"<instruction exactly as written above>": "<one-line behaviour>"}, '
        '"analysis": "<short reasoning about what to try next>"}'
    )
    return Rendered(system_prompt(req.goal, frames_per_rollout), parts)


def summary_prompt(req: SummaryRequest, frames_per_rollout: int) -> Rendered:
    parts: list[Part] = [
        f'TASK: "{req.goal}"\nInstruction given to the robot: "{req.prompt}" '
        f"(measured success {_rate(req.success_rate)}).\n"
        f"Below are {len(req.rollouts)} rollout(s) under this instruction."
    ]
    parts.extend(_rollout_parts(req.rollouts, "this instruction's"))
    parts.append(
        "In ONE sentence, say what the robot tried to do under this instruction and where it went "
        "wrong (or that it completed the task). Reply with only this JSON object:\n"
        '{"summary": "<one sentence>"}'
    )
    return Rendered(system_prompt(req.goal, frames_per_rollout), parts)


def success_prompt(req: SuccessRequest, frames_per_rollout: int) -> Rendered:
    criterion = f"SUCCESS means: {req.success_description}\n" if req.success_description else ""
    parts: list[Part] = [
        f'TASK: "{req.goal}"\n{criterion}Instruction given to the robot: "{req.rollout_prompt}".\n'
        "Frames of one rollout follow; the last frame is the final state."
    ]
    parts.extend(req.rollout.jpegs)
    parts.append(
        f"Did this rollout accomplish the TASK{' as SUCCESS defines it' if criterion else ''} (judge the "
        "final state, not the wording)? Your answer is "
        "a proposal shown to a human operator. Reply with only this JSON object:\n"
        '{"success": true or false, "reason": "<one line citing what you see>"}'
    )
    return Rendered(system_prompt(req.goal, frames_per_rollout), parts)
