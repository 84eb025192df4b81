"""Per-prompt diagnostics of one PPO update: what the update did to each prompt source.

A batch of the α mixture holds chunks rolled out under the canonical prompt and under pool prompts.
The mixed ratio couples them (ℓ = ½ log π(a|o,p_g) + ½ log π(a|o,p)), and in a network shared
between prompts a step taken for one prompt moves the others. These say, per source ('canonical',
'pool', and each pool prompt 'pool1', 'pool2', ... in the batch's order):

- the start-of-update log w0 per ratio unit (mean, p10, p50, p90), the share of units that start
  outside the clip band and the share the w0 guard drops;
- the share of units clipped during the update's minibatches;
- the gradient norm each half of ℓ contributes at the update's start (canonical half: the
  gradient through log π(a|o,p_g); rollout half: through log π(a|o,p));
- after the update, on a fixed subset of the batch's observations: KL(new ‖ old) under the
  source's prompt, and how far its mean action moved (RMS per element, normalised units) and
  toward which other mean (the fraction of the gap to the other prompt's old mean that was closed:
  1 = reached it, < 0 = moved away from it, beyond its own old mean).

``UpdateDiagnostics.metrics()`` flattens them into the trainer's stats as ``mech/<source>/<field>``
(floats, so the loop's metrics and the benchmark's update rows hold them without a schema of their
own); the typed record is ``Trainer.last_diagnostics``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from learner.policies.base import ObsBatch, Policy, PolicyNetwork

CANONICAL = "canonical"
POOL = "pool"


@dataclass
class SourceDiagnostics:
    """One prompt source of one update. NaN where the source had no chunk of that kind."""

    source: str  # 'canonical', 'pool', or 'pool<i>' (1-based, in the batch's order of first use)
    prompt: str  # the prompt text ('' for the whole pool)
    n_chunks: int
    log_w0_mean: float = float("nan")
    log_w0_p10: float = float("nan")
    log_w0_p50: float = float("nan")
    log_w0_p90: float = float("nan")
    w0_outside_clip_frac: float = float("nan")  # units with |w0 - 1| > clip_coef at the start
    w0_dropped_frac: float = float("nan")  # units the w0 guard leaves out of the loss
    clipfrac: float = float("nan")  # units clipped, over the update's minibatches
    grad_norm_canonical_half: float = float("nan")  # at the start, through log pi(a|o,p_g)
    grad_norm_rollout_half: float = float("nan")  # at the start, through log pi(a|o,p)
    kl_new_old: float = float("nan")  # KL(pi_new(.|o,p) || pi_old(.|o,p)) per chunk, fixed obs
    mean_move_rms: float = float("nan")  # RMS change of the mean action per element (normalised)
    move_toward: str = ""  # whose old mean the movement is measured against
    move_toward_frac: float = float("nan")  # share of the gap to that mean closed (< 0: away)


@dataclass
class UpdateDiagnostics:
    sources: list[SourceDiagnostics] = field(default_factory=list)

    def source(self, name: str) -> SourceDiagnostics:
        """The source called ``name``; a KeyError names the sources there are."""
        found = next((s for s in self.sources if s.source == name), None)
        if found is None:
            raise KeyError(f"no diagnostics for source {name!r}; sources: {[s.source for s in self.sources]}")
        return found

    def metrics(self) -> dict[str, float]:
        """Flat floats for the trainer's stats: ``mech/<source>/<field>``, the finite ones (a source
        without chunks of a kind has nothing to say about them; NaN would also compare unequal)."""
        out: dict[str, float] = {}
        for s in self.sources:
            for name, value in asdict(s).items():
                if isinstance(value, (int, float)) and np.isfinite(value):
                    out[f"mech/{s.source}/{name}"] = float(value)
        return out

    def as_record(self) -> list[dict[str, object]]:
        """JSON-ready, one dict per source (NaN as None)."""
        return [
            {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in asdict(s).items()}
            for s in self.sources
        ]


def prompt_sources(rollout_prompts: Sequence[str], canonical_prompts: Sequence[str]) -> dict[str, np.ndarray]:
    """Source name -> boolean mask over chunks: 'canonical', 'pool' (any other prompt) and
    'pool<i>' per distinct other prompt, numbered in order of first appearance."""
    rp = np.asarray(rollout_prompts, dtype=object)
    differs = np.array([r != c for r, c in zip(rollout_prompts, canonical_prompts, strict=True)])
    out = {CANONICAL: ~differs, POOL: differs}
    seen: list[str] = []
    for r, d in zip(rollout_prompts, differs, strict=True):
        if d and r not in seen:
            seen.append(r)
    for i, text in enumerate(seen, start=1):
        out[f"{POOL}{i}"] = rp == text
    return out


def pool_prompt_texts(rollout_prompts: Sequence[str], canonical_prompts: Sequence[str]) -> list[str]:
    seen: list[str] = []
    for r, c in zip(rollout_prompts, canonical_prompts, strict=True):
        if r != c and r not in seen:
            seen.append(r)
    return seen


def start_of_update(
    sources: dict[str, np.ndarray],
    log_w0: torch.Tensor,
    keep: torch.Tensor,
    clip_coef: float,
    texts: dict[str, str],
) -> dict[str, SourceDiagnostics]:
    """log w0 [N, U] and the guard's keep mask [N, U] summarised per source."""
    out: dict[str, SourceDiagnostics] = {}
    for name, mask in sources.items():
        d = SourceDiagnostics(source=name, prompt=texts.get(name, ""), n_chunks=int(mask.sum()))
        if mask.any():
            lw = log_w0[torch.from_numpy(mask)].reshape(-1).double().numpy()
            kp = keep[torch.from_numpy(mask)].reshape(-1).numpy()
            d.log_w0_mean = float(lw.mean())
            d.log_w0_p10, d.log_w0_p50, d.log_w0_p90 = (float(x) for x in np.percentile(lw, [10, 50, 90]))
            d.w0_outside_clip_frac = float((np.abs(np.expm1(lw)) > clip_coef).mean())
            d.w0_dropped_frac = float(1.0 - kp.mean())
        out[name] = d
    return out


