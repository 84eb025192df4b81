"""π0.5 (tiny, random weights) acting on a real `pde robot-server --backend sim` through
`pde learner eval --policy pi05 --init DIR`: the simulator's camera frames and state go through the
checkpoint mapping, the chunk comes back de-normalised and is executed."""

import json

from learner.main import main
from tests.learner.pi05_tiny import make_tiny_checkpoint
from tests.learner.test_actor_sim import sim_server  # noqa: F401  (the fixture)


def test_eval_runs_pi05_episodes_on_the_sim_server(sim_server, tmp_path, capsys):  # noqa: F811
    init = make_tiny_checkpoint(tmp_path / "pi05")
    argv = ["eval", "--policy", "pi05", "--init", str(init), "--pi05-flow-steps", "2", "--device", "cpu"]
    argv += ["--cmd-endpoint", sim_server, "--task", "put_green_container_in_bowl"]
    argv += ["--prompt", "put the green container in the bowl", "--episodes", "2", "--max-chunks", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("chunks=2") == 2  # both episodes ran their chunks (random weights: no success)
    assert json.loads(out.strip().splitlines()[-1])["episodes"] == 2
