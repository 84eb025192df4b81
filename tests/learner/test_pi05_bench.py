"""bench/bench_pi05.py at the tiny size: what it measures is measured the way training runs."""

import importlib.util
from pathlib import Path

import torch

from learner.policies import pi05_model
from learner.policies.pi05 import Pi05Options, Pi05Policy
from learner.policies.pi05_model import TINY_CONFIG

ROOT = Path(__file__).resolve().parents[2]


def _bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # the script imports bench/_common.py
    spec = importlib.util.spec_from_file_location("bench_pi05", ROOT / "bench" / "bench_pi05.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_minibatch_search_runs_with_gradient_checkpointing_after_an_update(monkeypatch):
    bench = _bench(monkeypatch)
    torch.manual_seed(0)
    options = Pi05Options(flow_steps=2, gradient_checkpointing=True)
    policy = Pi05Policy(bench.random_checkpoint(TINY_CONFIG), options)
    batch = bench.rollout_batch(policy, rollouts=4, chunks=1, image_px=24)
    policy.eval()  # where Trainer.update leaves it
    checkpointed: list[bool] = []
    real = pi05_model._maybe_checkpoint

    def spy(fn, enabled, *args):
        checkpointed.append(enabled)
        return real(fn, enabled, *args)

    monkeypatch.setattr(pi05_model, "_maybe_checkpoint", spy)
    found = bench.largest_minibatch(policy, batch, torch.device("cpu"))
    assert found["largest_minibatch"] == 4
    assert checkpointed and all(checkpointed)
    assert not policy.training  # given back as it was found, for whatever the bench runs next
