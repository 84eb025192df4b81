import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from learner.checkpoints import CheckpointStore
from learner.policies.vla import SmallVLAPolicy, make_test_policy
from learner.ppo import PPOConfig
from learner.synthetic import synthetic_episode, synthetic_observation
from learner.trainer import Trainer
from tests.helpers import free_port, subprocess_env


@pytest.mark.parametrize("head", ["flow", "gaussian"])
def test_save_load_round_trip(tmp_path, head):
    torch.manual_seed(0)
    policy = make_test_policy(head)
    policy.set_normalization(np.arange(7) * 0.1, np.ones(7) * 0.5, np.zeros(15), np.ones(15) * 2)
    obs = policy.preprocess([synthetic_observation(np.random.default_rng(0), 20)])
    sample = policy.sample(obs, ["open the top drawer"])
    store = CheckpointStore(tmp_path)
    path = store.save(policy, 3, {"success": 0.25})
    loaded = store.load(path)
    assert isinstance(loaded.policy, SmallVLAPolicy)
    assert loaded.version == 3 and loaded.metrics == {"success": 0.25}
    chain, P = torch.from_numpy(sample.chain), ["open the top drawer"]
    a = policy.evaluate_pair(obs, P, P, chain).rollout
    b = loaded.policy.evaluate_pair(obs, P, P, chain).rollout
    assert torch.allclose(a.log_prob, b.log_prob) and torch.allclose(a.value, b.value)
    # the prompt embedding travels with the checkpoint: no encoder needed for known prompts
    assert "open the top drawer" in loaded.policy.prompt_cache.state()
    assert torch.equal(loaded.policy.action_mean, policy.action_mean)


def test_latest_skips_damaged_and_missing(tmp_path):
    store = CheckpointStore(tmp_path)
    assert store.latest() is None
    policy = make_test_policy("flow")
    store.save(policy, 1)
    store.save(policy, 2)
    store.path_for(3).write_bytes(b"truncated")
    latest = store.latest()
    assert latest is not None and latest.version == 2
    with pytest.raises(FileNotFoundError, match="sft"):
        store.load(tmp_path / "nope.pt")


def test_resuming_below_a_damaged_version_continues_above_it(tmp_path):
    """A damaged newest file (or a newer version only the database knows) must not make the next
    update write a version number that already has a row and episodes."""
    store = CheckpointStore(tmp_path)
    policy = make_test_policy("flow")
    store.save(policy, 1, {"loss": 0.5}, {"n_updates": 1})
    store.path_for(2).write_bytes(b"truncated")
    loaded = store.latest()
    assert loaded is not None and loaded.version == 1
    assert store.renumbered(loaded, 1) is loaded  # nothing newer known: unchanged
    again = store.renumbered(loaded, max([*store.versions(), 5]))  # the database knows version 5
    assert again.version == 6 and again.path == store.path_for(6)
    assert again.metrics == {"loss": 0.5, "resumed_from_version": 1.0}
    assert again.trainer_state == {"n_updates": 1}
    for name, value in loaded.policy.state_dict().items():
        assert torch.equal(again.policy.state_dict()[name], value), name
    newest = store.latest()
    assert newest is not None and newest.version == 6


def test_the_loop_resumes_below_a_damaged_version_as_a_new_one(tmp_path, capsys):
    from learner.loop.service import main as loop_main
    from pde_storage import Store

    data = tmp_path / "data"
    checkpoints = CheckpointStore(data / "checkpoints")
    v0 = checkpoints.save(make_test_policy("flow"), 0, {"sft_loss": 1.0})
    v1 = checkpoints.path_for(1)
    v1.write_bytes(b"truncated")  # e.g. a disk that filled up
    url = f"sqlite:///{tmp_path}/pde.db"
    store = Store.open(url, tmp_path / "media")
    store.add_checkpoint(0, v0, {"sft_loss": 1.0})
    store.add_checkpoint(1, v1, {})
    # No robot server answers: the loop stops after settling its version.
    argv = ["--database-url", url, "--data-dir", str(data), "--device", "cpu"]
    assert loop_main([*argv, "--robot", f"tcp://127.0.0.1:{free_port()}"]) == 2
    assert "cannot reach the robot server" in capsys.readouterr().err
    row = store.latest_checkpoint()
    assert row is not None and row.version == 2 and row.metrics["resumed_from_version"] == 0.0
    assert CheckpointStore.load(row.path).version == 2
    store.close()


_WRITER = textwrap.dedent(
    """
    import sys, numpy as np, torch
    from learner.checkpoints import CheckpointStore
    from learner.policies.vla import SmallVLAPolicy, make_test_policy
    from learner.ppo import PPOConfig
    from learner.synthetic import synthetic_episode
    from learner.trainer import Trainer
    torch.manual_seed(0)
    policy = make_test_policy("flow")
    trainer = Trainer(policy, PPOConfig(minibatch_size=4))
    store = CheckpointStore(sys.argv[1])
    rng = np.random.default_rng(0)
    eps = [synthetic_episode(policy, rng, 2, "p", "p", bool(i % 2), size_px=20) for i in range(2)]
    batch = [(ep, float(i % 2)) for i, ep in enumerate(eps)]
    version = 0
    while True:
        trainer.update(batch)
        version += 1
        store.save(policy, version, {"v": version}, trainer.state_dict())
        print("saved", version, flush=True)
    """
)


def test_resume_after_kill(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env(OMP_NUM_THREADS="1"),
    )
    saved: list[int] = []
    deadline = time.monotonic() + 120
    try:
        while len(saved) < 3 and time.monotonic() < deadline:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line:
                break
            saved.append(int(line.split()[1]))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert len(saved) >= 3, "the writer did not save three checkpoints"
    store = CheckpointStore(tmp_path)
    latest = store.latest()
    assert latest is not None and latest.version >= saved[-1]
    assert latest.trainer_state is not None and latest.trainer_state["n_updates"] == latest.version
    # resume: same policy weights, optimiser state restored, training continues to the next version
    trainer = Trainer(latest.policy, PPOConfig(minibatch_size=4))
    trainer.load_state_dict(latest.trainer_state)
    rng = np.random.default_rng(1)
    batch = [(synthetic_episode(latest.policy, rng, 2, "p", "p", True, size_px=20), 1.0)]
    trainer.update(batch)
    store.save(latest.policy, latest.version + 1, {}, trainer.state_dict())
    again = store.latest()
    assert again is not None and again.version == latest.version + 1
    assert again.trainer_state is not None and again.trainer_state["n_updates"] == latest.version + 1


def test_checkpoint_file_names_have_one_home(tmp_path: Path) -> None:
    # pde demo reads the folder through learner.checkpoint_files, without importing torch.
    from learner.checkpoint_files import checkpoint_files, checkpoint_path

    assert checkpoint_files(tmp_path / "missing") == {}
    for version in (3, 0, 12):
        checkpoint_path(tmp_path, version).write_bytes(b"")
    (tmp_path / ".policy-000013.pt.abc.tmp").write_bytes(b"")  # a write in progress
    (tmp_path / "notes.txt").write_text("")
    assert checkpoint_files(tmp_path) == {v: tmp_path / f"policy-{v:06d}.pt" for v in (0, 3, 12)}
    assert list(checkpoint_files(tmp_path)) == [0, 3, 12]
    with pytest.raises(ValueError, match="checkpoint version must be >= 0, got -1"):
        checkpoint_path(tmp_path, -1)
