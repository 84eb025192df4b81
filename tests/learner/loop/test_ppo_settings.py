"""The loop's PPO settings: every PPOConfig field from PDE_LOOP_PPO__<FIELD>, the defaults the
loop trained with before they were nested, and PPOConfig without torch."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import typing
from typing import Any

import pytest
from pydantic import ValidationError

from learner.loop.settings import LoopSettings
from learner.ppo_config import PPOConfig
from tests.helpers import REPO_ROOT, subprocess_env


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in [k for k in os.environ if k.startswith("PDE_LOOP_")]:
        monkeypatch.delenv(k)


def _settings(**kw: Any) -> LoopSettings:
    return LoopSettings(**kw)  # the environment's, with these overrides


def _another_value(name: str, default: Any, hint: Any) -> Any:
    """A valid value of the field that is not its default."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is typing.Literal:
        return next(a for a in args if a != default)
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return default / 2 if default > 0 else 0.25  # within every field's range (gamma, dual_clip)
    raise AssertionError(f"PPOConfig.{name}: no rule for {hint!r}; extend this test")


def _env_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_every_ppo_field_is_set_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    hints = typing.get_type_hints(PPOConfig)
    expected: dict[str, Any] = {}
    for f in dataclasses.fields(PPOConfig):
        expected[f.name] = _another_value(f.name, f.default, hints[f.name])
        monkeypatch.setenv(f"PDE_LOOP_PPO__{f.name.upper()}", _env_text(expected[f.name]))
    ppo = _settings().ppo
    # The service hands this object to Trainer / DistributedTrainer as it is (learner/loop/service.py).
    assert ppo == PPOConfig(**expected)
    assert all(getattr(ppo, n) != getattr(PPOConfig(), n) for n in expected)  # each one moved


def test_the_defaults_are_the_ones_the_loop_trained_with() -> None:
    # What learner/loop/service.py built before PPOConfig was nested: five fields from LoopSettings.
    before = PPOConfig(
        ratio_variant="mixed", learning_rate=3e-5, value_learning_rate=1e-3, noise_learning_rate=0.0, seed=0
    )
    assert _settings().ppo == before == PPOConfig()


def test_the_ppo_seed_is_the_loops_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PDE_LOOP_SEED", "5")
    assert _settings().ppo.seed == 5
    assert _settings(seed=6).ppo.seed == 6
    monkeypatch.setenv("PDE_LOOP_PPO__SEED", "2")
    assert (_settings().seed, _settings().ppo.seed) == (5, 2)
    assert _settings(ppo=PPOConfig(seed=9)).ppo.seed == 9  # a PPOConfig given whole is kept


def test_null_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PDE_LOOP_PPO__TARGET_KL", "null")
    monkeypatch.setenv("PDE_LOOP_PPO__VALUE_LEARNING_RATE", "null")
    ppo = _settings().ppo
    assert (ppo.target_kl, ppo.value_learning_rate) == (None, None)


def test_the_flat_names_of_before_are_refused_with_the_new_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PDE_LOOP_LEARNING_RATE", "1e-4")
    with pytest.raises(ValidationError, match="PDE_LOOP_LEARNING_RATE is now PDE_LOOP_PPO__LEARNING_RATE"):
        _settings()
    monkeypatch.delenv("PDE_LOOP_LEARNING_RATE")
    with pytest.raises(ValidationError, match="PDE_LOOP_RATIO_VARIANT is now PDE_LOOP_PPO__RATIO_VARIANT"):
        _settings(ratio_variant="plain")


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("PDE_LOOP_PPO__CLIPCOEF", "0.1", "clipcoef"),  # a typo is an error, not ignored
        ("PDE_LOOP_PPO__MINIBATCH_SIZE", "0", "minibatch_size must be >= 1, got 0"),
        ("PDE_LOOP_PPO__DUAL_CLIP", "0.5", "dual_clip must be 0 .off. or > 1, got 0.5"),
        ("PDE_LOOP_PPO__RATIO_VARIANT", "clamp", r"ppo.ratio_variant\s+Input should be 'mixed'"),
    ],
)
def test_a_bad_ppo_setting_names_itself(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, message: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ValidationError, match=message):
        _settings()


def test_ppo_config_and_the_loop_settings_import_without_torch() -> None:
    # torch made unimportable: what reads the settings must not need it (the service imports torch
    # only once its settings are known to be good).
    code = """
import importlib.abc, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this test")
sys.meta_path.insert(0, NoTorch())
from learner.ppo_config import PPOConfig
from learner.loop.settings import LoopSettings
assert LoopSettings().ppo == PPOConfig()
assert "torch" not in sys.modules
print("ok")
"""
    env = {k: v for k, v in subprocess_env().items() if not k.startswith("PDE_LOOP_")}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
