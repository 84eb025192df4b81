"""The premise calibration command (bench/bench_premise_calibrate.py): its table and its verdict."""

from __future__ import annotations

import importlib
import json
from types import ModuleType

import pytest

from learner.paraphrases import WordingTable
from tests.learner.test_premise_recipe import ROOT


@pytest.fixture
def calib(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    return importlib.import_module("bench_premise_calibrate")


def test_table_at_changes_only_the_targets_canonical_probability(calib: ModuleType) -> None:
    recipe = json.loads(calib.RECIPE.read_text())
    table = calib.table_at(recipe, 0.05)
    assert table["tasks"][calib.TARGET_TASK]["canonical_prob"] == 0.05
    assert recipe["tasks"][calib.TARGET_TASK]["canonical_prob"] != 0.05  # the recipe is not touched
    table["tasks"][calib.TARGET_TASK]["canonical_prob"] = recipe["tasks"][calib.TARGET_TASK]["canonical_prob"]
    assert table == recipe
    assert (
        WordingTable.from_dict(calib.table_at(recipe, 0.05)).for_task(calib.TARGET_TASK).canonical_prob
        == 0.05
    )
    # the chosen p and the description may change without invalidating measured cells; the labels may not
    other = calib.table_at(recipe, 0.3) | {"about": "changed"}
    assert calib.wordings_sha256(other) == calib.wordings_sha256(recipe)
    other["tasks"][calib.TARGET_TASK]["wordings"] = ["lift the green tub"]
    assert calib.wordings_sha256(other) != calib.wordings_sha256(recipe)


def test_the_committed_calibration_matches_the_recipe(calib: ModuleType) -> None:
    result = json.loads(calib.RESULTS.read_text())
    recipe = json.loads(calib.RECIPE.read_text())
    assert result["setup"]["wordings_sha256"] == calib.wordings_sha256(recipe)
    assert result["setup"]["scene_seeds"] == [7000, 7099]  # disjoint from evaluation (100000..)
    p = recipe["tasks"][calib.TARGET_TASK]["canonical_prob"]
    row = result["per_canonical_prob"][f"{p:g}"]
    assert len(row["sft_seeds_in_band"]) >= 2, "the recipe's p needs >= 2 SFT seeds inside 10-20%"


def test_in_band_needs_every_sft_seed_inside(calib: ModuleType) -> None:
    cells = [
        {"canonical_prob": 0.07, "sft_seed": 0, "success_rate": 0.12},
        {"canonical_prob": 0.07, "sft_seed": 1, "success_rate": 0.10},
        {"canonical_prob": 0.08, "sft_seed": 0, "success_rate": 0.22},
        {"canonical_prob": 0.08, "sft_seed": 1, "success_rate": 0.15},
        {"canonical_prob": 0.09, "sft_seed": 0, "success_rate": 0.15},  # one seed is not enough
    ]
    assert calib.in_band(cells) == [0.07]
    summary = calib.per_prob(cells)
    assert summary["0.08"]["rates"] == [0.22, 0.15] and summary["0.08"]["mean"] == pytest.approx(0.185)
    assert summary["0.08"]["ci95_over_sft_seeds"][0] < 0.15 < 0.22 < summary["0.08"]["ci95_over_sft_seeds"][1]
    assert "ci95_over_sft_seeds" not in summary["0.09"]
    assert summary["0.07"]["sft_seeds_in_band"] == [0, 1] and summary["0.08"]["sft_seeds_in_band"] == [1]


def test_bad_probabilities_are_refused(calib: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        calib.main(["--canonical-probs", "1.5"])
    assert "--canonical-probs needs values in [0, 1]" in capsys.readouterr().err


def test_no_proposer_re_finds_the_paper_regime_labels(calib: ModuleType) -> None:
    def training(recipe: str) -> list[str]:
        table = json.loads((ROOT / "learner" / "recipes" / recipe).read_text())
        return list(table["tasks"][calib.TARGET_TASK]["wordings"])

    o = calib.proposer_overlap(training("paper_regime.json"), seeds=range(3))
    for name in ("rule_paraphrase", "sim_stand_in"):
        assert o[name]["exact_matches"] == 0 and o[name]["training_verb_share"] == 0.0, name
        assert min(o[name]["nearest_word_edit"]) >= 3, name
    # on the decoy recipe the rule-based proposer speaks the training wordings' verbs
    decoy = calib.proposer_overlap(training("language_premise.json"), seeds=range(3))["rule_paraphrase"]
    assert decoy["training_verb_share"] > 0.4 and min(decoy["nearest_word_edit"]) <= 1
