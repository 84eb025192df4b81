"""One (arm, seed) of the PDE benchmark, run by the code a lab runs.

The episode loop (learner.loop.core.EpisodeLoop) and the supervisor (supervisor.service.
SupervisorService, its pool rule in supervisor/pool.py: eta, M_min, N, K, T0) share a temporary
SQLite store in this process, wired as `pde loop` and `pde supervisor` wire them
(learner/loop/service.py, supervisor/main.py); the supervisor polls in a thread as its own process
would. The robot is `pde robot-server --backend sim --pacing fast`; episodes start and are labelled
by themselves (auto_start, auto_label: the simulator's success check).

What differs from a lab is a named setting of the loop (LoopSettings), never a code path here:
``synchronous_updates`` (each PPO update ends before the next episode: reproducible) and
``rollouts_per_scene`` (a lab's 1 by default). The environment-episode budget counts every episode
the loop runs, bootstrap included; evaluations (canonical prompt, sampled, fixed held-out scenes)
run beside the loop on the same actor and are not counted.

``drive`` is the whole algorithm's schedule and takes its robot, actor and trainer as arguments:
``run_arm`` gives it the real ones, tests give it fakes (tests/bench/test_pde_arm.py checks that
it decides what the lab's threads decide).
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from learner.loop.core import EpisodeLoop, LoopStopped, RobotLike
from learner.loop.settings import LoopSettings
from learner.loop.training import BackgroundTrainer, SaveCheckpoint, TrainedVersion, TrainerLike
from learner.ppo import PPOConfig, RatioVariant
from learner.rewards import Batch
from pde_contract.records import PromptStatus
from pde_storage import Store
from supervisor.dedup import Embedder
from supervisor.proposers import PROPOSERS, OutcomeLog, PromptProposer, ProposerOptions, make_proposer
from supervisor.service import SupervisorService
from supervisor.settings import SupervisorSettings

REPO_ROOT = Path(__file__).resolve().parent.parent
EVAL_SEED_BASE = 100_000  # held-out evaluation scenes (bench_learning's): never a demo's seed
EVAL_TORCH_SEED = 7_000  # + seed: the policy's sampling noise in evaluations (same at every point)
# A lab's supervisor logs a failed poll and tries again; a benchmark whose loop waits on a
# supervisor that fails this many polls stops with the reason instead of waiting for ever.
SUPERVISOR_FAILED_POLLS_BEFORE_GIVING_UP = 50


@dataclass(frozen=True)
class Arm:
    """What an arm changes, all of it settings of the loop and the supervisor."""

    ratio_variant: RatioVariant
    prompt_search: bool
    proposer: str = ""  # a name in supervisor.proposers.PROPOSERS; "" without a prompt search
    relabel: bool = False  # the search's successes relabelled, then the canonical prompt only


ARM_KINDS: dict[str, Arm] = {
    # Plain PPO on the canonical prompt: exploration is the policy's action noise only.
    "noise": Arm("plain", prompt_search=False),
    # PDE: prompt search, then the alpha mixture with the geometric-mean (mixed) ratio.
    "pde_mixed": Arm("mixed", prompt_search=True, proposer="paraphrase"),
    # The paper's original-only ratio and its rollout-prompt ratio (ablations).
    "pde_canonical": Arm("canonical", prompt_search=True, proposer="paraphrase"),
    "pde_rollout": Arm("rollout", prompt_search=True, proposer="paraphrase"),
    # The search's successful rollouts relabelled with the canonical prompt, then plain PPO.
    "relabel": Arm("plain", prompt_search=True, proposer="paraphrase", relabel=True),
    # The pool offered from a fixed list (the SFT's training wordings): an upper bound.
    "oracle": Arm("mixed", prompt_search=True, proposer="scripted"),
}


def parse_arm(name: str) -> Arm:
    """``kind`` or ``kind@proposer`` (e.g. ``pde_mixed@standin``: a PDE arm with another named
    proposer); a ValueError lists what there is."""
    kind, _, proposer = name.partition("@")
    if kind not in ARM_KINDS:
        raise ValueError(f"unknown arm {name!r}; arms are {', '.join(ARM_KINDS)} (optionally @proposer)")
    arm = ARM_KINDS[kind]
    if not proposer:
        return arm
    if not arm.prompt_search:
        raise ValueError(f"arm {kind!r} runs no prompt search: it takes no @proposer")
    if proposer not in PROPOSERS:
        raise ValueError(f"arm {name!r}: unknown proposer {proposer!r}; proposers: {', '.join(PROPOSERS)}")
    return Arm(arm.ratio_variant, arm.prompt_search, proposer, arm.relabel)


@dataclass(frozen=True)
class BenchSettings:
    """The benchmark's sizes: every field is a setting a lab has too (the loop's or the
    supervisor's), or a size of the evaluation."""

    task: str = "put_green_container_in_front_of_camera"
    budget_episodes: int = 320
    """Environment episodes per arm and seed, bootstrap included."""
    eval_at: tuple[int, ...] = (0, 128, 320)
    """Evaluate when the loop has run this many environment episodes."""
    eval_episodes: int = 100
    """Held-out scenes per evaluation (EVAL_SEED_BASE + i)."""
    max_chunks: int = 20
    rollouts_per_prompt: int = 8  # N
    candidates_k: int = 4  # K
    iterations_t0: int = 2  # T0
    eta: float = 0.1
    pool_min_m: int = 3  # M_min
    batch_size: int = 32
    rollouts_per_scene: int = 1
    synchronous_updates: bool = True
    learning_rate: float = 3e-5
    # No exploration-noise knob of its own: every arm acts with the SFT checkpoint's own noise, as a
    # lab's `pde loop` and `pde learner eval` do (the frozen 33f7d33 parts set log std -1.0 here
    # against a premise measured at the checkpoint's -1.5; issue 32). Each part records the sigma.
    wordings: tuple[str, ...] = ()
    """The scripted proposer's list (the oracle arm)."""
    supervisor_poll_s: float = 0.05
    """How often the supervisor thread polls (a lab's is 1 s; it only changes waiting time)."""

    def __post_init__(self) -> None:
        if self.budget_episodes < 1 or any(not 0 <= e <= self.budget_episodes for e in self.eval_at):
            raise ValueError(
                f"eval_at {self.eval_at} must lie in [0, budget_episodes={self.budget_episodes}]"
            )


