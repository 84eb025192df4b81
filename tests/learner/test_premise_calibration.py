"""The premise calibration command (bench/bench_premise_calibrate.py): its table and its verdict."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
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


def _cell(p: float, seed: int, rate: float) -> dict[str, object]:
    return {"canonical_prob": p, "sft_seed": seed, "success_rate": rate}


def test_a_p_qualifies_with_four_sft_seeds_in_band(calib: ModuleType) -> None:
    cells = [
        *(_cell(0.05, s, r) for s, r in enumerate([0.12, 0.08, 0.15, 0.19, 0.20])),  # 4 of 5 inside
        *(_cell(0.04, s, r) for s, r in enumerate([0.10, 0.11, 0.12, 0.02])),  # 3 of 4: not enough
        *(_cell(0.06, s, r) for s, r in enumerate([0.15, 0.15, 0.15, 0.15, 0.15])),  # 5 inside
    ]
    assert calib.qualifying(cells) == {"0.05": [0, 2, 3, 4], "0.06": [0, 1, 2, 3, 4]}
    assert calib.choose_p(cells) == 0.06  # most SFT seeds in band first
    assert calib.choose_p(cells[:9]) == 0.05
    assert calib.choose_p(cells[5:9]) is None
    # among p with as many seeds in band: the mean nearest the band's middle (0.15)
    near = [*(_cell(0.07, s, 0.19) for s in range(4)), *(_cell(0.08, s, 0.14) for s in range(4))]
    assert calib.choose_p(near) == 0.08


def test_recipe_at_sets_p_and_the_note_and_keeps_the_labels(calib: ModuleType) -> None:
    recipe = json.loads(calib.RECIPE.read_text())
    out = calib.recipe_at(recipe, 0.05, "calibrated on main.")
    assert out["tasks"][calib.TARGET_TASK]["canonical_prob"] == 0.05
    assert out["about"] == "calibrated on main."
    assert calib.wordings_sha256(out) == calib.wordings_sha256(recipe)


def test_cells_of_commands_run_side_by_side_are_merged(calib: ModuleType) -> None:
    old = [{**_cell(0.05, 0, 0.1), "run": "a"}, {**_cell(0.05, 2, 0.3), "run": "a"}]
    new = [{**_cell(0.05, 1, 0.2), "run": "b"}, {**_cell(0.05, 0, 0.15), "run": "b"}]
    merged = calib.merge_cells(old, new)
    assert [(c["sft_seed"], c["run"]) for c in merged] == [(0, "b"), (1, "b"), (2, "a")]


def test_a_file_of_another_setup_is_refused_and_kept(
    calib: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "calibration.json"
    out.write_text(json.dumps({"setup": {"sim_profile": "default"}, "cells": [_cell(0.07, 0, 0.1)]}))
    before = out.read_bytes()

    def no_run(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"the command went on to run {args}")

    monkeypatch.setattr(calib.subprocess, "run", no_run)  # nothing may be recorded or trained
    with pytest.raises(SystemExit):
        calib.main(["--out", str(out), "--data-dir", str(tmp_path / "data"), "--sim-profile", "fast"])
    err = capsys.readouterr().err
    assert "holds 1 cells measured with another setup" in err and "sim_profile" in err and "--out" in err
    assert out.read_bytes() == before and not (tmp_path / "data").exists()


def test_the_frozen_block_names_the_recipe_proposers_and_algorithm_files(calib: ModuleType) -> None:
    import argparse

    from pde_arm import ALGORITHM_FILES

    args = argparse.Namespace(
        episodes=100, seed=7000, max_chunks=20, sim_profile="fast", torch_seed=0, out=str(calib.RESULTS_MAIN)
    )
    recipe = json.loads(calib.RECIPE.read_text())
    setup = {"recipe": "learner/recipes/paper_regime.json"}
    result = calib._result([_cell(0.05, 0, 0.1)], setup, args, recipe, [], calib.RECIPE)
    hashed = set(result["frozen"]["sha256"])
    assert {"learner/recipes/paper_regime.json", "supervisor/proposers.py", *ALGORITHM_FILES} <= hashed
    assert len(result["frozen"]["commit"]) == 40
    assert "--sim-profile fast --torch-seed 0" in result["command"]


@pytest.mark.parametrize("name", ["premise_calibration_main.json", "premise_calibration_main_recheck.json"])
def test_the_main_calibration_is_at_the_benchmarks_settings(calib: ModuleType, name: str) -> None:
    """The calibrations on main (the search; the re-measure after main moved): the fast sim profile,
    the SFT checkpoint's own log std in every cell, seeded sampling, scenes disjoint from the demos'
    and the evaluation's, and the recipe copy (if any) at the p each chose."""
    import math

    from pde_arm import EVAL_SEED_BASE, BenchSettings

    from learner.policies.vla import VLAConfig
    from robot_server.sim.recorder import episode_seed

    result = json.loads((calib.RESULTS_MAIN.parent / name).read_text())
    setup, cells = result["setup"], result["cells"]
    assert setup["sim_profile"] == "fast" and setup["wordings_sha256"] == calib.wordings_sha256(
        json.loads(calib.RECIPE.read_text())
    )
    first, last = setup["scene_seeds"]
    scenes = set(range(first, last + 1))
    demo_seeds = {
        episode_seed(1000, task, attempt)
        for task in calib.TASKS.split(",")
        for attempt in range(10 * calib.DEMOS_PER_TASK)
    }
    evaluation = set(range(EVAL_SEED_BASE, EVAL_SEED_BASE + BenchSettings().eval_episodes))
    assert not scenes & demo_seeds and not scenes & evaluation
    assert cells, "no cell measured"
    for c in cells:
        assert c["exploration_log_std"] == pytest.approx(VLAConfig().gaussian_init_log_std)
        assert c["exploration_sigma"] == pytest.approx(math.exp(c["exploration_log_std"]), abs=1e-4)
        assert c["sim_profile"] == "fast" and c["torch_seed"] == setup["torch_seed"]
        assert c["episodes"] == setup["episodes"] and len(c["commit"]) == 40
    assert result["frozen"]["sha256"]["learner/recipes/paper_regime.json"]
    chosen = calib.choose_p(cells)
    assert result["chosen_canonical_prob"] == chosen
    if calib.RECIPE_MAIN.is_file():  # written only for a p in band on >= 4 SFT seeds
        recipe = json.loads(calib.RECIPE_MAIN.read_text())
        assert chosen is not None and recipe["tasks"][calib.TARGET_TASK]["canonical_prob"] == chosen
        assert calib.wordings_sha256(recipe) == setup["wordings_sha256"]
        assert len(calib.qualifying(cells)[f"{chosen:g}"]) >= calib.MIN_SFT_SEEDS_IN_BAND
    else:
        assert chosen is None


