"""PDE_LEARNER_DEVICE: parsed with the settings, resolved against what torch sees, and passed through
checkpoint loading, sampling and a PPO update. Only the CPU exists here; CUDA's absence is the case
tested for the error, and its presence is simulated only where no tensor has to go there."""

from __future__ import annotations

from typing import Any

import numpy as np
import pydantic
import pytest
import torch

from learner.checkpoints import CheckpointStore
from learner.device import DeviceUnavailableError, check_device_spec, resolve_device
from learner.loop import service as loop_service
from learner.loop.settings import LoopSettings
from learner.main import LearnerSettings
from learner.main import main as learner_main
from learner.policies.vla import make_test_policy
from learner.ppo import PPOConfig
from learner.synthetic import synthetic_episode, synthetic_observation
from learner.trainer import Trainer

CANON = "put the green container in the bowl"


@pytest.fixture
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def loop_settings(**overrides: Any) -> LoopSettings:
    return LoopSettings(**overrides)


def test_the_setting_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    assert LearnerSettings().device == "auto"
    monkeypatch.setenv("PDE_LEARNER_DEVICE", " CUDA:1 ")
    assert LearnerSettings().device == "cuda:1"
    assert loop_settings().device == "cuda:1"  # the episode loop reads the same variable
    assert loop_settings(device="cpu").device == "cpu"  # --device
    monkeypatch.setenv("PDE_LEARNER_DEVICE", "gpu")
    for settings in (LearnerSettings, loop_settings):
        with pytest.raises(
            pydantic.ValidationError, match="unknown device 'gpu': use auto, cpu, cuda or cuda:N"
        ):
            settings()
    for bad in ("cuda:", "cuda:x", "mps", ""):
        with pytest.raises(ValueError, match="unknown device"):
            check_device_spec(bad)


def test_auto_picks_what_torch_sees(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"  # cpu on this machine
    assert resolve_device("auto").type == expected
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)


@pytest.mark.usefixtures("no_cuda")
def test_cuda_asked_for_and_missing_is_a_clear_error() -> None:
    with pytest.raises(DeviceUnavailableError) as e:
        resolve_device("cuda")
    message = str(e.value)
    assert message.startswith("PDE_LEARNER_DEVICE=cuda but torch sees no CUDA device: torch ")
    assert "PDE_LEARNER_DEVICE=cpu" in message and "GPU reservation" in message


# The first line of /proc/driver/nvidia/version as NVIDIA's proprietary and open kernel modules write it.
PROC_PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)
PROC_OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs-builder@U16)\n"
)


def test_the_driver_version_is_read_from_proc_or_nvidia_smi(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from learner.device import find_nvidia_driver

    proc = tmp_path / "version"
    proc.write_text(PROC_PROPRIETARY)
    assert find_nvidia_driver(proc, nvidia_smi=None) == "550.54.14"
    proc.write_text(PROC_OPEN)
    assert find_nvidia_driver(proc, nvidia_smi=None) == "580.65.06"
    assert find_nvidia_driver(tmp_path / "absent", nvidia_smi=None) is None
    # No /proc file (e.g. a WSL host): nvidia-smi's answer, here a stand-in script on PATH.
    fake_smi = tmp_path / "bin" / "fake-nvidia-smi"
    fake_smi.parent.mkdir()
    fake_smi.write_text("#!/bin/sh\necho 535.104.05\n")
    fake_smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake_smi.parent), prepend=":")
    assert find_nvidia_driver(tmp_path / "absent", nvidia_smi="fake-nvidia-smi") == "535.104.05"
    assert find_nvidia_driver(tmp_path / "absent", nvidia_smi="no-such-nvidia-smi") is None


def test_the_advice_names_the_driver_cuda_needs() -> None:
    from learner.device import driver_advice

    old = driver_advice("13.0", "550.54.14")
    assert "driver here is 550.54.14, older than CUDA 13.0 needs (driver >= 580)" in old
    assert "upgrade the host's driver to 580 or newer" in old and "TORCH_INDEX_URL" in old
    assert "needs (driver >= 525.60.13)" in driver_advice("12.8", "470.82.01")
    assert "no NVIDIA driver is visible" in driver_advice("13.0", None)
    assert "CUDA 13.0 needs driver >= 580" in driver_advice("13.0", None)
    recent = driver_advice("13.0", "580.65.06")
    assert "recent enough" in recent and "CUDA_VISIBLE_DEVICES" in recent
    assert "recent enough" in driver_advice("12.4", "525.60.13")  # the minimum itself is enough
    assert "an NVIDIA driver that supports it" in driver_advice("14.0", None)  # not in the table


