# ruff: noqa: E501  (prose strings: the pre-registration's text)
"""Writes bench/preregistration/pde_v4.json: premise 2 (learner/recipes/sim_case.json) from its
calibration, run from the repo root. The SFT-seed rule is the band the calibration was measured for
(bench/results/premise2_calibration.json, written in session 14 before this file)."""

import hashlib
import json
import time
from pathlib import Path

CAL = "bench/results/premise2_calibration.json"
RECIPE = "learner/recipes/sim_case.json"
cal = json.loads(Path(CAL).read_text())
p = cal["chosen_canonical_prob"]
low, high = cal["band"]
cells = sorted((c for c in cal["cells"] if c["canonical_prob"] == p), key=lambda c: c["sft_seed"])
measured = {c["sft_seed"]: c["successes"] for c in cells}
in_band = [s for s, k in measured.items() if low <= k / 100 <= high]
wordings = json.loads(Path(RECIPE).read_text())["tasks"]["put_green_container_in_front_of_camera"]["wordings"]
files = [
    RECIPE,
    CAL,
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
cmd = (
    f"python bench/bench_pde.py --sft-checkpoint data/premise2/sft-p{p}-seed{{K}}/policy-000000.pt "
    "--sft-seed {K} --arms "
    + ",".join(arms)
    + " --seeds 0,1 --eval-at 0,64,128,192,256,320 --sim-profile fast "
    f"--premise {RECIPE} --calibration {CAL} "
    "--parts-dir bench/results/pde_v4/parts --out bench/results/pde_v4.json --wordings '"
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
    "name": "pde_v4",
    "written_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "status": "frozen before any arm ran on this premise: the commit that adds this file is the freeze; files_sha256 are those files at it",
    "supersedes": "nothing: pde_v3 (the paper's-regime premise, canonical 10-20%) stands; this is issue 32's second premise",
    "question": "does PDE (prompt search, then the alpha mixture with the mixed ratio and the pool anchor) raise the canonical prompt's success more than action-noise PPO, from a canonical prompt that succeeds 1-5% of the time?",
    "premise": {
        "recipe": RECIPE,
        "canonical_prob": p,
        "band": [low, high],
        "calibration": f"{CAL} (measured on f158ed8: lockstep fast pacing, the benchmark servers' watchdogs; scenes 7000-7099, torch seed 0, sim profile fast, the checkpoint's own log std -1.5)",
        "sft_seeds_measured": measured,
        "sft_seeds": in_band,
        "sft_seed_rule": f"every SFT seed of 0-9 whose canonical sampled success at p = {p} lies in the calibration's band [{low}, {high}] (the band issue 32 item 4 asks for, 1-5%, given to the calibration before it ran; none chosen by hand)",
        "what_it_is": "a weak canonical prompt beside a similar task's prompt (put_bowl_in_front_of_camera differs only in the object), NOT the paper's wrong-program case: measured before any arm, the canonical prompt's failures move the target's own object (30-36 of 40 rollouts per SFT seed), the bowl in 2-8, the similar task's check never held",
        "known_before_the_freeze": "the before-arms measurement (issue 32 item 4; the calibration's before_arms, learner/recipes/README.md): on the first 40 calibration scenes the canonical prompt scored 0-3/40, the target's training wordings 18-32/40, and among both proposers' first candidates some wordings scored 3-29/40 on every SFT seed (the paraphraser's 'place the green container close to the camera and let go' 3-27/40); this premise was chosen to run after pde_v3's search admitted wordings no better than its 10-20% canonical prompt (docs/benchmarks.md), because here the canonical prompt is weak enough that one success in N is news",
        "exploration": "the SFT checkpoint's own Gaussian log std (-1.5, sigma 0.223); no arm changes it",
        "sim_profile": "fast",
        "pacing": "fast, lockstep: simulated time passes only with chunk rows, so an episode is a function of (checkpoint, scene seed, torch seed) and not of the machine's load",
        "oracle_wordings": wordings,
        "oracle_wordings_source": "the recipe's hand-written target labels, written at e525d91 before any proposer output was measured on this premise (tests/supervisor/test_sim_state_proposer.py checks they share no word with the proposers)",
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
        "the mechanism block per run (update size, the admitted prompts' training record against the canonical prompt's, alpha) as in pde_v3's exploratory reading",
    ],
    "command_per_sft_seed": cmd,
    "run_order": order,
    "run_order_rule": "the primary pair first (noise and pde_mixed, RL seed 0 on every SFT seed, then RL seed 1), then the secondary arms; each command's parts are skipped when finished, so running the list again resumes it; a partial result is reported only as partial",
    "sft_checkpoints": f"built by bench/bench_premise_calibrate.py --recipe {RECIPE} --canonical-probs {p} --sft-seeds S --data-dir data/premise2 (SFT is deterministic, as for pde_v3)",
    "compute": f"{len(arms) * len(in_band) * 2} parts ({len(arms)} arms x {len(in_band)} SFT seeds x 2 RL seeds), ~8-15 min of one core each on this 2-core machine; spread over sessions, every part resumable and merged by --merge",
    "known_noise": "none from timing (lockstep); the scenes and the torch seed fix each evaluation",
    "files_sha256": {f: hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in files},
}
Path("bench/preregistration/pde_v4.json").write_text(json.dumps(pre, indent=1) + "\n")
print(in_band, measured, len(order))
