"""π0.5 (tiny, random weights) acting on a real `pde robot-server --backend sim` through
`pde learner eval --policy pi05 --init DIR`: the simulator's camera frames and state go through the
checkpoint mapping, the chunk comes back de-normalised and is executed."""

import json
import logging

from learner.loop.service import main as loop_main
from learner.main import main
from learner.policies.pi05 import load_pi05
from learner.policies.pi05_checkpoint import Pi05Mapping
from pde_contract.messages import PROTOCOL_VERSION, STATE_VECTOR_NAMES, ActionSpace, ServerInfo
from tests.learner.pi05_tiny import make_tiny_checkpoint
from tests.learner.test_actor_sim import sim_server, sim_server_group  # noqa: F401  (the fixtures)

NO_OVERHEAD = Pi05Mapping(STATE_VECTOR_NAMES, ("overhead", "wrist"))  # the sim has no "overhead"


def _info(cameras: list[str], spaces: list[ActionSpace]) -> ServerInfo:
    return ServerInfo(
        protocol_version=PROTOCOL_VERSION,
        server_name="fr3",
        backend="sim",
        control_rate_hz=10.0,
        action_spaces=spaces,
        cameras=cameras,
        obs_endpoint="tcp://127.0.0.1:1",
        heartbeat_timeout_s=1.0,
    )


def test_eval_runs_pi05_episodes_on_the_sim_server(sim_server, tmp_path, capsys):  # noqa: F811
    init = make_tiny_checkpoint(tmp_path / "pi05")
    argv = ["eval", "--policy", "pi05", "--init", str(init), "--pi05-flow-steps", "2", "--device", "cpu"]
    argv += ["--cmd-endpoint", sim_server, "--task", "put_green_container_in_bowl"]
    argv += ["--prompt", "put the green container in the bowl", "--episodes", "2", "--max-chunks", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("chunks=2") == 2  # both episodes ran their chunks (random weights: no success)
    assert json.loads(out.strip().splitlines()[-1])["episodes"] == 2


def test_eval_acts_through_the_real_time_path_when_the_actor_settings_ask(
    sim_server,  # noqa: F811
    tmp_path,
    capsys,
    monkeypatch,
    caplog,
):
    for name in ("FAST_INFERENCE", "BF16_WEIGHTS", "CUDA_GRAPHS"):
        monkeypatch.setenv(f"PDE_ACTOR_{name}", "1")
    caplog.set_level(logging.INFO, logger="learner.policies.pi05_realtime")
    init = make_tiny_checkpoint(tmp_path / "pi05")
    argv = ["eval", "--policy", "pi05", "--init", str(init), "--pi05-flow-steps", "2", "--device", "cpu"]
    argv += ["--cmd-endpoint", sim_server, "--task", "put_green_container_in_bowl"]
    argv += ["--prompt", "put the green container in the bowl", "--episodes", "1", "--max-chunks", "2"]
    assert main(argv) == 0
    assert "chunks=2" in capsys.readouterr().out
    assert "not a CUDA GPU: sampling without CUDA graphs" in caplog.text  # the CPU: said, not failed


def test_the_mapping_is_checked_against_what_the_robot_server_offers(tmp_path):
    policy = load_pi05(make_tiny_checkpoint(tmp_path / "pi05"))  # cameras external, wrist; ee_delta
    both = [ActionSpace.EE_DELTA, ActionSpace.JOINT_ABS]
    assert policy.robot_mismatch(_info(["external", "wrist", "top"], both)) is None
    msg = policy.robot_mismatch(_info(["wrist"], both))
    assert msg is not None
    assert "reads cameras ['external', 'wrist'] and acts in ee_delta" in msg
    assert "has cameras ['wrist'] and action spaces ['ee_delta', 'joint_abs']" in msg
    assert f"pde_pi05.json in {tmp_path / 'pi05'}" in msg
    msg = policy.robot_mismatch(_info(["external", "wrist"], [ActionSpace.JOINT_ABS]))
    assert msg is not None and "action spaces ['joint_abs']" in msg


def test_the_loop_stops_at_start_up_when_the_robot_lacks_a_mapped_camera(sim_server, tmp_path, capsys):  # noqa: F811
    init = make_tiny_checkpoint(tmp_path / "pi05", mapping=NO_OVERHEAD)
    argv = ["--policy", "pi05", "--init", str(init), "--robot", sim_server, "--device", "cpu", "--auto"]
    argv += ["--database-url", f"sqlite:///{tmp_path}/pde.db", "--data-dir", str(tmp_path / "data")]
    argv += ["--max-episodes", "1", "--max-chunks", "1"]  # without the check: one aborted episode
    assert loop_main([*argv, "--tasks", "put_green_container_in_bowl"]) == 2
    err = capsys.readouterr().err
    assert "pde loop: the policy reads cameras ['overhead', 'wrist']" in err
    assert "has cameras ['external', 'wrist']" in err
