"""The actor's settings: timeouts, the chunk timing mode, takeovers, π0.5's sampling path
(environment ``PDE_ACTOR_*``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pde_contract.settings import data_dir_field


class ActorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PDE_ACTOR_", populate_by_name=True)

    heartbeat_period_s: float = 0.05
    """Heartbeat period while an episode runs (server timeout is 200 ms)."""
    obs_timeout_s: float = 2.0
    """Longest wait for a fresh observation."""
    chunk_timeout_s: float = 30.0
    """Longest wait for a submitted chunk to finish executing."""
    server_silent_s: float = 2.0
    """No reply to any status poll for this long while a chunk runs: the robot server is taken for
    dead and the episode ends, instead of waiting out chunk_timeout_s (replies late by less are
    waited out; one later than this means a server stalled past its own 200 ms watchdog)."""
    stop_check_period_s: float = 0.1
    """While a chunk runs, ``should_stop`` (SIGTERM, the page's abort) is asked this often."""
    poll_period_s: float = 0.005
    """Status polling period while a chunk executes (a fast-paced server's chunk end is read from
    its observation stream instead: it publishes every tick)."""
    reset_before_episode: bool = True
    """Send Reset(task, seed) before the first chunk (sim re-lays the scene; hardware homes)."""
    stop_on_success: bool = True
    """End the episode early when the simulator reports task success (hardware never reports it)."""
    deterministic: bool = False
    """Sample the mean chunk (evaluation) instead of a stochastic chain."""
    chunk_timing: Literal["overlapped", "sync"] = "overlapped"
    """'overlapped': infer the next chunk while the current one runs and let it take over at the
    seam, rows already in the past skipped (the arm never holds for the policy). 'sync': infer
    after each chunk has finished (the arm holds still for the inference time at every chunk
    end). A server with fast pacing (sim) always runs 'sync': there a chunk's rows outpace any
    inference, and observations inside a chunk carry no camera frames."""
    overlap_margin_ticks: int = 1
    """'overlapped': the next observation is taken this many control ticks earlier than the slowest
    of the last ``overlap_window_chunks`` inferences needed, so a slower one still lands before the
    seam. Each chunk then runs its rows less about (inference ticks + this margin)."""
    overlap_window_chunks: int = 3
    """'overlapped': how many recent inference times the lead is taken from (one slow outlier,
    a load spike, then stops cutting chunks short after this many chunks)."""
    fast_inference: bool = False
    """π0.5: sample through the real-time path (prefix cache kept in the model's dtype, SDPA
    attention, static shapes; learner/policies/pi05_realtime.py). The trainer is unaffected."""
    bf16_weights: bool = False
    """π0.5: the actor's copy of the weights in bfloat16 (half the memory; the trainer keeps its
    float32 master weights and each swap casts the new snapshot)."""
    takeover_max_s: float = 60.0
    """A person's takeover hands back to the policy by itself after this long (the operator
    normally ends it first: the source's end button or key)."""
    intervention_demos: bool = False
    """Beyond the paper (HIL-SERL's demo buffer): write each takeover's rows as a demonstration
    file under <data_dir>/demos/<task>/ (``pde learner sft`` reads there). Off: only the episode
    file holds them."""
    data_dir: Path = data_dir_field("PDE_ACTOR_")
    cuda_graphs: bool = False
    """π0.5 with fast_inference on a CUDA GPU: sampling captured as one CUDA graph per batch size
    (on first use, in the warm-up before an episode) and replayed; on a CPU a logged no-op."""
    compiled_kernels: bool = False
    """π0.5 with fast_inference: the real-time path's elementwise pieces (residual add + RMS norm,
    GeGLU, RoPE, the flow step) each compiled into one kernel by torch.compile (Inductor; on a CPU
    it needs a C++ compiler). Compiled on first use (the warm-up), so the first episode starts later."""

    @model_validator(mode="after")
    def _graphs_need_the_fast_path(self) -> ActorSettings:
        for name in ("cuda_graphs", "compiled_kernels"):
            if getattr(self, name) and not self.fast_inference:
                raise ValueError(
                    f"{name} applies to the real-time path: set PDE_ACTOR_FAST_INFERENCE=1 as well "
                    f"(or PDE_ACTOR_{name.upper()}=0)"
                )
        return self