def loop_settings(arm: Arm, bench: BenchSettings, seed: int, **where: Any) -> LoopSettings:
    """The loop's settings for one (arm, seed); ``where``: database_url, data_dir, endpoint."""
    if arm.relabel:  # alpha pinned at 1: every RL episode uses the canonical prompt
        where = {"relabel_search_successes": True, "alpha_min": 1.0, **where}
    return LoopSettings(
        tasks=[bench.task],
        auto_start=True,
        auto_label=True,
        rollouts_per_prompt=bench.rollouts_per_prompt,
        batch_size=bench.batch_size,
        max_chunks=bench.max_chunks,
        prompt_search=arm.prompt_search,
        synchronous_updates=bench.synchronous_updates,
        rollouts_per_scene=bench.rollouts_per_scene,
        ppo=PPOConfig(ratio_variant=arm.ratio_variant, learning_rate=bench.learning_rate, seed=seed),
        seed=seed,
        torch_threads=1,
        device="cpu",
        **where,
    )


def supervisor_settings(bench: BenchSettings, **where: Any) -> SupervisorSettings:
    """The supervisor's settings: the pool rule's eta, M_min, K, T0 (N is the loop's)."""
    return SupervisorSettings(
        tasks=[bench.task],
        proposer="offline",
        iterations_t0=bench.iterations_t0,
        candidates_k=bench.candidates_k,
        eta=bench.eta,
        pool_min_m=bench.pool_min_m,
        poll_interval_s=bench.supervisor_poll_s,
        score_episodes=False,
        **where,
    )


