"""What bench_pi05.py measures inside one π0.5 chunk: kernels per chunk, the time of its parts
(images, prefix, chain) apart, and the swap of new weights into the actor's copy.

Kernels: ``torch.profiler`` over one chunk; on a GPU the CUDA kernels (memcpy/memset included), on a
CPU the aten operations as a stand-in (named ``cpu_ops``: a CPU has no kernels to count). A captured
path is counted on its uncaptured network: the graph replays exactly those kernels, and a profiler
does not see inside a replay.

Parts: CUDA events on a GPU, ``time.perf_counter`` on a CPU. With ``cuda_graphs`` each part is
captured as its own graph (images, prefix, chain + value), so the parts are timed as the whole
chunk runs them; their sum is the chunk's network time without the host-side tokenising and
de-normalising.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

from learner.policies.base import ObsBatch
from learner.policies.pi05 import Pi05Policy
from learner.policies.pi05_realtime import CapturedNetwork, RealtimeSampler


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def count_kernels(
    policy: Pi05Policy, obs: ObsBatch, prompt: str, deterministic: bool, device: torch.device
) -> dict[str, Any]:
    """Kernels (GPU) or aten operations (CPU) of one chunk of ``policy.sample``, after a warm-up
    (compilation, capture)."""
    policy.sample(obs, [prompt], deterministic=deterministic)
    sampler = policy._realtime
    graphs = sampler is not None and sampler.cuda_graphs
    if sampler is not None:
        sampler.cuda_graphs = False  # the uncaptured network: what the graph replays
    try:
        _sync(device)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=activities) as prof:
            policy.sample(obs, [prompt], deterministic=deterministic)
            _sync(device)
    finally:
        if sampler is not None:
            sampler.cuda_graphs = graphs
    events = prof.events()
    if device.type == "cuda":
        kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
        return {"cuda_kernels": len(kernels), "counted_uncaptured": graphs}
    return {
        "cpu_ops": sum(1 for e in events if e.name.startswith("aten::")),
        "stand_in": "a CPU: aten operations counted, not kernels",
    }


class _Clock:
    """Marks on the GPU's stream (CUDA events) or the host's clock; elapsed ms between marks."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.marks: list[Any] = []

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def spans_ms(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:], strict=False)]
        return [(b - a) * 1e3 for a, b in zip(self.marks, self.marks[1:], strict=False)]


PARTS = ("images", "prefix", "chain")


def part_times(
    policy: Pi05Policy, obs: ObsBatch, prompt: str, deterministic: bool, runs: int, device: torch.device
) -> dict[str, Any]:
    """p50/p90 ms of the real-time path's images, prefix and chain (+ value) over ``runs`` chunks,
    each part captured apart where the path captures."""
    sampler = policy._realtime
    assert sampler is not None, "parts: the real-time path only"
    with torch.no_grad():
        obs = obs.to(policy.device)
        ids, valid = policy.tokenize([prompt], policy.normalize_state(obs.state).cpu().numpy())
        noise = sampler.draw_noise(policy, 1, deterministic)
        steps = _part_steps(sampler, policy, obs.images, ids, valid, noise, deterministic)
        for run in steps:  # warm-up (compilation)
            run()
        spans: list[list[float]] = []
        for _ in range(runs):
            clock = _Clock(device)
            clock.mark()
            for run in steps:
                run()
                clock.mark()
            spans.append(clock.spans_ms())
    a = np.asarray(spans)
    out: dict[str, Any] = {
        part: {
            "p50_ms": round(float(np.median(a[:, i])), 2),
            "p90_ms": round(float(np.percentile(a[:, i], 90)), 2),
        }
        for i, part in enumerate(PARTS)
    }
    out["timer"] = "cuda events" if device.type == "cuda" else "perf_counter"
    out["captured"] = sampler.cuda_graphs
    return out


def _part_steps(
    s: RealtimeSampler,
    p: Pi05Policy,
    images: torch.Tensor,
    ids: torch.Tensor,
    valid: torch.Tensor,
    noise: torch.Tensor,
    deterministic: bool,
) -> list[Callable[[], Any]]:
    """The three parts as calls, each reading the one before's output: captured graphs replayed
    (their outputs are fixed buffers), or the functions called."""
    if not s.cuda_graphs:
        held: dict[str, Any] = {}

        def images_part() -> None:
            held["tokens"] = s.images(p, images)

        def prefix_part() -> None:
            held["prefix"] = s.prefix(p, held["tokens"], ids, valid)

        def chain_part() -> None:
            s.chain(p, held["prefix"], noise, deterministic)

        return [images_part, prefix_part, chain_part]
    g_images = CapturedNetwork(lambda im: s.images(p, im), [images])
    g_prefix = CapturedNetwork(lambda tok: s.prefix(p, tok, ids, valid), [g_images.outputs])
    g_chain = CapturedNetwork(lambda nz: s.chain(p, g_prefix.outputs, nz, deterministic), [noise])
    return [
        lambda: g_images.run(images),
        lambda: g_prefix.run(g_images.outputs),
        lambda: g_chain.run(noise),
    ]


def swap_cost(
    actor: Pi05Policy, trainer_policy: Pi05Policy, sample: Callable[[Pi05Policy], Any], device: torch.device
) -> dict[str, Any]:
    """A PPO update lands: the trainer's snapshot (every weight moved by 2%, as a stand-in for an
    update) swapped into ``actor`` in place; the swap's wall time, the first chunk after it, and
    that chunk against the eager chunk of the new weights (same noise; ``sample`` seeds it)."""
    new = copy.deepcopy(trainer_policy)
    with torch.no_grad():
        for param in new.parameters():
            param.mul_(1.02)
    before = sample(actor)
    _sync(device)
    t0 = time.perf_counter()
    in_place = actor.take_weights_of(new)
    _sync(device)
    swap_ms = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    after = sample(actor)
    _sync(device)
    first_ms = (time.perf_counter() - t0) * 1e3
    reference = sample(new)
    del new
    return {
        "in_place": in_place,
        "swap_ms": round(swap_ms, 2),
        "first_chunk_after_ms": round(first_ms, 2),
        "chain_changed_by_swap": float(np.abs(after.chain - before.chain).max()),
        "chain_max_abs_diff_vs_eager_new_weights": float(np.abs(after.chain - reference.chain).max()),
    }
