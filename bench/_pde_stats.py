"""Statistics of the PDE benchmark (issue 22 item 5), pure functions over the result file's rows.

The unit of replication is the seed (one PPO run from one SFT start), not the episode: per-seed
success rates spread far more than the binomial (bench/results/pde_vs_noise.json: 50, 39, 17/100),
so a pooled Wilson interval overstates precision. Gains and the primary contrast get seed-level 95%
intervals, Student t and a percentile bootstrap over seeds; per-seed Wilson intervals stay beside
them. Also here: how far proposals are from the SFT training wordings (``overlap``) and the result
file's ``premise``, ``primary_contrast`` and ``frozen`` blocks (``schema_errors`` checks the file).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _common import REPO_ROOT, success_interval

PRIMARY = ("pde_mixed", "noise")  # pre-registered: pde_mixed gain - noise gain, final checkpoint
# Files whose hashes the result carries: the premise and every proposer, frozen before any arm runs.
FROZEN_FILES = ("learner/recipes/paper_regime.json", "supervisor/proposers.py")
PER_SEED_KEYS = ("seed", "eval_episodes", "success_start", "success_end", "env_episodes")
BOOTSTRAP_RESAMPLES = 10_000
# Issue 22's bar for a result the README may report: runs (SFT seed, RL seed) per arm, SFT seeds per
# arm, held-out scenes per evaluation, and the environment episodes of the final checkpoint.
MIN_RUNS_PER_ARM = 6
MIN_SFT_SEEDS = 2
MIN_EVAL_EPISODES = 100
FINAL_ENV_EPISODES = 320
# bench/bench_premise_calibrate.py's names for the proposers -> supervisor.proposers.PROPOSERS'
CALIBRATION_PROPOSERS = {"rule_paraphrase": "paraphrase", "sim_stand_in": "standin"}


# --- seed-level intervals -----------------------------------------------------------------------


def t_cdf(x: float, df: int, steps: int = 4000) -> float:
    """Student t CDF, Simpson's rule on [0, |x|] (smooth integrand: error far below 1e-9 for |x| < 50)."""
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    grid = np.linspace(0.0, abs(x), steps + 1)
    pdf = np.exp(log_c - (df + 1) / 2 * np.log1p(grid * grid / df))
    weights = np.where(np.arange(steps + 1) % 2, 4.0, 2.0)
    weights[0] = weights[-1] = 1.0
    half = float(weights @ pdf) * abs(x) / steps / 3
    return 0.5 + half if x >= 0 else 0.5 - half


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student t with ``df`` degrees of freedom (bisection on ``t_cdf``)."""
    if not 0.5 <= p < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0.5 <= p < 1 and df >= 1, got p={p}, df={df}")
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, df) < p else (low, mid)
    return (low + high) / 2


def t_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Student t interval of the mean over seeds: mean +- t(df = n-1) * sd / sqrt(n)."""
    n = len(values)
    if n < 2:
        raise ValueError(f"a seed-level interval needs at least 2 seeds, got {n}")
    x = np.asarray(values, dtype=np.float64)
    half = t_quantile(0.5 + confidence / 2, n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
    return (float(x.mean()) - half, float(x.mean()) + half)


def bootstrap_interval(
    values: Sequence[float], confidence: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap of the mean over seeds (seeds drawn with replacement)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        raise ValueError(f"a seed-level interval needs at least 2 seeds, got {x.size}")
    means = np.random.default_rng(seed).choice(x, size=(resamples, x.size), replace=True).mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return (float(low), float(high))


def _interval_block(values: Sequence[float]) -> dict[str, Any]:
    t_low, t_high = t_interval(values)
    b_low, b_high = bootstrap_interval(values)
    return {
        "n_seeds": len(values),
        "mean": float(np.mean(values)),
        "ci95": [t_low, t_high],
        "ci95_bootstrap": [b_low, b_high],
    }


# --- arms and the primary contrast --------------------------------------------------------------


def _count(rate: float, n: int) -> int:
    return round(rate * n)


def arm_stats(per_seed: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-seed Wilson intervals of start and end, and the seed-level interval of the gain (its
    ``ci95`` None, with the reason, below 2 seeds)."""
    rows = []
    for r in per_seed:
        n = int(r["eval_episodes"])
        rows.append(
            {
                "seed": r["seed"],
                "start": success_interval(_count(r["success_start"], n), n),
                "end": success_interval(_count(r["success_end"], n), n),
                "gain": r["success_end"] - r["success_start"],
            }
        )
    gains = [r["gain"] for r in rows]
    if len(gains) < 2:
        reason = f"a seed-level interval needs at least 2 seeds, this arm has {len(gains)}"
        gain: dict[str, Any] = {"n_seeds": len(gains), "mean": float(np.mean(gains)) if gains else None}
        gain["ci95"] = None
        gain["reason"] = reason
        return {"per_seed": rows, "gain": gain}
    return {"per_seed": rows, "gain": _interval_block(gains)}


def _gains(per_seed: Sequence[Mapping[str, Any]]) -> dict[Any, float]:
    # a run is (SFT seed, RL seed): rows of several SFT starts share RL seed numbers
    return {(r.get("sft_seed"), r["seed"]): r["success_end"] - r["success_start"] for r in per_seed}


def contrast(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]], seed: int = 0) -> dict[str, Any]:
    """Gain of arm ``a`` minus gain of arm ``b``, over seeds. Paired (per-run differences: same SFT
    seed and RL seed, same start and evaluation scenes) when both arms ran the same runs; else Welch's t
    and a bootstrap that resamples each arm's seeds on its own."""
    ga, gb = _gains(a), _gains(b)
    if set(ga) == set(gb):
        diffs = [ga[s] - gb[s] for s in sorted(ga)]
        return {
            "paired": True,
            **_interval_block(diffs),
            "clustered_by_sft_seed": clustered_interval({s: ga[s] - gb[s] for s in ga}),
        }
    xa, xb = np.array(list(ga.values())), np.array(list(gb.values()))
    if xa.size < 2 or xb.size < 2:
        raise ValueError(f"a contrast needs at least 2 seeds per arm, got {xa.size} and {xb.size}")
    va, vb = xa.var(ddof=1) / xa.size, xb.var(ddof=1) / xb.size
    df = (va + vb) ** 2 / (va**2 / (xa.size - 1) + vb**2 / (xb.size - 1)) if va + vb > 0 else 1.0
    mean = float(xa.mean() - xb.mean())
    half = t_quantile(0.975, max(1, math.floor(df))) * math.sqrt(va + vb)
    rng = np.random.default_rng(seed)
    boot = rng.choice(xa, (BOOTSTRAP_RESAMPLES, xa.size)).mean(axis=1) - rng.choice(
        xb, (BOOTSTRAP_RESAMPLES, xb.size)
    ).mean(axis=1)
    low, high = np.percentile(boot, [2.5, 97.5])
    return {
        "paired": False,
        "n_seeds": [int(xa.size), int(xb.size)],
        "mean": mean,
        "ci95": [mean - half, mean + half],
        "ci95_bootstrap": [float(low), float(high)],
    }


def clustered_interval(diff_by_run: Mapping[tuple[Any, Any], float]) -> dict[str, Any]:
    """The interval with the SFT seed as the cluster: runs from one SFT checkpoint share its start
    and are not independent, so the unit is the SFT seed's mean over its RL seeds, and the t
    interval has (SFT seeds - 1) degrees of freedom. ``ci95`` None, with the reason, below 2 SFT
    seeds. (The seed-level ``ci95`` beside it treats every run as independent: too narrow.)"""
    by_sft: dict[Any, list[float]] = {}
    for (sft_seed, _), d in diff_by_run.items():
        by_sft.setdefault(sft_seed, []).append(d)
    means = {str(k): float(np.mean(v)) for k, v in sorted(by_sft.items(), key=lambda kv: str(kv[0]))}
    block: dict[str, Any] = {"n_sft_seeds": len(means), "sft_seed_means": means}
    if len(means) < 2:
        return {**block, "mean": None, "ci95": None, "reason": f"{len(means)} SFT seed(s): no interval"}
    low, high = t_interval(list(means.values()))
    return {**block, "mean": float(np.mean(list(means.values()))), "ci95": [low, high]}


def primary_contrast(arms: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The pre-registered contrast: ``pde_mixed`` gain - ``noise`` gain at the final checkpoint."""
    a, b = PRIMARY
    missing = [arm for arm in PRIMARY if arm not in arms]
    if missing:
        raise ValueError(f"the primary contrast needs arms {list(PRIMARY)}; missing {missing}")
    return {
        "definition": f"{a} gain - {b} gain (final checkpoint)",
        **contrast(arms[a]["per_seed"], arms[b]["per_seed"]),
    }


def primary_contrast_block(arms: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The pre-registered contrast over the runs both arms finished (paired on (SFT seed, RL seed));
    ``mean`` and ``ci95`` None, with the reason, below 2 such pairs (a benchmark still in parts)."""
    a, b = PRIMARY
    rows = {arm: arms[arm]["per_seed"] if arm in arms else [] for arm in PRIMARY}
    both = set(_gains(rows[a])) & set(_gains(rows[b]))
    pick = {arm: [r for r in rows[arm] if (r.get("sft_seed"), r["seed"]) in both] for arm in PRIMARY}
    unpaired = sorted(
        f"{arm} sft{r.get('sft_seed')} seed{r['seed']}"
        for arm in PRIMARY
        for r in rows[arm]
        if r not in pick[arm]
    )
    ends = sorted({int(r["env_episodes"]) for arm in PRIMARY for r in pick[arm]})
    head = {
        "definition": f"{a} gain - {b} gain (final checkpoint)",
        "at_env_episodes": ends,
        "unpaired_runs_left_out": unpaired,
    }
    if len(both) < 2:
        reason = f"{len(both)} run(s) (SFT seed, RL seed) finished in both {a} and {b}; the contrast needs 2"
        return {**head, "paired": True, "n_seeds": len(both), "mean": None, "ci95": None, "reason": reason}
    return {**head, **contrast(pick[a], pick[b])}


def completeness(arms: Mapping[str, Mapping[str, Any]], final_env_episodes: int) -> dict[str, Any]:
    """Whether the merged arms meet issue 22's bar, and, when not, what is missing."""
    missing = [f"arm {arm}: no finished run" for arm in PRIMARY if arm not in arms]
    for name, arm in arms.items():
        rows = arm["per_seed"]
        sft = {r.get("sft_seed") for r in rows}
        if len(rows) < MIN_RUNS_PER_ARM:
            missing.append(f"arm {name}: {len(rows)} of {MIN_RUNS_PER_ARM} runs")
        if len(sft) < MIN_SFT_SEEDS:
            missing.append(f"arm {name}: {len(sft)} of {MIN_SFT_SEEDS} SFT seeds")
        if any(int(r["eval_episodes"]) < MIN_EVAL_EPISODES for r in rows):
            missing.append(f"arm {name}: evaluations on fewer than {MIN_EVAL_EPISODES} held-out scenes")
    if final_env_episodes != FINAL_ENV_EPISODES:
        missing.append(
            f"budget: {final_env_episodes} environment episodes, the bar's is {FINAL_ENV_EPISODES}"
        )
    return {
        "complete": not missing,
        "bar": f">= {MIN_RUNS_PER_ARM} runs and >= {MIN_SFT_SEEDS} SFT seeds per arm ({', '.join(PRIMARY)} "
        f"included), {MIN_EVAL_EPISODES} held-out scenes, final checkpoint at {FINAL_ENV_EPISODES} episodes",
        "missing": missing,
    }


# Exploratory contrasts that say *why* (issue 22 item 7), beside the pre-registered primary one: each
# isolates one part of PDE. Reported only over runs both arms finished (paired), never used to pick.
SECONDARY = (
    ("pde_mixed", "pde_canonical", "the ratio: mixed - canonical-only, both with the search"),
    ("oracle", "pde_mixed", "the proposer: the SFT training wordings as the pool - the paraphraser's"),
    ("oracle", "noise", "an upper bound on the search: the training wordings as the pool - action noise"),
    ("pde_canonical", "noise", "the search alone: canonical-only ratio with the search - action noise"),
    # Added with the remaining arms (after the minimal set above had run; exploratory like the rest):
    ("pde_mixed", "pde_rollout", "the ratio: mixed - rollout-prompt, both with the search"),
    ("relabel", "noise", "the search's successes relabelled with the canonical prompt - action noise"),
    ("pde_mixed", "relabel", "the mixture - relabelling the search's successes, same search"),
    ("pde_mixed@standin", "pde_mixed", "the proposer: the sim stand-in for the VLM - the paraphraser"),
    # Added after every run had finished (so, like all of these, no claim rests on it):
    ("pde_mixed@standin", "noise", "PDE with the sim stand-in for the VLM - action noise"),
)


def target_block(arm_stats: Mapping[str, Any], primary: Mapping[str, Any]) -> dict[str, Any]:
    """Issue 22 item 7's bar for "PDE helps": the pde_mixed gain at least twice the noise gain, and
    the seed-level 95% interval of their difference above zero. ``met`` None while either is missing."""
    a, b = PRIMARY
    gains = [arm_stats.get(arm, {}).get("gain", {}).get("mean") for arm in PRIMARY]
    ci = primary.get("ci95")
    head = {"definition": f"{a} gain >= 2 x {b} gain, and the primary contrast's ci95 above 0"}
    if None in gains or ci is None:
        return {**head, "met": None, "gain_ratio": None}
    ratio = gains[0] / gains[1] if gains[1] else None
    met = bool(gains[0] >= 2 * gains[1] and ci[0] > 0)
    return {**head, "met": met, "gain_ratio": ratio, "contrast_ci95_low": ci[0]}


def secondary_contrasts(arms: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The ``SECONDARY`` contrasts that have >= 2 runs finished in both arms, paired on (SFT seed,
    RL seed); the others listed with how many pairs they have."""
    out: list[dict[str, Any]] = []
    for a, b, meaning in SECONDARY:
        rows_a = arms[a]["per_seed"] if a in arms else []
        rows_b = arms[b]["per_seed"] if b in arms else []
        both = set(_gains(rows_a)) & set(_gains(rows_b))
        head = {"contrast": f"{a} gain - {b} gain (final checkpoint)", "meaning": meaning}
        if len(both) < 2:
            out.append({**head, "n_seeds": len(both), "mean": None, "ci95": None})
            continue
        pick_a = [r for r in rows_a if (r.get("sft_seed"), r["seed"]) in both]
        pick_b = [r for r in rows_b if (r.get("sft_seed"), r["seed"]) in both]
        out.append({**head, **contrast(pick_a, pick_b)})
    return out


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if len(values) else None


def run_mechanism(result: Mapping[str, Any]) -> dict[str, Any]:
    """What one run's PPO updates logged: when RL began, how alpha moved, how much of the RL stage
    went to pool prompts and how they and the canonical prompt succeeded in training."""
    its = [it for it in result.get("iterations", []) if "alpha" in it]
    prompts = result.get("prompts", [])
    pooled = [p for p in prompts if p.get("status") == "pool"]
    # weighted by each update's rollouts: a share times its batch is a count of episodes
    share = [float(it.get("pool_prompt_share", 0.0)) for it in its]
    return {
        "sft_seed": result.get("sft_seed"),
        "seed": result.get("seed"),
        "n_updates": len(its),
        "env_episodes_at_first_update": int(its[0]["env_episodes"]) if its else None,
        "alpha": [round(float(it["alpha"]), 4) for it in its],
        "pool_size_end": int(its[-1].get("pool_size", 0)) if its else len(pooled),
        "proposals_admitted": len(pooled),
        "proposals_rejected": sum(p.get("status") == "rejected" for p in prompts),
        "pool_prompt_share_mean": _mean(share),
        "pool_success_mean": _mean(
            [float(it["pool_success"]) for it in its if it.get("pool_success") is not None]
        ),
        "canonical_success_train": [
            None if it.get("canonical_success") is None else round(float(it["canonical_success"]), 4)
            for it in its
        ],
        # how far each update moved: PPO's approx KL on its own ratio, whether target_kl stopped it,
        # and KL(new || old) under the canonical prompt on the batch's observations (nats per chunk)
        "update_approx_kl": [_opt(it.get("approx_kl")) for it in its],
        "update_early_stopped": [_opt(it.get("early_stop")) for it in its],
        "update_canonical_kl": [_opt(it.get("mech/canonical/kl_new_old")) for it in its],
        # what the search found: each admitted prompt's training record against the canonical prompt's
        "canonical_prompt_train": [
            {"successes": int(p["successes"]), "n": int(p["n"])}
            for p in prompts
            if p.get("status") == "canonical" and "n" in p
        ],
        "pool_prompts_train": [
            {"text": p["text"], "successes": int(p["successes"]), "n": int(p["n"])}
            for p in pooled
            if "n" in p
        ],
    }


def _opt(value: Any) -> float | None:
    return None if value is None else round(float(value), 4)


def _median(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return float(np.median(kept)) if kept else None


def _pooled_rate(cells: Sequence[Mapping[str, Any]]) -> float | None:
    n = sum(int(c["n"]) for c in cells)
    return sum(int(c["successes"]) for c in cells) / n if n else None


def auc_gain(evaluations: Sequence[Mapping[str, Any]], from_env_episodes: int = 1) -> float | None:
    """The run's mean gain over its start across the training, as the area under its success curve:
    the trapezoid over the evaluation points at or after ``from_env_episodes`` (and the last point
    before them, so the area starts where the curve does), divided by the span, minus the start
    (the evaluation at 0). None without a start or with fewer than 2 such points. A run that leads
    early and falls back scores between the two, where an endpoint sees only the fall."""
    points = sorted((int(ev["env_episodes"]), float(ev["rate"])) for ev in evaluations)
    start = next((r for at, r in points if at == 0), None)
    used = [(at, r) for at, r in points if at >= from_env_episodes]
    if start is None or len(used) < 2:
        return None
    xs, ys = np.array([at for at, _ in used], float), np.array([r for _, r in used], float)
    area = float(np.sum((xs[1:] - xs[:-1]) * (ys[1:] + ys[:-1]) / 2))
    return area / float(xs[-1] - xs[0]) - start


def auc_contrast(
    arms: Mapping[str, Mapping[str, Any]], a: str, b: str, from_env_episodes: int = 64
) -> dict[str, Any]:
    """``auc_gain`` of arm ``a`` minus arm ``b``, paired by (SFT seed, RL seed), with the seed-level
    and the SFT-clustered intervals; ``mean`` None, with the reason, below 2 pairs."""

    def gains(name: str) -> dict[tuple[Any, Any], float]:
        rows = arms[name]["per_seed"] if name in arms else []
        out = {}
        for r in rows:
            g = auc_gain(r.get("evaluations", []), from_env_episodes)
            if g is not None:
                out[(r.get("sft_seed"), r["seed"])] = g
        return out

    ga, gb = gains(a), gains(b)
    both = sorted(set(ga) & set(gb), key=str)
    head = {"definition": f"{a} - {b}: mean gain over the start, area under the curve from "
            f"{from_env_episodes} environment episodes", "paired_runs": len(both)}  # fmt: skip
    if len(both) < 2:
        return {**head, "mean": None, "ci95": None, "reason": f"{len(both)} paired run(s) with a curve"}
    diffs = {k: ga[k] - gb[k] for k in both}
    return {
        **head,
        **_interval_block(list(diffs.values())),
        "clustered_by_sft_seed": clustered_interval(diffs),
    }


def time_course(arms: Mapping[str, Mapping[str, Any]], reference: str = "noise") -> dict[str, Any]:
    """Each arm's canonical success at every evaluation point (pooled k/n over runs), and its gain
    over ``reference`` at that point, paired by (SFT seed, RL seed), with the seed-level and the
    SFT-clustered intervals: one endpoint hides an arm that leads early and falls back."""

    def at(rows: Sequence[Mapping[str, Any]], when: int) -> dict[tuple[Any, Any], float]:
        return {
            (r.get("sft_seed"), r["seed"]): float(ev["rate"])
            for r in rows
            for ev in r.get("evaluations", [])
            if int(ev["env_episodes"]) == when
        }

    ref_rows = arms[reference]["per_seed"] if reference in arms else []
    out: dict[str, Any] = {}
    for name, arm in arms.items():
        rows = arm["per_seed"]
        points = sorted({int(ev["env_episodes"]) for r in rows for ev in r.get("evaluations", [])})
        course = []
        for when in points:
            evs = [ev for r in rows for ev in r.get("evaluations", []) if int(ev["env_episodes"]) == when]
            k, n = sum(int(ev["successes"]) for ev in evs), sum(int(ev["n"]) for ev in evs)
            point: dict[str, Any] = {"env_episodes": when, "runs": len(evs), **success_interval(k, n)}
            mine, ref = at(rows, when), at(ref_rows, when)
            both = sorted(set(mine) & set(ref), key=str)
            if name != reference and len(both) >= 2:
                diffs = [mine[s] - ref[s] for s in both]
                point[f"minus_{reference}"] = {
                    "paired_runs": len(both),
                    **_interval_block(diffs),
                    "clustered_by_sft_seed": clustered_interval({s: mine[s] - ref[s] for s in both}),
                }
            course.append(point)
        out[name] = course
    return out


def train_by_version(episodes: Sequence[Mapping[str, Any]], canonical_prompt: str) -> list[dict[str, Any]]:
    """RL-stage training episodes of one or more runs, pooled by the policy version that acted:
    the canonical prompt's and the pool prompts' successes as counts (k/n). A mean of per-update
    rates over whole runs mixes versions and weighs one-episode rates like 30-episode ones."""
    cells: dict[int, dict[str, list[int]]] = {}
    for e in episodes:
        if e.get("kind") != "train" or e.get("stage") != "rl":
            continue
        who = "canonical" if e["prompt"] == canonical_prompt else "pool"
        kn = cells.setdefault(int(e["policy_version"]), {"canonical": [0, 0], "pool": [0, 0]})[who]
        kn[0] += bool(e["success"])
        kn[1] += 1
    return [
        {
            "policy_version": v,
            **{
                who: {"successes": k, "n": n, "rate": k / n if n else None}
                for who, (k, n) in cells[v].items()
            },
        }
        for v in sorted(cells)
    ]


def mechanism(arms: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Per arm: each run's ``run_mechanism`` and their means (alpha at the first and last update, the
    pool's share of RL rollouts and its training success, episodes spent before the first update)."""
    out: dict[str, Any] = {}
    for name, arm in arms.items():
        runs = [run_mechanism(r) for r in arm["per_seed"]]
        with_alpha = [r for r in runs if r["alpha"]]
        out[name] = {
            "runs": runs,
            "mean_env_episodes_at_first_update": _mean(
                [
                    r["env_episodes_at_first_update"]
                    for r in runs
                    if r["env_episodes_at_first_update"] is not None
                ]
            ),
            "mean_updates": _mean([r["n_updates"] for r in runs]),
            "mean_alpha_first": _mean([r["alpha"][0] for r in with_alpha]),
            "mean_alpha_last": _mean([r["alpha"][-1] for r in with_alpha]),
            "mean_pool_prompt_share": _mean(
                [r["pool_prompt_share_mean"] for r in runs if r["pool_prompt_share_mean"] is not None]
            ),
            "mean_pool_success": _mean(
                [r["pool_success_mean"] for r in runs if r["pool_success_mean"] is not None]
            ),
            "mean_canonical_success_train": _mean(
                [x for r in runs for x in r["canonical_success_train"] if x is not None]
            ),
            "train_by_version": arm.get("train_by_version", []),
            "median_update_approx_kl": _median([x for r in runs for x in r["update_approx_kl"]]),
            "early_stopped_frac": _mean(
                [float(x) for r in runs for x in r["update_early_stopped"] if x is not None]
            ),
            "median_update_canonical_kl": _median([x for r in runs for x in r["update_canonical_kl"]]),
            # pooled over runs, every episode each prompt ran in training (bootstrap and RL stages)
            "canonical_prompt_train_rate": _pooled_rate(
                [c for r in runs for c in r["canonical_prompt_train"]]
            ),
            "pool_prompts_train_rate": _pooled_rate([c for r in runs for c in r["pool_prompts_train"]]),
        }
    return out


# --- overlap between proposals and the SFT training wordings ------------------------------------


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def word_edit_distance(a: str, b: str) -> int:
    """Levenshtein distance over words: insertions, deletions and substitutions of whole words."""
    x, y = words(a), words(b)
    row = list(range(len(y) + 1))
    for i, wx in enumerate(x, 1):
        prev, row[0] = row[0], i
        for j, wy in enumerate(y, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (wx != wy))
    return row[-1]


def overlap(proposals: Sequence[str], training: Sequence[str]) -> dict[str, Any]:
    """How close proposals are to the SFT training wordings: exact matches (same words), the share
    that starts with a training wording's verb (its first word), and each proposal's nearest
    word-edit distance to any training wording."""
    if not training:
        raise ValueError("overlap needs the training wordings (the recipe's 'wordings' of the target)")
    train_words = {tuple(words(t)) for t in training}
    verbs = {words(t)[0] for t in training if words(t)}
    nearest = [min(word_edit_distance(p, t) for t in training) for p in proposals]
    n = len(proposals)
    return {
        "n_proposals": n,
        "exact_matches": sum(tuple(words(p)) in train_words for p in proposals),
        "training_verb_share": sum(bool(words(p)) and words(p)[0] in verbs for p in proposals) / max(1, n),
        "nearest_word_edit": nearest,
        "nearest_word_edit_median": float(np.median(nearest)) if nearest else None,
        "within_2_word_edits_share": sum(d <= 2 for d in nearest) / max(1, n),
    }


def recorded_proposals(parts: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Every wording each proposer put in the store during the runs (the parts' ``prompts`` less the
    canonical prompt), by proposer name; arms without a prompt search have none."""
    by_proposer: dict[str, list[str]] = {}
    for part in parts:
        name = part["settings"]["arm"].get("proposer") or ""
        if name:
            texts = [q["text"] for q in part["result"].get("prompts", []) if q["status"] != "canonical"]
            by_proposer.setdefault(name, []).extend(texts)
    return by_proposer


def overlap_by_proposer(
    recorded: Mapping[str, Sequence[str]], training: Sequence[str], pre_run: Mapping[str, Any]
) -> dict[str, Any]:
    """Per proposer: ``recorded``, the overlap of what it proposed in the runs, and ``pre_run``, the
    calibration's overlap of its first proposals (bench/results/premise_calibration.json, without
    the texts, which stay there)."""
    pre = {
        CALIBRATION_PROPOSERS.get(k, k): {f: v for f, v in o.items() if f != "proposals"}
        for k, o in pre_run.items()
    }
    return {
        name: {
            "recorded": overlap(recorded[name], training) if name in recorded else None,
            "pre_run": pre.get(name),
        }
        for name in sorted(set(recorded) | set(pre))
    }


# --- result-file blocks -------------------------------------------------------------------------


def premise_block(
    canonical_start: Sequence[Mapping[str, Any]], decoy: bool, overlap_by_proposer: Mapping[str, Any]
) -> dict[str, Any]:
    """``canonical_start``: one row per SFT seed, {sft_seed, successes, n} (the canonical prompt's
    sampled success before RL); ``decoy``: is another task trained with the target's canonical
    prompt; ``overlap_by_proposer``: ``overlap(...)`` of each proposer's proposals."""
    rows = [
        {"sft_seed": r["sft_seed"], **success_interval(int(r["successes"]), int(r["n"]))}
        for r in canonical_start
    ]
    return {"canonical_start": rows, "decoy": decoy, "overlap": dict(overlap_by_proposer)}


def calibration_rows(calibration: Mapping[str, Any], canonical_prob: float) -> list[dict[str, Any]]:
    """``premise_block``'s ``canonical_start`` rows from bench/results/premise_calibration.json at the
    recipe's ``canonical_prob`` (one row per SFT seed)."""
    rows = [
        {"sft_seed": c["sft_seed"], "successes": c["successes"], "n": c["episodes"]}
        for c in calibration.get("cells", [])
        if math.isclose(c["canonical_prob"], canonical_prob)
    ]
    if not rows:
        raise ValueError(
            f"premise_calibration.json has no cell at canonical_prob {canonical_prob}: run "
            "bench/bench_premise_calibrate.py with that p first"
        )
    return rows


def frozen_block(files: Sequence[str] = FROZEN_FILES, root: Path = REPO_ROOT) -> dict[str, Any]:
    """The commit and the sha256 of the premise and proposer files as run; ``uncommitted`` lists
    those that differ from the commit (a frozen run has none)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout

    hashes = {f: hashlib.sha256((root / f).read_bytes()).hexdigest() for f in files}
    dirty = [line[3:] for line in git("status", "--porcelain", "--", *files).splitlines()]
    return {"commit": git("rev-parse", "HEAD").strip(), "sha256": hashes, "uncommitted": dirty}


def add_blocks(result: dict[str, Any], premise: Mapping[str, Any]) -> dict[str, Any]:
    """Join the pre-registered blocks into a merged benchmark result: ``premise`` (``premise_block``),
    the primary contrast from its arms, seed-level statistics per arm, and the premise and proposer
    files' hashes under ``frozen``."""
    result["premise"] = dict(premise)
    result["primary_contrast"] = primary_contrast_block(result["arms"])
    result["arm_stats"] = {name: arm_stats(arm["per_seed"]) for name, arm in result["arms"].items()}
    result["target"] = target_block(result["arm_stats"], result["primary_contrast"])
    result["secondary_contrasts"] = secondary_contrasts(result["arms"])
    result["mechanism"] = mechanism(result["arms"])
    result["time_course"] = time_course(result["arms"])
    result["auc_contrast"] = auc_contrast(result["arms"], *PRIMARY)
    # pde_v3/v4 name their exploratory contrasts by the primary's statistic (the AUC gain)
    result["secondary_auc_contrasts"] = [
        {**auc_contrast(result["arms"], a, b), "meaning": meaning} for a, b, meaning in SECONDARY
    ]
    result.setdefault("frozen", {})["premise_and_proposers"] = frozen_block()
    return result


def schema_errors(result: Mapping[str, Any]) -> list[str]:
    """What the PDE benchmark's result file lacks (empty: it has every required field)."""
    errors: list[str] = []
    arms = result.get("arms")
    if not isinstance(arms, Mapping) or not arms:
        errors.append("arms: missing or empty")
        arms = {}
    for name, arm in arms.items():
        rows = arm.get("per_seed") if isinstance(arm, Mapping) else None
        if not isinstance(rows, list) or not rows:
            errors.append(f"arms.{name}.per_seed: missing or empty")
            continue
        for i, row in enumerate(rows):
            errors += [f"arms.{name}.per_seed[{i}].{k}: missing" for k in PER_SEED_KEYS if k not in row]
    for block, keys in (
        ("premise", ("canonical_start", "decoy", "overlap")),
        ("primary_contrast", ("mean", "ci95")),
    ):
        value = result.get(block)
        if not isinstance(value, Mapping):
            errors.append(f"{block}: missing")
            continue
        errors += [f"{block}.{k}: missing" for k in keys if k not in value]
    frozen = result.get("frozen")
    if not isinstance(frozen, Mapping) or not ({"commit", "commits"} & set(frozen)):
        errors.append("frozen: missing, or without the commit the run was made at")
    elif "sha256" not in json.dumps(frozen):
        errors.append("frozen: no file hashes (sha256)")
    ci = (
        result.get("primary_contrast", {}).get("ci95")
        if isinstance(result.get("primary_contrast"), Mapping)
        else None
    )
    if ci is not None and not (isinstance(ci, list | tuple) and len(ci) == 2 and ci[0] <= ci[1]):
        errors.append(f"primary_contrast.ci95: want [low, high], got {ci!r}")
    return errors
