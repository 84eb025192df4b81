"""``pde learner run`` / ``pde loop``: the episode loop with the real robot client, actor, trainer
and checkpoints wired together."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from learner.loop.core import SERVICE_NAME, EpisodeLoop
from learner.loop.settings import LoopSettings
from learner.loop.takeover import StorePageCommands, TakeoverActor
from learner.loop.training import BackgroundTrainer, TrainedVersion, TrainerLike
from learner.policies.registry import PolicyInitError, policy_kind
from learner.policy_args import add_policy_args, load_init_policy
from pde_contract.messages import ActionSpace
from pde_contract.service_state import LoopPhase, LoopState
from pde_contract.settings import DataLayout
from pde_storage import ConflictError, Store
from pde_storage.service_states import write_state
from teleop.base import TeleopError
from teleop.main import person_source
from teleop.settings import TeleopSettings

if TYPE_CHECKING:
    import torch

    from learner.distributed import DistributedContext
    from learner.trainer import Batch, Trainer

log = logging.getLogger("pde.loop")

T = TypeVar("T")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, dict[str, Any]]:
    p = argparse.ArgumentParser(prog="pde learner run", description="The PDE episode loop (Algorithm 1).")
    p.add_argument("--database-url", help="default: $PDE_DATABASE_URL or sqlite:///data/pde.db")
    p.add_argument("--data-dir", type=Path, help="media and checkpoints (default: $PDE_DATA_DIR or data)")
    p.add_argument("--robot", dest="robot_cmd_endpoint", help="robot server command endpoint")
    p.add_argument("--tasks", help="comma-separated task names (default: the paper's tasks 1, 8, 10)")
    p.add_argument(
        "--auto-start", action="store_true", default=None, help="do not wait for the operator's start"
    )
    p.add_argument(
        "--auto-label",
        action="store_true",
        default=None,
        help="label with the simulator's success check instead of the operator",
    )
    p.add_argument("--auto", action="store_true", help="--auto-start and --auto-label (simulation)")
    p.add_argument("--max-episodes", type=int)
    p.add_argument("--max-chunks", type=int)
    p.add_argument("--batch-size", type=int, help="labelled RL rollouts per PPO update (default 64)")
    p.add_argument("--rollouts-per-prompt", type=int, help="N rollouts per candidate prompt (default 10)")
    p.add_argument("--seed", type=int)
    p.add_argument("--device", help="auto, cpu, cuda or cuda:N (default: $PDE_LEARNER_DEVICE or auto)")
    p.add_argument(
        "--actor-device", help="the actor's device when not --device (default: $PDE_LEARNER_ACTOR_DEVICE)"
    )
    p.add_argument(
        "--distributed",
        choices=["ddp", "fsdp"],
        help="under torchrun: DDP (a replica per GPU) or FSDP (sharded) PPO updates (default ddp)",
    )
    p.add_argument(
        "--checkpoint-keep-trainer-state",
        type=int,
        help="the newest N checkpoints keep the optimiser state for resuming (default 1; 0: all)",
    )
    p.add_argument(
        "--checkpoint-keep-versions",
        type=int,
        help="keep the newest N checkpoint files, plus version 0 and those in use (default 0: all)",
    )
    add_policy_args(p)
    # The policy flags are settings here (PDE_LOOP_POLICY, PDE_LOOP_INIT, ...): they override the
    # environment, whose default is LoopSettings'; LoopSettings checks that they fit together.
    p.set_defaults(policy=None, init=None)
    args = p.parse_args(argv)
    overrides: dict[str, Any] = {
        k: v for k, v in vars(args).items() if v is not None and k not in ("tasks", "auto")
    }
    if args.tasks:
        overrides["tasks"] = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if args.auto:
        overrides["auto_start"] = overrides["auto_label"] = True
    return args, overrides


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    _, overrides = parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        settings = LoopSettings(**overrides)
    except ValueError as e:
        print(f"pde loop: invalid settings: {e}", file=sys.stderr)
        return 2
    # Heavy imports (torch) only once the arguments are known to be good.
    from learner.actor import Actor, ActorSettings
    from learner.checkpoints import CheckpointStore
    from learner.device import DeviceUnavailableError, describe_device, resolve_device
    from learner.distributed import torchrun_world_size
    from learner.loop.retention import CheckpointKeeper
    from learner.trainer import Trainer
    from pde_contract.client import RobotClient, RobotServerError
    from pde_contract.link import LinkKeyError, client_curve_from_env

    ctx = None
    try:
        if torchrun_world_size() > 1:  # `torchrun --nproc_per_node N`: one GPU per rank, PPO over all
            from learner.distributed import init_distributed

            ctx = init_distributed()
            device = ctx.device
        else:
            device = resolve_device(settings.device)
        actor_device = (
            resolve_device(settings.actor_device, "PDE_LEARNER_ACTOR_DEVICE")
            if settings.actor_device
            else device
        )
        print(f"pde loop: the policy runs on {describe_device(device)}", file=sys.stderr, flush=True)
    except DeviceUnavailableError as e:
        print(f"pde loop: {e}", file=sys.stderr)
        return 2
    if ctx is not None and ctx.rank > 0:
        return _follow(settings, ctx)
    if settings.torch_threads:
        import torch

        torch.set_num_threads(settings.torch_threads)
    layout = DataLayout(settings.data_dir)
    store = Store.open(settings.database_url, layout.media)
    checkpoints = CheckpointStore(layout.checkpoints)
    loaded = checkpoints.latest(device)
    from_dir = policy_kind(settings.policy).starts_from_dir
    if loaded is None and from_dir:
        # A first run from a checkpoint directory (π0.5's): it becomes version 0 (no SFT needed first).
        try:
            checkpoints.save(load_init_policy(settings), 0, {"init_from_dir": 1.0})
        except PolicyInitError as e:
            print(f"pde loop: {e}", file=sys.stderr)
            return 2
        loaded = checkpoints.latest(device)
    elif loaded is not None and from_dir:
        log.info(
            "resuming from %s; --init %s is used only when there is no checkpoint", loaded.path, settings.init
        )
    if loaded is None:
        loaded = wait_for_policy(store, lambda: checkpoints.latest(device), checkpoints.directory, settings)
        if loaded is None:  # stopped while waiting
            store.close()
            return 0
    known = [*checkpoints.versions(), *(c.version for c in store.checkpoints())]
    loaded = checkpoints.renumbered(loaded, max(known), device)
    with contextlib.suppress(ConflictError):
        store.add_checkpoint(
            loaded.version,
            loaded.path,
            {k: float(v) for k, v in loaded.metrics.items()},
            trained_through_episode_id=loaded.trained_through_episode_id,
        )
    try:
        robot_keys = client_curve_from_env()  # PDE_ROBOT_LINK_*: the robot link's CURVE keys
    except LinkKeyError as e:
        print(f"pde loop: {e}", file=sys.stderr)
        return 2
    try:
        teleop = TeleopSettings()  # PDE_TELEOP_PERSON: who may take over, if anyone
        if teleop.person != "none" and loaded.policy.action_space is not ActionSpace.EE_DELTA:
            raise TeleopError(
                f"a person takes over with ee_delta rows, but the policy acts in "
                f"{loaded.policy.action_space.value}"
            )
        person = person_source(teleop, page_commands=StorePageCommands(store))
    except (TeleopError, ValueError) as e:  # ValueError: a PDE_TELEOP_PERSON it does not know
        print(
            f"pde loop: the person source (PDE_TELEOP_PERSON): {e}; or set PDE_TELEOP_PERSON=none",
            file=sys.stderr,
        )
        store.close()
        return 2
    client = RobotClient(settings.robot_cmd_endpoint, name="learner", timeout_s=2.0, curve=robot_keys)
    try:
        info = client.connect()
    except RobotServerError as e:
        print(
            f"pde loop: cannot reach the robot server at {settings.robot_cmd_endpoint}: {e}", file=sys.stderr
        )
        return 2
    if msg := sim_cannot_run(settings, info.backend):
        print(f"pde loop: {msg}", file=sys.stderr)
        # The page shows why no task appears (the loop creates them): its row says so.
        write_state(store, SERVICE_NAME, LoopState(phase=LoopPhase.STOPPED, pid=os.getpid(), last_error=msg))
        client.close()
        store.close()
        return 2
    if mismatch := loaded.policy.robot_mismatch(info):
        print(f"pde loop: {mismatch}", file=sys.stderr)
        client.close()
        store.close()
        return 2
    # The trainer trains its own copy of the weights; the actor's copy changes only at swaps.
    ppo = settings.ppo  # every rank builds the same
    stop_followers: Callable[[], None] | None = None
    if ctx is not None:
        import torch.distributed as dist

        from learner.distributed import BroadcastTrainer, DistributedPolicy

        dist.barrier()  # the checkpoint exists: the other ranks load it now (_follow)
        policy = DistributedPolicy(CheckpointStore.load(loaded.path).policy, ctx, settings.distributed)
        broadcast = BroadcastTrainer(policy, ppo)
        log.info("PPO updates over %d ranks with %s", ctx.world_size, settings.distributed.upper())
        trainer: Trainer = broadcast
        stop_followers = broadcast.stop_followers
    else:
        trainer = Trainer(CheckpointStore.load(loaded.path).policy, ppo, device=device)
    if loaded.trainer_state:
        trainer.load_state_dict(loaded.trainer_state)
    elif loaded.version > 0:  # the newest file was unreadable and an older one has no Adam state
        log.warning("resuming from %s without trainer state: Adam restarts from zero", loaded.path)
    actor = Actor(
        loaded.policy.to(actor_device),
        client,
        ActorSettings(reset_before_episode=False),
        teleop_settings=teleop,  # a takeover's rows are sent as the recorder's (the same PDE_TELEOP_*)
    )

    keeper = CheckpointKeeper(checkpoints, store, settings.checkpoint_retention())

    def save(new: TrainedVersion) -> str:
        # Runs in the training thread before the swap: ``loop.policy_version`` is the actor's.
        return str(
            keeper.save(
                new.policy,
                new.version,
                new.metrics,
                trainer.state_dict(),
                in_use={loop.policy_version},
                trained_through_episode_id=new.trained_through_episode_id,
            )
        )

    import torch

    from learner.loop.schedule import Plan

    def warm_up(plan: Plan) -> None:
        policy = actor.policy
        obs = client.latest_observation(timeout_s=2.0)
        # With CUDA graphs, each sampling mode is captured on its first call: the episode's too.
        modes = {True, actor.settings.deterministic} if actor.settings.cuda_graphs else {True}
        with torch.no_grad():
            for deterministic in sorted(modes):
                policy.sample(policy.preprocess([obs]), [plan.prompt], deterministic=deterministic)

    # Intents of a kind this version does not know (another version's): failed and logged, once.
    store.fail_unknown_intents()
    from learner.run_log import RunLog, RunLogError

    try:
        run_log = RunLog.start(
            layout.runs, "loop", settings.wandb_project, {"tasks": settings.tasks, "ppo": repr(settings.ppo)}
        )
    except RunLogError as e:
        print(f"pde loop: {e}", file=sys.stderr)
        client.close()
        store.close()
        return 2
    loop = EpisodeLoop(
        store,
        client,
        TakeoverActor(actor, store, person),  # the page's "end episode now" and "take control"
        settings,
        BackgroundTrainer(trainer_for_actor(trainer, device, actor_device), save),
        policy_version=loaded.version,
        trained_through_episode_id=loaded.trained_through_episode_id or 0,
        warm_up=warm_up,
        run_log=run_log,
    )
    signal.signal(signal.SIGTERM, lambda *_: loop.stop())
    signal.signal(signal.SIGINT, lambda *_: loop.stop())
    log.info(
        "episode loop on %s (robot %s, backend %s), policy version %d on %s",
        store.url.split("@")[-1],
        settings.robot_cmd_endpoint,
        info.backend,
        loaded.version,
        device,
    )
    try:
        n = loop.run()
        loop.finish_training(settings.final_update_timeout_s)
    finally:
        if stop_followers is not None:
            stop_followers()
        if person is not None:
            person.disconnect()
        run_log.close()
        client.close()
        store.close()
    log.info("stopped after %d episode(s)", n)
    if ctx is not None:
        from learner.distributed import end_distributed

        end_distributed(0)
    return 0


def wait_for_policy(
    store: Store, latest: Callable[[], T | None], directory: Path, settings: LoopSettings
) -> T | None:
    """No policy checkpoint yet: wait for one (``pde learner sft`` writes version 0) in phase
    ``waiting_for_policy``, which the page shows with what to do, instead of exiting (compose would
    restart the learner over and over). None: stopped (SIGTERM, Ctrl-C) while waiting."""
    detail = (
        f"no policy checkpoint in {directory} yet: train the SFT policy from the demonstrations "
        "(`pde learner sft`, docs/teleop.md); the loop starts when it appears"
    )
    print(f"pde loop: {detail}", file=sys.stderr, flush=True)
    stop = threading.Event()
    handlers = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    state = LoopState(phase=LoopPhase.WAITING_FOR_POLICY, pid=os.getpid(), detail=detail)
    try:
        while not stop.is_set():
            write_state(store, SERVICE_NAME, state)  # also the heartbeat: the page sees it alive
            found = latest()
            if found is not None:
                return found
            # Its heartbeat period: the page calls a row older than PDE_UI_SERVICE_STALE_S dead.
            stop.wait(settings.heartbeat_period_s)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    write_state(store, SERVICE_NAME, msgspec.structs.replace(state, phase=LoopPhase.STOPPED))
    return None


def sim_cannot_run(settings: LoopSettings, backend: str) -> str:
    """Why the robot server's backend cannot run the loop's tasks ("" when it can): the simulator
    lays out only the paper's ten scenes."""
    lab = [t for t in settings.tasks if not settings.catalogue.get(t).builtin]
    if backend != "sim" or not lab:
        return ""
    return (
        f"the robot server runs the sim backend, which has only the paper's ten built-in tasks; "
        f"{lab} come from the tasks file {settings.tasks_file} and need the franka backend "
        "(or leave them out of PDE_LOOP_TASKS)"
    )