# --- premise 2, the paper's sim case (issue 32 item 4) ------------------------------------------

SIM_CASE_BAND = (0.01, 0.05)


def test_the_band_is_a_setting(calib: ModuleType) -> None:
    """Premise 2 asks 1-5% of the canonical prompt: the same verdict code, another band."""
    cells = [
        *(_cell(0.03, s, r) for s, r in enumerate([0.01, 0.03, 0.05, 0.04, 0.12])),
        *(_cell(0.05, s, r) for s, r in enumerate([0.12, 0.15, 0.11, 0.18])),
    ]
    assert calib.qualifying(cells, band=SIM_CASE_BAND) == {"0.03": [0, 1, 2, 3]}
    assert calib.choose_p(cells, band=SIM_CASE_BAND) == 0.03
    assert calib.choose_p(cells) == 0.05  # the first premise's band (10-20%) by default
    assert calib.per_prob(cells, SIM_CASE_BAND)["0.03"]["sft_seeds_in_band"] == [0, 1, 2, 3]
    assert calib.in_band(cells, SIM_CASE_BAND) == []  # seed 4 at 12%
    assert calib._band("0.01,0.05") == SIM_CASE_BAND
    assert calib._band("0.05,0.01") is None and calib._band("0.1") is None


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--band", "0.2,0.1"], "--band '0.2,0.1': give LOW,HIGH"),
        (
            ["--tasks", "put_bowl_in_front_of_camera"],
            "lacks the target put_green_container_in_front_of_camera",
        ),
        (["--before-arms", "--canonical-probs", "0.02,0.03"], "give exactly one --canonical-probs"),
    ],
)
def test_bad_premise_settings_are_refused(
    calib: ModuleType, capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], says: str
) -> None:
    with pytest.raises(SystemExit):
        calib.main([*argv, "--out", str(tmp_path / "c.json"), "--data-dir", str(tmp_path / "data")])
    assert says in capsys.readouterr().err
    assert not (tmp_path / "data").exists() and not (tmp_path / "c.json").exists()


def test_a_recipe_calibrated_in_place_keeps_its_design_text(calib: ModuleType) -> None:
    about = calib.about_with_note("Why these tasks.", "p 0.03 from run 1.")
    assert about == f"Why these tasks. {calib.CALIBRATED} p 0.03 from run 1."
    assert (
        calib.about_with_note(about, "p 0.02 from run 2.")
        == f"Why these tasks. {calib.CALIBRATED} p 0.02 from run 2."
    )


