"""bench/preregistration/pde_v2.json, the next PDE benchmark written down before any arm runs: what
it names exists and agrees with the benchmark's code and the calibration it cites (a rename or a
moved file fails here; the file itself is never edited after its commit: a change is a new one)."""

from __future__ import annotations

import json
import shlex

from tests.bench.test_pde_arm import pde_arm
from tests.helpers import REPO_ROOT

PRE = json.loads((REPO_ROOT / "bench" / "preregistration" / "pde_v2.json").read_text())


def test_the_arms_premise_and_calibration_it_names_exist_and_agree() -> None:
    for arm in PRE["arms"]:
        pde_arm.parse_arm(arm)  # raises for an arm the benchmark does not have
    recipe = json.loads((REPO_ROOT / PRE["premise"]["recipe"]).read_text())
    target = recipe["tasks"][pde_arm.BenchSettings().task]
    assert target["canonical_prob"] == PRE["premise"]["canonical_prob"]
    assert target["wordings"] == PRE["premise"]["oracle_wordings"]
    calibration_file = PRE["premise"]["calibration"].split(" ")[0]
    cells = json.loads((REPO_ROOT / calibration_file).read_text())["cells"]
    low, high = 0.10, 0.20
    for seed in PRE["premise"]["sft_seeds"]:
        [cell] = [
            c for c in cells if c["sft_seed"] == seed and c["canonical_prob"] == target["canonical_prob"]
        ]
        assert low <= cell["successes"] / cell["episodes"] <= high, cell
    assert len(PRE["premise"]["sft_seeds"]) >= 3 and len(PRE["rl_seeds"]) >= 2


def test_the_command_runs_the_arms_points_and_premise_it_declares() -> None:
    argv = shlex.split(PRE["command_per_sft_seed"])
    flag = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
    assert flag["--arms"].split(",") == PRE["arms"]
    assert [int(s) for s in flag["--seeds"].split(",")] == PRE["rl_seeds"]
    assert [int(e) for e in flag["--eval-at"].split(",")] == PRE["evaluation"]["at_env_episodes"]
    assert (
        flag["--premise"] == PRE["premise"]["recipe"]
        and flag["--sim-profile"] == PRE["premise"]["sim_profile"]
    )
    assert flag["--wordings"].split("|") == PRE["premise"]["oracle_wordings"]
    assert max(PRE["evaluation"]["at_env_episodes"]) == PRE["budget_env_episodes"]
    assert pde_arm.BenchSettings(
        eval_at=tuple(PRE["evaluation"]["at_env_episodes"]), budget_episodes=PRE["budget_env_episodes"]
    )
