"""The language premise, calibrated: the target task's sampled success per prompt (issue 11 item 3).

For each prompt, ``pde learner eval`` rolls the SFT checkpoint out on fixed scenes (seeds
``--seed`` ..) of a fast-paced sim robot server, acting under that prompt; the counts go to
bench/results/premise.json with Wilson 95% intervals. Prompts already measured with the same
checkpoint, episodes and seed are kept (the run resumes). Each prompt is tagged: canonical,
training (in the wording table), proposer (what the offline paraphrase proposer of supervisor/
proposes for the target, i.e. what the PDE benchmark's ``pde_paraphrase`` arm samples), other.

    python bench/bench_premise.py --checkpoint CKPT --wordings learner/recipes/language_premise.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "bench"))
from _common import SIM_SERVER_WATCHDOG_ENV, wilson_interval  # noqa: E402

if TYPE_CHECKING:
    from pde_contract.episodes import EpisodeFile
    from robot_server.robots.sim import SimRobot
    from supervisor.proposers import PromptProposer

RESULTS = REPO_ROOT / "bench" / "results" / "premise.json"
TARGET_TASK = "put_green_container_in_front_of_camera"
TARGET_PROMPT = "put the green container in front of the camera"
NONSENSE = "xyzzy banana"
# The longest wait for the server's observations in these measurements (a loaded machine; an
# in-process server shares the policy's GIL).
IN_PROCESS_WAIT_S = 30.0


def proposer_wordings(
    goal: str, seeds: range, per_seed: int, make: Callable[[int], PromptProposer] | None = None
) -> list[str]:
    """A proposer's first ``per_seed`` proposals of each seed, in order, without repeats; ``make``
    builds it from a seed (default: the offline paraphrase proposer)."""
    from supervisor.proposers import RandomParaphraseProposer
    from supervisor.vlm.base import CandidateRequest

    out: list[str] = []
    for seed in seeds:
        request = CandidateRequest(
            task=TARGET_TASK,
            goal=goal,
            canonical_ema_success=None,
            canonical_trend="unknown",
            iteration=0,
            n_new=per_seed,
            pool=[],
            failed=[],
        )
        proposer = make(seed) if make is not None else RandomParaphraseProposer(seed)
        for text in proposer.propose(request).new_prompts:
            if text not in out:
                out.append(text)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    stack: ExitStack,
    image_size: str,
    spread: float,
    log_dir: str | Path,
    wait_s: float = 0.0,
    sim_profile: str = "",
) -> str:
    """A fast-paced sim robot server on free ports, stopped by ``stack``; returns its command endpoint.
    ``sim_profile``: the server's --sim-profile ("" leaves it to its settings)."""
    cmd_port, obs_port = _free_port(), _free_port()
    log = open(Path(log_dir) / f"server-{cmd_port}.log", "w")  # noqa: SIM115 (closed by the stack)
    stack.callback(log.close)
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "pde", "robot-server", "--backend", "sim", "--pacing", "fast"),
            *("--image-size", image_size, "--sim-layout-spread", str(spread)),
            *("--cmd-port", str(cmd_port), "--obs-port", str(obs_port)),
            *(("--sim-profile", sim_profile) if sim_profile else ()),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **SIM_SERVER_WATCHDOG_ENV},
    )

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()

    stack.callback(stop)
    time.sleep(wait_s)  # the server loads MuJoCo
    return f"tcp://127.0.0.1:{cmd_port}"


@dataclass(frozen=True)
class Scenes:
    """Which episodes an evaluation runs: scenes ``seed`` .. ``seed + episodes - 1``, at most
    ``max_chunks`` chunks each, the policy's sampling noise seeded with ``torch_seed``."""

    episodes: int
    seed: int
    max_chunks: int
    torch_seed: int = 0


def eval_command(
    endpoint: str, checkpoint: str, prompt: str, scenes: Scenes, task: str = TARGET_TASK
) -> list[str]:
    """``task``: whose scene is laid out and whose success check judges (and ends) each episode; the
    layout depends on the scene seed only, so another task's check watches the same scenes."""
    return [
        sys.executable, "-m", "pde", "learner", "eval", "--checkpoint", checkpoint,
        "--cmd-endpoint", endpoint, "--task", task, "--prompt", TARGET_PROMPT,
        "--rollout-prompt", prompt, "--episodes", str(scenes.episodes), "--seed", str(scenes.seed),
        "--max-chunks", str(scenes.max_chunks), "--device", "cpu", "--torch-seed", str(scenes.torch_seed),
    ]  # fmt: skip


