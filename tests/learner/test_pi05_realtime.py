"""π0.5's real-time path (learner/policies/pi05_realtime.py) against the eager path on the tiny
config: with the same seed (the same noise) the same chunk, chain, log-probability and value —
bit for bit where nothing changes dtype or kernel, within float32 rounding with SDPA, within
bfloat16 tolerance with bf16 weights; and the actor's copy leaves the trainer's float32 weights be."""

from __future__ import annotations

import copy
import gc
import logging
import weakref
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pytest
import torch

from learner.actor import Actor, ActorSettings
from learner.policies import pi05_realtime
from learner.policies.base import ChunkSample
from learner.policies.pi05 import Pi05Options, Pi05Policy, load_pi05
from learner.policies.pi05_model import GemmaAttention
from learner.synthetic import synthetic_observation
from tests.learner.pi05_tiny import make_tiny_checkpoint

PROMPTS = ["put the green container in the bowl", "put the green container in front of the camera"]


@dataclass(frozen=True)
class Choice:
    fast_inference: bool = True
    bf16_weights: bool = False
    cuda_graphs: bool = False
    compiled_kernels: bool = False


@pytest.fixture(scope="module")
def ckpt_dir(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("rt") / "pi05")


def _load(ckpt_dir, **options) -> Pi05Policy:
    torch.manual_seed(0)  # the value head is not in a LeRobot checkpoint: the same random one
    return load_pi05(ckpt_dir, Pi05Options(flow_steps=5, **options))


def _sample(policy: Pi05Policy, deterministic: bool, seed: int = 3) -> ChunkSample:
    rng = np.random.default_rng(0)
    obs = policy.preprocess([synthetic_observation(rng, size_px=24, seq=i) for i in range(2)])
    torch.manual_seed(seed)
    return policy.sample(obs, PROMPTS, deterministic=deterministic)


def _fields(s: ChunkSample) -> dict[str, np.ndarray]:
    return {"actions": s.actions, "chain": s.chain, "log_prob": s.log_prob_elements, "value": s.value}


def _same(a: ChunkSample, b: ChunkSample, rtol: float = 0.0, atol: float = 0.0) -> None:
    """Equal within the tolerances; bit for bit without them."""
    for name, x in _fields(a).items():
        y = _fields(b)[name]
        if rtol or atol:
            np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, err_msg=name)
        else:
            np.testing.assert_array_equal(x, y, err_msg=name)


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
@pytest.mark.parametrize("deterministic", [False, True], ids=["flow-sde", "euler"])
def test_without_dtype_or_kernel_changes_the_fast_path_gives_the_eager_bits(
    ckpt_dir, autocast, deterministic
):
    eager = _load(ckpt_dir, bf16=autocast)
    fast = _load(ckpt_dir, bf16=autocast).for_acting(Choice())
    fast.model.set_sdpa_attention(False)
    assert fast._realtime is not None
    fast._realtime.use_fused = False  # the model's modules: only the prefix handling differs now
    _same(_sample(eager, deterministic), _sample(fast, deterministic))


