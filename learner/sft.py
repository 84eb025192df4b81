"""Supervised fine-tuning (behaviour cloning) from demonstration EpisodeFiles: a weak start for PPO.

demo files (<= episodes_per_task per task) --> (observation at each chunk start, next T action rows)
--> normalisation statistics from the demos --> flow-matching (or Gaussian-mean) regression,
each sample labelled with its canonical prompt or a paraphrase (learner/paraphrases.py), or as a
per-task wording table says (``--wordings FILE.json``; e.g. learner/recipes/language_premise.json)
--> cached checkpoint (re-used when demos and settings are unchanged)

Under ``torchrun --nproc_per_node N`` (``ctx``: learner/distributed.py's context) the small policy
and π0.5 train data-parallel through learner/distributed.py's ``DistributedPolicy`` (``engine``:
PyTorch DDP, or FSDP2 sharding weights, gradients and AdamW state): every rank holds all demos and
draws the same global batch (rows, image shifts, prompts, flow noise and times from the same seeded
streams), runs only its share of the rows (``torch.tensor_split``: sizes differ by at most one),
and weights its loss by its share so that the engine's gradient average is the single-process
gradient of the whole batch. Rank 0 alone reads and writes the cache (under FSDP the ranks first
gather the whole weights to it); the others wait at a barrier.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections.abc import Callable, Generator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.distributed as dist

from learner.checkpoints import CheckpointStore
from learner.paraphrases import WordingTable, training_prompt
from learner.policies.base import DemoRows, ObsBatch, Policy
from learner.policies.vla import SmallVLAPolicy, VLAConfig
from learner.sft_stream import EpisodeFileSource, EpisodeSource, SFTStream, open_stream
from pde_contract.episodes import EPISODE_SUFFIXES, EpisodeFile, read_episode, rows_that_ran
from pde_contract.messages import ActionSpace
from pde_contract.settings import DEFAULT_CONTROL_RATE_HZ
from pde_contract.tasks import TaskCatalogue, UnknownTaskError

if TYPE_CHECKING:
    from learner.distributed import DistributedContext, DistributedPolicy, Engine
    from learner.lerobot_dataset import LeRobotMapping

log = logging.getLogger(__name__)


@dataclass
class SFTConfig:
    episodes_per_task: int = 40
    """Demonstrations used per task (the paper: 40)."""
    steps: int = 2000
    """Gradient steps."""
    batch_size: int = 64
    """Samples per step."""
    learning_rate: float = 3e-4
    """AdamW step size."""
    weight_decay: float = 1e-4
    """AdamW weight decay."""
    image_shift_px: int = 2
    """Random image shift augmentation (pixels, after downscaling)."""
    seed: int = 0
    """Seed for the model init, sampling and prompts."""
    control_rate_hz: float = DEFAULT_CONTROL_RATE_HZ
    """The robot server's control rate the policy will act at: a LeRobot dataset's fps must be it
    (one row per control tick)."""
    memory_budget_mb: float = 1024.0
    """Preprocessed samples SFT may hold in memory. A dataset larger than this streams from disk
    (learner/sft_stream.py): episodes decoded in DataLoader workers through a shuffle buffer of
    this size."""
    loader_workers: int = 2
    """DataLoader worker processes that decode a streamed dataset (0: in the training process)."""
    stride: int = 1
    """A LeRobotDataset: every stride-th row of an episode is a sample."""

    def __post_init__(self) -> None:
        if self.memory_budget_mb <= 0 or self.loader_workers < 0 or self.stride < 1:
            raise ValueError(
                f"memory_budget_mb {self.memory_budget_mb} must be > 0, loader_workers "
                f"{self.loader_workers} >= 0 and stride {self.stride} >= 1"
            )


@dataclass
class SFTDataset:
    obs: ObsBatch
    actions: np.ndarray  # [N, T, D] action-space units
    canonical_prompts: list[str]
    tasks: list[str]

    def __len__(self) -> int:
        return len(self.canonical_prompts)


def select_demo_files(
    demo_dir: str | Path, episodes_per_task: int, tasks: list[str] | None = None
) -> list[Path]:
    """The first ``episodes_per_task`` successful demo files of each task (sorted by file name)."""
    demo_dir = Path(demo_dir)
    files = sorted(p for p in demo_dir.rglob("*") if p.suffix in EPISODE_SUFFIXES and p.is_file())
    if not files:
        raise FileNotFoundError(
            f"no demonstration files ({', '.join(EPISODE_SUFFIXES)}) under {demo_dir}; record them with "
            "`pde sim record --tasks all --episodes-per-task 40 --out data/demos`"
        )
    chosen: dict[str, list[Path]] = {}
    for path in files:
        ep = read_episode(path)
        if tasks is not None and ep.task not in tasks:
            continue
        if ep.success is False or not ep.chunks:
            continue
        bucket = chosen.setdefault(ep.task, [])
        if len(bucket) < episodes_per_task:
            bucket.append(path)
    return [p for task in sorted(chosen) for p in chosen[task]]


def action_windows(episode: EpisodeFile, chunk_len: int) -> list[np.ndarray]:
    """For each recorded chunk's observation, the next ``chunk_len`` rows the robot ran; past the
    end the robot holds (zero deltas, last gripper width). Only rows that ran count (overlapped
    inference skips a chunk's rows in the past and preempts its tail: ``ChunkRecord.rows_run``); a
    chunk whose first ``k`` rows were skipped was observed ``k`` rows before its first one ran."""
    ran = [rows_that_ran(c) for c in episode.chunks]
    rows = np.concatenate(
        [np.asarray(c.actions, dtype=np.float64)[f:e] for c, (f, e) in zip(episode.chunks, ran, strict=True)]
    )
    if episode.action_space == ActionSpace.EE_DELTA:
        hold = np.zeros(rows.shape[1])
        hold[-1] = rows[-1, -1]
    else:
        hold = rows[-1]
    padded = np.concatenate([rows, np.tile(hold, (chunk_len, 1))])
    starts = np.cumsum([0] + [e - f for f, e in ran[:-1]]) - np.array([f for f, _ in ran])
    return [padded[s : s + chunk_len] for s in np.maximum(starts, 0)]


def catalogue_prompts(files: list[Path], catalogue: TaskCatalogue) -> dict[str, str]:
    """The canonical prompt the catalogue (the built-in ten and the tasks file) gives each task
    whose demos name another one, e.g. demos recorded before the lab worded its task anew: SFT
    trains the prompt the loop will use. A demo of a task the catalogue lacks stops SFT."""
    changed: dict[str, str] = {}
    for path in files:
        ep = read_episode(path)
        try:
            prompt = catalogue.get(ep.task).prompt
        except UnknownTaskError as e:
            raise UnknownTaskError(f"demo {path}: {e}") from None
        if prompt != ep.canonical_prompt:
            changed[ep.task] = prompt
    for task, prompt in changed.items():
        log.warning(
            "demos of %s recorded another canonical prompt: SFT trains %r (the tasks file's)", task, prompt
        )
    return changed


def build_dataset(policy: Policy, files: list[Path], prompt_of: dict[str, str] | None = None) -> SFTDataset:
    """``prompt_of``: task -> the canonical prompt to train instead of the one a demo recorded."""
    return memory_dataset(policy, demo_source(policy, files, prompt_of))


def demo_source(
    policy: Policy, files: list[Path], prompt_of: dict[str, str] | None = None
) -> EpisodeFileSource:
    return EpisodeFileSource(files, policy.chunk_len, policy.action_space, action_windows, prompt_of)


def lerobot_source(
    policy: Policy,
    root: str | Path,
    mapping: LeRobotMapping | None = None,
    stride: int = 1,
    control_rate_hz: float = DEFAULT_CONTROL_RATE_HZ,
) -> EpisodeSource:
    """A LeRobotDataset's samples for ``policy`` (learner/lerobot_dataset.py); ``mapping``: how a
    dataset of another layout feeds ours (None: our export layout); its fps must be
    ``control_rate_hz``."""
    from learner.lerobot_dataset import LeRobotSource

    return LeRobotSource(
        root, policy.chunk_len, policy.action_space, stride, mapping, policy.cameras, control_rate_hz
    )


def lerobot_sft_dataset(
    policy: Policy,
    root: str | Path,
    mapping: LeRobotMapping | None = None,
    control_rate_hz: float = DEFAULT_CONTROL_RATE_HZ,
) -> SFTDataset:
    """SFT samples from a LeRobotDataset, all in memory, preprocessed by ``policy``."""
    return memory_dataset(policy, lerobot_source(policy, root, mapping, control_rate_hz=control_rate_hz))


def memory_dataset(policy: Policy, source: EpisodeSource) -> SFTDataset:
    """Every sample of ``source`` decoded and preprocessed by ``policy``, in episode order."""
    obs, actions, prompts, tasks = [], [], [], []
    for i in range(len(source)):
        ep = source.samples(i)
        obs.append(policy.preprocess(ep.observations))
        actions.append(ep.actions)
        prompts += ep.prompts
        tasks += ep.tasks
    if not prompts:
        raise ValueError("the demonstrations hold no samples")
    return SFTDataset(ObsBatch.cat(obs), np.concatenate(actions), prompts, tasks)


def _statistics(data: SFTDataset | SFTStream) -> tuple[np.ndarray, np.ndarray]:
    """Every sample's raw state and action window, for the normalisation."""
    if isinstance(data, SFTStream):
        return data.states, data.actions
    return data.obs.state.numpy(), data.actions


def _memory_batches(
    data: SFTDataset, batch: int, gen: torch.Generator
) -> Generator[tuple[ObsBatch, torch.Tensor, list[str], list[str]], None, None]:
    """Random batches of an in-memory dataset (indices from ``gen``, as before streaming existed)."""
    actions = torch.from_numpy(data.actions).float()
    while True:
        idx = torch.randint(0, len(data), (batch,), generator=gen)
        rows = idx.tolist()
        yield (
            data.obs.index(idx),
            actions[idx],
            [data.canonical_prompts[i] for i in rows],
            [data.tasks[i] for i in rows],
        )


def shift_images(images: torch.Tensor, max_shift_px: int, gen: torch.Generator) -> torch.Tensor:
    """Random translation by up to ``max_shift_px`` (replicate padding), one shift per sample."""
    if max_shift_px <= 0:
        return images
    b, c, ch, h, w = images.shape
    pad = torch.nn.functional.pad(images.flatten(0, 1).float(), [max_shift_px] * 4, mode="replicate")
    pad = pad.view(b, c, ch, h + 2 * max_shift_px, w + 2 * max_shift_px)
    dx = torch.randint(0, 2 * max_shift_px + 1, (b,), generator=gen)
    dy = torch.randint(0, 2 * max_shift_px + 1, (b,), generator=gen)
    out = torch.stack([pad[i, :, :, dy[i] : dy[i] + h, dx[i] : dx[i] + w] for i in range(b)])
    return out.to(images.dtype)


def train_sft(
    policy: Policy,
    data: SFTDataset | SFTStream,
    cfg: SFTConfig,
    on_step: Callable[[int, float], None] | None = None,
    device: torch.device | str | None = None,
    wordings: WordingTable | None = None,
    ctx: DistributedContext | None = None,
    engine: Engine = "ddp",
) -> tuple[Policy, dict[str, float]]:
    """Batches are drawn and augmented on the CPU; the network runs on ``device`` (default: where
    the policy is). ``wordings``: per-task labels (default: canonical or a paraphrase).
    The small policy takes its normalisation from the demos; π0.5 keeps its checkpoint's.
    ``ctx``: this rank of a torchrun job: each rank runs its share of every batch under ``engine``
    (DDP or FSDP) and ``on_step`` gets the whole batch's loss (the single-process one).
    Returns the trained policy with whole weights (under FSDP: rank 0's gathered replica; the
    other ranks get their shards) and the metrics."""
    if device is not None:
        policy.to(device)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    # Flow noise and times for the whole batch come from the global CPU stream seeded above
    # (``supervised_noise``), drawn in the order one process always drew them (noise, then times):
    # every rank draws the same values and takes its rows, and one process trains exactly as before
    # torchrun existed.
    batch = min(cfg.batch_size, len(data))
    world, rank = (1, 0) if ctx is None else (ctx.world_size, ctx.rank)
    if batch < world:  # on every rank: a rank with no rows stopping alone leaves the others waiting
        raise ValueError(
            f"a batch of {batch} samples cannot be split over {world} ranks: it needs at least "
            f"{world} (--batch-size; the demos hold {len(data)} samples)"
        )
    mine = torch.tensor_split(torch.arange(batch), world)[rank]
    states, windows = _statistics(data)
    policy.fit_statistics(states, windows)
    model: Policy = policy
    dp: DistributedPolicy | None = None
    if ctx is not None:
        from learner.distributed import DistributedPolicy

        # After the statistics: FSDP's rank 0 copies the policy for its replica here.
        model = dp = DistributedPolicy(policy, ctx, engine)
    # Read after wrapping: FSDP replaces the parameters with its sharded ones.
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, cfg.steps))
    batches = (
        data.batches(batch, cfg.seed) if isinstance(data, SFTStream) else _memory_batches(data, batch, gen)
    )

    def _sft_step(step: int, drawn: tuple[ObsBatch, torch.Tensor, list[str], list[str]]) -> None:
        obs, actions, canonical, tasks = drawn
        obs = ObsBatch(images=shift_images(obs.images, cfg.image_shift_px, gen), state=obs.state)
        prompts = [training_prompt(canonical[i], rng, tasks[i], wordings) for i in range(batch)]
        noise, t = policy.supervised_noise(batch)
        rows = mine.tolist()
        loss = model.supervised_loss(
            DemoRows(obs.index(mine), [prompts[i] for i in rows], actions[mine], noise[mine], t[mine])
        )
        # This rank's mean weighted by its share of the batch (times the ranks, which the engine's
        # average divides out): the ranks' gradients average to the whole batch's mean-loss gradient.
        share = mine.numel() * world / batch
        opt.zero_grad()
        (loss * share).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        whole = loss.detach() * (mine.numel() / batch)
        if ctx is not None:
            dist.all_reduce(whole)
        losses.append(float(whole))
        if on_step is not None:
            on_step(step, losses[-1])

    policy.train()
    losses: list[float] = []
    t0 = time.perf_counter()
    try:
        for step in range(cfg.steps):
            _sft_step(step, next(batches))
    finally:
        batches.close()  # a stream's worker processes end here
    policy.eval()
    trained: Policy = policy
    if dp is not None:
        dp.gather_weights()  # every rank: a collective under FSDP
        if dp.ctx.rank == 0:
            trained = dp.plain_policy().eval()
    tail = losses[-max(1, len(losses) // 10) :]
    return trained, {
        "sft_loss_first": losses[0] if losses else float("nan"),
        "sft_loss_last": float(np.mean(tail)) if tail else float("nan"),
        "sft_samples": float(len(data)),
        "sft_seconds": time.perf_counter() - t0,
    }


def cache_key(
    files: list[Path],
    vla: VLAConfig,
    cfg: SFTConfig,
    wordings: WordingTable | None = None,
    policy_key: dict[str, Any] | None = None,
    prompt_of: dict[str, str] | None = None,
) -> str:
    """Demo files, network and training settings, the wording table, another policy's description
    and the prompts the tasks file changes (each only when given: keys made without them stay what
    they were)."""
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(f"{f.resolve()}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    # The control rate only decides whether a dataset is accepted, not what trains (and keys made
    # before it existed stay what they were).
    trained = {k: v for k, v in asdict(cfg).items() if k != "control_rate_hz"}
    h.update(json.dumps([asdict(vla), trained], sort_keys=True, default=str).encode())
    if wordings is not None:
        h.update(json.dumps({"wordings": wordings.as_dict()}, sort_keys=True).encode())
    if policy_key is not None:
        h.update(json.dumps({"policy": policy_key}, sort_keys=True, default=str).encode())
    if prompt_of:
        h.update(json.dumps({"prompts": prompt_of}, sort_keys=True).encode())
    return h.hexdigest()[:16]


def run_sft(
    demo_dir: str | Path,
    checkpoint_dir: str | Path,
    vla: VLAConfig,
    cfg: SFTConfig,
    tasks: list[str] | None = None,
    force: bool = False,
    on_step: Callable[[int, float], None] | None = None,
    device: torch.device | str = "cpu",
    wordings: WordingTable | None = None,
    policy_factory: Callable[[], Policy] | None = None,
    policy_key: dict[str, Any] | None = None,
    lerobot_dataset: str | Path | None = None,
    ctx: DistributedContext | None = None,
    engine: Engine = "ddp",
    lerobot_map: str | Path | None = None,
    catalogue: TaskCatalogue | None = None,
) -> tuple[Path, dict[str, float], bool]:
    """Train (or reuse) the SFT checkpoint as version 0 in ``checkpoint_dir``.
    ``policy_factory`` (with ``policy_key``, what the cache key records of it) starts from another
    policy than the small one, e.g. π0.5 from a checkpoint directory; ``vla`` is then unused.
    ``lerobot_dataset``: train on that LeRobotDataset instead of the episode files in ``demo_dir``;
    ``lerobot_map``: the mapping file (TOML/JSON) for a dataset not in our export layout.
    ``catalogue``: the known tasks (pde_contract.tasks.load_tasks): every demo's task must be one,
    and trains its canonical prompt there (None: the prompts the demos recorded).
    ``ctx``: every rank of a torchrun job calls this (``train_sft`` under ``engine``, DDP or FSDP);
    rank 0 alone checks and writes the cache, the others wait for it at a barrier.
    Returns (path, metrics, cached)."""
    mapping = None
    if lerobot_map is not None:
        if lerobot_dataset is None:
            raise ValueError("a LeRobot mapping file needs a LeRobotDataset to map (--lerobot-dataset)")
        from learner.lerobot_dataset import load_mapping

        mapping = load_mapping(lerobot_map)  # its schema errors before any cache lookup
    if lerobot_dataset is not None:
        files = sorted(p for p in Path(lerobot_dataset).rglob("*") if p.is_file())
        if not files:
            raise FileNotFoundError(f"no LeRobotDataset at {lerobot_dataset}")
        if lerobot_map is not None:
            files.append(Path(lerobot_map))  # another mapping trains another policy
    else:
        files = select_demo_files(demo_dir, cfg.episodes_per_task, tasks)
    if wordings is not None and lerobot_dataset is None:
        found = {read_episode(f).task for f in files}
        missing = sorted(set(wordings.tasks) - found)
        if missing:
            raise ValueError(
                f"the wording table names tasks with no demos under {demo_dir}: {missing} "
                f"(demos hold {sorted(found)})"
            )
    prompt_of = (
        catalogue_prompts(files, catalogue) if catalogue is not None and lerobot_dataset is None else {}
    )
    key = cache_key(files, vla, cfg, wordings, policy_key, prompt_of)
    store = CheckpointStore(checkpoint_dir)
    path = store.path_for(0)
    hit: dict[str, float] | None = None
    if path.is_file() and not force and (ctx is None or ctx.rank == 0):
        try:
            cached = store.load(path)
            if cached.metrics.get("sft_key_int") == float(int(key, 16) % (1 << 52)):
                hit = cached.metrics
        except Exception as e:  # unreadable cache: train again
            log.warning("SFT cache %s unreadable (%s); retraining", path, e)
    if ctx is not None:
        box: list[Any] = [hit]
        dist.broadcast_object_list(box, src=0)
        hit = box[0]
    if hit is not None:
        return path, hit, True
    torch.manual_seed(cfg.seed)
    wording: object = "canonical p=.5, else 1 of 4 paraphrases"
    if wordings is not None:
        wording = {"default": wording, "tasks": wordings.as_dict()}
    vla = replace(vla, extra={"sft_demo_files": len(files), "sft_wording": wording})
    policy = SmallVLAPolicy(vla) if policy_factory is None else policy_factory()
    source = (
        demo_source(policy, files, prompt_of)
        if lerobot_dataset is None
        else lerobot_source(policy, lerobot_dataset, mapping, cfg.stride, cfg.control_rate_hz)
    )
    stream = open_stream(source, policy.preprocess, cfg.memory_budget_mb, cfg.loader_workers)
    data: SFTDataset | SFTStream = stream
    if len(stream) <= stream.buffer_samples:  # it fits the budget: held in memory, as ever
        data = memory_dataset(policy, source)
    else:
        log.info(
            "SFT streams %d samples from %d episodes (%d MB of preprocessed samples at most, %d workers)",
            len(stream),
            len(source),
            cfg.memory_budget_mb,
            stream.workers,
        )
    trained, metrics = train_sft(policy, data, cfg, on_step, device, wordings, ctx, engine)
    metrics["sft_key_int"] = float(int(key, 16) % (1 << 52))
    metrics["sft_episodes"] = float(len(source))  # episodes, not the dataset's files
    metrics["sft_streamed"] = float(data is stream)
    if ctx is None or ctx.rank == 0:
        store.save(trained, 0, metrics)
    if ctx is not None:
        dist.barrier()
    return path, metrics, False
