"""The offline paraphrase proposer and the VLM/operator confusion matrix."""

from __future__ import annotations

import pytest

from supervisor.dedup import normalise
from supervisor.proposers import RandomParaphraseProposer
from supervisor.scoring import confusion
from supervisor.vlm.base import CandidateRequest, PromptEvidence

TASKS = [
    "put the green container in the bowl",
    "put the tape on the top rack",
    "put the bowl in front of the camera",
    "open the top drawer and put the bowl inside",
    "open the bottom drawer and put the bowl inside",
    "put the green container on the bottom rack",
]


def test_offline_paraphrases_are_new_and_keep_the_objects() -> None:
    proposer = RandomParaphraseProposer(seed=1)
    for goal in TASKS:
        failed = [PromptEvidence(goal.replace("put", "place", 1), 0.0, 10)]
        out = proposer.propose(CandidateRequest("t", goal, None, "unknown", 1, 5, [], failed))
        assert out.source == "offline" and len(out.new_prompts) == 5, (goal, out.new_prompts)
        norms = {normalise(p) for p in out.new_prompts}
        assert len(norms) == 5 and normalise(goal) not in norms and normalise(failed[0].text) not in norms
        # what the task is about survives the rewording
        for p in out.new_prompts:
            assert ("drawer" in p) == ("drawer" in goal) and ("camera" in p) == ("camera" in goal)


def test_offline_proposer_is_reproducible() -> None:
    req = CandidateRequest("t", TASKS[0], None, "unknown", 1, 3, [], [])
    a = RandomParaphraseProposer(seed=7).propose(req).new_prompts
    assert a == RandomParaphraseProposer(seed=7).propose(req).new_prompts


def test_confusion_matrix() -> None:
    c = confusion(
        [
            (True, True),
            (True, False),
            (False, True),
            (False, False),
            (False, False),
            (True, None),
            (None, True),
            (None, None),
        ]
    )
    assert (c.true_pos, c.false_pos, c.false_neg, c.true_neg) == (1, 1, 1, 2)
    assert (c.unlabelled, c.no_proposal, c.n) == (1, 1, 5)
    assert c.agreement == 3 / 5 and c.precision == 0.5 and c.recall == 0.5
    assert confusion([]).agreement is None


def test_proposers_are_made_by_name_and_an_unknown_name_lists_the_known_ones() -> None:
    from supervisor.proposers import PROPOSERS, ProposerOptions, ScriptedProposer, make_proposer

    assert isinstance(make_proposer("paraphrase", ProposerOptions(seed=1)), RandomParaphraseProposer)
    with pytest.raises(ValueError) as refused:
        make_proposer("gpt-9", ProposerOptions())
    assert all(name in str(refused.value) for name in PROPOSERS)
    wordings = ("place the green container in the bowl", "set the green container into the bowl", "drop it")
    scripted = make_proposer("scripted", ProposerOptions(wordings=wordings))
    assert isinstance(scripted, ScriptedProposer)
    goal = "put the green container in the bowl"
    tried = [PromptEvidence(wordings[0], 0.0, 10)]
    out = scripted.propose(CandidateRequest("t", goal, None, "unknown", 2, 5, [], tried))
    assert out.new_prompts == list(wordings[1:])  # the untried ones, in order


def test_every_named_proposer_has_a_source_the_store_keeps() -> None:
    from pde_contract.records import PromptSource
    from supervisor.proposers import PROPOSERS, ProposerOptions

    for name, factory in PROPOSERS.items():
        options = ProposerOptions(wordings=("place it in the bowl",), outcomes=lambda _: [])
        assert factory(options).source in set(PromptSource), name
