"""`pde sim record` and `pde sim pictures` as real processes, and what they write."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest

from pde_contract.episodes import read_episode
from pde_contract.messages import ActionSpace
from robot_server.sim.world import SimWorldConfig
from tests.helpers import pde_command, subprocess_env

TASK = "put_green_container_in_bowl"


def _run(*args: str, timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        pde_command("sim", *args),
        env=subprocess_env(MUJOCO_GL="egl"),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def test_record_writes_episode_files(tmp_path: Path) -> None:
    out = tmp_path / "demos"
    proc = _run(
        "record", "--tasks", TASK, "--episodes-per-task", "2", "--out", str(out), "--image-size", "96x80"
    )
    assert proc.returncode == 0, proc.stderr
    index = json.loads((out / "index.json").read_text())
    assert [e["task"] for e in index["episodes"]] == [TASK, TASK]
    seeds = [e["seed"] for e in index["episodes"]]
    assert len(set(seeds)) == 2
    for entry in index["episodes"]:
        ep = read_episode(out / entry["file"])
        assert ep.task == TASK and ep.success is True and ep.source == "expert"
        assert ep.rollout_prompt == ep.canonical_prompt == "put the green container in the bowl"
        assert ep.action_space == ActionSpace.EE_DELTA and ep.control_rate_hz == 10.0
        assert len(ep.chunks) == entry["chunks"] > 5
        for chunk in ep.chunks:
            assert chunk.actions.shape == (10, 7) and chunk.actions.dtype == np.float32
            assert [c.name for c in chunk.observation.cameras] == ["external", "wrist"]
            for frame in chunk.observation.cameras:
                img = cv2.imdecode(np.frombuffer(frame.jpeg, np.uint8), cv2.IMREAD_COLOR)
                assert img.shape == (80, 96, 3) and (frame.width, frame.height) == (96, 80)
        # the first observation is taken before any motion
        assert ep.chunks[0].observation.task_success is False
        assert ep.chunks[0].observation.state.joint_positions_rad.shape == (7,)


def test_pictures(tmp_path: Path) -> None:
    proc = _run("pictures", "--tasks", TASK, "--out", str(tmp_path), "--size", "64")
    assert proc.returncode == 0, proc.stderr
    for stage in ("start", "end"):
        img = cv2.imread(str(tmp_path / f"{TASK}_{stage}.png"))
        assert img is not None and img.shape == (64, 128, 3)
        assert img.std() > 10


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("record", "--tasks", "nope", "--out", "x"), "unknown task(s) ['nope']"),
        (("record", "--tasks", TASK, "--out", "x", "--image-size", "big"), "use WIDTHxHEIGHT"),
        (("record", "--tasks", TASK, "--out", "x", "--episodes-per-task", "0"), "must be at least 1"),
        (("fly",), "invalid choice"),
    ],
)
def test_bad_arguments_are_explained(args: tuple[str, ...], message: str, tmp_path: Path) -> None:
    proc = _run(*args)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_tasks_lists_the_prompts() -> None:
    proc = _run("tasks")
    assert proc.returncode == 0
    assert "open the bottom drawer and put the bowl inside" in proc.stdout
    assert len(proc.stdout.strip().splitlines()) == 10


def test_world_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="image size"):
        SimWorldConfig(image_width=0)
    with pytest.raises(ValueError, match="unknown scene"):
        SimWorldConfig(scene="moon")
