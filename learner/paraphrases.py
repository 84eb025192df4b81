"""Wording variety for SFT: each demonstration sample is labelled with its task's canonical prompt
(probability ``CANONICAL_PROB``) or one of these paraphrases, so the policy learns that different
wordings of a task mean the same behaviour (a language prior that prompt exploration can move).
Paraphrases vary the verb, object naming and spatial reference, like the supervisor's guidelines."""

from __future__ import annotations

import random

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


def training_prompt(canonical: str, rng: random.Random) -> str:
    """The prompt an SFT sample is labelled with: canonical or one of its paraphrases."""
    options = PARAPHRASES.get(canonical, [])
    if not options or rng.random() < CANONICAL_PROB:
        return canonical
    return options[rng.randrange(len(options))]