def test_the_stand_in_proposes_from_the_canonical_prompts_rollouts(calib: ModuleType) -> None:
    """Its first candidates follow the canonical prompt's commonest failure; the paraphraser's are
    blind to it (what bench_pde's arms would propose first with RL seeds 0 and 1)."""
    from supervisor.proposers import RolloutOutcome

    kept = [RolloutOutcome(False, True, True, None)] * 3
    got = calib.first_candidates(lambda text: kept if text == calib.TARGET_PROMPT else [], 2)
    after = got["sim_stand_in_after_canonical"]
    assert len(after) == 4 and all("release it" in p or "open the fingers" in p for p in after), got
    assert got["rule_paraphrase"] == calib.proposer_wordings(calib.TARGET_PROMPT, range(2), 2)
    blind = calib.first_candidates(lambda _: [], 2)
    assert blind["rule_paraphrase"] == got["rule_paraphrase"]
    # at the first poll nothing has finished: plain rewordings with the stand-in's own verbs
    assert blind["sim_stand_in_first_poll"] == got["sim_stand_in_first_poll"]
    assert blind["sim_stand_in_after_canonical"] == blind["sim_stand_in_first_poll"]
    assert all(
        p.split()[0] in {"position", "deliver", "relocate", "shift", "take"}
        for p in blind["sim_stand_in_first_poll"]
    )
    no_grasp = [RolloutOutcome(False, False, False, None)] * 3
    assert all(
        p.startswith(("grasp ", "grab "))
        for p in calib.first_candidates(lambda _: no_grasp, 2)["sim_stand_in_after_canonical"]
    )


def test_another_tasks_check_judges_the_same_scenes(calib: ModuleType) -> None:
    import bench_premise

    scenes = bench_premise.Scenes(40, 7000, 20, 0)
    cmd = bench_premise.eval_command(
        "tcp://127.0.0.1:1", "c.pt", calib.TARGET_PROMPT, scenes, "put_bowl_in_front_of_camera"
    )
    assert cmd[cmd.index("--task") + 1] == "put_bowl_in_front_of_camera"
    assert cmd[cmd.index("--rollout-prompt") + 1] == calib.TARGET_PROMPT
    assert cmd[cmd.index("--seed") + 1] == "7000" and cmd[cmd.index("--torch-seed") + 1] == "0"
    default = bench_premise.eval_command("tcp://127.0.0.1:1", "c.pt", "w", scenes)
    assert default[default.index("--task") + 1] == calib.TARGET_TASK


def test_in_process_rollouts_say_what_each_episode_did_to_the_scene(
    calib: ModuleType, tmp_path: Path
) -> None:
    """Premise 2's item 3c: the canonical prompt's episodes in an in-process sim server (real sim,
    server and client; a tiny random-weight policy), each with how far every free object moved and
    which tasks' checks hold at its end; the server is closed afterwards."""
    import threading

    import bench_premise

    from learner.checkpoints import CheckpointStore
    from learner.policies.vla import make_test_policy
    from robot_server.sim.tasks.tabletop import LAYOUT_PROPS

    checkpoint = CheckpointStore(tmp_path).save(make_test_policy("gaussian"), 0)
    threads = set(threading.enumerate())
    scenes = bench_premise.Scenes(episodes=2, seed=7000, max_chunks=2, torch_seed=0)
    with bench_premise.in_process_sim("32x32", 0.2, "fast") as (endpoint, robot):
        rollouts = bench_premise.run_episodes(endpoint, str(checkpoint), "xyzzy", scenes, robot)
        assert robot.seed == 7001 and robot.task_name == bench_premise.TARGET_TASK
    assert len(rollouts) == 2
    for r in rollouts:
        assert r.episode.rollout_prompt == "xyzzy" and 1 <= len(r.episode.chunks) <= 2
        assert r.scene_end is not None and set(r.scene_end.moved_m) == set(LAYOUT_PROPS)
        assert all(d >= 0.0 for d in r.scene_end.moved_m.values())
        assert bench_premise.TARGET_TASK not in r.scene_end.tasks_done  # two chunks cannot do it
    left = [t for t in threading.enumerate() if t not in threads and t.is_alive()]
    assert not left, left