def test_sdpa_attention_changes_only_float32_rounding(ckpt_dir):
    eager = _load(ckpt_dir)
    fast = _load(ckpt_dir).for_acting(Choice())
    assert all(m.sdpa for m in fast.model.modules() if isinstance(m, GemmaAttention))
    _same(_sample(eager, False), _sample(fast, False), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fast_inference", [True, False], ids=["fast", "eager"])
def test_bf16_weights_stay_within_bf16_tolerance_of_the_float32_policy(ckpt_dir, fast_inference):
    reference = _load(ckpt_dir, bf16=True)
    actor = _load(ckpt_dir).for_acting(Choice(fast_inference=fast_inference, bf16_weights=True))
    assert {p.dtype for p in actor.parameters()} == {torch.bfloat16}
    assert actor.state_offset.dtype == torch.float32  # statistics keep their precision
    a, b = _sample(reference, False), _sample(actor, False)
    # Normalised units (the chain is ~N(0, 1)); bf16 keeps 8 bits: 0.4% of the values' scale.
    # (Measured here: chain 0.0036 at most, 0.0004 on average; value 0.001; log-prob 1.4e-6.)
    np.testing.assert_allclose(a.chain, b.chain, atol=0.02)
    assert np.abs(a.chain - b.chain).mean() < 0.002
    np.testing.assert_allclose(a.value, b.value, atol=0.01)
    np.testing.assert_allclose(a.log_prob_elements, b.log_prob_elements, atol=1e-3)


def test_the_actor_copy_leaves_the_trainer_policy_float32_and_is_not_copied(ckpt_dir):
    trainer_policy = load_pi05(ckpt_dir, Pi05Options(flow_steps=2))
    actor = copy.deepcopy(trainer_policy).for_acting(Choice(bf16_weights=True))
    assert {p.dtype for p in trainer_policy.parameters()} == {torch.float32}
    assert all(p.requires_grad for p in trainer_policy.parameters())
    assert not any(p.requires_grad for p in actor.parameters())
    assert trainer_policy._realtime is None and not trainer_policy.options.bf16
    with pytest.raises(TypeError, match="copy the trainer's policy"):
        copy.deepcopy(actor)


def test_a_swapped_out_actor_copy_is_freed_at_once(ckpt_dir):
    actor = _load(ckpt_dir).for_acting(Choice(bf16_weights=True, cuda_graphs=True))
    _sample(actor, False)
    gone = weakref.ref(actor)
    gc.disable()  # no cycle collection: only reference counts free it
    try:
        del actor
        assert gone() is None
    finally:
        gc.enable()


def test_nothing_chosen_leaves_the_policy_as_it_is(ckpt_dir):
    policy = load_pi05(ckpt_dir)
    assert policy.for_acting(Choice(fast_inference=False)) is policy
    assert policy._realtime is None and all(p.requires_grad for p in policy.parameters())


def test_cuda_graphs_on_a_cpu_are_a_logged_no_op(ckpt_dir, caplog):
    caplog.set_level(logging.INFO, logger="learner.policies.pi05_realtime")
    eager = _load(ckpt_dir)
    fast = _load(ckpt_dir).for_acting(Choice(cuda_graphs=True))
    assert "not a CUDA GPU: sampling without CUDA graphs" in caplog.text
    assert fast._realtime is not None and not fast._realtime.cuda_graphs
    _same(_sample(eager, False), _sample(fast, False), rtol=1e-5, atol=1e-6)
    assert fast._realtime.graphs_captured == 0


def test_the_actor_makes_every_policy_it_is_given_its_real_time_copy(ckpt_dir):
    settings = ActorSettings(fast_inference=True, bf16_weights=True)
    actor = Actor(_load(ckpt_dir), client=cast(Any, None), settings=settings)
    trainer_policy = _load(ckpt_dir)
    actor.set_policy(copy.deepcopy(trainer_policy))  # the trainer's snapshot at a swap
    swapped = actor.policy
    assert isinstance(swapped, Pi05Policy) and swapped._realtime is not None
    assert {p.dtype for p in swapped.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in trainer_policy.parameters()} == {torch.float32}


def test_a_failed_capture_samples_without_graphs_instead_of_losing_the_chunk(ckpt_dir, monkeypatch, caplog):
    def capture_fails(*args: Any) -> None:
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(pi05_realtime, "CapturedNetwork", capture_fails)
    fast = _load(ckpt_dir).for_acting(Choice())
    assert fast._realtime is not None
    fast._realtime.cuda_graphs = True  # as on a GPU
    expected = _sample(_load(ckpt_dir).for_acting(Choice()), False)
    _same(expected, _sample(fast, False))
    assert "CUDA graph capture failed" in caplog.text and not fast._realtime.cuda_graphs


def test_cuda_graphs_need_the_fast_path():
    with pytest.raises(ValueError, match="PDE_ACTOR_FAST_INFERENCE"):
        ActorSettings(cuda_graphs=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("deterministic", [False, True], ids=["flow-sde", "euler"])
def test_on_a_gpu_the_captured_graph_gives_the_uncaptured_chunk(ckpt_dir, deterministic):  # pragma: no cover
    plain = _load(ckpt_dir).to("cuda").for_acting(Choice(bf16_weights=True))
    graphs = _load(ckpt_dir).to("cuda").for_acting(Choice(bf16_weights=True, cuda_graphs=True))
    reference = _sample(plain, deterministic)
    _same(reference, _sample(graphs, deterministic), atol=1e-5)  # captured, then replayed
    _same(reference, _sample(graphs, deterministic), atol=1e-5)  # replayed
    assert graphs._realtime is not None and graphs._realtime.graphs_captured == 1
    eager = _load(ckpt_dir).to("cuda")  # float32: only SDPA and the kept prefix differ
    fast = _load(ckpt_dir).to("cuda").for_acting(Choice())
    _same(_sample(eager, deterministic), _sample(fast, deterministic), rtol=1e-4, atol=1e-4)