def run_eval(
    endpoint: str, checkpoint: str, prompt: str, scenes: Scenes, task: str = TARGET_TASK
) -> dict[str, Any]:
    """The sampled success of ``task`` (default the target) under ``prompt`` on ``scenes``, with the
    log std the policy acted at."""
    t0 = time.monotonic()
    cmd = eval_command(endpoint, checkpoint, prompt, scenes, task)
    # Fast pacing makes an episode independent of how long the actor waits for the server, so on a
    # loaded machine the evaluation waits instead of ending with "the robot server has not answered
    # for 2.0 s" (ActorSettings' lab default; seen under load 15 on 2 cores).
    patient = {f"PDE_ACTOR_{k}": str(IN_PROCESS_WAIT_S) for k in ("OBS_TIMEOUT_S", "SERVER_SILENT_S")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**patient, **os.environ})
    if proc.returncode != 0:
        raise RuntimeError(f"eval of {prompt!r} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    lines = proc.stdout.splitlines()
    wins = sum("success=True" in line for line in lines)
    n = sum(line.startswith("episode ") for line in lines)
    summary = json.loads(next(line for line in reversed(lines) if line.startswith("{")))
    low, high = wilson_interval(wins, n)
    return {
        "successes": wins,
        "episodes": n,
        "success_rate": round(wins / max(1, n), 4),
        "wilson95": [round(low, 4), round(high, 4)],
        "torch_seed": summary["torch_seed"],
        "exploration_log_std": summary["exploration_log_std"],
        "seconds": round(time.monotonic() - t0, 1),
    }


@dataclass(frozen=True)
class SceneEnd:
    """What an episode did to the scene, read from the simulator: how far each free object moved
    (start of the episode to its end) and which of the sim's tasks' success checks hold at the end."""

    moved_m: dict[str, float]
    tasks_done: list[str]


@dataclass(frozen=True)
class Rollout:
    episode: EpisodeFile
    scene_end: SceneEnd | None  # None: the server runs in another process


@contextmanager
def in_process_sim(image_size: str, spread: float, sim_profile: str) -> Iterator[tuple[str, SimRobot]]:
    """A fast-paced sim robot server in this process, so that its world can be read between
    episodes (fast pacing advances physics with chunk rows only: the same episodes as in a server
    process); yields its command endpoint and its robot."""
    from robot_server.backends import build_backend
    from robot_server.robots.sim import SimRobot
    from robot_server.server import RobotServer
    from robot_server.settings import RobotServerSettings

    width, height = (int(x) for x in image_size.split("x"))
    settings = RobotServerSettings.model_validate(  # validated: a wrong profile name says so
        {
            "backend": "sim",
            "pacing": "fast",
            "cmd_port": _free_port(),
            "obs_port": _free_port(),
            "image_width": width,
            "image_height": height,
            "sim_layout_spread": spread,
            "sim_profile": sim_profile,
            # the actor's heartbeat and the command thread share this process's GIL with the policy;
            # a watchdog that fires drops a chunk (an episode that depends on the load), so both
            # wait longer than the benchmark servers' (SIM_SERVER_WATCHDOG_ENV) and stay on
            "heartbeat_timeout_s": IN_PROCESS_WAIT_S,
            "command_stall_timeout_s": IN_PROCESS_WAIT_S,
        }
    )
    backend = build_backend(settings)
    server = RobotServer(backend.robot, backend.cameras, settings)
    try:
        server.start()
        assert isinstance(backend.robot, SimRobot)
        yield f"tcp://127.0.0.1:{settings.cmd_port}", backend.robot
    finally:
        server.close()
        backend.close()


def _scene(robot: SimRobot) -> tuple[dict[str, np.ndarray], list[str]]:
    """Each free object's position and the tasks whose success check holds (world lock held)."""
    from robot_server.sim.tasks import TASK_NAMES, load
    from robot_server.sim.tasks.tabletop import LAYOUT_PROPS, body_pos

    with robot.world.lock:
        where = {prop: body_pos(robot.world, prop) for prop in LAYOUT_PROPS}
        return where, [t for t in TASK_NAMES if load(t).success(robot.world)]


def run_episodes(
    endpoint: str, checkpoint: str, prompt: str, scenes: Scenes, robot: SimRobot | None = None
) -> list[Rollout]:
    """The target's episodes under ``prompt`` on ``scenes``, in this process (``pde learner eval``'s
    loop): the episode files the sim stand-in proposer reads and, given the server's ``robot`` (an
    ``in_process_sim``), what each did to the scene."""
    import torch

    from learner.actor import Actor, ActorSettings
    from learner.checkpoints import CheckpointStore
    from pde_contract.client import RobotClient

    policy = CheckpointStore.load(checkpoint).policy
    out: list[Rollout] = []
    settings = ActorSettings(reset_before_episode=False)
    if robot is not None:
        settings = ActorSettings(
            reset_before_episode=False, obs_timeout_s=IN_PROCESS_WAIT_S, server_silent_s=IN_PROCESS_WAIT_S
        )
    wait_s = settings.obs_timeout_s if robot is not None else 5.0
    with RobotClient(cmd_endpoint=endpoint, name="premise-episodes", timeout_s=wait_s) as client:
        client.connect()
        actor = Actor(policy, client, settings)
        torch.manual_seed(scenes.torch_seed)
        for i in range(scenes.episodes):
            client.reset(task=TARGET_TASK, seed=scenes.seed + i)
            start = _scene(robot)[0] if robot is not None else {}
            episode = actor.run_episode(
                episode_id=f"premise-{i}",
                task=TARGET_TASK,
                canonical_prompt=TARGET_PROMPT,
                rollout_prompt=prompt,
                max_chunks=scenes.max_chunks,
                seed=scenes.seed + i,
            )
            end = None
            if robot is not None:
                where, done = _scene(robot)
                moved = {k: round(float(np.linalg.norm(where[k] - start[k])), 4) for k in where}
                end = SceneEnd(moved, done)
            out.append(Rollout(episode, end))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="SFT checkpoint (pde learner sft --wordings ...)")
    ap.add_argument("--wordings", required=True, help="the wording table it was trained with")
    ap.add_argument("--prompts", default="", help="JSON list of extra prompts to measure")
    ap.add_argument("--proposer-seeds", type=int, default=2, help="offline proposer seeds 0.. to measure")
    ap.add_argument("--proposals-per-seed", type=int, default=5, help="K: the proposer's first batch")
    ap.add_argument("--no-training", action="store_true", help="skip the training wordings")
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--seed", type=int, default=5000, help="first scene seed")
    ap.add_argument("--max-chunks", type=int, default=20)
    ap.add_argument("--image-size", default="128x128")
    ap.add_argument("--spread", type=float, default=0.2)
    ap.add_argument("--parallel", type=int, default=2, help="evaluations at once (one sim server each)")
    ap.add_argument("--log-dir", default="/tmp")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument(
        "--recipe-command", action="append", default=[], help="a command that made the checkpoint (recorded)"
    )
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])

    table = json.loads(Path(args.wordings).read_text())
    training = list(table["tasks"].get(TARGET_TASK, {}).get("wordings", []))
    proposed = proposer_wordings(TARGET_PROMPT, range(args.proposer_seeds), args.proposals_per_seed)
    extra = json.loads(args.prompts) if args.prompts else []
    kinds: dict[str, list[str]] = {}
    for kind, prompts in (
        ("canonical", [TARGET_PROMPT]),
        ("training", [] if args.no_training else training),
        ("proposer", proposed),
        ("other", [*extra, NONSENSE]),
    ):
        for p in prompts:
            kinds.setdefault(p, [])
            kinds[p].append(kind)
    for p in kinds:  # a proposal that is also a training wording is tagged both ways
        if p in training and "training" not in kinds[p]:
            kinds[p].append("training")

    out_path = Path(args.out)
    result: dict[str, Any] = json.loads(out_path.read_text()) if out_path.is_file() else {}
    setup = {
        "checkpoint": args.checkpoint,
        "checkpoint_sha256": hashlib.sha256(Path(args.checkpoint).read_bytes()).hexdigest(),
        "episodes": args.episodes,
        "seed": args.seed,
        "max_chunks": args.max_chunks,
        "image_size": args.image_size,
        "layout_spread": args.spread,
        "sampled": True,
    }
    same = result.get("setup", {}) == setup
    per_prompt: dict[str, Any] = result.get("prompts", {}) if same else {}
    todo = [p for p in kinds if p not in per_prompt]
    print(f"{len(kinds)} prompts, {len(todo)} to measure", flush=True)

    def save() -> None:
        for p, row in per_prompt.items():
            row["kind"] = kinds.get(p, row.get("kind", ["other"]))
        good = [p for p, r in per_prompt.items() if "proposer" in r["kind"] and r["success_rate"] >= 0.15]
        out = {
            "benchmark": "premise",
            "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "task": TARGET_TASK,
            "canonical_prompt": TARGET_PROMPT,
            "setup": setup,
            "wordings": table,
            "prompts": per_prompt,
            "proposer_wordings_at_least_15pct": good,
            "commands": [*args.recipe_command, shlex.join(["python", *sys.argv])],
        }
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(out, indent=1) + "\n")

    with ExitStack() as stack:
        endpoints = [
            start_server(stack, args.image_size, args.spread, args.log_dir)
            for _ in range(max(1, args.parallel))
        ]
        time.sleep(3.0)  # the servers load MuJoCo

        def one(i: int) -> None:
            endpoint = endpoints[i % len(endpoints)]
            for prompt in todo[i :: len(endpoints)]:
                row = run_eval(
                    endpoint, args.checkpoint, prompt, Scenes(args.episodes, args.seed, args.max_chunks)
                )
                per_prompt[prompt] = {**row, "kind": kinds[prompt]}
                print(f"{row['successes']:3d}/{row['episodes']}  {row['wilson95']}  {prompt}", flush=True)
                save()

        with ThreadPoolExecutor(len(endpoints)) as pool:
            for f in [pool.submit(one, i) for i in range(len(endpoints))]:
                f.result()
    save()
    print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
