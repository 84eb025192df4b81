"""π0.5's real-time sampling: how the actor's copy turns one observation into a chunk.

The eager path (``sample_chunks``, which PPO's evaluation mirrors) hands the prefix cache around as
the network hooks' conditioning: every layer's keys and values packed into one float32 tensor, which each
denoising step unpacks and casts back (at full size 8 M elements per step, 38% of the GPU time).
This path computes the same chunk without that:

- the prefix (images + prompt) runs once per chunk; its keys/values stay in the model's dtype and
  every step of the flow-SDE chain reads them as they are;
- SDPA attention in the Gemma layers (``Pi05Model.set_sdpa_attention``);
- static shapes: the prompt is always padded to ``tokenizer_max_length`` tokens, the cameras are
  the mapping's, and a batch size is fixed per captured graph;
- every random draw is made before the network runs, in the eager path's order (the start noise,
  then one per transition), so one seed gives the eager path's chunk; a CUDA graph reads them
  from its input buffer;
- optionally (``cuda_graphs``) the whole network part (images, prefix, chain, value) captured as
  one CUDA graph per (batch size, deterministic) on first use and replayed after: one launch
  instead of thousands. On a CPU this is a no-op, said once in the log.

Tokenising the prompt (which holds the discretised state) and de-normalising the actions stay on
the host side of the graph. The prefix is computed under the policy's autocast exactly as in the
eager path, so with float32 weights and eager attention both paths give the same bits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from learner.policies import flow_sde
from learner.policies.base import ChunkSample, ObsBatch, check_len, chunk_sample
from learner.policies.pi05_fused import FusedPi05, fusable
from learner.policies.pi05_model import PrefixCache

if TYPE_CHECKING:
    from learner.policies.pi05 import Pi05Policy

log = logging.getLogger(__name__)

GRAPH_WARMUP_RUNS = 2  # eager runs on a side stream before capture (cuBLAS handles, allocator)

# (images uint8 [B, C, 3, H, W], token ids [B, L], token mask [B, L], noise [1 + K, B, T, D])
#   -> (chain [B, K+1, T, D], log_prob [B, T, D] over all model columns, value [B])
Network = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]
]


def _on(schedule: flow_sde.FlowSDESchedule, device: torch.device) -> flow_sde.FlowSDESchedule:
    """The schedule's tensors on ``device`` (a captured graph cannot copy them from the host)."""
    return flow_sde.FlowSDESchedule(
        times=schedule.times.to(device), sigmas=schedule.sigmas.to(device), dt=schedule.dt
    )


class CapturedNetwork:
    """``network`` captured as one CUDA graph for the shapes of its first inputs; ``run`` copies new
    inputs into the graph's buffers and replays it. The outputs are the graph's own buffers:
    read them before the next run."""

    def __init__(self, network: Callable[..., Any], inputs: Sequence[torch.Tensor]) -> None:
        self.inputs = [t.clone() for t in inputs]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(GRAPH_WARMUP_RUNS):  # also compiles what torch.compile wraps
                network(*self.inputs)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: the PPO update may run on this GPU from another thread meanwhile.
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            self.outputs = network(*self.inputs)

    def run(self, *inputs: torch.Tensor) -> Any:
        for buffer, value in zip(self.inputs, inputs, strict=True):
            buffer.copy_(value)
        self.graph.replay()
        return self.outputs


