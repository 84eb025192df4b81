"""Where candidate prompts come from: the VLM (PDE), or rule-based paraphrases (no VLM).

``RandomParaphraseProposer`` is the paper's "random paraphrases" ablation, not PDE: it rewrites the
canonical prompt with other verbs, spatial references and levels of detail, blind to rollouts. It
exists so the loop runs on machines without a VLM (the demo, CI) and as the fallback when the VLM
keeps failing.

``SimStateProposer`` is a stand-in for the VLM in the sim benchmark: it reads rollout outcomes from
the simulator's state instead of frames and rewords the goal from its own tables.
"""

from __future__ import annotations

import math
import random
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pde_contract.episodes import EpisodeFile
from pde_contract.records import PromptSource
from supervisor.dedup import normalise
from supervisor.vlm.base import VLM, CandidateRequest, CandidateResult


class PromptProposer(ABC):
    source: str = ""  # a pde_contract.records.PromptSource (the store refuses any other word)

    @abstractmethod
    def propose(self, request: CandidateRequest) -> CandidateResult:
        """``request.n_new`` new wordings of ``request.goal`` (fewer if it runs out of ideas)."""


class VLMProposer(PromptProposer):
    source = PromptSource.VLM

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

    source = PromptSource.OFFLINE

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


def vocabulary(*texts: str) -> frozenset[str]:
    """The lower-case words of ``texts`` (letters and apostrophes), for vocabulary comparisons."""
    return frozenset(w for t in texts for w in re.findall(r"[a-z']+", t.lower()))


def rule_vocabulary() -> frozenset[str]:
    """Every word ``RandomParaphraseProposer`` can put into a prompt that the goal did not have."""
    tables = (*_VERB_RULES, *_SPATIAL_RULES, *_SPECIFIC_RULES)
    return vocabulary(*(alt for _, alternatives in tables for alt in alternatives), *_SUFFIXES)


# --- a stand-in for the VLM that reads the simulator ----------------------------------------------


@dataclass(frozen=True)
class RolloutOutcome:
    """What a VLM's summary of one rollout would say, read from the simulator's state as the episode
    file records it (per chunk: the TCP position and ``object_held``, the fingers' contact with an
    object) and the success label."""

    success: bool
    grasped: bool | None  # the hand held an object at some point; None: the robot cannot tell
    held_at_end: bool
    release_to_goal_m: float | None  # where the hand last held it (xy) to the destination; None: unknown

    @classmethod
    def from_episode(
        cls, episode: EpisodeFile, destination_xy_m: tuple[float, float] | None
    ) -> RolloutOutcome:
        states = [c.observation.state for c in episode.chunks]
        held = [s.object_held for s in states]
        if not states or all(h is None for h in held):
            return cls(bool(episode.success), None, False, None)
        last = max((i for i, h in enumerate(held) if h), default=None)
        distance = None
        if last is not None and destination_xy_m is not None:
            xy = states[last].ee_position_m[:2]
            distance = math.hypot(float(xy[0]) - destination_xy_m[0], float(xy[1]) - destination_xy_m[1])
        return cls(bool(episode.success), last is not None, bool(held[-1]), distance)

    def failure(self, off_target_m: float) -> str:
        """The failure mode: "none" (succeeded), "no_grasp", "kept_holding", "off_target", "near_miss",
        or "unknown" (the robot cannot tell what the hand held)."""
        if self.success:
            return "none"
        if self.grasped is None:
            return "unknown"
        if not self.grasped:
            return "no_grasp"
        if self.held_at_end:
            return "kept_holding"
        if self.release_to_goal_m is not None and self.release_to_goal_m > off_target_m:
            return "off_target"
        return "near_miss"


def summarize_outcomes(outcomes: Sequence[RolloutOutcome]) -> str:
    """One line, as the supervisor's summary of a prompt's rollouts would read."""
    if not outcomes:
        return "no rollouts yet"
    n = len(outcomes)
    wins = sum(o.success for o in outcomes)
    grasped = sum(bool(o.grasped) for o in outcomes)
    kept = sum(o.held_at_end for o in outcomes)
    line = (
        f"{wins}/{n} succeeded; the hand held the object in {grasped}/{n}, still held it at the end in {kept}"
    )
    gaps = [o.release_to_goal_m for o in outcomes if o.release_to_goal_m is not None and not o.held_at_end]
    if gaps:
        line += f"; let go {sum(gaps) / len(gaps):.2f} m from the destination on average"
    return line