@pytest.mark.usefixtures("no_cuda")
def test_a_cuda_build_on_an_old_driver_says_which_driver_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    import learner.device

    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(learner.device, "find_nvidia_driver", lambda: "550.54.14")
    with pytest.raises(DeviceUnavailableError) as e:
        resolve_device("cuda")
    message = str(e.value)
    assert "is built for CUDA 13.0 but finds no GPU: the NVIDIA driver here is 550.54.14" in message
    assert "(driver >= 580)" in message and "PDE_LEARNER_DEVICE=cpu" in message


def test_a_gpu_index_beyond_what_torch_sees(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(DeviceUnavailableError, match=r"sees 1 CUDA device\(s\), cuda:0 to cuda:0"):
        resolve_device("cuda:1")


@pytest.mark.usefixtures("no_cuda")
def test_the_commands_refuse_a_missing_gpu_before_doing_anything(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PDE_LEARNER_DEVICE", "cuda")
    db = tmp_path / "pde.db"
    assert loop_service.main(["--database-url", f"sqlite:///{db}", "--data-dir", str(tmp_path)]) == 2
    assert "pde loop: PDE_LEARNER_DEVICE=cuda but torch sees no CUDA device" in capsys.readouterr().err
    assert not db.exists(), "the loop opened its database before checking the device"
    assert learner_main(["sft", "--demos", str(tmp_path)]) == 2
    assert "pde learner sft: PDE_LEARNER_DEVICE=cuda but torch sees no CUDA" in capsys.readouterr().err
    monkeypatch.setenv("PDE_LEARNER_DEVICE", "tpu")
    assert learner_main(["sft"]) == 2
    assert "unknown device 'tpu'" in capsys.readouterr().err


def _batch(policy, n_eps: int = 4):
    rng = np.random.default_rng(0)
    return [
        (
            synthetic_episode(policy, rng, 3, CANON if i % 2 else "drop it in the bowl", CANON, i < 2, 20),
            float(i < 2),
        )
        for i in range(n_eps)
    ]


def test_checkpoint_sample_and_ppo_update_on_the_configured_device(tmp_path) -> None:
    """The service's path with device="cpu": load onto the device, act, train, save, reload."""
    device = resolve_device("cpu")
    torch.manual_seed(0)
    store = CheckpointStore(tmp_path)
    store.save(make_test_policy("flow"), 0)
    loaded = store.latest(device)
    assert loaded is not None and loaded.policy.device == device
    obs = loaded.policy.preprocess([synthetic_observation(np.random.default_rng(1), 20)])
    sample = loaded.policy.sample(obs, [CANON])
    assert sample.actions.shape == (1, loaded.policy.chunk_len, loaded.policy.action_dim)

    trainer = Trainer(CheckpointStore.load(loaded.path).policy, PPOConfig(minibatch_size=4), device=device)
    assert trainer.policy.device == device
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    stats = trainer.update(_batch(trainer.policy))
    assert np.isfinite([stats["pg_loss"], stats["v_loss"], stats["approx_kl"]]).all()
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.policy.parameters(), strict=True))
    # Saved from the device, loaded back with its optimiser state: a second update resumes.
    path = store.save(trainer.policy, 1, trainer_state=trainer.state_dict())
    again = CheckpointStore.load(path, device)
    resumed = Trainer(again.policy, PPOConfig(minibatch_size=4), device=device)
    assert again.trainer_state is not None
    resumed.load_state_dict(again.trainer_state)
    assert np.isfinite(resumed.update(_batch(resumed.policy))["pg_loss"])


def test_describe_device_names_the_device() -> None:
    from learner.device import describe_device

    assert describe_device(torch.device("cpu")) == "cpu"
