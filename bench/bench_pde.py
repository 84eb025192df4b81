"""PDE against action-noise PPO (a benchmark, not a timed test), run by the code a lab runs: each
(arm, seed) drives the real episode loop and supervisor (bench/pde_arm.py) from the same SFT
start, with the same environment-episode budget (the prompt search's bootstrap counted).

    python bench/bench_pde.py --sft-checkpoint CKPT --sft-seed 0 --arms noise --seeds 0
    python bench/bench_pde.py --merge       -> bench/results/pde_vs_noise.json + .png

The merge joins the pre-registered blocks (bench/_pde_stats.py): ``premise`` (the canonical
prompt's start per SFT seed from the calibration at ``--premise``'s p, whether it is a decoy, and
each proposer's overlap with the training wordings, recorded in the runs and measured before
them), ``primary_contrast`` (pde_mixed gain - noise gain, paired runs), seed-level statistics per
arm, ``frozen`` hashes, and ``completeness`` (whether issue 22's bar is met, and what is missing).

Arms (``--arms``; bench/pde_arm.py ARM_KINDS): ``noise`` (plain PPO on the canonical prompt, no
prompt search), ``pde_mixed`` (search, then the alpha mixture with the mixed ratio),
``pde_canonical`` (the original-only ratio), ``pde_rollout`` (the rollout-prompt ratio), ``oracle``
(the pool offered from ``--wordings``, e.g. the SFT's training wordings: an upper bound). A PDE arm
takes another named proposer as ``pde_mixed@<name>`` (supervisor.proposers.PROPOSERS; the
rule-based paraphraser is ``paraphrase``, the default). ``relabel``: the search's successful
rollouts relabelled with the canonical prompt join the first PPO batch, then plain PPO on the
canonical prompt (LoopSettings.relabel_search_successes, alpha_min 1).

Every (arm, SFT seed, seed) writes ``<parts-dir>/<arm>-sft<k>-seed<s>.json`` with its summary, its
updates (alpha, pool share and success per PPO update) and every episode's outcome (arm, seed,
sft_seed, scene, prompt, success); a finished part is skipped when the command runs again, so the
benchmark can be completed in parts, in parallel processes or on other machines, then merged.

Evaluation: the canonical prompt's sampled success on ``--eval-episodes`` fixed held-out scenes
(the same for every arm, seed and point) at ``--eval-at`` environment episodes, not counted in the
budget; Wilson 95% intervals per seed and pooled (seed-level intervals: bench/_pde_stats.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _common import success_interval  # noqa: E402
from _pde_stats import (  # noqa: E402
    add_blocks,
    arm_stats,
    calibration_rows,
    completeness,
    overlap_by_proposer,
    premise_block,
    recorded_proposals,
    train_by_version,
)
from bench_learning import start_server  # noqa: E402
from pde_arm import BenchSettings, file_sha256, frozen_inputs, parse_arm, run_arm  # noqa: E402

PARTS_DIR = "bench/results/pde/parts"
PREMISE_RECIPE = ROOT / "learner/recipes/paper_regime.json"
CALIBRATION = ROOT / "bench/results/premise_calibration.json"


ARM_COLORS_BGR = {
    "noise": (60, 60, 200),
    "pde_mixed": (60, 150, 60),
    "pde_canonical": (40, 160, 200),
    "pde_rollout": (200, 120, 40),
    "oracle": (150, 60, 150),
}


def plot_arms(arms: dict[str, Any], title: str, path: Path) -> None:
    """Success against environment episodes spent (bootstrap included): one colour per arm, a thin
    line per seed, a thick line for the arm's pooled rate at each evaluation point."""
    w, h, m = 760, 460, 60
    img = np.full((h, w, 3), 255, np.uint8)
    x_max = max(r["env_episodes"] for a in arms.values() for r in a["per_seed"]) or 1
    y_max = 0.6
    x = lambda e: int(m + (w - 2 * m) * e / x_max)  # noqa: E731
    y = lambda v: int(h - m - (h - 2 * m) * min(v, y_max) / y_max)  # noqa: E731
    font = cv2.FONT_HERSHEY_SIMPLEX
    for v in np.arange(0.0, y_max + 1e-9, 0.1):
        cv2.line(img, (m, y(v)), (w - m, y(v)), (225, 225, 225), 1)
        cv2.putText(img, f"{v:.1f}", (18, y(v) + 4), font, 0.4, (0, 0, 0), 1)
    for e in range(0, x_max + 1, 64):
        cv2.putText(img, str(e), (x(e) - 8, h - m + 18), font, 0.4, (0, 0, 0), 1)
    cv2.line(img, (m, h - m), (w - m, h - m), (0, 0, 0), 1)
    cv2.line(img, (m, m), (m, h - m), (0, 0, 0), 1)
    for k, (name, a) in enumerate(arms.items()):
        color = ARM_COLORS_BGR.get(name, (0, 0, 0))
        rows = a["per_seed"]
        for r in rows:
            pts = [(x(e["env_episodes"]), y(e["rate"])) for e in r["evaluations"]]
            cv2.polylines(img, [np.array(pts, np.int32)], False, color, 1)
        n_points = min(len(r["evaluations"]) for r in rows)
        pooled = []
        for i in range(n_points):
            evs = [r["evaluations"][i] for r in rows]
            rate = sum(e["successes"] for e in evs) / sum(e["n"] for e in evs)
            pooled.append((x(float(np.mean([e["env_episodes"] for e in evs]))), y(rate)))
        cv2.polylines(img, [np.array(pooled, np.int32)], False, color, 3)
        label = (
            f"{name}: {a['success_start_pooled']['rate']:.2f} -> {a['success_end_pooled']['rate']:.2f}"
            f" pooled ({len(rows)} seeds)"
        )
        cv2.putText(img, label, (m + 10, m + 16 * k + 12), font, 0.42, color, 1)
    cv2.putText(img, title, (m, 25), font, 0.5, (0, 0, 0), 1)
    cv2.putText(
        img,
        "environment episodes per arm and seed (bootstrap included)",
        (w // 2 - 200, h - 15),
        font,
        0.45,
        (0, 0, 0),
        1,
    )
    cv2.imwrite(str(path), img)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"  # None: e.g. no pool rollout in any update yet


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def markdown_table(result: dict[str, Any]) -> str:
    """One row per arm (runs, pooled start and end with Wilson 95% intervals, the mean gain over runs
    with its seed-level 95% t interval), and the primary contrast under it: for the README."""

    def cell(k: int, n: int) -> str:
        iv = success_interval(k, n)
        return f"{k}/{n} = {iv['rate']:.2f} [{iv['wilson95_low']:.2f}, {iv['wilson95_high']:.2f}]"

    def gain(g: dict[str, Any]) -> str:
        if g["mean"] is None:
            return "none"
        ci = g["ci95"]
        return f"{g['mean']:+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else " (1 run: no interval)")

    lines = [
        "| arm | runs (SFT seeds) | start, pooled | end, pooled | gain, mean over runs [seed-level 95% CI] |",
        "|---|---|---|---|---|",
    ]
    for name, a in result["arms"].items():
        rows = a["per_seed"]
        n = sum(r["eval_episodes"] for r in rows)
        k0 = round(sum(r["success_start"] * r["eval_episodes"] for r in rows))
        k1 = round(sum(r["success_end"] * r["eval_episodes"] for r in rows))
        sft = ", ".join(str(k) for k in sorted({r.get("sft_seed", 0) for r in rows}))
        g = arm_stats(rows)["gain"]
        lines.append(f"| `{name}` | {len(rows)} ({sft}) | {cell(k0, n)} | {cell(k1, n)} | {gain(g)} |")
    pc = result.get("primary_contrast")
    if pc:
        what = gain(pc) if pc["mean"] is not None else f"not yet: {pc['reason']}"
        lines.append(
            f"\nFinal-checkpoint contrast (pde_v2's primary), {pc['definition']}, over {pc['n_seeds']} "
            f"paired runs: {what}"
        )
        cl = pc.get("clustered_by_sft_seed")
        if cl:
            ci = cl["ci95"]
            lines.append(
                f"Clustered by SFT seed ({cl['n_sft_seeds']} clusters, t with {cl['n_sft_seeds'] - 1} df): "
                + (f"{cl['mean']:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else cl["reason"])
            )
    auc = result.get("auc_contrast")
    if auc and auc.get("mean") is not None:
        cl = auc["clustered_by_sft_seed"]
        ci = cl.get("ci95")
        lines.append(
            f"AUC contrast (the primary pde_v3 and pde_v4 pre-registered), {auc['definition']}, over "
            f"{auc['paired_runs']} paired runs: {gain(auc)}; clustered by SFT seed ({cl['n_sft_seeds']} "
            "clusters): "
            + (f"{cl['mean']:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else str(cl.get("reason")))
            + "; SFT-seed means "
            + ", ".join(f"{k}: {v:+.3f}" for k, v in cl.get("sft_seed_means", {}).items())
        )
    target = result.get("target")
    if target and target["met"] is not None:
        ratio = "n/a" if target["gain_ratio"] is None else f"{target['gain_ratio']:.2f}"
        verdict = "met" if target["met"] else "NOT met"
        lines.append(f"Target ({target['definition']}): {verdict} (gain ratio {ratio})")
    for sc in result.get("secondary_auc_contrasts", []):
        if sc["mean"] is not None:
            cl = sc["clustered_by_sft_seed"]
            ci = cl.get("ci95")
            lines.append(
                f"Exploratory (AUC from 64), {sc['meaning']}, over {sc['paired_runs']} paired runs: "
                f"{gain(sc)}; clustered by SFT seed ({cl['n_sft_seeds']}): "
                + (f"{cl['mean']:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else str(cl.get("reason")))
            )
    for sc in result.get("secondary_contrasts", []):
        if sc["mean"] is not None:
            lines.append(f"Exploratory, {sc['meaning']}, over {sc['n_seeds']} paired runs: {gain(sc)}")
    mech = result.get("mechanism", {})
    for name, m in mech.items():
        if m.get("median_update_approx_kl") is not None:
            lines.append(
                f"`{name}` update size (exploratory): median approx KL {m['median_update_approx_kl']:.4f}, "
                f"{_pct(m['early_stopped_frac'])} of updates stopped by target_kl, median KL(new || old) "
                f"under the canonical prompt {_num(m['median_update_canonical_kl'])} nats/chunk"
                + (
                    f"; in training the pool prompts succeeded {_pct(m['pool_prompts_train_rate'])}, the "
                    f"canonical prompt {_pct(m['canonical_prompt_train_rate'])}"
                    if m.get("pool_prompts_train_rate") is not None
                    else ""
                )
            )
        if m["mean_alpha_first"] is None or name == "noise":
            continue
        first, last = m["mean_alpha_first"], m["mean_alpha_last"]

        def rates(who: str, m: dict[str, Any] = m) -> str:
            return ", ".join(
                "-" if v[who]["rate"] is None else f"{v[who]['rate']:.2f}" for v in m["train_by_version"]
            )

        lines.append(
            f"`{name}`: first PPO update after {m['mean_env_episodes_at_first_update']:.0f} episodes "
            f"(mean), {m['mean_updates']:.1f} updates, alpha {first:.2f} -> {last:.2f}, pool prompts "
            f"{_pct(m['mean_pool_prompt_share'])} of RL rollouts; training success by policy version "
            f"(RL stage, pooled over runs), pool: {rates('pool')}; canonical: {rates('canonical')}"
        )
    done = result.get("completeness")
    if done:
        lines.append(
            "Complete: the runs, SFT seeds, scenes and budget issue 22 asks for."
            if done["complete"]
            else "Incomplete: " + "; ".join(done["missing"])
        )
    return "\n".join(lines)


def shown(path: Path) -> str:
    """``path`` as the result file names it: from the repository root when inside it."""
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


def premise(parts: list[dict[str, Any]], recipe_path: Path, calibration_path: Path) -> dict[str, Any]:
    """The result's ``premise`` block for the parts' task from the premise recipe and its
    calibration; its fields None, with the reason, where the parts ran another task."""
    from learner.loop.tasks import canonical_prompt
    from learner.paraphrases import CANONICAL_PROB

    recipe = json.loads(recipe_path.read_text())
    task = str(parts[0]["settings"]["bench"].get("task", ""))  # one task: the merge checked their settings
    entry = recipe.get("tasks", {}).get(task)
    where = shown(recipe_path)
    if not entry or not entry.get("wordings"):
        reason = f"the parts ran task {task!r}, which {where} gives no training wordings"
        return {"recipe": where, "canonical_start": None, "decoy": None, "overlap": None, "reason": reason}
    goal = canonical_prompt(task)
    canonical_prob = float(entry.get("canonical_prob", CANONICAL_PROB))
    # A decoy premise trains another task with the target's canonical prompt.
    decoy = any(goal in t.get("extra", {}) for name, t in recipe["tasks"].items() if name != task)
    calibration = json.loads(calibration_path.read_text())
    sft_seeds = {p["result"]["sft_seed"] for p in parts}
    try:
        rows = [r for r in calibration_rows(calibration, canonical_prob) if r["sft_seed"] in sft_seeds]
        not_calibrated = ""
    except ValueError as e:  # e.g. the decoy tier, calibrated elsewhere (bench/results/premise.json)
        rows, not_calibrated = [], str(e)
    training = list(entry["wordings"])
    block = premise_block(
        rows, decoy, overlap_by_proposer(recorded_proposals(parts), training, calibration.get("overlap", {}))
    )
    return {
        "recipe": where,
        "canonical_prob": canonical_prob,
        "training_wordings": training,
        **block,
        "sft_seeds_not_calibrated": sorted(sft_seeds - {r["sft_seed"] for r in rows}),
        **({"calibration_missing": not_calibrated} if not_calibrated else {}),
        "calibration": {
            "file": str(
                calibration_path.relative_to(ROOT)
                if calibration_path.is_relative_to(ROOT)
                else calibration_path
            ),
            "command": calibration.get("command"),
            "scene_seeds": calibration.get("setup", {}).get("scene_seeds"),
        },
    }


def part_name(arm: str, sft_seed: int, seed: int) -> str:
    return f"{arm}-sft{sft_seed}-seed{seed}.json"


def merge(
    parts_dir: Path, out: Path, title: str, recipe: Path = PREMISE_RECIPE, calibration: Path = CALIBRATION
) -> dict[str, Any]:
    """All finished parts -> the result file (+ a curve of evaluations per arm), the pre-registered
    blocks joined in. Parts must share their settings and frozen inputs (commit, SFT checkpoint and
    proposer hashes per SFT seed)."""
    parts = [json.loads(f.read_text()) for f in sorted(parts_dir.glob("*-sft*-seed*.json"))]
    if not parts:
        raise SystemExit(f"no finished parts in {parts_dir}: run arms first (see --help)")
    # The oracle's wordings are its own (other arms run without them): compared on their own.
    settings = {
        json.dumps({k: v for k, v in p["settings"]["bench"].items() if k != "wordings"}, sort_keys=True)
        for p in parts
    }
    if len(settings) > 1:
        raise SystemExit(f"parts in {parts_dir} ran with different settings; merge one setting at a time")
    wordings = {
        tuple(p["settings"]["bench"]["wordings"])
        for p in parts
        if p["settings"]["arm"]["proposer"] == "scripted"
    }
    if len(wordings) > 1:
        raise SystemExit(f"scripted parts in {parts_dir} were given different --wordings: {sorted(wordings)}")
    frozen: dict[str, Any] = {}
    for p in parts:
        key = f"sft{p['result']['sft_seed']}"
        mine = {k: v for k, v in p["frozen"].items() if k != "commit"}
        if frozen.setdefault(key, mine) != mine:
            raise SystemExit(
                f"part {p['arm']} sft{p['result']['sft_seed']} seed{p['result']['seed']} ran on another SFT "
                f"checkpoint or other algorithm files than its SFT seed's first part: rerun it"
            )
    frozen["commits"] = sorted({p["frozen"]["commit"] for p in parts})
    arms: dict[str, Any] = {}
    for p in sorted(parts, key=lambda p: (p["arm"], p["result"]["sft_seed"], p["result"]["seed"])):
        arms.setdefault(p["arm"], {"per_seed": []})["per_seed"].append(p["result"])
    # evaluations act under the canonical prompt; parts without any leave the table empty
    goal = next((e["prompt"] for p in parts for e in p.get("episodes", []) if e["kind"] == "eval"), None)
    for name, a in arms.items():
        eps = [e for p in parts if p["arm"] == name for e in p.get("episodes", [])]
        a["train_by_version"] = train_by_version(eps, goal) if goal is not None else []
    for a in arms.values():
        rows = a["per_seed"]
        n = sum(r["eval_episodes"] for r in rows)
        for when in ("start", "end"):
            k = round(sum(r[f"success_{when}"] * r["eval_episodes"] for r in rows))
            a[f"success_{when}_pooled"] = success_interval(k, n)
        a["gain_pooled"] = a["success_end_pooled"]["rate"] - a["success_start_pooled"]["rate"]
    where = shown(parts_dir)
    budget = {**json.loads(settings.pop()), "wordings": list(wordings.pop()) if wordings else []}
    result = {
        "arms": arms,
        "budget": budget,
        "commands": sorted({p["command"] for p in parts}),
        "frozen": frozen,
        "episodes": f"per-episode outcomes: in the parts ({where})",
    }
    add_blocks(result, premise(parts, recipe, calibration))
    result["completeness"] = completeness(arms, int(budget.get("budget_episodes", 0)))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    plot_arms(arms, title, out.with_suffix(".png"))
    print(markdown_table(result))
    return result


def bench_settings(args: argparse.Namespace) -> BenchSettings:
    return BenchSettings(
        task=args.task,
        budget_episodes=args.budget_episodes,
        eval_at=tuple(int(e) for e in args.eval_at.split(",")),
        eval_episodes=args.eval_episodes,
        max_chunks=args.max_chunks,
        rollouts_per_prompt=args.n_per_prompt,
        candidates_k=args.k_candidates,
        iterations_t0=args.t0,
        eta=args.eta,
        pool_min_m=args.m_min,
        batch_size=args.batch_size,
        rollouts_per_scene=args.rollouts_per_scene,
        synchronous_updates=args.synchronous_updates,
        learning_rate=args.lr,
        wordings=tuple(w.strip() for w in args.wordings.split("|") if w.strip()),
    )


def main(argv: list[str] | None = None) -> int:
    d = BenchSettings()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sft-checkpoint", type=Path, help="the SFT start (one SFT seed per command)")
    ap.add_argument("--sft-seed", type=int, default=0, help="which SFT seed --sft-checkpoint is")
    ap.add_argument("--task", default=d.task)
    ap.add_argument("--arms", default="noise,pde_mixed,pde_canonical,oracle")
    ap.add_argument("--seeds", default="0,1,2,3,4,5")
    ap.add_argument("--budget-episodes", type=int, default=d.budget_episodes, help="per arm and seed")
    ap.add_argument("--eval-at", default=",".join(map(str, d.eval_at)), help="environment episodes")
    ap.add_argument("--eval-episodes", type=int, default=d.eval_episodes)
    ap.add_argument("--max-chunks", type=int, default=d.max_chunks)
    ap.add_argument("--n-per-prompt", type=int, default=d.rollouts_per_prompt, help="N (the loop's)")
    ap.add_argument("--k-candidates", type=int, default=d.candidates_k, help="K (the supervisor's)")
    ap.add_argument("--t0", type=int, default=d.iterations_t0, help="T0 search iterations")
    ap.add_argument("--eta", type=float, default=d.eta, help="pool admission: success >= eta")
    ap.add_argument("--m-min", type=int, default=d.pool_min_m, help="enter RL with this many pool prompts")
    ap.add_argument("--batch-size", type=int, default=d.batch_size, help="RL episodes per PPO update")
    ap.add_argument(
        "--rollouts-per-scene", type=int, default=d.rollouts_per_scene, help="1: a lab's fresh scene each"
    )
    ap.add_argument(
        "--synchronous-updates",
        action=argparse.BooleanOptionalAction,
        default=d.synchronous_updates,
        help="wait for each PPO update before the next episode (reproducible; a lab does not)",
    )
    ap.add_argument("--lr", type=float, default=d.learning_rate)
    ap.add_argument("--wordings", default="", help="'|'-separated wordings: the oracle arm's pool")
    ap.add_argument("--image-px", type=int, default=128)
    ap.add_argument(
        "--sim-profile",
        choices=["default", "fast"],
        default="default",
        help="the sim server's speed profile (docs/sim.md): fast changes episodes (own premise)",
    )
    ap.add_argument("--layout-spread", type=float, default=0.2)
    ap.add_argument("--work-dir", type=Path, default=ROOT / "data" / "bench_pde", help="logs, start cache")
    ap.add_argument("--parts-dir", type=Path, default=ROOT / PARTS_DIR)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/pde_vs_noise.json")
    ap.add_argument("--merge", action="store_true", help="only merge the finished parts")
    ap.add_argument("--premise", type=Path, default=PREMISE_RECIPE, help="the SFT's wording recipe")
    ap.add_argument("--calibration", type=Path, default=CALIBRATION, help="the premise's calibration")
    ap.add_argument("--redraw", action="store_true", help="only redraw the PNG and print the table")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args.command = "python bench/bench_pde.py " + " ".join(sys.argv[1:] if argv is None else argv)
    title = f"{args.task}: canonical-prompt sampled success"
    if args.redraw:
        result = json.loads(args.out.read_text())
        plot_arms(result["arms"], title, args.out.with_suffix(".png"))
        print(markdown_table(result))
        return 0
    if not args.merge:
        run_parts(args)
    merge(args.parts_dir, args.out, title, args.premise, args.calibration)
    return 0


def run_parts(args: argparse.Namespace) -> None:
    if not args.sft_checkpoint or not args.sft_checkpoint.is_file():
        raise SystemExit("--sft-checkpoint CKPT (a file) is needed to run arms (see scripts/premise.sh)")
    try:
        bench = bench_settings(args)
        arms = [a.strip() for a in args.arms.split(",") if a.strip()]
        for a in arms:
            if parse_arm(a).proposer == "scripted" and not bench.wordings:
                raise ValueError(f"arm {a!r} offers a scripted pool: give it --wordings 'w1|w2|...'")
    except ValueError as e:
        raise SystemExit(f"bench_pde: {e}") from None
    todo = [
        (a, int(s))
        for a in arms
        for s in args.seeds.split(",")
        if not (args.parts_dir / part_name(a, args.sft_seed, int(s))).is_file()
    ]
    if not todo:
        print("every part is finished; merging", flush=True)
        return
    import torch

    from supervisor.dedup import MiniLMEmbedder

    torch.set_num_threads(1)
    frozen = frozen_inputs(args.sft_checkpoint)
    embedder = MiniLMEmbedder(torch_threads=1)  # as `pde supervisor` screens candidates
    args.parts_dir.mkdir(parents=True, exist_ok=True)
    group, endpoint = start_server(
        args.work_dir / "logs", args.image_px, args.layout_spread, args.sim_profile
    )
    # A start evaluation under one sim profile is no answer for another (the default's names unchanged)
    profile_tag = "" if args.sim_profile == "default" else f"-sim{args.sim_profile}"
    try:
        for arm, seed in todo:
            cache = args.work_dir / (
                f"start-{file_sha256(args.sft_checkpoint)[:16]}-seed{seed}-e{bench.eval_episodes}"
                f"-c{bench.max_chunks}-px{args.image_px}-spread{args.layout_spread}"
                f"{profile_tag}.json"
            )
            part = run_arm(arm, seed, args.sft_seed, args.sft_checkpoint, endpoint, bench, embedder, cache)
            part.update(
                arm=arm,
                command=args.command,
                frozen=frozen,
                sim={
                    "image_px": args.image_px,
                    "layout_spread": args.layout_spread,
                    "profile": args.sim_profile,
                },
            )
            path = args.parts_dir / part_name(arm, args.sft_seed, seed)
            path.write_text(json.dumps(part, indent=1))
            r = part["result"]
            print(f"[{arm} sft{args.sft_seed} s{seed}] {r['success_start']:.2f} -> {r['success_end']:.2f}")
    finally:
        group.stop_all()


if __name__ == "__main__":
    raise SystemExit(main())
