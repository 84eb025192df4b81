"""The PDE benchmark's statistics (bench/_pde_stats.py): seed-level intervals against hand-computed
references, the overlap metrics on a hand-computed example, the result file's blocks and schema."""

from __future__ import annotations

import importlib
import math
from types import ModuleType

import pytest

from tests.learner.test_premise_recipe import ROOT


@pytest.fixture
def stats(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # the module imports bench/_common.py
    return importlib.import_module("_pde_stats")


def test_t_quantile_matches_the_table(stats: ModuleType) -> None:
    # two-sided 95% critical values from any t table
    for df, want in ((1, 12.7062), (2, 4.3027), (5, 2.5706), (7, 2.3646), (15, 2.1314), (30, 2.0423)):
        assert stats.t_quantile(0.975, df) == pytest.approx(want, abs=1e-4)
    assert stats.t_cdf(0.0, 4) == 0.5 and stats.t_cdf(-2.7764, 4) == pytest.approx(0.025, abs=1e-5)


def test_t_interval_against_a_hand_computed_reference(stats: ModuleType) -> None:
    # gains of six seeds: mean 1.05 / 6 = 0.175; squared deviations sum to 0.04375, so
    # sd = sqrt(0.04375 / 5) = 0.0935414, se = sd / sqrt(6) = 0.0381881; t(0.975, 5) = 2.570582,
    # half-width 0.0981650: [0.0768350, 0.2731650]
    gains = [0.10, 0.25, 0.05, 0.20, 0.15, 0.30]
    low, high = stats.t_interval(gains)
    assert low == pytest.approx(0.0768350, abs=1e-6) and high == pytest.approx(0.2731650, abs=1e-6)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        stats.t_interval([0.1])


def test_bootstrap_interval_is_inside_the_range_and_reproducible(stats: ModuleType) -> None:
    gains = [0.10, 0.25, 0.05, 0.20, 0.15, 0.30]
    low, high = stats.bootstrap_interval(gains)
    assert 0.05 < low < 0.175 < high < 0.30
    assert (low, high) == stats.bootstrap_interval(gains)
    assert stats.bootstrap_interval([0.2, 0.2, 0.2]) == (pytest.approx(0.2), pytest.approx(0.2))


def _seed(seed: int, start: float, end: float) -> dict[str, float | int]:
    return {
        "seed": seed,
        "eval_episodes": 100,
        "success_start": start,
        "success_end": end,
        "env_episodes": 320,
    }


def test_runs_pair_on_sft_seed_and_rl_seed(stats: ModuleType) -> None:
    rows = [_seed(0, 0.1, 0.2) | {"sft_seed": 0}, _seed(0, 0.2, 0.2) | {"sft_seed": 2}]
    other = [_seed(0, 0.1, 0.1) | {"sft_seed": 0}, _seed(0, 0.2, 0.4) | {"sft_seed": 2}]
    c = stats.contrast(rows, other)  # differences +0.1 (SFT seed 0) and -0.2 (SFT seed 2)
    assert c["paired"] and c["n_seeds"] == 2 and c["mean"] == pytest.approx(-0.05)


def test_paired_contrast_is_the_t_interval_of_per_seed_differences(stats: ModuleType) -> None:
    noise = [_seed(s, 0.15, 0.15 + g) for s, g in enumerate([0.05, 0.00, 0.10, 0.05, 0.00, 0.05])]
    mixed = [_seed(s, 0.15, 0.15 + g) for s, g in enumerate([0.15, 0.25, 0.15, 0.25, 0.15, 0.35])]
    arms = {"noise": {"per_seed": noise}, "pde_mixed": {"per_seed": mixed}}
    c = stats.primary_contrast(arms)
    # differences 0.10, 0.25, 0.05, 0.20, 0.15, 0.30: the reference above
    assert c["paired"] and c["mean"] == pytest.approx(0.175)
    assert c["ci95"] == [pytest.approx(0.0768350, abs=1e-6), pytest.approx(0.2731650, abs=1e-6)]
    assert c["ci95_bootstrap"][0] > 0
    unpaired = stats.contrast(mixed, noise[:4])
    assert not unpaired["paired"] and unpaired["n_seeds"] == [6, 4]
    assert unpaired["ci95"][0] < unpaired["mean"] < unpaired["ci95"][1]
    arm = stats.arm_stats(mixed)
    assert arm["per_seed"][0]["end"]["successes"] == 30 and arm["gain"]["mean"] == pytest.approx(
        0.2167, abs=1e-4
    )
    with pytest.raises(ValueError, match="missing"):
        stats.primary_contrast({"noise": arms["noise"]})


def test_secondary_contrasts_pair_only_runs_both_arms_finished(stats: ModuleType) -> None:
    mixed = [_seed(s, 0.1, 0.1 + g) for s, g in enumerate([0.2, 0.3, 0.1])]
    canon = [_seed(s, 0.1, 0.1 + g) for s, g in enumerate([0.1, 0.1])]  # seed 2 not run yet
    out = {
        c["contrast"]: c
        for c in stats.secondary_contrasts(
            {"pde_mixed": {"per_seed": mixed}, "pde_canonical": {"per_seed": canon}}
        )
    }
    ratio = out["pde_mixed gain - pde_canonical gain (final checkpoint)"]
    # pairs: seeds 0 and 1 only, differences 0.1 and 0.2
    assert ratio["paired"] and ratio["n_seeds"] == 2 and ratio["mean"] == pytest.approx(0.15)
    oracle = out["oracle gain - pde_mixed gain (final checkpoint)"]
    assert oracle["n_seeds"] == 0 and oracle["mean"] is None and oracle["ci95"] is None


def test_target_needs_twice_the_noise_gain_and_an_interval_above_zero(stats: ModuleType) -> None:
    def verdict(pde: float, noise: float, low: float) -> object:
        arm = {"pde_mixed": {"gain": {"mean": pde}}, "noise": {"gain": {"mean": noise}}}
        return stats.target_block(arm, {"ci95": [low, 1.0]})["met"]

    assert verdict(0.4, 0.2, 0.01) is True
    assert verdict(0.39, 0.2, 0.01) is False  # not twice
    assert verdict(0.4, 0.2, -0.01) is False  # interval reaches zero
    assert stats.target_block({"noise": {"gain": {"mean": 0.2}}}, {"ci95": None})["met"] is None


def test_mechanism_reads_alpha_pool_share_and_success_per_update(stats: ModuleType) -> None:
    its = [
        {
            "update": 1,
            "env_episodes": 104,
            "alpha": 0.25,
            "pool_size": 2,
            "pool_prompt_share": 0.75,
            "pool_success": 0.2,
            "canonical_success": 0.0,
            "approx_kl": 0.004,
            "early_stop": 0.0,
            "mech/canonical/kl_new_old": 0.1,
        },
        {
            "update": 2,
            "env_episodes": 136,
            "alpha": 0.5,
            "pool_size": 3,
            "pool_prompt_share": 0.25,
            "pool_success": None,
            "canonical_success": 0.5,
            "approx_kl": 0.02,
            "early_stop": 1.0,
            "mech/canonical/kl_new_old": 0.5,
        },
    ]
    prompts = [
        {"text": "c", "status": "canonical", "n": 40, "successes": 4},
        {"text": "p1", "status": "pool", "n": 30, "successes": 9},
        {"text": "p2", "status": "pool", "n": 10, "successes": 1},
        {"text": "r", "status": "rejected", "n": 8, "successes": 0},
    ]
    run = _seed(0, 0.1, 0.3) | {"sft_seed": 2, "iterations": its, "prompts": prompts}
    m = stats.mechanism({"pde_mixed": {"per_seed": [run]}})["pde_mixed"]
    r = m["runs"][0]
    assert r["alpha"] == [0.25, 0.5] and r["env_episodes_at_first_update"] == 104
    assert r["pool_size_end"] == 3 and (r["proposals_admitted"], r["proposals_rejected"]) == (2, 1)
    assert r["pool_prompt_share_mean"] == pytest.approx(0.5) and r["pool_success_mean"] == pytest.approx(0.2)
    assert m["mean_alpha_first"] == 0.25 and m["mean_alpha_last"] == 0.5
    assert m["mean_canonical_success_train"] == pytest.approx(0.25)
    # update size and what the search found, pooled over every episode each prompt ran
    assert r["update_approx_kl"] == [0.004, 0.02] and m["early_stopped_frac"] == pytest.approx(0.5)
    assert m["median_update_canonical_kl"] == pytest.approx(0.3)
    assert m["pool_prompts_train_rate"] == pytest.approx(10 / 40)
    assert m["canonical_prompt_train_rate"] == pytest.approx(4 / 40)


def test_overlap_on_a_hand_computed_example(stats: ModuleType) -> None:
    training = [
        "place the green container close to the camera",
        "carry the small green container close to the camera",
    ]
    proposals = [
        "Place the green container close to the camera.",  # exact (case, punctuation): 0 edits
        "place the green container in front of the camera",  # close to -> in front of: 2 subs + 1 insert
        "move the box",  # vs the first: move/place, box/green, 5 deletions = 7 (8 vs the second)
    ]
    o = stats.overlap(proposals, training)
    assert o["exact_matches"] == 1 and o["n_proposals"] == 3
    assert o["training_verb_share"] == pytest.approx(2 / 3)
    assert o["nearest_word_edit"] == [0, 3, 7] and o["nearest_word_edit_median"] == 3
    assert o["within_2_word_edits_share"] == pytest.approx(1 / 3)
    assert stats.word_edit_distance("a b c", "") == 3 and stats.word_edit_distance("a b", "b a") == 2


def test_result_blocks_and_schema(stats: ModuleType) -> None:
    arms = {
        "noise": {"per_seed": [_seed(s, 0.15, 0.2) for s in range(3)]},
        "pde_mixed": {"per_seed": [_seed(s, 0.15, 0.3 + 0.05 * s) for s in range(3)]},
    }
    premise = stats.premise_block(
        [{"sft_seed": 0, "successes": 14, "n": 100}, {"sft_seed": 1, "successes": 11, "n": 100}],
        decoy=False,
        overlap_by_proposer={"rule": stats.overlap(["move it"], ["hold the green box up near the lens"])},
    )
    assert premise["canonical_start"][0]["rate"] == 0.14 and premise["decoy"] is False
    frozen = stats.frozen_block()
    assert len(frozen["commit"]) == 40 and set(frozen["sha256"]) == set(stats.FROZEN_FILES)
    assert all(len(h) == 64 for h in frozen["sha256"].values())
    result = {
        "arms": arms,
        "premise": premise,
        "primary_contrast": stats.primary_contrast(arms),
        "frozen": frozen,
    }
    assert stats.schema_errors(result) == []
    # bench/bench_pde.py's merged file: frozen per SFT seed with the commits; the blocks joined in
    merged = stats.add_blocks({"arms": arms, "frozen": {"commits": ["abc"], "sft0": {}}}, premise)
    assert stats.schema_errors(merged) == [] and merged["frozen"]["premise_and_proposers"]["sha256"]
    assert set(merged["arm_stats"]) == {"noise", "pde_mixed"}
    bare = {**merged, "frozen": {"commits": ["abc"]}}
    assert stats.schema_errors(bare) == ["frozen: no file hashes (sha256)"]
    assert math.isclose(result["primary_contrast"]["mean"], 0.15)
    del result["arms"]["noise"]["per_seed"][1]["env_episodes"]
    del result["frozen"]
    result["primary_contrast"]["ci95"] = [0.3, 0.1]
    assert stats.schema_errors(result) == [
        "arms.noise.per_seed[1].env_episodes: missing",
        "frozen: missing, or without the commit the run was made at",
        "primary_contrast.ci95: want [low, high], got [0.3, 0.1]",
    ]


def test_calibration_rows_pick_the_recipes_probability(stats: ModuleType) -> None:
    calibration = {
        "cells": [
            {"canonical_prob": 0.07, "sft_seed": 0, "successes": 12, "episodes": 100},
            {"canonical_prob": 0.08, "sft_seed": 0, "successes": 22, "episodes": 100},
            {"canonical_prob": 0.08, "sft_seed": 1, "successes": 8, "episodes": 100},
        ]
    }
    rows = stats.calibration_rows(calibration, 0.08)
    assert rows == [{"sft_seed": 0, "successes": 22, "n": 100}, {"sft_seed": 1, "successes": 8, "n": 100}]
    assert [r["rate"] for r in stats.premise_block(rows, False, {})["canonical_start"]] == [0.22, 0.08]
    with pytest.raises(ValueError, match=r"no cell at canonical_prob 0\.1"):
        stats.calibration_rows(calibration, 0.1)


def test_the_clustered_interval_takes_the_sft_seed_as_the_unit(stats: ModuleType) -> None:
    # SFT seed 0's runs differ by 0.1, 0.2, 0.3 (mean 0.2); SFT seed 2's by 0.0, 0.0 (mean 0.0).
    # Over the two cluster means: mean 0.1, sd 0.141421, se 0.1, t(0.975, 1) = 12.7062 -> +-1.27062
    diffs = {(0, 0): 0.1, (0, 1): 0.2, (0, 2): 0.3, (2, 0): 0.0, (2, 1): 0.0}
    block = stats.clustered_interval(diffs)
    assert block["n_sft_seeds"] == 2 and block["sft_seed_means"] == pytest.approx({"0": 0.2, "2": 0.0})
    assert block["mean"] == pytest.approx(0.1)
    assert block["ci95"] == pytest.approx([0.1 - 1.270620, 0.1 + 1.270620], abs=1e-5)
    one = stats.clustered_interval({(0, 0): 0.1, (0, 1): 0.3})
    assert one["ci95"] is None and "1 SFT seed" in one["reason"]
    # a paired contrast carries it beside the (too narrow) seed-level interval
    rows = lambda g: [  # noqa: E731
        {"sft_seed": k[0], "seed": k[1], "success_start": 0.1, "success_end": 0.1 + v} for k, v in g.items()
    ]
    c = stats.contrast(rows(diffs), rows({k: 0.0 for k in diffs}))
    assert c["paired"] and c["clustered_by_sft_seed"]["mean"] == pytest.approx(0.1)


def test_training_success_is_pooled_by_policy_version_as_counts(stats: ModuleType) -> None:
    goal = "put it there"

    def ep(v: int, prompt: str, ok: bool, stage: str = "rl", kind: str = "train") -> dict[str, object]:
        return {"kind": kind, "stage": stage, "policy_version": v, "prompt": prompt, "success": ok}

    episodes = [
        ep(0, "a pool wording", True), ep(0, "a pool wording", True), ep(0, "another", False),
        ep(0, goal, False), ep(1, goal, True), ep(1, "a pool wording", False),
        ep(0, "a pool wording", True, stage="bootstrap"),  # the search: not the RL stage
        ep(1, goal, True, kind="eval"),  # evaluations: not training
    ]  # fmt: skip
    table = stats.train_by_version(episodes, goal)
    assert [row["policy_version"] for row in table] == [0, 1]
    assert table[0]["pool"] == {"successes": 2, "n": 3, "rate": pytest.approx(2 / 3)}
    assert table[0]["canonical"] == {"successes": 0, "n": 1, "rate": 0.0}
    assert table[1]["canonical"]["successes"] == 1 and table[1]["pool"]["rate"] == 0.0


def test_the_time_course_gives_every_evaluation_point_and_its_paired_gain(stats: ModuleType) -> None:
    def run(sft: int, seed: int, rates: list[float]) -> dict[str, object]:
        evs = [
            {"env_episodes": at, "successes": round(r * 100), "n": 100, "rate": r}
            for at, r in zip((0, 128, 320), rates, strict=True)
        ]
        return {"sft_seed": sft, "seed": seed, "evaluations": evs}

    arms = {
        "noise": {"per_seed": [run(0, 0, [0.1, 0.2, 0.4]), run(2, 0, [0.1, 0.3, 0.4])]},
        "oracle": {"per_seed": [run(0, 0, [0.1, 0.5, 0.4]), run(2, 0, [0.1, 0.4, 0.3])]},
    }
    course = stats.time_course(arms)
    at128 = course["oracle"][1]
    assert at128["env_episodes"] == 128 and at128["successes"] == 90 and at128["n"] == 200
    assert at128["minus_noise"]["mean"] == pytest.approx(0.2)  # (0.3 + 0.1) / 2
    assert course["oracle"][2]["minus_noise"]["mean"] == pytest.approx(-0.05)
    assert "minus_noise" not in course["noise"][1]


def test_the_area_under_the_curve_gain_against_a_hand_computed_reference(stats: ModuleType) -> None:
    evs = [
        {"env_episodes": at, "rate": r}
        for at, r in ((0, 0.10), (64, 0.20), (128, 0.40), (192, 0.30), (256, 0.30), (320, 0.20))
    ]
    # trapezoids over 64..320 (width 64): (0.2+0.4)/2 + (0.4+0.3)/2 + (0.3+0.3)/2 + (0.3+0.2)/2 = 1.2
    # -> area 1.2 * 64 / 256 = 0.3, minus the start 0.1 = 0.2 (the endpoint gain is 0.1)
    assert stats.auc_gain(evs, from_env_episodes=64) == pytest.approx(0.2)
    assert stats.auc_gain(evs[1:], from_env_episodes=64) is None  # no start
    assert stats.auc_gain(evs[:2], from_env_episodes=64) is None  # one point: no area


def test_the_auc_contrast_pairs_runs_and_clusters_by_sft_seed(stats: ModuleType) -> None:
    def run(sft: int, seed: int, rates: list[float]) -> dict[str, object]:
        pts = (0, 64, 128)
        return {
            "sft_seed": sft,
            "seed": seed,
            "evaluations": [{"env_episodes": at, "rate": r} for at, r in zip(pts, rates, strict=True)],
        }

    arms = {
        "pde_mixed": {"per_seed": [run(0, 0, [0.1, 0.3, 0.5]), run(1, 0, [0.1, 0.2, 0.2])]},
        "noise": {"per_seed": [run(0, 0, [0.1, 0.2, 0.2]), run(1, 0, [0.1, 0.2, 0.2])]},
    }
    c = stats.auc_contrast(arms, "pde_mixed", "noise")
    # sft0: (0.3+0.5)/2 - 0.1 = 0.3 vs (0.2+0.2)/2 - 0.1 = 0.1 -> +0.2; sft1: 0.0 -> mean +0.1
    assert c["paired_runs"] == 2 and c["mean"] == pytest.approx(0.1)
    assert c["clustered_by_sft_seed"]["sft_seed_means"] == pytest.approx({"0": 0.2, "1": 0.0})
    assert stats.auc_contrast({"noise": arms["noise"]}, "pde_mixed", "noise")["mean"] is None