class OutcomeLog:
    """Rollout outcomes per prompt text, fed with episode files as they finish: the stand-in's view.
    Thread-safe: the supervisor proposes on a worker thread while episodes arrive."""

    def __init__(self, destination_xy_m: tuple[float, float] | None) -> None:
        self.destination_xy_m = destination_xy_m
        self._by_prompt: dict[str, list[RolloutOutcome]] = {}
        self._lock = threading.Lock()

    def add(self, episode: EpisodeFile) -> RolloutOutcome:
        outcome = RolloutOutcome.from_episode(episode, self.destination_xy_m)
        with self._lock:
            self._by_prompt.setdefault(normalise(episode.rollout_prompt), []).append(outcome)
        return outcome

    def __call__(self, prompt: str) -> list[RolloutOutcome]:
        with self._lock:
            return list(self._by_prompt.get(normalise(prompt), []))


# The stand-in's own words. None of them may appear in an SFT recipe's training wordings of the
# target (tests/supervisor/test_sim_state_proposer.py): what it proposes cannot re-find the labels.
_SIM_VERBS = ["position", "deliver", "relocate", "shift", "take"]
_SIM_OBJECTS: dict[str, list[str]] = {
    "green container": ["green container", "green bin"],
    "bowl": ["bowl", "dish"],
    "tape": ["tape", "adhesive tape"],
}
_SIM_PLACES: dict[str, list[str]] = {
    "in front of the camera": ["in front of the camera", "facing the camera", "within view of the camera"],
    "in the bowl": ["in the bowl", "within the bowl", "down in the bowl"],
    "on the top rack": ["on the top rack", "atop the top rack"],
    "on the bottom rack": ["on the bottom rack", "atop the bottom rack"],
}
# How each failure mode reshapes the instruction ({v}: verb, {o}: object, {p}: place), as a VLM that
# watched the rollouts would stress the step that went wrong.
_SIM_TEMPLATES: dict[str, list[str]] = {
    "no_grasp": ["grasp the {o}, then {v} it {p}", "grab the {o} firmly and {v} it {p}"],
    "kept_holding": ["{v} the {o} {p}, then release it", "{v} the {o} {p} and open the fingers"],
    "off_target": ["{v} the {o} directly {p}", "{v} the {o} all the way {p}", "{v} the {o} exactly {p}"],
    "near_miss": ["{v} the {o} {p} and lower it gently", "{v} the {o} {p}, then settle it down slowly"],
    "none": ["{v} the {o} {p}"],
}
_SIM_TEMPLATES["unknown"] = _SIM_TEMPLATES["none"]
_FAILURE_ORDER = ("no_grasp", "kept_holding", "off_target", "near_miss", "unknown")


def sim_stand_in_vocabulary() -> frozenset[str]:
    """Every word ``SimStateProposer`` can put into a prompt."""
    return vocabulary(
        *_SIM_VERBS,
        *(w for names in _SIM_OBJECTS.values() for w in names),
        *(w for places in _SIM_PLACES.values() for w in places),
        *(
            t.replace("{v}", "").replace("{o}", "").replace("{p}", "")
            for ts in _SIM_TEMPLATES.values()
            for t in ts
        ),
    )


