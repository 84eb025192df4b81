# ruff: noqa: E501  (prose strings: the pre-registration's text)
"""Writes bench/preregistration/pde_v3.json from the lockstep calibration (run from the repo root).

The seed rule below was committed before SFT seeds 3, 4, 6, 7, 9, 10, 11 were measured."""

import hashlib
import json
import time
from pathlib import Path

cal = json.loads(Path("bench/results/premise_calibration_lockstep.json").read_text())
cells = sorted((c for c in cal["cells"] if c["canonical_prob"] == 0.05), key=lambda c: c["sft_seed"])
measured = {c["sft_seed"]: c["successes"] for c in cells}
in_band = [s for s, k in measured.items() if 10 <= k <= 20][:6]
files = [
    "learner/recipes/paper_regime_main.json",
    "bench/results/premise_calibration_lockstep.json",
    "bench/_pde_stats.py",
    "bench/bench_pde.py",
    "bench/pde_arm.py",
    "learner/ppo.py",
    "learner/ppo_config.py",
    "learner/trainer.py",
    "supervisor/pool.py",
    "supervisor/proposers.py",
    "learner/loop/core.py",
    "robot_server/executor.py",
    "bench/_common.py",
    "bench/bench_learning.py",
]
arms = ["noise", "pde_mixed", "pde_mixed@standin", "pde_canonical", "pde_rollout", "oracle", "relabel"]
wordings = [
    "hold the green box up near the lens",
    "present the green box before the lens",
    "raise the green tub toward the lens",
]
cmd = (
    "python bench/bench_pde.py --sft-checkpoint data/paper_regime_main/sft-p0.05-seed{K}/policy-000000.pt "
    "--sft-seed {K} --arms "
    + ",".join(arms)
    + " --seeds 0,1 --eval-at 0,64,128,192,256,320 --sim-profile fast "
    "--premise learner/recipes/paper_regime_main.json --calibration bench/results/premise_calibration_lockstep.json "
    "--parts-dir bench/results/pde_v3/parts --out bench/results/pde_v3.json --wordings '"
    + "|".join(wordings)
    + "'"
)
order = []
for arm_set in (
    ["noise", "pde_mixed"],
    ["oracle", "pde_rollout"],
    ["pde_canonical", "relabel"],
    ["pde_mixed@standin"],
):
    for rl in (0, 1):
        for k in in_band:
            order.append(
                cmd.replace("{K}", str(k))
                .replace(" --arms " + ",".join(arms), " --arms " + ",".join(arm_set))
                .replace("--seeds 0,1", f"--seeds {rl}")
            )