def test_episodes_are_counted_by_the_one_object_they_moved(calib: ModuleType) -> None:
    end = calib.SceneEnd
    ends = [
        end({"bowl": 0.15, "green_container": 0.001, "tape": 0.0}, ["put_bowl_in_front_of_camera"]),
        end({"bowl": 0.0, "green_container": 0.3, "tape": 0.0}, []),
        end({"bowl": 0.05, "green_container": 0.3, "tape": 0.0}, []),
        end({"bowl": 0.01, "green_container": 0.0, "tape": 0.0}, []),
    ]
    assert calib._only_moved(ends) == {"bowl": 1, "green_container": 1, "none": 1, "several": 1}


def test_an_evaluation_waits_out_a_loaded_machine(calib: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """`pde learner eval` runs with the actor's waits raised (fast pacing: waiting changes no
    episode); a lab's own setting in the environment wins."""
    import subprocess

    import bench_premise

    seen: dict[str, str] = {}

    def fake_run(cmd: list[str], env: dict[str, str], **_: object) -> subprocess.CompletedProcess[str]:
        seen.update(env)
        out = 'episode 0: success=True chunks=3\n{"torch_seed": 0, "exploration_log_std": -1.5}\n'
        return subprocess.CompletedProcess(cmd, 0, out, "")

    monkeypatch.setattr(bench_premise.subprocess, "run", fake_run)
    monkeypatch.setenv("PDE_ACTOR_SERVER_SILENT_S", "7")
    row = bench_premise.run_eval("tcp://127.0.0.1:1", "c.pt", "w", bench_premise.Scenes(1, 7000, 20))
    assert row["successes"] == 1 and row["episodes"] == 1
    assert seen["PDE_ACTOR_OBS_TIMEOUT_S"] == "30.0" and seen["PDE_ACTOR_SERVER_SILENT_S"] == "7"


def test_premise_2_is_calibrated_at_the_benchmarks_settings_and_measured_before_arms(
    calib: ModuleType,
) -> None:
    """bench/results/premise2_calibration.json: the sim case's cells at the benchmark's settings, its
    recipe at the p it chose (1-5% on >= 4 SFT seeds), and per SFT seed in band the measures taken
    before any arm: the target's own wordings well above the canonical prompt (the program exists),
    every proposer's first candidates measured, and what the canonical prompt did instead."""
    from pde_arm import EVAL_SEED_BASE, BenchSettings

    from learner.policies.vla import VLAConfig

    result = json.loads((calib.RESULTS_MAIN.parent / "premise2_calibration.json").read_text())
    recipe = json.loads((ROOT / "learner" / "recipes" / "sim_case.json").read_text())
    setup, cells = result["setup"], result["cells"]
    assert setup["recipe"] == "learner/recipes/sim_case.json"
    assert setup["wordings_sha256"] == calib.wordings_sha256(recipe)
    assert (
        setup["sim_profile"] == "fast" and setup["torch_seed"] == 0 and setup["scene_seeds"] == [7000, 7099]
    )
    assert EVAL_SEED_BASE > 7099 and result["band"] == list(SIM_CASE_BAND)
    for c in cells:
        assert c["exploration_log_std"] == pytest.approx(VLAConfig().gaussian_init_log_std)
        assert c["episodes"] == 100 and len(c["commit"]) == 40
    p = calib.choose_p(cells, band=SIM_CASE_BAND)
    assert (
        p is not None
        and recipe["tasks"][calib.TARGET_TASK]["canonical_prob"] == p == result["chosen_canonical_prob"]
    )
    in_band = calib.qualifying(cells, band=SIM_CASE_BAND)[f"{p:g}"]
    assert len(in_band) >= calib.MIN_SFT_SEEDS_IN_BAND
    measured = result["before_arms"]
    assert len([s for s in in_band if f"sft{s}" in measured]) >= calib.MIN_SFT_SEEDS_IN_BAND
    for key, block in measured.items():
        assert (
            block["canonical_prob"] == p
            and block["scenes"]["episodes"] == 40
            and key == f"sft{block['sft_seed']}"
        )
        rows = block["prompts"]
        canonical = rows[calib.TARGET_PROMPT]["success_rate"]
        training = [r["success_rate"] for r in rows.values() if "training" in r["kind"]]
        assert len(training) == 3 and min(training) >= canonical + 0.25, (key, training, canonical)
        for name, texts in block["first_candidates"].items():
            assert texts and all(t in rows and name in rows[t]["kind"] for t in texts), (key, name)
        rollouts = block["canonical_rollouts"]
        assert rollouts["episodes"] == 40 and len(rollouts["scene_ends"]) == 40
        assert set(block["canonical_judged_by"]) == {
            "put_green_container_in_bowl",
            "put_bowl_in_front_of_camera",
        }
    assert BenchSettings().eval_episodes == 100