class RealtimeSampler:
    """``Pi05Policy.sample`` for the actor's copy (``Pi05Policy.for_acting``), which holds it. It
    holds no reference back to the policy: a swapped-out copy is freed at once with its graphs, not
    at some later garbage collection of a reference cycle (6.7 GB of GPU memory at full size).

    The network runs on fused weights (learner/policies/pi05_fused.py) unless the model has forward
    hooks (LoRA adapters), which fused GEMMs would skip: then through the model's modules."""

    def __init__(self, policy: Pi05Policy, cuda_graphs: bool, compiled_kernels: bool = False) -> None:
        device = policy.device
        self.cuda_graphs = cuda_graphs and device.type == "cuda"
        if cuda_graphs and not self.cuda_graphs:
            log.info("cuda_graphs: π0.5 runs on %s, not a CUDA GPU: sampling without CUDA graphs", device)
        self._schedules = {False: _on(policy.schedule, device), True: _on(policy.euler, device)}
        self._captured: dict[tuple[int, bool], CapturedNetwork] = {}
        why_not = fusable(policy.model)
        if why_not is not None:
            log.info("π0.5's real-time path without fused weights: %s", why_not)
            if compiled_kernels:
                log.warning("compiled_kernels: nothing to compile without fused weights (%s)", why_not)
        self.fused = FusedPi05(policy.model, compiled_kernels) if why_not is None else None
        # False: the model's own modules (SDPA, the kept prefix), what the tests compare bit for bit.
        self.use_fused = self.fused is not None

    def __deepcopy__(self, memo: dict[int, Any]) -> RealtimeSampler:
        raise TypeError(
            "the actor's real-time π0.5 copy is not copied (its CUDA graphs belong to its weights): "
            "copy the trainer's policy, then make the copy the actor's with for_acting"
        )

    @property
    def graphs_captured(self) -> int:
        return len(self._captured)

    def draw_noise(self, p: Pi05Policy, batch: int, deterministic: bool) -> torch.Tensor:
        """[1 + K, B, T, D]: the start noise, then each transition's draw (none when deterministic),
        drawn as the eager path draws them."""
        draws = 1 if deterministic else 1 + self._schedules[False].num_steps
        shape = (batch, p.chunk_len, p.config.max_action_dim)
        return torch.stack([torch.randn(shape, device=p.device) for _ in range(draws)])

    # The network in its three parts (bench/bench_pi05.py times each apart).

    def images(self, p: Pi05Policy, images: torch.Tensor) -> torch.Tensor:
        """uint8 images [B, C, 3, H, W] -> image tokens [B, C * image_tokens, width]."""
        with p._autocast():
            if self.fused is not None and self.use_fused:
                return self.fused.embed_images(images)
            return p.model.embed_images(images.float() / 255.0 * 2.0 - 1.0)

    def prefix(
        self, p: Pi05Policy, tokens: torch.Tensor, ids: torch.Tensor, valid: torch.Tensor
    ) -> PrefixCache:
        """Image tokens and the prompt's ids/mask -> the prefix cache (every camera present)."""
        image_valid = torch.ones(tokens.shape[0], len(p.cameras), dtype=torch.bool, device=tokens.device)
        with p._autocast():
            if self.fused is not None and self.use_fused:
                return self.fused.prefix(*p.model.prefix_inputs(tokens, image_valid, ids, valid))
            return p.model.embed_prefix(tokens, image_valid, ids, valid)

    def chain(
        self, p: Pi05Policy, prefix: PrefixCache, noise: torch.Tensor, deterministic: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The flow chain over ``prefix`` from ``noise`` (``draw_noise``) and the value:
        (chain [B, K+1, T, D], log_prob [B, T, D] over all model columns, value [B])."""
        schedule = self._schedules[deterministic]
        step_noise = None if deterministic else noise[1:]
        if self.fused is not None and self.use_fused:
            with p._autocast():
                chain, log_prob = self.fused.sample_chain(
                    prefix, noise[0], schedule, deterministic, step_noise
                )
        else:
            chain, log_prob = flow_sde.sample_chain(
                p.prefix_velocity_fn(prefix), noise[0], schedule, deterministic, step_noise
            )
        return chain, log_prob, p.value_from_prefix(prefix)

    def network(self, p: Pi05Policy, deterministic: bool) -> Network:
        def run(
            images: torch.Tensor, ids: torch.Tensor, valid: torch.Tensor, noise: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            prefix = self.prefix(p, self.images(p, images), ids, valid)
            return self.chain(p, prefix, noise, deterministic)

        return run

    def _graph(
        self, p: Pi05Policy, inputs: Sequence[torch.Tensor], deterministic: bool
    ) -> CapturedNetwork | None:
        """The graph for these shapes, captured on first use; None (and no more graphs) when the
        capture fails: the chunk is then computed without one rather than lost."""
        key = (int(inputs[0].shape[0]), deterministic)
        if key not in self._captured:
            log.info("capturing π0.5's sampling as a CUDA graph (batch %d, deterministic %s)", *key)
            try:
                self._captured[key] = CapturedNetwork(self.network(p, deterministic), inputs)
            except RuntimeError as e:
                log.warning("CUDA graph capture failed, sampling without graphs from now on: %s", e)
                self.cuda_graphs = False
                return None
        return self._captured[key]

    def _check_fused(self) -> None:
        """The fused tensors are still the model's weights: a ``.to()`` of the model after
        ``for_acting`` would have copied its weights away from them (stale weights). Fused anew then,
        and the graphs (which hold the old tensors) captured anew."""
        if self.fused is None or self.fused.intact():
            return
        log.warning("π0.5's actor copy was moved after for_acting: fusing its weights again, new graphs")
        self.fused = FusedPi05(self.fused.model, self.fused.compiled)
        self._captured.clear()

    @torch.no_grad()
    def sample(
        self, p: Pi05Policy, obs: ObsBatch, prompts: Sequence[str], deterministic: bool
    ) -> ChunkSample:
        """Policy ``p`` (the one holding this sampler) samples a chunk for each observation."""
        check_len(obs, prompts, "prompts")
        obs = obs.to(p.device)
        self._check_fused()
        ids, valid = p.tokenize(prompts, p.normalize_state(obs.state).cpu().numpy())
        noise = self.draw_noise(p, len(obs), deterministic)
        inputs = (obs.images, ids, valid, noise)
        captured = self._graph(p, inputs, deterministic) if self.cuda_graphs else None
        if captured is not None:
            chain, log_prob, value = captured.run(*inputs)
        else:
            chain, log_prob, value = self.network(p, deterministic)(*inputs)
        actions = p.denormalize_actions(chain[:, -1], obs.state)
        return chunk_sample(actions, chain, log_prob[..., : p.action_dim], value)