class SimStateProposer(PromptProposer):
    """A STAND-IN for the VLM proposer, for the sim benchmark: it reads what the supervisor's
    summaries would say from the simulator (``RolloutOutcome``: grasped, held at the end, where the
    hand let go), finds the commonest failure of the canonical prompt and the failed prompts, and
    rewords the goal to stress that step, with verbs and names from its own tables (independent of
    the SFT labels). Prompts already in the pool lend their verb to half the new ones. No VLM runs."""

    source = PromptSource.OFFLINE  # no VLM involved

    def __init__(
        self,
        outcomes: Callable[[str], Sequence[RolloutOutcome]],
        seed: int = 0,
        off_target_m: float = 0.07,
        max_tries: int = 200,
    ) -> None:
        self.outcomes = outcomes
        self.rng = random.Random(seed)
        self.off_target_m = off_target_m
        self.max_tries = max_tries

    def failure_mode(self, request: CandidateRequest) -> str:
        counts = {mode: 0 for mode in _FAILURE_ORDER}
        for text in (request.goal, *(p.text for p in request.failed)):
            for o in self.outcomes(text):
                mode = o.failure(self.off_target_m)
                if mode in counts:
                    counts[mode] += 1
        best = max(_FAILURE_ORDER, key=lambda m: counts[m])  # ties: the earlier step of the task
        return best if counts[best] else "unknown"

    def wording(self, goal: str, mode: str, verbs: Sequence[str]) -> str:
        text = goal.strip().lower()
        place = next((p for p in _SIM_PLACES if text.endswith(p)), None)
        match = re.search(r"\bput (?:the )?(.+?)\s*$", text[: len(text) - len(place)] if place else text)
        if place is None or match is None:  # a goal outside the tables: nothing to reword (dropped as known)
            return text
        obj = match.group(1).strip()
        template = self.rng.choice(_SIM_TEMPLATES[mode])
        filled = template.format(
            v=self.rng.choice(list(verbs)),
            o=self.rng.choice(_SIM_OBJECTS.get(obj, [obj])),
            p=self.rng.choice(_SIM_PLACES[place]),
        )
        return text[: match.start()] + filled

    def propose(self, request: CandidateRequest) -> CandidateResult:
        mode = self.failure_mode(request)
        pool_verbs = [w for p in request.pool for w in p.text.lower().split()[:1] if w in _SIM_VERBS]
        known = {normalise(request.goal)} | {normalise(p.text) for p in (*request.pool, *request.failed)}
        out: list[str] = []
        for _ in range(self.max_tries):
            if len(out) >= request.n_new:
                break
            verbs = pool_verbs if pool_verbs and self.rng.random() < 0.5 else _SIM_VERBS
            text = self.wording(request.goal, mode, verbs)
            if normalise(text) not in known:
                known.add(normalise(text))
                out.append(text)
        summaries = {
            p.text: summarize_outcomes(self.outcomes(p.text)) for p in (*request.pool, *request.failed)
        }
        goal_line = summarize_outcomes(self.outcomes(request.goal))
        return CandidateResult(
            new_prompts=out,
            summaries={t: line for t, line in summaries.items() if self.outcomes(t)},
            analysis=f"sim stand-in (no VLM): commonest failure {mode}; canonical prompt: {goal_line}",
            source=self.source,
        )


class ScriptedProposer(PromptProposer):
    """The next wordings of a fixed list not tried yet, K at a time, blind to rollouts: e.g. the
    SFT's training wordings as an oracle pool in a benchmark (an upper bound, not a VLM result)."""

    source = PromptSource.OFFLINE  # no VLM involved

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
    # the sim stand-in's view of the rollouts (e.g. an OutcomeLog fed with each finished episode)
    outcomes: Callable[[str], Sequence[RolloutOutcome]] | None = None


# Proposers by name, for a supervisor run without a VLM endpoint (benchmarks): one line each. A
# proposer's ``source`` is stored with its prompts and is a pde_contract.records.PromptSource.
PROPOSERS: dict[str, Callable[[ProposerOptions], PromptProposer]] = {
    "paraphrase": lambda o: RandomParaphraseProposer(o.seed),
    "scripted": lambda o: ScriptedProposer(o.wordings),
    "standin": lambda o: SimStateProposer(_outcomes_of(o), o.seed),
}


def _outcomes_of(options: ProposerOptions) -> Callable[[str], Sequence[RolloutOutcome]]:
    if options.outcomes is None:
        raise ValueError(
            "the sim stand-in proposer reads rollout outcomes: pass "
            "ProposerOptions(outcomes=OutcomeLog(...)) and add each finished episode to it"
        )
    return options.outcomes


def make_proposer(name: str, options: ProposerOptions) -> PromptProposer:
    """The proposer registered as ``name``; a ValueError lists the names there are."""
    try:
        factory = PROPOSERS[name]
    except KeyError:
        raise ValueError(f"unknown proposer {name!r}; choose one of {', '.join(PROPOSERS)}") from None
    return factory(options)
