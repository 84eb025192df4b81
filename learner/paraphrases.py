"""Wording variety for SFT: each demonstration sample is labelled with its task's canonical prompt
(probability ``CANONICAL_PROB``) or one of these paraphrases, so the policy learns that different
wordings of a task mean the same behaviour (a language prior that prompt exploration can move).
Paraphrases vary the verb, object naming and spatial reference, like the supervisor's guidelines.

A ``WordingTable`` (``pde learner sft --wordings FILE.json``) overrides the labels per task, e.g. to
train one task only under distant wordings so that its canonical prompt is weak (the language
premise, learner/recipes/language_premise.json). The file::

    {"about": "free text",
     "tasks": {"<task name>": {"canonical_prob": 0.0,        # default CANONICAL_PROB
                               "wordings": ["...", "..."],   # default: the task's PARAPHRASES
                               "extra": {"<wording>": 0.3}}}} # default: none

A sample of a listed task is labelled with one of the ``extra`` wordings, each with its own
probability (e.g. another task's canonical prompt as a decoy); else with its canonical prompt with
probability ``canonical_prob``; else with one of ``wordings``, uniformly. Tasks not in the table
keep the default.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CANONICAL_PROB = 0.5

PARAPHRASES: dict[str, list[str]] = {
    "put the green container in the bowl": [
        "place the green container into the bowl",
        "drop the green box in the bowl",
        "move the green container so it sits inside the bowl",
        "pick up the green container and put it in the bowl",
    ],
    "put the tape on the top rack": [
        "place the tape roll on the upper rack",
        "move the tape onto the top shelf of the rack",
        "pick up the tape and set it on the top rack",
        "put the roll of tape on the higher rack level",
    ],
    "put the bowl on the top rack": [
        "place the bowl on the upper rack",
        "move the bowl onto the top shelf of the rack",
        "pick up the bowl and set it on the top rack",
        "lift the bowl onto the higher rack level",
    ],
    "put the green container in front of the camera": [
        "hold the green container up in front of the camera",
        "bring the green box in front of the camera",
        "move the green container so the camera sees it up close",
        "show the green container to the camera",
    ],
    "put the bowl in front of the camera": [
        "hold the bowl up in front of the camera",
        "bring the bowl in front of the camera",
        "move the bowl so the camera sees it up close",
        "show the bowl to the camera",
    ],
    "open the top drawer and put the bowl inside": [
        "pull the upper drawer open and place the bowl in it",
        "open the top drawer, then put the bowl into it",
        "slide the top drawer out and drop the bowl inside",
        "put the bowl into the top drawer after opening it",
    ],
    "open the bottom drawer and put the bowl inside": [
        "pull the lower drawer open and place the bowl in it",
        "open the bottom drawer, then put the bowl into it",
        "slide the bottom drawer out and drop the bowl inside",
        "put the bowl into the bottom drawer after opening it",
    ],
    "open the top drawer and put the tape inside": [
        "pull the upper drawer open and place the tape in it",
        "open the top drawer, then put the tape into it",
        "slide the top drawer out and drop the tape roll inside",
        "put the tape into the top drawer after opening it",
    ],
    "open the top drawer and put the green container inside": [
        "pull the upper drawer open and place the green container in it",
        "open the top drawer, then put the green box into it",
        "slide the top drawer out and drop the green container inside",
        "put the green container into the top drawer after opening it",
    ],
    "put the green container on the bottom rack": [
        "place the green container on the lower rack",
        "move the green box onto the bottom shelf of the rack",
        "pick up the green container and set it on the bottom rack",
        "put the green container on the lower rack level",
    ],
}


@dataclass(frozen=True)
class TaskWordings:
    """How the SFT samples of one task are labelled (see the module docstring)."""

    canonical_prob: float = CANONICAL_PROB
    """Probability of the canonical prompt (after the ``extra`` draws)."""
    wordings: tuple[str, ...] | None = None
    """Other training wordings, drawn uniformly; None = the task's PARAPHRASES."""
    extra: tuple[tuple[str, float], ...] = ()
    """(wording, probability) pairs drawn first, each with its own probability."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.canonical_prob <= 1.0:
            raise ValueError(f"canonical_prob must be in [0, 1], got {self.canonical_prob}")
        if self.wordings is not None and any(not w.strip() for w in self.wordings):
            raise ValueError(f"empty training wording in {list(self.wordings)}")
        probs = [p for _, p in self.extra]
        if any(not 0.0 <= p <= 1.0 for p in probs) or sum(probs) > 1.0 + 1e-9:
            raise ValueError(f"extra wording probabilities must be in [0, 1] and sum to <= 1, got {probs}")

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"canonical_prob": self.canonical_prob}
        if self.wordings is not None:
            out["wordings"] = list(self.wordings)
        if self.extra:
            out["extra"] = dict(self.extra)
        return out


@dataclass(frozen=True)
class WordingTable:
    """Per-task training wordings for SFT, keyed by task name; tasks not listed keep the default."""

    tasks: dict[str, TaskWordings] = field(default_factory=dict)
    about: str = ""

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> WordingTable:
        unknown = set(raw) - {"about", "tasks"}
        if unknown or not isinstance(raw.get("tasks"), dict):
            raise ValueError(
                f"a wording table is {{'about': str, 'tasks': {{task: {{...}}}}}}; got keys {sorted(raw)}"
            )
        tasks: dict[str, TaskWordings] = {}
        for task, entry in raw["tasks"].items():
            bad = set(entry) - {"canonical_prob", "wordings", "extra"}
            if bad:
                raise ValueError(
                    f"task {task}: unknown keys {sorted(bad)} (known: canonical_prob, wordings, extra)"
                )
            wordings = entry.get("wordings")
            tasks[task] = TaskWordings(
                canonical_prob=float(entry.get("canonical_prob", CANONICAL_PROB)),
                wordings=None if wordings is None else tuple(str(w) for w in wordings),
                extra=tuple((str(w), float(p)) for w, p in entry.get("extra", {}).items()),
            )
        return cls(tasks=tasks, about=str(raw.get("about", "")))

    @classmethod
    def load(cls, path: str | Path) -> WordingTable:
        try:
            raw = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"wording table {path}: {e}") from e
        try:
            return cls.from_dict(raw)
        except (ValueError, TypeError, AttributeError) as e:
            raise ValueError(f"wording table {path}: {e}") from e

    def as_dict(self) -> dict[str, Any]:
        """The table as JSON-able data (``about`` left out: it does not change the labels)."""
        return {task: self.tasks[task].as_dict() for task in sorted(self.tasks)}

    def for_task(self, task: str) -> TaskWordings:
        return self.tasks.get(task, TaskWordings())


def training_prompt(
    canonical: str, rng: random.Random, task: str = "", table: WordingTable | None = None
) -> str:
    """The prompt an SFT sample is labelled with: by default its canonical prompt (probability
    CANONICAL_PROB) or one of its paraphrases; with a ``table``, as the table says for ``task``."""
    spec = table.for_task(task) if table is not None else TaskWordings()
    if spec.extra:  # one draw for all extras, so each has exactly its own probability
        u, cumulative = rng.random(), 0.0
        for wording, prob in spec.extra:
            cumulative += prob
            if u < cumulative:
                return wording
    options = PARAPHRASES.get(canonical, []) if spec.wordings is None else list(spec.wordings)
    if not options or rng.random() < spec.canonical_prob:
        return canonical
    return options[rng.randrange(len(options))]
