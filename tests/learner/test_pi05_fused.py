"""The actor's fused π0.5 (learner/policies/pi05_fused.py) and the in-place swap, on the tiny config
on the CPU: the fused path computes the eager chunk within float32 rounding with fewer operations,
holds no weight twice, runs compiled (Inductor's CPU backend) within the same tolerance, and a swap
copies the trainer's new weights into the acting copy's tensors, after which it samples the eager
chunk of the new weights."""

from __future__ import annotations

import copy
import logging
from typing import Any, cast

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from learner.actor import Actor, ActorSettings
from learner.policies.pi05 import Pi05Options, Pi05Policy, load_pi05
from learner.policies.pi05_fused import gemma_layers
from tests.learner.pi05_tiny import make_tiny_checkpoint
from tests.learner.test_pi05_realtime import Choice, _same, _sample


@pytest.fixture(scope="module")
def ckpt_dir(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("fused") / "pi05")


def _load(ckpt_dir, **options) -> Pi05Policy:
    torch.manual_seed(0)
    return load_pi05(ckpt_dir, Pi05Options(flow_steps=5, **options))


def _fast(ckpt_dir, **choice) -> Pi05Policy:
    fast = _load(ckpt_dir).for_acting(Choice(**choice))
    assert fast._realtime is not None and fast._realtime.fused is not None and fast._realtime.use_fused
    return fast


def _storage_bytes(tensors) -> int:
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def test_the_fused_weights_are_the_modules_weights_held_once(ckpt_dir):
    reference, fast = _load(ckpt_dir), _fast(ckpt_dir)
    assert fast._realtime is not None and fast._realtime.fused is not None
    fused = fast._realtime.fused
    layer = gemma_layers(fast.model.vlm.language_model)[0]
    # q, k and v are rows of one tensor: a write through a module reaches the fused GEMM's weight
    with torch.no_grad():
        layer.self_attn.k_proj.weight[0, 0] = 123.0
    q_rows = layer.self_attn.q_proj.out_features
    assert fused.vlm.qkv[0][q_rows, 0] == 123.0
    # every parameter's storage counted once: exactly what the unfused policy holds
    assert _storage_bytes(fast.parameters()) == sum(p.numel() * 4 for p in reference.parameters())


@pytest.mark.parametrize("deterministic", [False, True], ids=["flow-sde", "euler"])
def test_the_fused_path_gives_the_eager_chunk_within_float32_rounding(ckpt_dir, deterministic):
    eager, fast = _load(ckpt_dir), _fast(ckpt_dir)
    a, b = _sample(eager, deterministic), _sample(fast, deterministic)
    _same(a, b, rtol=1e-5, atol=1e-6)
    assert fast._realtime is not None
    fast._realtime.use_fused = False  # the modules' path (SDPA, prefix kept): same to rounding
    _same(b, _sample(fast, deterministic), rtol=1e-5, atol=1e-6)


def _cpu_ops(policy: Pi05Policy) -> int:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _sample(policy, False)
    return sum(1 for e in prof.events() if e.name.startswith("aten::"))


def test_the_fused_path_runs_fewer_operations_than_the_modules(ckpt_dir):
    fast = _fast(ckpt_dir)
    fused_ops = _cpu_ops(fast)
    assert fast._realtime is not None
    fast._realtime.use_fused = False
    module_ops = _cpu_ops(fast)
    assert fused_ops < 0.8 * module_ops, (fused_ops, module_ops)


def test_a_model_with_lora_adapters_samples_through_its_modules(ckpt_dir, caplog):
    caplog.set_level(logging.INFO, logger="learner.policies.pi05_realtime")
    reference = _load(ckpt_dir, trainable="lora")
    for adapter in reference.lora.values():  # B starts at zero: make the adapters count
        torch.nn.init.normal_(cast(Any, adapter).B, std=0.5)
    actor = copy.deepcopy(reference).for_acting(Choice(compiled_kernels=True))
    assert actor._realtime is not None and actor._realtime.fused is None
    assert "without fused weights" in caplog.text and "nothing to compile" in caplog.text
    _same(_sample(reference, False), _sample(actor, False), rtol=1e-5, atol=1e-6)


