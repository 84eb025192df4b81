"""bench/preregistration/pde_v*.json, each PDE benchmark written down before any arm runs: what it
names exists and agrees with the benchmark's code and the calibration it cites (a rename or a moved
file fails here; a file itself is never edited after its commit: a change is a new one)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.bench.test_pde_arm import pde_arm
from tests.helpers import REPO_ROOT

FILES = sorted((REPO_ROOT / "bench" / "preregistration").glob("pde_v*.json"))
# Those that give a run order (pde_v3 on; pde_v2 runs command_per_sft_seed per SFT seed).
WITH_RUN_ORDER = [f for f in FILES if "run_order" in json.loads(f.read_text())]


def _flags(command: str) -> dict[str, str]:
    argv = shlex.split(command)
    return {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}


@pytest.fixture(params=FILES, ids=[f.stem for f in FILES])
def pre(request: pytest.FixtureRequest) -> dict[str, Any]:
    path: Path = request.param
    return json.loads(path.read_text())


def test_the_arms_premise_and_calibration_it_names_exist_and_agree(pre: dict[str, Any]) -> None:
    for arm in pre["arms"]:
        pde_arm.parse_arm(arm)  # raises for an arm the benchmark does not have
    recipe = json.loads((REPO_ROOT / pre["premise"]["recipe"]).read_text())
    target = recipe["tasks"][pde_arm.BenchSettings().task]
    assert target["canonical_prob"] == pre["premise"]["canonical_prob"]
    assert target["wordings"] == pre["premise"]["oracle_wordings"]
    calibration_file = pre["premise"]["calibration"].split(" ")[0]
    cells = json.loads((REPO_ROOT / calibration_file).read_text())["cells"]
    low, high = pre["premise"].get("band", (0.10, 0.20))  # pde_v2/v3 predate the field: 10-20%
    for seed in pre["premise"]["sft_seeds"]:
        [cell] = [
            c for c in cells if c["sft_seed"] == seed and c["canonical_prob"] == target["canonical_prob"]
        ]
        assert low <= cell["successes"] / cell["episodes"] <= high, cell
    assert len(pre["premise"]["sft_seeds"]) >= 3 and len(pre["rl_seeds"]) >= 2


def test_the_command_runs_the_arms_points_and_premise_it_declares(pre: dict[str, Any]) -> None:
    flag = _flags(pre["command_per_sft_seed"])
    assert flag["--arms"].split(",") == pre["arms"]
    assert [int(s) for s in flag["--seeds"].split(",")] == pre["rl_seeds"]
    assert [int(e) for e in flag["--eval-at"].split(",")] == pre["evaluation"]["at_env_episodes"]
    assert (
        flag["--premise"] == pre["premise"]["recipe"]
        and flag["--sim-profile"] == pre["premise"]["sim_profile"]
    )
    assert flag["--wordings"].split("|") == pre["premise"]["oracle_wordings"]
    assert max(pre["evaluation"]["at_env_episodes"]) == pre["budget_env_episodes"]
    assert pde_arm.BenchSettings(
        eval_at=tuple(pre["evaluation"]["at_env_episodes"]), budget_episodes=pre["budget_env_episodes"]
    )


@pytest.mark.parametrize("path", WITH_RUN_ORDER, ids=[f.stem for f in WITH_RUN_ORDER])
def test_the_run_order_runs_exactly_the_declared_parts(path: Path) -> None:
    """Where a run order is given, its commands are the per-SFT-seed command cut into pieces: together
    every (arm, SFT seed, RL seed) once, each with the command's other flags unchanged."""
    pre = json.loads(path.read_text())
    whole = _flags(pre["command_per_sft_seed"])
    parts = []
    for command in pre["run_order"]:
        flag = _flags(command)
        k = int(flag["--sft-seed"])
        same = {f: v for f, v in whole.items() if f not in ("--arms", "--seeds")}
        same["--sft-checkpoint"] = same["--sft-checkpoint"].replace("{K}", str(k))
        same["--sft-seed"] = str(k)
        assert {f: v for f, v in flag.items() if f not in ("--arms", "--seeds")} == same
        parts += [(a, k, int(s)) for a in flag["--arms"].split(",") for s in flag["--seeds"].split(",")]
    expected = {(a, k, s) for a in pre["arms"] for k in pre["premise"]["sft_seeds"] for s in pre["rl_seeds"]}
    assert sorted(parts) == sorted(expected)
