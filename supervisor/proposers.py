"""Where candidate prompts come from: the VLM (PDE), or rule-based paraphrases (no VLM).

``RandomParaphraseProposer`` is the paper's "random paraphrases" ablation, not PDE: it rewrites the
canonical prompt with other verbs, spatial references and levels of detail, blind to rollouts. It
exists so the loop runs on machines without a VLM (the demo, CI) and as the fallback when the VLM
keeps failing.
"""

from __future__ import annotations

import random
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from supervisor.dedup import normalise
from supervisor.vlm.base import VLM, CandidateRequest, CandidateResult


class PromptProposer(ABC):
    source: str = ""

    @abstractmethod
    def propose(self, request: CandidateRequest) -> CandidateResult:
        """``request.n_new`` new wordings of ``request.goal`` (fewer if it runs out of ideas)."""


class VLMProposer(PromptProposer):
    source = "vlm"

    def __init__(self, vlm: VLM) -> None:
        self.vlm = vlm

    def propose(self, request: CandidateRequest) -> CandidateResult:
        return self.vlm.propose_prompts(request)


# (pattern, alternatives): each rule rewrites one part of a tabletop instruction.
_VERB_RULES: list[tuple[str, list[str]]] = [
    (r"^put\b", ["place", "move", "set", "transfer", "carry"]),
    (r"\band put\b", ["and place", "and drop", "and set"]),
    (r"^open\b", ["pull open", "slide open"]),
]
_SPATIAL_RULES: list[tuple[str, list[str]]] = [
    (r"\bin the bowl\b", ["into the bowl", "inside the bowl"]),
    (r"\bon the top rack\b", ["onto the upper rack", "on the top level of the rack"]),
    (r"\bon the bottom rack\b", ["onto the lower rack", "on the bottom level of the rack"]),
    (r"\bin front of the camera\b", ["right in front of the camera", "close to the camera"]),
    (r"\btop drawer\b", ["upper drawer"]),
    (r"\bbottom drawer\b", ["lower drawer"]),
    (r"\binside\b$", ["into it", "in it"]),
]
_SPECIFIC_RULES: list[tuple[str, list[str]]] = [
    (r"\bgreen container\b", ["green plastic container", "small green container"]),
    (r"\bthe tape\b", ["the roll of tape", "the tape roll"]),
    (r"\bthe bowl\b(?! inside)", ["the round bowl", "the bowl"]),
]
_SUFFIXES = ["", "", " carefully", " and let go", " using the gripper"]


class RandomParaphraseProposer(PromptProposer):
    """Rule-based paraphrases of the canonical prompt (the paper's random-paraphrase ablation)."""

    source = "offline"

    def __init__(self, seed: int = 0, max_tries: int = 200) -> None:
        self.rng = random.Random(seed)
        self.max_tries = max_tries

    def paraphrase(self, goal: str) -> str:
        text = goal.strip().lower()
        for rules in (_VERB_RULES, _SPATIAL_RULES, _SPECIFIC_RULES):
            for pattern, alternatives in rules:
                if re.search(pattern, text) and self.rng.random() < 0.6:
                    text = re.sub(pattern, self.rng.choice(alternatives), text, count=1)
        return text + self.rng.choice(_SUFFIXES)

    def propose(self, request: CandidateRequest) -> CandidateResult:
        known = {normalise(request.goal)}
        known |= {normalise(p.text) for p in (*request.pool, *request.failed)}
        out: list[str] = []
        for _ in range(self.max_tries):
            if len(out) >= request.n_new:
                break
            text = self.paraphrase(request.goal)
            if normalise(text) not in known:
                known.add(normalise(text))
                out.append(text)
        return CandidateResult(
            new_prompts=out,
            summaries={},
            analysis="offline rule-based paraphrases (random-paraphrase ablation; no VLM involved)",
            source=self.source,
        )


class ScriptedProposer(PromptProposer):
    """The next wordings of a fixed list not tried yet, K at a time, blind to rollouts: e.g. the
    SFT's training wordings as an oracle pool in a benchmark (an upper bound, not a VLM result)."""

    source = "offline"  # no VLM involved (the store keeps a prompt's source: pde_storage PROMPT_SOURCES)

    def __init__(self, wordings: tuple[str, ...]) -> None:
        if not wordings:
            raise ValueError("a scripted proposer needs wordings to offer; none were given")
        self.wordings = wordings

    def propose(self, request: CandidateRequest) -> CandidateResult:
        known = {normalise(request.goal)} | {normalise(p.text) for p in (*request.pool, *request.failed)}
        fresh = [w for w in self.wordings if normalise(w) not in known]
        return CandidateResult(
            new_prompts=fresh[: request.n_new], summaries={}, analysis="scripted wordings", source=self.source
        )


@dataclass(frozen=True)
class ProposerOptions:
    """What a named proposer may be built from (add a field when a new proposer needs one)."""

    seed: int = 0
    wordings: tuple[str, ...] = ()  # the scripted proposer's list


# Proposers by name, for a supervisor run without a VLM endpoint (benchmarks): one line each. A
# proposer's ``source`` is stored with its prompts and must be one of pde_storage.rows.PROMPT_SOURCES.
PROPOSERS: dict[str, Callable[[ProposerOptions], PromptProposer]] = {
    "paraphrase": lambda o: RandomParaphraseProposer(o.seed),
    "scripted": lambda o: ScriptedProposer(o.wordings),
}


def make_proposer(name: str, options: ProposerOptions) -> PromptProposer:
    """The proposer registered as ``name``; a ValueError lists the names there are."""
    try:
        factory = PROPOSERS[name]
    except KeyError:
        raise ValueError(f"unknown proposer {name!r}; choose one of {', '.join(PROPOSERS)}") from None
    return factory(options)