def test_a_copy_moved_after_for_acting_is_fused_again(ckpt_dir, caplog):
    eager, fast = _load(ckpt_dir), _fast(ckpt_dir)
    assert fast._realtime is not None
    before = fast._realtime.fused
    fast.to(torch.float64).to(torch.float32)  # every weight copied: no longer views of the fused ones
    assert before is not None and not before.intact()
    _same(_sample(eager, False), _sample(fast, False), rtol=1e-5, atol=1e-6)
    assert "fusing its weights again" in caplog.text
    assert fast._realtime.fused is not before and fast._realtime.fused is not None
    assert fast._realtime.fused.intact()


def _trained(policy: Pi05Policy, seed: int) -> Pi05Policy:
    """A trainer's snapshot after an update: every weight moved."""
    new = copy.deepcopy(policy)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    return new


@pytest.mark.parametrize("bf16_weights", [False, True], ids=["float32", "bf16"])
def test_a_swap_copies_the_new_weights_into_the_acting_copy(ckpt_dir, bf16_weights):
    trainer_policy = _load(ckpt_dir)
    settings = ActorSettings(fast_inference=True, bf16_weights=bf16_weights)
    actor = Actor(copy.deepcopy(trainer_policy), client=cast(Any, None), settings=settings)
    acting = actor.policy
    assert isinstance(acting, Pi05Policy) and acting._realtime is not None
    sampler, fused = acting._realtime, acting._realtime.fused
    before = _sample(acting, False)
    new = _trained(trainer_policy, seed=1)

    actor.set_policy(new)

    assert actor.policy is acting and acting._realtime is sampler and sampler.fused is fused  # in place
    assert fused is not None and fused.intact()
    assert {p.dtype for p in acting.parameters()} == {torch.bfloat16 if bf16_weights else torch.float32}
    assert {p.dtype for p in new.parameters()} == {torch.float32}  # the snapshot is not cast
    after = _sample(acting, False)
    assert np.abs(after.chain - before.chain).max() > 1e-3  # the new weights act
    if bf16_weights:  # against the new weights' float32 policy under autocast
        reference = _sample(_trained(_load(ckpt_dir, bf16=True), seed=1), False)
        np.testing.assert_allclose(after.chain, reference.chain, atol=0.02)
    else:  # the eager chunk of the new weights, to float32 rounding
        _same(_sample(new, False), after, rtol=1e-5, atol=1e-6)


def test_a_swap_to_another_policy_makes_it_the_acting_copy(ckpt_dir):
    actor = Actor(_load(ckpt_dir), client=cast(Any, None), settings=ActorSettings(fast_inference=True))
    acting = actor.policy
    other = load_pi05(ckpt_dir, Pi05Options(flow_steps=3))  # another chain: not the same policy
    actor.set_policy(other)
    assert actor.policy is other and actor.policy is not acting
    assert other._realtime is not None


@pytest.mark.slow  # Inductor's C++ compiles, ~15-35 s on a loaded 2-core machine; seconds when cached
def test_the_compiled_kernels_run_and_agree_with_the_eager_chunk(ckpt_dir):
    eager = _load(ckpt_dir)
    compiled = _fast(ckpt_dir, compiled_kernels=True)
    assert compiled._realtime is not None and compiled._realtime.fused is not None
    assert compiled._realtime.fused.compiled
    torch._dynamo.reset()
    graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    # compile_threads=1: Inductor compiles in this thread (its pool's threads outlive the test)
    with torch._inductor.config.patch(compile_threads=1):
        got = _sample(compiled, False)  # the flow-SDE chain: every compiled piece runs
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > graphs_before  # compiled, not eager
    _same(_sample(eager, False), got, rtol=1e-5, atol=1e-5)