class ClipCounter:
    """Clipped and kept units per source, summed over an update's minibatches."""

    def __init__(self, names: Sequence[str]) -> None:
        self.clipped = dict.fromkeys(names, 0.0)
        self.kept = dict.fromkeys(names, 0.0)

    @torch.no_grad()
    def add(
        self, sources: dict[str, np.ndarray], idx: np.ndarray, log_ratio: torch.Tensor, keep: torch.Tensor,
        clip_coef: float,
    ) -> None:  # fmt: skip
        clipped = ((log_ratio.exp() - 1.0).abs() > clip_coef) & keep
        for name, mask in sources.items():
            rows = torch.from_numpy(mask[idx]).to(log_ratio.device)
            self.clipped[name] += float(clipped[rows].sum())
            self.kept[name] += float(keep[rows].sum())

    def fractions(self) -> dict[str, float]:
        return {n: self.clipped[n] / self.kept[n] if self.kept[n] else float("nan") for n in self.clipped}


def fixed_subset(n: int, size: int, rng: np.random.Generator) -> np.ndarray:
    return np.sort(rng.choice(n, size=min(n, size), replace=False))


@dataclass
class PromptSnapshot:
    """A policy's view of fixed observations under each prompt: mean actions [P, B, T, D]
    (normalised; deterministic sampling) and, for a PolicyNetwork, its head's means along the
    stored chains (for KL)."""

    prompts: list[str]
    mean_actions: torch.Tensor
    head_means: list[torch.Tensor] | None


@torch.no_grad()
def snapshot(
    policy: Policy, obs: ObsBatch, chains: torch.Tensor, prompts: Sequence[str], seed: int
) -> PromptSnapshot:
    means, heads = [], []
    net = policy if isinstance(policy, PolicyNetwork) else None
    for p in prompts:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)  # a flow head's deterministic chain starts from noise: the same each time
            s = policy.sample(obs, [p] * len(obs), deterministic=True)
        means.append(torch.from_numpy(s.chain[:, -1]).float())
        if net is not None:
            feats = net.encode_observations(obs)
            heads.append(net.action_head.means(net.condition(feats, [p] * len(obs)), chains.to(net.device)))
    return PromptSnapshot(list(prompts), torch.stack(means), heads if net is not None else None)


@torch.no_grad()
def movement(
    policy: Policy, before: PromptSnapshot, after: PromptSnapshot, out: dict[str, SourceDiagnostics],
    names: dict[str, str],
) -> None:  # fmt: skip
    """Fill KL(new || old), the mean's move and the share of the gap closed: a pool prompt against
    the canonical prompt's old mean, the canonical prompt against the pool prompts' average old mean.
    ``names``: prompt text -> source name; before.prompts[0] is the canonical prompt."""
    net = policy if isinstance(policy, PolicyNetwork) else None
    canon_old = before.mean_actions[0]
    pool_old = before.mean_actions[1:].mean(0) if len(before.prompts) > 1 else None
    for i, p in enumerate(before.prompts):
        d = out.get(names[p])
        if d is None:
            continue
        move = after.mean_actions[i] - before.mean_actions[i]
        d.mean_move_rms = float(move.pow(2).mean().sqrt())
        target, label = (pool_old, POOL) if i == 0 else (canon_old, CANONICAL)
        if target is not None:
            gap = (target - before.mean_actions[i]).flatten()
            d.move_toward = label
            d.move_toward_frac = float(move.flatten() @ gap / gap.pow(2).sum().clamp(min=1e-12))
        if net is not None and before.head_means is not None and after.head_means is not None:
            d.kl_new_old = float(net.action_head.kl(after.head_means[i], before.head_means[i]).mean())
    whole = out.get(POOL)
    parts = [out[names[p]] for p in before.prompts[1:] if names[p] in out]
    if whole is not None and parts:  # the pool as a whole: its prompts' average
        whole.move_toward = CANONICAL
        for name in ("kl_new_old", "mean_move_rms", "move_toward_frac"):
            setattr(whole, name, float(np.mean([getattr(d, name) for d in parts])))
