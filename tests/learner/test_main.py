import json
import subprocess

import pytest

from learner.main import main
from pde_contract.episodes import write_episode
from pde_contract.job_status import read_status
from pde_contract.run_metrics import SftCurve
from tests.helpers import pde_command, subprocess_env
from tests.learner.loop.test_run_log import read_scalars
from tests.learner.test_sft import _demo


def test_run_delegates_to_the_loop_service(capsys):
    # `pde learner run --help` and `pde learner --help`-less default both reach learner.loop.service
    with pytest.raises(SystemExit) as exc:
        main(["run", "--help"])
    assert exc.value.code == 0
    assert "pde learner run" in capsys.readouterr().out


def test_help_lists_the_subcommands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "sft" in out and "eval" in out and "run" in out


def test_sft_command_trains_then_reuses_the_cache(tmp_path):
    for seed in range(2):
        write_episode(
            tmp_path / "demos" / f"d{seed}.msgpack",
            _demo("put_bowl_on_top_rack", "put the bowl on the top rack", seed),
        )
    cmd = pde_command(
        "learner",
        "sft",
        "--demos",
        str(tmp_path / "demos"),
        "--checkpoints",
        str(tmp_path / "ckpt"),
        "--steps",
        "3",
        "--batch-size",
        "4",
        "--image-size",
        "16",
        "--chunk-len",
        "4",
        "--status-file",
        str(tmp_path / "sft.status.json"),
    )
    env = subprocess_env(OMP_NUM_THREADS="1", PDE_LEARNER_DATA_DIR=str(tmp_path / "data"))
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
    assert first.returncode == 0, first.stderr
    # The run's curves, read back with TensorBoard's reader: a loss and a step time per step.
    (run_dir,) = (tmp_path / "data" / "logs" / "runs").iterdir()
    scalars = read_scalars(run_dir)
    assert run_dir.name.startswith("sft-")
    assert [s for s, _ in scalars[SftCurve.LOSS]] == [s for s, _ in scalars[SftCurve.STEP_S]] == [0, 1, 2]
    out = json.loads(first.stdout[first.stdout.index("{") :])
    assert out["cached"] is False and (tmp_path / "ckpt" / "policy-000000.pt").is_file()
    status = read_status(tmp_path / "sft.status.json")
    assert status is not None
    assert (status.job, status.phase, status.step, status.total_steps, status.cached) == (
        "sft",
        "done",
        3,
        3,
        False,
    )
    assert status.checkpoint == out["checkpoint"]
    second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
    assert json.loads(second.stdout[second.stdout.index("{") :])["cached"] is True
    status = read_status(tmp_path / "sft.status.json")
    assert status is not None and status.phase == "done" and status.cached


def test_sft_command_without_demos(tmp_path, capsys):
    assert main(["sft", "--demos", str(tmp_path / "none"), "--checkpoints", str(tmp_path / "c")]) == 2
    assert "pde sim record" in capsys.readouterr().err


def test_sft_command_refuses_a_bad_wording_table(tmp_path, capsys):
    write_episode(
        tmp_path / "demos" / "d.msgpack", _demo("put_bowl_on_top_rack", "put the bowl on the top rack", 0)
    )
    table = tmp_path / "w.json"
    table.write_text(json.dumps({"tasks": {"put_bowl_on_top_rack": {"canonical_prob": 2}}}))
    args = ["sft", "--demos", str(tmp_path / "demos"), "--checkpoints", str(tmp_path / "c")]
    assert main([*args, "--wordings", str(table)]) == 2
    assert "canonical_prob" in capsys.readouterr().err
    table.write_text(json.dumps({"tasks": {"put_tape_on_top_rack": {"canonical_prob": 0}}}))
    assert main([*args, "--wordings", str(table)]) == 2
    assert "put_tape_on_top_rack" in capsys.readouterr().err


def test_sft_command_stops_on_an_unknown_task_listing_the_known(tmp_path, capsys, monkeypatch):
    write_episode(
        tmp_path / "demos" / "d.msgpack", _demo("stack_cups", "stack the blue cup on the red cup", 0)
    )
    args = ["sft", "--demos", str(tmp_path / "demos"), "--checkpoints", str(tmp_path / "c"), "--steps", "1"]
    assert main([*args, "--tasks", "stack_cup"]) == 2
    err = capsys.readouterr().err
    assert "unknown task(s) ['stack_cup']" in err and "put_bowl_on_top_rack" in err
    assert main(args) == 2  # a demo of a task no tasks file names
    assert "d.msgpack: unknown task(s) ['stack_cups']" in capsys.readouterr().err
    tasks = tmp_path / "tasks.toml"
    tasks.write_text('[tasks.stack_cups]\nprompt = "stack the blue cup on the red cup"\n')
    monkeypatch.setenv("PDE_TASKS_FILE", str(tasks))
    assert main([*args, "--tasks", "stack_cups", "--batch-size", "2", "--image-size", "16"]) == 0
