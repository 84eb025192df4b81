"""Does a fast-paced sim episode depend on how long the policy took to infer? (issue 32)

Runs the same episodes twice against an in-process `--pacing fast` sim robot server (so its tick log
and its MuJoCo world can be read): once as the policy is, once with a FAKE delay before each chunk
is returned (a seeded random 0..``--max-delay-ms``, standing in for a loaded machine). Per episode it
reports the success, the control ticks that moved the world while no chunk ran (hold ticks between
chunks: on a server that steps physics on them, their number follows the inference time), the
simulated seconds the episode took (MuJoCo's ``data.time``), and a hash of the trajectory (every
chunk's observation state and the world's qpos/qvel at the end). Identical hashes: the episode is
a function of (checkpoint, scene seed, torch seed) alone.

    .venv/bin/python bench/bench_lockstep.py --episodes 4 --max-chunks 4
    .venv/bin/python bench/bench_lockstep.py --checkpoint data/x/sft/policy-000000.pt --image-size 128
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import _common  # noqa: F401  (sets sys.path, MUJOCO_GL)

from tests.learner.lockstep import PROMPT, TASK, delayed, run_episodes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", default="", help="a policy checkpoint (default: random test weights)")
    ap.add_argument("--task", default=TASK)
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0, help="first scene seed")
    ap.add_argument("--max-chunks", type=int, default=4)
    ap.add_argument("--torch-seed", type=int, default=0)
    ap.add_argument("--image-size", type=int, default=32, help="the server's render size (square)")
    ap.add_argument("--sim-profile", choices=["default", "fast"], default="fast")
    ap.add_argument("--max-delay-ms", type=float, default=300.0, help="the fake delay's upper bound")
    ap.add_argument("--out", default="", help="also write the result JSON here")
    args = ap.parse_args(argv)

    def policy() -> Any:
        if args.checkpoint:
            from learner.checkpoints import CheckpointStore

            return CheckpointStore.load(Path(args.checkpoint)).policy
        import torch

        from learner.policies.vla import make_test_policy

        torch.manual_seed(1234)  # the random weights, the same in both runs
        return make_test_policy("gaussian", chunk_len=10)

    def run(p: Any) -> list[Any]:
        return run_episodes(
            p,
            episodes=args.episodes,
            first_scene=args.seed,
            max_chunks=args.max_chunks,
            torch_seed=args.torch_seed,
            image_size_px=args.image_size,
            sim_profile=args.sim_profile,
            task=args.task,
            prompt=args.prompt,
            report=True,
        )

    print("run 1: the policy as it is", flush=True)
    plain = run(policy())
    print(f"run 2: a fake delay of 0..{args.max_delay_ms:g} ms before each chunk", flush=True)
    slow = run(delayed(policy(), args.max_delay_ms / 1000, seed=args.torch_seed))
    same = [a.trajectory_sha256 == b.trajectory_sha256 for a, b in zip(plain, slow, strict=True)]
    result = {
        "command": "python bench/bench_lockstep.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "plain": [dataclasses.asdict(e) for e in plain],
        "delayed": [dataclasses.asdict(e) for e in slow],
        "trajectories_identical": sum(same),
        "episodes": len(same),
        "outcomes_identical": [a.success for a in plain] == [b.success for b in slow],
    }
    print(
        f"identical trajectories: {sum(same)}/{len(same)}; outcomes: {result['outcomes_identical']}",
        flush=True,
    )
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all(same) else 1


if __name__ == "__main__":
    raise SystemExit(main())
