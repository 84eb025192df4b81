"""`pde demo` as a user runs it, sized down through PDE_DEMO_* (1 demonstration, 2 SFT steps, fast
sim, 2-chunk episodes): the first run records, trains and runs to --max-episodes then prints where
everything is; the second run reuses the cache; Ctrl-C (SIGINT) tears every child down."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pde_storage import Store
from tests.helpers import free_port, pde_command, subprocess_env


def _demo_env(data: Path) -> dict[str, str]:
    return subprocess_env(
        PDE_DEMO_DATA_DIR=str(data),
        PDE_DEMO_TASKS="put_green_container_in_bowl",
        PDE_DEMO_SFT_TASKS="",  # one task, canonical labels: the sized-down run stays fast
        PDE_DEMO_WORDINGS="",
        PDE_DEMO_DEMOS_PER_TASK="1",
        PDE_DEMO_SFT_STEPS="2",
        PDE_DEMO_SFT_BATCH_SIZE="4",
        PDE_DEMO_MAX_CHUNKS="2",
        PDE_DEMO_UI_PORT=str(free_port()),
        PDE_DEMO_ROBOT_CMD_PORT=str(free_port()),
        PDE_DEMO_ROBOT_OBS_PORT=str(free_port()),
    )


def _children_of(data: Path) -> list[int]:
    """Processes whose environment points at this data folder (the demo's children)."""
    marker = f"PDE_DATA_DIR={data}".encode()
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if marker in (p / "environ").read_bytes().split(b"\0"):
                    pids.append(int(p.name))
            except OSError:
                continue
    return pids


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_demo_first_run_cached_run_and_ctrl_c(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = _demo_env(data)
    first = subprocess.run(
        pde_command("demo", "--auto-label", "--max-episodes", "1", "--fast"),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = first.stdout + first.stderr
    assert first.returncode == 0, out[-4000:]
    assert "SFT policy: trained" in out and "operator page: http://127.0.0.1:" in out
    assert f"files and videos under {data / 'media'}" in out
    assert "put_green_container_in_bowl: canonical prompt 1/1 successes" in out or (
        "put_green_container_in_bowl: canonical prompt 0/1 successes" in out
    ), out[-2000:]
    for name in ("robot-server", "ui", "supervisor", "learner", "sft", "sim-record"):
        assert (data / "logs" / f"{name}.log").stat().st_size > 0, name
    with Store(f"sqlite:///{data / 'pde.db'}", data / "media", migrate=False) as store:
        eps = store.episodes()
        assert len(eps) == 1 and eps[0].status == "labelled"
        assert store.labels(eps[0].id)[0].source == "simulator"
    assert not _children_of(data)

    # Second run: everything cached; Ctrl-C once the loop runs stops everything.
    proc = subprocess.Popen(
        pde_command("demo", "--auto-label", "--fast"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 400
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("running:"):
                break
            assert time.monotonic() < deadline, "".join(lines)
        text = "".join(lines)
        assert "demonstrations: 1 cached" in text and "SFT policy: cached" in text, text
        assert _children_of(data), "no services running"
        os.kill(proc.pid, signal.SIGINT)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, "".join(lines) + rest
    assert "stopping" in rest
    assert not _children_of(data), "children left after Ctrl-C"


def test_stop_flag_ends_a_wait_even_if_the_interrupt_was_swallowed(tmp_path: Path) -> None:
    """Python drops an exception raised inside a weakref callback (CI saw a Ctrl-C lost in
    SQLAlchemy's); the demo's wait loops must still notice the request through the flag."""
    from pde import demo

    child = [sys.executable, "-c", "import time; time.sleep(60)"]  # no bare `python` on Debian
    demo._stop_requested.set()
    try:
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            demo.run_with_progress(
                child,
                subprocess_env(),
                tmp_path / "child.log",
                demo.progress_bar("wait", 1),
                lambda: None,
            )
        assert time.monotonic() - t0 < 10.0
    finally:
        demo._stop_requested.clear()


def test_sft_command_carries_head_and_policy_image_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's defaults (the Gaussian head on 32 px frames, one task) reach `pde learner sft`;
    PDE_DEMO_* and the command line change them, the command line winning."""
    from pde import demo

    def sft_options(argv: list[str]) -> dict[str, str]:
        cmd = demo.Demo(demo.parse_args(argv)).sft_argv()
        return {cmd[i]: cmd[i + 1] for i in range(cmd.index("sft") + 1, len(cmd), 2)}

    for name in ("HEAD", "POLICY_IMAGE_PX", "TASKS", "SFT_TASKS", "WORDINGS"):
        monkeypatch.delenv(f"PDE_DEMO_{name}", raising=False)
    got = sft_options([])
    assert (got["--head"], got["--image-size"]) == ("gaussian", "32")
    # the paper's regime: three tasks, the target last, with the recipe's wording table (its p)
    assert got["--tasks"] == (
        "put_green_container_in_bowl,put_bowl_in_front_of_camera,put_green_container_in_front_of_camera"
    )
    assert got["--wordings"].endswith("learner/recipes/paper_regime.json")
    decoy = sft_options(["--wordings", "learner/recipes/language_premise.json"])  # the hard tier
    assert decoy["--wordings"] == "learner/recipes/language_premise.json"
    plain = sft_options(["--sft-tasks", "", "--wordings", ""])
    assert plain["--tasks"] == "put_green_container_in_front_of_camera" and "--wordings" not in plain
    monkeypatch.setenv("PDE_DEMO_HEAD", "flow")
    assert sft_options([])["--head"] == "flow"
    got = sft_options(["--head", "gaussian", "--policy-image-px", "64"])
    assert (got["--head"], got["--image-size"]) == ("gaussian", "64")


@pytest.mark.parametrize(
    "argv", [["--policy-image-px", "8"], ["--head", "mlp"], ["--wordings", "/nonexistent/table.json"]]
)
def test_bad_policy_options_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from pde import demo

    with pytest.raises(SystemExit):
        demo.parse_args(argv)
    assert argv[0] in capsys.readouterr().err


def test_tasks_as_a_comma_list_or_as_compose_passes_loop_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    from pde import demo

    a, b = "put_green_container_in_bowl", "open_top_drawer_and_put_tape_inside"
    assert demo.parse_args(["--tasks", f"{a}, {b}"]).tasks == [a, b]
    monkeypatch.setenv("PDE_DEMO_TASKS", f'["{a}","{b}"]')  # compose: PDE_DEMO_TASKS=${LOOP_TASKS}
    assert demo.parse_args([]).tasks == [a, b]


@pytest.mark.parametrize("tasks", ['["put_green_container_in_bowl"', "[1, 2]"])
def test_a_broken_json_task_list_is_refused(tasks: str, capsys: pytest.CaptureFixture[str]) -> None:
    from pde import demo

    with pytest.raises(SystemExit):
        demo.parse_args(["--tasks", tasks])
    assert "JSON list" in capsys.readouterr().err


def test_prompt_summary_counts_the_pool() -> None:
    from datetime import UTC, datetime

    from pde.demo import prompt_summary
    from pde_contract.records import PromptSource, PromptStatus
    from pde_storage import PromptRow

    def row(i: int, text: str, status: str, wins: int, n: int) -> PromptRow:
        return PromptRow(
            i, "t", text, PromptStatus(status), PromptSource.OFFLINE, 1, "", n, wins, n, datetime.now(UTC)
        )

    line = prompt_summary(
        "t",
        [
            row(1, "put it there", "canonical", 1, 4),
            row(2, "move it there", "pool", 2, 4),
            row(3, "carry it there", "rejected", 0, 4),
            row(4, "place it there", "candidate", 0, 2),
        ],
    )
    assert line == (
        "t: canonical prompt 1/4 successes; prompt pool: 1 admitted ('move it there' 2/4), "
        "1 rejected, 1 still candidates"
    )


def test_rl_summary_reports_alpha_pool_share_and_canonical_before_after() -> None:
    from datetime import UTC, datetime

    from pde.demo import rl_summary
    from pde_contract.records import EpisodeStatus, Stage
    from pde_storage import EpisodeRow

    canon = "put it there"

    def ep(i: int, prompt: str, stage: str, version: int, success: bool | None) -> EpisodeRow:
        now = datetime.now(UTC)
        return EpisodeRow(
            i,
            "t",
            prompt,
            canon,
            1,
            version,
            Stage(stage),
            EpisodeStatus.LABELLED,
            success,
            None,
            "",
            "",
            {},
            now,
            now,
            now,
            "",
            i,
            3,
        )

    line = rl_summary(
        "t",
        [
            ep(1, canon, "bootstrap", 0, False),
            ep(2, "move it there", "bootstrap", 0, True),
            ep(3, canon, "rl", 0, True),
            ep(4, "move it there", "rl", 0, True),
            ep(5, "move it there", "rl", 1, False),
            ep(6, canon, "rl", 1, True),
            ep(7, canon, "rl", 2, None),  # unlabelled: not counted in the rates
        ],
        0.05,
    )
    assert line == (
        "t: RL stage 5 rollouts, 2 (40%) with a pool prompt, alpha 0.05; "
        "canonical prompt before PPO 1/2, after PPO 1/1"
    )


def test_a_new_sft_policy_sets_the_previous_run_aside(tmp_path: Path) -> None:
    """Retrained SFT (e.g. new defaults on an old data folder): the learner must not resume from the
    old run's PPO versions, and nothing of that run is deleted."""
    from pde import demo

    data = tmp_path / "data"
    (data / "checkpoints").mkdir(parents=True)
    (data / "media").mkdir()
    (data / "media" / "ep1.mp4").write_bytes(b"video")
    (data / "pde.db").write_bytes(b"db")
    for v in (0, 1, 12):
        (data / "checkpoints" / f"policy-{v:06d}.pt").write_bytes(bytes([v]))
    d = demo.Demo(demo.parse_args(["--data-dir", str(data)]))
    assert [p.name for p in d.later_checkpoints()] == ["policy-000001.pt", "policy-000012.pt"]
    d.set_aside_previous_run()
    assert [p.name for p in (data / "checkpoints").iterdir()] == ["policy-000000.pt"]
    assert not (data / "pde.db").exists() and not (data / "media").exists()
    (moved,) = (data / "previous-runs").iterdir()
    assert (moved / "pde.db").read_bytes() == b"db" and (moved / "media" / "ep1.mp4").read_bytes() == b"video"
    assert (moved / "checkpoints" / "policy-000012.pt").read_bytes() == bytes([12])
    d.set_aside_previous_run()  # nothing left to move: no second folder
    assert len(list((data / "previous-runs").iterdir())) == 1