class RecordingTrainer:
    """The trainer as the loop uses it, writing down each update: the batch's prompts and
    outcomes and alpha as the loop set it for the episodes after this batch."""

    def __init__(self, trainer: TrainerLike, store: Store, task: str) -> None:
        self.trainer, self.store, self.task = trainer, store, task
        self.updates: list[dict[str, Any]] = []

    def update(self, batch: Batch) -> dict[str, float]:
        stats = self.trainer.update(batch)
        state = self.store.task_state(self.task)
        pool_size = len(self.store.prompts(self.task, PromptStatus.POOL))
        canonical = [e for e, _ in batch if e.rollout_prompt == e.canonical_prompt]
        pool = [e for e, _ in batch if e.rollout_prompt != e.canonical_prompt]
        self.updates.append(
            {
                "update": len(self.updates) + 1,
                "env_episodes": self.store.count_episodes(),
                "pool_size": pool_size,
                "alpha": state.alpha if pool_size else 1.0,  # no pool: every draw is canonical
                "ema_success": state.ema_success,
                "pool_prompt_share": len(pool) / len(batch),
                "pool_success": sum(bool(e.success) for e in pool) / len(pool) if pool else None,
                "canonical_success": (
                    sum(bool(e.success) for e in canonical) / len(canonical) if canonical else None
                ),
                "rollout_success": sum(bool(e.success) for e, _ in batch) / len(batch),
                # NaN diagnostics (e.g. explained variance without a value target) as null
                **{k: float(v) if math.isfinite(float(v)) else None for k, v in stats.items()},
            }
        )
        return stats

    def policy_snapshot(self) -> Any:
        return self.trainer.policy_snapshot()


# evaluate(env_episodes) -> one outcome per held-out scene, in scene order
Evaluate = Callable[[int], list[bool]]


@dataclass
class DriveRecord:
    """What one drive decided and measured."""

    evaluations: list[dict[str, Any]] = field(default_factory=list)  # env_episodes, outcomes
    updates: list[dict[str, Any]] = field(default_factory=list)
    episodes: list[dict[str, Any]] = field(default_factory=list)  # the loop's, in order
    prompts: list[dict[str, Any]] = field(default_factory=list)  # every wording and its verdict
    env_episodes: int = 0


def drive(
    *,
    loop_store: Store,
    supervisor_store: Store,
    robot: RobotLike,
    actor: Any,
    trainer: TrainerLike,
    save: SaveCheckpoint,
    settings: LoopSettings,
    supervisor: SupervisorSettings,
    proposer: PromptProposer | None,
    embedder: Embedder | None,
    budget_episodes: int,
    eval_at: Sequence[int],
    evaluate: Evaluate,
    policy_version: int = 0,
) -> DriveRecord:
    """Run the loop for ``budget_episodes`` environment episodes, the supervisor polling beside
    it, and evaluate at each of ``eval_at`` (after the last update has been swapped in)."""
    task = settings.tasks[0]
    recording = RecordingTrainer(trainer, loop_store, task)
    loop = EpisodeLoop(
        loop_store,
        robot,
        actor,
        settings,
        BackgroundTrainer(recording, save),
        policy_version=policy_version,
    )
    record = DriveRecord()
    stop = threading.Event()
    pending = sorted(set(eval_at))
    loop.recover()  # the tasks exist and carry N before the supervisor's first poll
    threads: list[threading.Thread] = []
    failed: list[str] = []
    if settings.prompt_search:  # without a search the supervisor has nothing to do (as in a lab)
        service = SupervisorService(
            supervisor_store, supervisor, None, embedder, seed=settings.seed, proposer=proposer
        )

        def watch() -> None:
            while not stop.wait(0.2):
                if service.counters["errors"] >= SUPERVISOR_FAILED_POLLS_BEFORE_GIVING_UP:
                    failed.append(
                        f"the supervisor failed {service.counters['errors']} polls (its log says why)"
                    )
                    loop.stop()
                    return

        threads = [
            threading.Thread(target=service.run, args=(stop,), name="supervisor", daemon=True),
            threading.Thread(target=watch, name="supervisor-watch", daemon=True),
        ]
        for t in threads:
            t.start()
    try:
        while loop.episodes_run < budget_episodes:
            while pending and pending[0] <= loop.episodes_run:
                record.evaluations.append(
                    {"env_episodes": loop.episodes_run, "outcomes": evaluate(pending.pop(0))}
                )
            loop.step()
        loop.finish_training()
    except LoopStopped:
        raise RuntimeError(failed[0] if failed else "the loop was stopped") from None
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    for at in pending:
        record.evaluations.append({"env_episodes": loop.episodes_run, "outcomes": evaluate(at)})
    record.env_episodes = loop.episodes_run
    record.updates = recording.updates
    record.episodes = [
        {
            "stage": e.stage,
            "scene": e.seed,
            "prompt": e.rollout_prompt,
            "success": e.success,
            "status": e.status,
            "policy_version": e.policy_version,
        }
        for e in loop_store.episodes(task=task)
    ]
    record.prompts = [
        {
            "text": p.text,
            "status": p.status,
            "iteration": p.iteration,
            "n": p.n_episodes,
            "successes": p.n_success,
        }
        for p in loop_store.prompts(task)
    ]
    return record


