"""``pde learner [run|sft|eval|export-policy] ...``

- ``run`` (default): the PDE episode loop service (learner/loop/service.py, the loop team's).
- ``sft``: train and cache the SFT checkpoint (version 0) from demonstration episode files.
- ``eval``: roll out a checkpoint on the robot server under a prompt and report the success rate.
- ``export-policy``: write a π0.5 policy checkpoint as a LeRobot 0.6.1 checkpoint directory.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from learner.device import DeviceUnavailableError, check_device_spec, resolve_device
from learner.policies.registry import PolicyInitError, policy_kind
from learner.policy_args import add_policy_args, check_policy_args, load_init_policy
from pde_contract.job_status import JobStatus, Phase, write_status
from pde_contract.settings import (
    DEFAULT_ROBOT_CMD_ENDPOINT,
    DataLayout,
    data_dir_field,
    tasks_file_field,
    wandb_project_field,
)
from pde_contract.tasks import load_tasks

if TYPE_CHECKING:
    from pde_contract.messages import Counters


class LearnerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PDE_LEARNER_", populate_by_name=True)

    data_dir: Path = data_dir_field("PDE_LEARNER_")
    checkpoint_dir: str = ""
    """Empty: <data_dir>/checkpoints (DataLayout), where the loop reads the SFT policy."""
    demo_dir: str = ""
    """Empty: <data_dir>/demos (DataLayout), where `pde record` and `pde sim record` write."""
    cmd_endpoint: str = DEFAULT_ROBOT_CMD_ENDPOINT
    tasks_file: str = tasks_file_field()
    """PDE_TASKS_FILE: `sft` trains each demo's task under its canonical prompt there."""
    device: str = "auto"
    """Where the policy runs: auto (CUDA if torch sees a GPU, else CPU), cpu, cuda or cuda:N."""
    wandb_project: str = wandb_project_field("PDE_LEARNER_")
    """W&B project that also gets SFT's curves (TensorBoard files are written regardless)."""

    @property
    def checkpoints(self) -> str:
        return self.checkpoint_dir or str(DataLayout(self.data_dir).checkpoints)

    @property
    def demos(self) -> str:
        return self.demo_dir or str(DataLayout(self.data_dir).demos)

    @field_validator("device")
    @classmethod
    def _known_device(cls, v: str) -> str:
        return check_device_spec(v)