def _follow(settings: LoopSettings, ctx: DistributedContext) -> int:
    """A rank > 0 under torchrun: no robot, no database; it joins every PPO update rank 0 runs."""
    import torch.distributed as dist

    from learner.checkpoints import CheckpointStore
    from learner.distributed import DistributedPolicy, DistributedTrainer, end_distributed, follow_updates

    dist.barrier()  # rank 0 has a checkpoint (or has failed, and torchrun stops this rank)
    loaded = CheckpointStore(DataLayout(settings.data_dir).checkpoints).latest(ctx.device)
    if loaded is None:
        print(f"pde loop: rank {ctx.rank} found no checkpoint", file=sys.stderr)
        return 2
    policy = DistributedPolicy(loaded.policy, ctx, settings.distributed)
    trainer = DistributedTrainer(policy, settings.ppo)  # no actor here
    if loaded.trainer_state:  # the same Adam state as rank 0, or the ranks' steps would differ
        trainer.load_state_dict(loaded.trainer_state)
    n = follow_updates(trainer)
    log.info("rank %d stopped after %d update(s)", ctx.rank, n)
    end_distributed(0)


def trainer_for_actor(trainer: Trainer, device: torch.device, actor_device: torch.device) -> TrainerLike:
    """The trainer as the loop uses it: its snapshots (the actor's next policy) where the actor runs."""
    return trainer if actor_device == device else SnapshotsOn(trainer, actor_device)


class SnapshotsOn:
    """The trainer as the loop uses it, its weight snapshots (the actor's next policy) moved to
    the actor's device: the actor and the trainer on two GPUs."""

    def __init__(self, trainer: Trainer, device: torch.device) -> None:
        self.trainer, self.device = trainer, device

    def update(self, batch: Batch) -> dict[str, float]:
        return self.trainer.update(batch)

    def policy_snapshot(self) -> Any:
        return self.trainer.policy_snapshot().to(self.device)