# --- the real arm: sim robot server, Actor, Trainer, checkpoints -------------------------------------


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# The files that make the algorithm and its proposers: a part's hashes of them must match every
# other part's for the merge (a commit may differ: committing finished parts moves HEAD).
ALGORITHM_FILES = (
    "learner/loop/core.py",
    "learner/loop/schedule.py",
    "learner/loop/settings.py",
    "learner/loop/training.py",
    "learner/mixture.py",
    "learner/ppo.py",
    "learner/rewards.py",
    "learner/trainer.py",
    "supervisor/pool.py",
    "supervisor/service.py",
    "supervisor/proposers.py",
    "bench/pde_arm.py",
)


class _ObservedActor:
    """The loop's actor, each finished episode also added to the stand-in proposer's outcome log."""

    def __init__(self, actor: Any, log: OutcomeLog) -> None:
        self.actor, self.log = actor, log

    def run_episode(self, **kwargs: Any) -> Any:
        episode = self.actor.run_episode(**kwargs)
        self.log.add(episode)
        return episode

    def set_policy(self, policy: Any) -> None:
        self.actor.set_policy(policy)


def sim_destination_xy_m(task: str) -> tuple[float, float] | None:
    """Where the sim's task puts its object (the stand-in's reference); None for a lab's own task."""
    from robot_server.sim.tasks.tabletop import TABLETOP_TASKS, destination_centre_xy_m

    return destination_centre_xy_m(TABLETOP_TASKS[task][1]) if task in TABLETOP_TASKS else None


def frozen_inputs(sft_checkpoint: Path) -> dict[str, Any]:
    """What a part ran with: the SFT checkpoint's and the algorithm files' hashes (compared by the
    merge) and the commit (for the record)."""

    def git(*argv: str) -> str:
        run = subprocess.run(
            ["git", "-C", str(REPO_ROOT), *argv], capture_output=True, text=True, check=False
        )
        return run.stdout.strip()

    return {
        "sft_checkpoint_sha256": file_sha256(sft_checkpoint),
        "files_sha256": {f: file_sha256(REPO_ROOT / f) for f in ALGORITHM_FILES},
        "commit": git("rev-parse", "HEAD")
        + ("+uncommitted" if git("status", "--porcelain", "--untracked-files=no") else ""),
    }


def success_summary(outcomes: list[bool]) -> dict[str, float]:
    from _common import success_interval  # bench/_common.py (bench/ is on sys.path for benches)

    return dict(success_interval(sum(outcomes), len(outcomes)))


