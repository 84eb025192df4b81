"""bench/bench_pi05.py at the tiny size: what it measures is measured the way training runs."""

import argparse
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


def test_latency_before_and_after_and_the_loop_memory_check_run_on_the_tiny_config(monkeypatch):
    bench = _bench(monkeypatch)
    cpu = torch.device("cpu")
    torch.manual_seed(0)
    options = Pi05Options(flow_steps=2, bf16=True)
    policy = Pi05Policy(bench.random_checkpoint(TINY_CONFIG), options).eval()
    # (fast_graphs_compiled: Inductor's compiles, tests/learner/test_pi05_fused.py checks that path)
    # (fast: on a CPU the same as fast_graphs, whose capture is a no-op there)
    variants = ["eager", "fast_graphs_unfused", "fast_graphs"]
    latency = bench.latency_before_after(policy, runs=1, device=cpu, variants=variants)
    assert set(variants) <= set(latency)
    assert not any("error" in latency[v] for v in variants), latency
    ops = {v: latency[v]["kernels_per_chunk"]["sde"]["cpu_ops"] for v in variants}  # the CPU's stand-in
    assert ops["fast_graphs"] < ops["fast_graphs_unfused"] < ops["eager"]
    for name in ("fast_graphs_unfused", "fast_graphs"):
        assert set(latency[name]["parts_sde"]) >= {"images", "prefix", "chain"}
        swap = latency[name]["swap"]
        assert swap["in_place"] and swap["chain_changed_by_swap"] > 1e-3
        assert swap["chain_max_abs_diff_vs_eager_new_weights"] < 0.05  # bf16 weights vs float32
    assert latency["eager"]["chain_max_abs_diff"] == 0.0  # the eager copy samples the same chunk
    for name in ("fast_graphs_unfused", "fast_graphs"):  # SDPA's bf16 softmax under autocast, bf16 weights
        assert 0.0 < latency[name]["chain_max_abs_diff"] < 0.05  # close, not equal
    assert not latency["fast_graphs"]["cuda_graphs_used"]  # a CPU: no graphs, and said so
    assert latency["ratio_eager_over_fast_graphs_sde_p50"] > 0
    assert {p.dtype for p in policy.parameters()} == {torch.float32}  # the copies were copies

    args = argparse.Namespace(loop_rollouts=2, loop_chunks=1, minibatch=2, tiny=True)
    run = bench.loop_memory(TINY_CONFIG, options, bench.VARIANTS["fast_graphs"], args, cpu)
    assert run["trainable"] == "all" and run["chunks"] == 2 and run["ppo_update_s"] >= 0
    assert run["swap_in_place"]  # the loop's swap copies into the actor's copy