pre = {
    "name": "pde_v3",
    "written_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "status": "frozen before any arm ran: the commit that adds this file is the freeze; files_sha256 are those files at it",
    "supersedes": "bench/preregistration/pde_v2.json: none of its parts ran; its premise was measured before fast pacing stopped simulated time while the policy infers (robot_server/executor.py, the 'lockstep' change), which changes every episode, so the premise is re-measured at the pacing the arms run with and the design is otherwise unchanged",
    "question": "does PDE (prompt search, then the alpha mixture with the mixed ratio and the pool anchor) raise the canonical prompt's success more than action-noise PPO, from the paper's regime?",
    "premise": {
        "recipe": "learner/recipes/paper_regime_main.json",
        "canonical_prob": 0.05,
        "calibration": "bench/results/premise_calibration_lockstep.json (fast pacing in lockstep; scenes 7000-7099, torch seed 0, sim profile fast, the checkpoint's own log std -1.5)",
        "sft_seeds_measured": measured,
        "sft_seeds": in_band,
        "sft_seed_rule": "every SFT seed of 0-11 whose canonical sampled success lies in [0.10, 0.20] at lockstep with the benchmark servers' watchdogs (bench/_common.py SIM_SERVER_WATCHDOG_ENV), the six lowest if more; all twelve measured by the calibration's commands before this file; none chosen by hand. (A first pass on 2026-11-29 with the server's 0.2 s heartbeat, which dropped chunks under load, was discarded unread beyond seeds 0, 1, 2, 5, 8; this rule was committed before seeds 3, 4, 6, 7, 9, 10, 11 were measured.)",
        "exploration": "the SFT checkpoint's own Gaussian log std (-1.5, sigma 0.223); no arm changes it",
        "sim_profile": "fast",
        "pacing": "fast, lockstep: simulated time passes only with chunk rows, so an episode is a function of (checkpoint, scene seed, torch seed) and not of the machine's load",
        "oracle_wordings": wordings,
        "oracle_wordings_source": "the recipe's hand-written target labels, committed before the proposers (tests/supervisor/test_sim_state_proposer.py checks they share no word with them)",
    },
    "arms": arms,
    "rl_seeds": [0, 1],
    "budget_env_episodes": 320,
    "evaluation": {
        "prompt": "the canonical prompt, sampled",
        "scenes": "EVAL_SEED_BASE 100000 .. 100099 (100 held-out scenes, disjoint from demos and calibration)",
        "at_env_episodes": [0, 64, 128, 192, 256, 320],
    },
    "ppo": "PPOConfig defaults at the freeze commit (pool_anchor_coef 1.0, ratio unit dim, w0 guard drop); the loop's synchronous_updates on (the benchmark's named difference from a lab)",
    "primary": {
        "contrast": "pde_mixed - noise",
        "statistic": "auc_gain from 64 environment episodes: the area under the canonical prompt's success curve over the evaluation points 64..320 divided by the span, minus the start (bench/_pde_stats.py: auc_gain, auc_contrast)",
        "pairing": "(SFT seed, RL seed)",
        "interval": "95% t interval over the SFT-seed means of the paired differences (clustered_by_sft_seed; one cluster per SFT seed)",
        "decision": "PDE helps if the clustered interval lies above 0, hurts if below 0, else undecided; reported with the seed-level interval and the cluster means beside it",
    },
    "secondary_exploratory": [
        "pde_mixed - noise at 320 episodes (the endpoint) and at each evaluation point (time_course)",
        "oracle - noise (auc): an upper bound on the search",
        "pde_mixed - pde_rollout and pde_mixed - pde_canonical (auc): the ratio",
        "pde_mixed - relabel (auc): the mixture against relabelling the search's successes",
        "pde_mixed@standin - pde_mixed (auc): the proposer",
        "pool and canonical training success by policy version (train_by_version) in every PDE arm: does the anchor keep the pool over 320 episodes?",
    ],
    "command_per_sft_seed": cmd,
    "run_order": order,
    "run_order_rule": "the primary pair first (noise and pde_mixed, RL seed 0 on every SFT seed, then RL seed 1), then the secondary arms; each command's parts are skipped when finished, so running the list again resumes it; a partial result is reported only as partial",
    "sft_checkpoints": "built by bench/bench_premise_calibrate.py --canonical-probs 0.05 --sft-seeds S --data-dir data/paper_regime_main (SFT is deterministic: seed 1 rebuilt from independently recorded demos has equal weights, sha256 over the state dict 4ed37e408ac2f6db..., the file hash differs by its sft_seconds)",
    "compute": f"{len(arms) * len(in_band) * 2} parts ({len(arms)} arms x {len(in_band)} SFT seeds x 2 RL seeds), ~15-30 min of one core each on this 2-core machine: ~15-25 core-hours; spread over sessions, every part resumable and merged by --merge",
    "known_noise": "none from timing (lockstep); the scenes and the torch seed fix each evaluation",
    "not_covered": "the second premise (the paper's sim case, issue 32 item 4): learner/recipes/sim_case.json, a separate pre-registration once calibrated",
    "files_sha256": {f: hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in files},
}
Path("bench/preregistration/pde_v3.json").write_text(json.dumps(pre, indent=1) + "\n")
print(in_band, measured, len(order))