def run_arm(
    arm_name: str,
    seed: int,
    sft_seed: int,
    sft_checkpoint: Path,
    endpoint: str,
    bench: BenchSettings,
    embedder: Embedder | None,
    start_cache: Path | None = None,
) -> dict[str, Any]:
    """One (arm, seed) from the SFT checkpoint: the part's ``result`` and ``episodes``."""
    import time

    import torch

    from learner.actor import Actor, ActorSettings
    from learner.checkpoints import CheckpointStore
    from learner.loop.retention import CheckpointKeeper
    from learner.policies.base import exploration_log_std
    from learner.trainer import Trainer
    from pde_contract.client import RobotClient

    arm = parse_arm(arm_name)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"pde-{arm_name}-s{seed}-") as tmp:
        data = Path(tmp)
        url = f"sqlite:///{data}/pde.db"
        settings = loop_settings(
            arm, bench, seed, database_url=url, data_dir=data, robot_cmd_endpoint=endpoint
        )
        sup = supervisor_settings(bench, database_url=url, data_dir=data)
        entry = settings.catalogue.get(bench.task)  # the task as the loop runs it (tasks file)
        goal = entry.prompt
        loop_store = Store.open(url, data / "media")
        supervisor_store = Store.open(url, data / "media")
        checkpoints = CheckpointStore(data / "checkpoints")
        start = CheckpointStore.load(sft_checkpoint).policy
        checkpoints.save(start, 0, {"sft_seed": float(sft_seed)})
        loaded = checkpoints.latest("cpu")
        assert loaded is not None
        loop_store.add_checkpoint(0, loaded.path, {})
        torch.manual_seed(seed)
        trainer = Trainer(CheckpointStore.load(loaded.path).policy, settings.ppo, device="cpu")
        client = RobotClient(endpoint, name=f"bench-{arm_name}-{seed}", timeout_s=10.0)
        client.connect()  # the server's control rate and pacing, for the actor
        actor = Actor(
            loaded.policy,
            client,
            ActorSettings(reset_before_episode=False, obs_timeout_s=10.0),
        )
        keeper = CheckpointKeeper(checkpoints, loop_store, settings.checkpoint_retention())
        in_use = [0]  # the actor's version, for the keeper's pruning

        def save(new: TrainedVersion) -> str:
            through = new.trained_through_episode_id
            state = trainer.state_dict()
            path = keeper.save(
                new.policy, new.version, new.metrics, state, set(in_use), trained_through_episode_id=through
            )
            in_use[0] = new.version
            return str(path)

        def evaluate(at: int) -> list[bool]:
            if at == 0 and start_cache is not None and start_cache.is_file():
                return [bool(o) for o in json.loads(start_cache.read_text())["outcomes"]]
            outcomes = []
            # Its own sampling noise, the same at every point, so evaluating never moves training's.
            with torch.random.fork_rng():
                torch.manual_seed(EVAL_TORCH_SEED + seed)
                for i in range(bench.eval_episodes):
                    scene = EVAL_SEED_BASE + i
                    client.reset(task=bench.task, seed=scene, reset_joints_rad=entry.reset_joints_rad)
                    ep = actor.run_episode(
                        episode_id=f"eval-{at}-{i}",
                        task=bench.task,
                        canonical_prompt=goal,
                        rollout_prompt=goal,
                        max_chunks=settings.max_chunks_of(bench.task),
                        seed=scene,
                    )
                    outcomes.append(bool(ep.success))
            if at == 0 and start_cache is not None:
                start_cache.parent.mkdir(parents=True, exist_ok=True)
                start_cache.write_text(json.dumps({"outcomes": outcomes}))
            print(
                f"[{arm_name} sft{sft_seed} s{seed}] eval at {at}: {sum(outcomes)}/{len(outcomes)}",
                flush=True,
            )
            return outcomes

        # The sim stand-in for the VLM sees the loop's episodes (never the held-out evaluation's)
        # as a VLM would see their videos: through an outcome log fed as each one finishes.
        outcome_log = OutcomeLog(sim_destination_xy_m(bench.task))
        proposer = (
            make_proposer(
                arm.proposer, ProposerOptions(seed=seed, wordings=bench.wordings, outcomes=outcome_log)
            )
            if arm.prompt_search
            else None
        )
        try:
            record = drive(
                loop_store=loop_store,
                supervisor_store=supervisor_store,
                robot=client,
                actor=_ObservedActor(actor, outcome_log),
                trainer=trainer,
                save=save,
                settings=settings,
                supervisor=sup,
                proposer=proposer,
                embedder=embedder,
                budget_episodes=bench.budget_episodes,
                eval_at=bench.eval_at,
                evaluate=evaluate,
            )
        finally:
            client.close()
            loop_store.close()
            supervisor_store.close()
    evaluations = [
        {"env_episodes": ev["env_episodes"], **success_summary(ev["outcomes"])} for ev in record.evaluations
    ]
    who = {"arm": arm_name, "seed": seed, "sft_seed": sft_seed}
    episodes = [{**who, "kind": "train", **e} for e in record.episodes] + [
        {**who, "kind": "eval", "at_env_episodes": ev["env_episodes"], "scene": EVAL_SEED_BASE + i,
         "prompt": goal, "success": o}
        for ev in record.evaluations
        for i, o in enumerate(ev["outcomes"])
    ]  # fmt: skip
    result = {
        "seed": seed,
        "sft_seed": sft_seed,
        "eval_episodes": bench.eval_episodes,
        "success_start": evaluations[0]["rate"],
        "success_end": evaluations[-1]["rate"],
        "env_episodes": record.env_episodes,
        "evaluations": evaluations,
        "iterations": record.updates,
        "prompts": record.prompts,
        "wall_s": time.perf_counter() - t_start,
        "exploration_log_std": exploration_log_std(start),
    }
    return {"result": result, "episodes": episodes, "settings": {"arm": asdict(arm), "bench": asdict(bench)}}