def _device_arg(value: str) -> str:
    try:
        return check_device_spec(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def add_device_arg(ap: argparse.ArgumentParser, default: str) -> None:
    ap.add_argument(
        "--device",
        type=_device_arg,
        default=default,
        help=f"auto, cpu, cuda or cuda:N (default: $PDE_LEARNER_DEVICE or auto; now {default})",
    )


def _sft(argv: list[str], settings: LearnerSettings) -> int:
    from learner.paraphrases import WordingTable
    from learner.policies.vla import VLAConfig
    from learner.sft import SFTConfig, run_sft

    ap = argparse.ArgumentParser(prog="pde learner sft", description="behaviour cloning from demo episodes")
    ap.add_argument("--demos", default=settings.demos, help="folder of demonstration episode files")
    ap.add_argument(
        "--lerobot-dataset",
        default="",
        metavar="DIR",
        help="train on this LeRobotDataset v3.0 or v2.0/v2.1 (FR3 state and action columns, e.g. from "
        "`pde data export-lerobot`, or another layout with --lerobot-map) instead of --demos",
    )
    ap.add_argument(
        "--lerobot-map",
        default="",
        metavar="FILE",
        help="TOML/JSON mapping of a --lerobot-dataset of another layout onto our state, actions and "
        "cameras (docs/lerobot_map.example.toml)",
    )
    ap.add_argument(
        "--control-rate-hz",
        type=float,
        default=SFTConfig.control_rate_hz,
        help="the robot server's control rate (its PDE_ROBOT_CONTROL_RATE_HZ) the policy will act at; "
        f"a --lerobot-dataset must have this fps (default {SFTConfig.control_rate_hz:g})",
    )
    ap.add_argument("--checkpoints", default=settings.checkpoints, help="checkpoint folder (SFT = version 0)")
    ap.add_argument("--per-task", type=int, default=SFTConfig.episodes_per_task, help="demos per task")
    ap.add_argument("--tasks", default="", help="comma-separated task names (default: all in the demos)")
    ap.add_argument("--steps", type=int, default=SFTConfig.steps)
    ap.add_argument("--batch-size", type=int, default=SFTConfig.batch_size)
    ap.add_argument("--lr", type=float, default=SFTConfig.learning_rate)
    ap.add_argument("--head", choices=["flow", "gaussian"], default="flow")
    ap.add_argument("--image-size", type=int, default=VLAConfig.image_size_px)
    ap.add_argument("--chunk-len", type=int, default=VLAConfig.chunk_len)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--memory-budget-mb",
        type=float,
        default=SFTConfig.memory_budget_mb,
        help="preprocessed samples held in memory at most; a larger dataset streams from disk "
        f"(default {SFTConfig.memory_budget_mb:g})",
    )
    ap.add_argument(
        "--loader-workers",
        type=int,
        default=SFTConfig.loader_workers,
        help=f"processes that decode a streamed dataset (default {SFTConfig.loader_workers})",
    )
    ap.add_argument(
        "--stride",
        type=int,
        default=SFTConfig.stride,
        help="--lerobot-dataset: every N-th row of an episode is a sample (default 1: every row)",
    )
    ap.add_argument(
        "--wordings",
        default="",
        help="JSON table of training wordings per task (learner/paraphrases.py; e.g. "
        "learner/recipes/language_premise.json); default: canonical p=.5, else a paraphrase",
    )
    ap.add_argument("--force", action="store_true", help="retrain even if a matching checkpoint is cached")
    ap.add_argument(
        "--status-file",
        default="",
        metavar="PATH",
        help="keep this JSON file up to date with the progress (pde_contract/job_status.py)",
    )
    ap.add_argument(
        "--distributed",
        choices=["ddp", "fsdp"],
        default="ddp",
        help="under torchrun: DDP (a replica per GPU) or FSDP (weights, gradients and AdamW state "
        "sharded) (default ddp); one process ignores it",
    )
    add_device_arg(ap, settings.device)
    add_policy_args(ap)
    args = ap.parse_args(argv)
    if msg := check_policy_args(args):
        print(f"pde learner sft: {msg}", file=sys.stderr)
        return 2
    from learner.distributed import torchrun_world_size

    ctx = None
    try:
        if torchrun_world_size() > 1:  # `torchrun --nproc_per_node N`: data-parallel SFT
            from learner.distributed import init_distributed

            ctx = init_distributed()
            device = ctx.device
        else:
            device = resolve_device(args.device)
    except DeviceUnavailableError as e:
        print(f"pde learner sft: {e}", file=sys.stderr)
        return 2
    lead = ctx is None or ctx.rank == 0  # prints and writes the status file
    try:
        wordings = WordingTable.load(args.wordings) if args.wordings else None
    except ValueError as e:
        print(f"pde learner sft: {e}", file=sys.stderr)
        return 2
    vla = VLAConfig(head=args.head, image_size_px=args.image_size, chunk_len=args.chunk_len)
    try:
        cfg = SFTConfig(
            episodes_per_task=args.per_task,
            steps=args.steps,
            batch_size=args.batch_size,
            learning_rate=args.lr,
            seed=args.seed,
            control_rate_hz=args.control_rate_hz,
            memory_budget_mb=args.memory_budget_mb,
            loader_workers=args.loader_workers,
            stride=args.stride,
        )
    except ValueError as e:
        print(f"pde learner sft: {e}", file=sys.stderr)
        return 2
    tasks = [t for t in args.tasks.split(",") if t] or None
    try:
        catalogue = load_tasks(settings.tasks_file)
        if tasks is not None:
            catalogue.check(tasks)  # lists the known tasks
    except ValueError as e:
        print(f"pde learner sft: {e}", file=sys.stderr)
        return 2

    def status(phase: Phase, **fields: Any) -> None:
        if args.status_file and lead:
            write_status(args.status_file, JobStatus(job="sft", phase=phase, total_steps=cfg.steps, **fields))

    from learner.run_log import RunLog, RunLogError
    from pde_contract.run_metrics import SftCurve

    run_log: RunLog | None = None
    if lead:
        try:
            run_log = RunLog.start(
                DataLayout(settings.data_dir).runs, "sft", settings.wandb_project, {"sft": vars(args)}
            )
        except RunLogError as e:
            print(f"pde learner sft: {e}", file=sys.stderr)
            return 2
    last_step_at = [time.perf_counter()]

    def on_step(step: int, loss: float) -> None:
        if run_log is not None:
            now = time.perf_counter()
            run_log.scalar(SftCurve.LOSS, loss, step)
            run_log.scalar(SftCurve.STEP_S, now - last_step_at[0], step)
            last_step_at[0] = now
        if lead and (step % max(1, cfg.steps // 100) == 0 or step == cfg.steps - 1):
            print(f"sft step {step}/{cfg.steps} loss {loss:.4f}", flush=True)
            status("training", step=step + 1, loss=round(loss, 4))

    status("loading")

    factory, key = None, None
    spec = policy_kind(args.policy)
    if spec.starts_from_dir:

        def factory() -> Any:
            return load_init_policy(args, stats_from_demos=True)

        key = spec.init_key(args)
    try:
        path, metrics, cached = run_sft(
            args.demos,
            args.checkpoints,
            vla,
            cfg,
            tasks,
            args.force,
            on_step,
            device,
            wordings,
            factory,
            key,
            args.lerobot_dataset or None,
            ctx,
            args.distributed,
            args.lerobot_map or None,
            catalogue,
        )
    except (FileNotFoundError, ValueError, RuntimeError) as e:  # Pi05CheckpointError is a RuntimeError
        print(f"pde learner sft: {e}", file=sys.stderr)
        return 2
    finally:
        if run_log is not None:
            run_log.close()
    status("done", step=cfg.steps, cached=cached, checkpoint=str(path))
    if lead:
        print(json.dumps({"checkpoint": str(path), "cached": cached, **metrics}, indent=1))
    if ctx is not None:
        from learner.distributed import end_distributed

        end_distributed(0)
    return 0


def _eval(argv: list[str], settings: LearnerSettings) -> int:
    from learner.actor import Actor, ActorSettings
    from learner.checkpoints import CheckpointStore

    ap = argparse.ArgumentParser(prog="pde learner eval", description="success rate of a checkpoint")
    ap.add_argument("--checkpoint", default="", help="checkpoint file (default: latest in --checkpoints)")
    ap.add_argument("--checkpoints", default=settings.checkpoints)
    ap.add_argument("--cmd-endpoint", default=settings.cmd_endpoint)
    ap.add_argument("--task", required=True)
    ap.add_argument("--prompt", required=True, help="canonical prompt of the task")
    ap.add_argument("--rollout-prompt", default="", help="prompt to act under (default: the canonical one)")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--max-chunks", type=int, default=20)
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--seed", type=int, default=1000, help="first scene seed")
    ap.add_argument(
        "--torch-seed",
        type=int,
        default=0,
        help="seed of the policy's sampling noise (same seed, scenes and checkpoint: same episodes)",
    )
    add_device_arg(ap, settings.device)
    add_policy_args(ap)
    args = ap.parse_args(argv)
    if msg := check_policy_args(args):
        print(f"pde learner eval: {msg}", file=sys.stderr)
        return 2
    try:
        device = resolve_device(args.device)
    except DeviceUnavailableError as e:
        print(f"pde learner eval: {e}", file=sys.stderr)
        return 2
    try:
        from pde_contract.client import RobotClient
        from pde_contract.link import client_curve_for_command
    except ImportError as e:
        print(f"pde learner eval: the robot client is not available ({e})", file=sys.stderr)
        return 2
    store = CheckpointStore(args.checkpoints)
    if policy_kind(args.policy).starts_from_dir:  # the directory as it is, before any SFT or PPO
        from learner.checkpoints import LoadedCheckpoint

        try:
            policy = load_init_policy(args, device)
        except PolicyInitError as e:
            print(f"pde learner eval: {e}", file=sys.stderr)
            return 2
        loaded: LoadedCheckpoint | None = LoadedCheckpoint(0, Path(args.init), policy, {}, None)
    else:
        loaded = store.load(args.checkpoint, device) if args.checkpoint else store.latest(device)
    if loaded is None:
        print(
            f"pde learner eval: no checkpoint in {args.checkpoints}; run `pde learner sft`", file=sys.stderr
        )
        return 2
    successes = 0
    # Evaluation is not latency-bound: generous timeouts ride out a loaded machine.
    with RobotClient(
        cmd_endpoint=args.cmd_endpoint,
        name="learner-eval",
        timeout_s=5.0,
        curve=client_curve_for_command("pde learner eval"),
    ) as client:
        info = client.connect()
        if mismatch := loaded.policy.robot_mismatch(info):
            print(f"pde learner eval: {mismatch}", file=sys.stderr)
            return 2
        actor = Actor(
            loaded.policy,
            client,
            ActorSettings(deterministic=args.deterministic, obs_timeout_s=10.0),
        )
        # The server's wall-clock watchdogs drop a chunk: an episode that then depends on the load.
        dropped_before = _chunks_dropped_by_watchdogs(client.status().counters)
        import torch

        from learner.policies.base import exploration_log_std
        from pde_contract.episodes import trajectory_sha256

        torch.manual_seed(args.torch_seed)
        for i in range(args.episodes):
            ep = actor.run_episode(
                episode_id=f"eval-{uuid.uuid4().hex[:8]}",
                task=args.task,
                canonical_prompt=args.prompt,
                rollout_prompt=args.rollout_prompt or args.prompt,
                max_chunks=args.max_chunks,
                seed=args.seed + i,
            )
            successes += bool(ep.success)
            print(
                f"episode {i}: success={ep.success} chunks={len(ep.chunks)} "
                f"trajectory={trajectory_sha256(ep)[:16]}",
                flush=True,
            )
        dropped = _chunks_dropped_by_watchdogs(client.status().counters) - dropped_before
    if dropped:
        print(
            f"pde learner eval: the robot server's watchdogs dropped {dropped} chunk(s) (a heartbeat later "
            "than heartbeat_timeout_s, or its command thread stalled past command_stall_timeout_s): those "
            "episodes depend on the machine's load; give a loaded sim server longer ones "
            "(PDE_ROBOT_HEARTBEAT_TIMEOUT_S, PDE_ROBOT_COMMAND_STALL_TIMEOUT_S)",
            file=sys.stderr,
        )
    print(
        json.dumps(
            {
                "version": loaded.version,
                "episodes": args.episodes,
                "success_rate": successes / args.episodes,
                "torch_seed": args.torch_seed,
                "exploration_log_std": exploration_log_std(loaded.policy),
                "chunks_dropped_by_watchdogs": dropped,
            }
        )
    )
    return 0


def _chunks_dropped_by_watchdogs(counters: Counters) -> int:
    return counters.watchdog_trips + counters.command_loop_stalls


def _export_policy(argv: list[str], settings: LearnerSettings) -> int:
    ap = argparse.ArgumentParser(
        prog="pde learner export-policy", description="a π0.5 policy checkpoint as a LeRobot checkpoint"
    )
    ap.add_argument("--format", choices=["lerobot"], required=True, help="LeRobot 0.6.1's π0.5 layout")
    ap.add_argument(
        "--checkpoint", default="", help="policy checkpoint file (default: latest in --checkpoints)"
    )
    ap.add_argument("--checkpoints", default=settings.checkpoints)
    ap.add_argument("--out", required=True, help="directory to write (created; files in it are replaced)")
    from learner.policies.pi05_export import DEVICES, default_lerobot_device

    ap.add_argument(
        "--device",
        choices=DEVICES,
        default=default_lerobot_device(),
        help="where LeRobot's pipeline puts the batch (its config.device; a cuda one does not load "
        "without CUDA; default: cuda when this machine has it, else cpu)",
    )
    args = ap.parse_args(argv)
    from learner.checkpoints import CheckpointStore
    from learner.policies.pi05 import Pi05CheckpointError, Pi05Policy
    from learner.policies.pi05_export import export_lerobot

    store = CheckpointStore(args.checkpoints)
    try:
        loaded = store.load(args.checkpoint) if args.checkpoint else store.latest()
    except (Pi05CheckpointError, FileNotFoundError) as e:  # no file; a partial one whose DIR is gone
        print(f"pde learner export-policy: {e}", file=sys.stderr)
        return 2
    if loaded is None:
        print(f"pde learner export-policy: no checkpoint in {args.checkpoints}", file=sys.stderr)
        return 2
    if not isinstance(loaded.policy, Pi05Policy):
        print(
            f"pde learner export-policy: {loaded.path} holds a {type(loaded.policy).__name__}; only π0.5 "
            "policies have a LeRobot form",
            file=sys.stderr,
        )
        return 2
    try:
        out = export_lerobot(loaded.policy, args.out, args.device)
    except Pi05CheckpointError as e:
        print(f"pde learner export-policy: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"version": loaded.version, "checkpoint": str(loaded.path), "out": str(out)}))
    return 0


def _run(argv: list[str]) -> int:
    try:
        service = importlib.import_module("learner.loop.service")
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("learner.loop"):
            print(
                "pde learner run: the episode loop service (learner/loop/service.py) is not installed in "
                "this checkout yet; use `pde learner sft` / `pde learner eval`, or update to a version "
                "that has learner.loop",
                file=sys.stderr,
            )
            return 2
        raise
    result: int = service.main(argv)
    return result


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        settings = LearnerSettings()
    except ValidationError as e:
        print(f"pde learner: invalid settings:\n{e}", file=sys.stderr)
        return 2
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if argv and argv[0] == "sft":
        return _sft(argv[1:], settings)
    if argv and argv[0] == "eval":
        return _eval(argv[1:], settings)
    if argv and argv[0] == "export-policy":
        return _export_policy(argv[1:], settings)
    if argv and argv[0] == "run":
        argv = argv[1:]
    return _run(argv)
