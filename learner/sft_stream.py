"""SFT samples streamed from disk: a dataset whose decoded samples exceed ``SFTConfig.memory_budget_mb``
is never held whole. Episodes are decoded one at a time in ``torch.utils.data.DataLoader`` worker
processes (``SFTConfig.loader_workers``) and pass through a shuffle buffer of at most the budget's
worth of preprocessed samples (split among the workers), from which batches are drawn at random.

episode source (LeRobotSource, EpisodeFileSource: ``samples(i)``, ``vectors(i)``)
--> worker: its share of the episodes, in a seeded random order, epoch after epoch
--> policy.preprocess per episode --> shuffle buffer (swap-pop at a seeded random place)
--> DataLoader batches (ObsBatch, action windows, prompts, tasks)

The normalisation statistics come from a first pass over ``vectors(i)`` (state and actions, no
images). The stream is deterministic for a seed and a worker count, so under torchrun every rank
draws the same global batches, as the in-memory path does.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from learner.lerobot_dataset import DatasetSamples, EpisodeVectors
from learner.policies.base import ObsBatch
from pde_contract.episodes import EpisodeFile, read_episode
from pde_contract.messages import ActionSpace, Observation, state_vector

THREAD_JOIN_TIMEOUT_S = 10.0  # a closed queue's feeder thread ends once it has flushed
Preprocess = Callable[[Sequence[Observation]], ObsBatch]
# (images uint8 [n_cameras, 3, H, W], state [15], action window [T, D], canonical prompt, task)
Sample = tuple[torch.Tensor, torch.Tensor, torch.Tensor, str, str]


class EpisodeSource(Protocol):
    """SFT's episodes, each decoded on demand."""

    def __len__(self) -> int: ...
    def vectors(self, i: int) -> EpisodeVectors: ...
    def samples(self, i: int) -> DatasetSamples: ...


class EpisodeFileSource:
    """Demonstration episode files: a sample per chunk, its observation and the next ``chunk_len``
    rows that ran (``learner.sft.action_windows``), under the task's canonical prompt (``prompt_of``
    overrides it per task)."""

    def __init__(
        self,
        files: Sequence[Path],
        chunk_len: int,
        action_space: ActionSpace,
        windows: Callable[[EpisodeFile, int], list[np.ndarray]],
        prompt_of: dict[str, str] | None = None,
    ) -> None:
        self.files, self.chunk_len, self.action_space, self._windows = (
            list(files),
            chunk_len,
            action_space,
            windows,
        )
        self.prompt_of = prompt_of or {}

    def __len__(self) -> int:
        return len(self.files)

    def _read(self, i: int) -> EpisodeFile:
        ep = read_episode(self.files[i])
        if ep.action_space != self.action_space:
            raise ValueError(
                f"{self.files[i]}: actions are {ep.action_space}, the policy acts in {self.action_space}"
            )
        return ep

    def samples(self, i: int) -> DatasetSamples:
        ep = self._read(i)
        prompt = self.prompt_of.get(ep.task, ep.canonical_prompt)
        n = len(ep.chunks)
        actions = np.stack(self._windows(ep, self.chunk_len))
        return DatasetSamples([c.observation for c in ep.chunks], actions, [prompt] * n, [ep.task] * n)

    def vectors(self, i: int) -> EpisodeVectors:
        ep = self._read(i)
        states = np.stack([state_vector(c.observation.state) for c in ep.chunks])
        return EpisodeVectors(states, np.stack(self._windows(ep, self.chunk_len)))


@dataclass
class SFTStream:
    """A dataset SFT streams (``learner.sft.train_sft`` draws its batches from ``batches``); the
    states and action windows of every sample, for the normalisation statistics."""

    source: EpisodeSource
    preprocess: Preprocess
    states: np.ndarray  # [N, 15]
    actions: np.ndarray  # [N, T, D]
    buffer_samples: int  # preprocessed samples held at once, all workers together
    workers: int

    def __len__(self) -> int:
        return len(self.states)

    def batches(
        self, batch_size: int, seed: int
    ) -> Generator[tuple[ObsBatch, torch.Tensor, list[str], list[str]], None, None]:
        """Batches for ever (a generator: close it to stop the workers)."""
        workers = min(self.workers, len(self.source))
        data = _ShuffledSamples(self.source, self.preprocess, self.buffer_samples, seed)
        loader = DataLoader(
            data,
            batch_size=batch_size,
            num_workers=workers,
            collate_fn=_collate,
            worker_init_fn=_one_thread if workers else None,
            prefetch_factor=2 if workers else None,
        )
        before = set(threading.enumerate())
        it = iter(loader)
        try:
            while True:
                yield next(it)
        finally:
            del it  # shuts the worker processes down and closes their queues
            for thread in set(threading.enumerate()) - before:
                if thread.name == "QueueFeederThread":  # the worker queues'
                    thread.join(THREAD_JOIN_TIMEOUT_S)


def open_stream(
    source: EpisodeSource, preprocess: Preprocess, memory_budget_mb: float, workers: int
) -> SFTStream:
    """The vectors pass over every episode, and the buffer the budget holds (at least one batch's
    worth is the caller's to check)."""
    vectors = [source.vectors(i) for i in range(len(source))]
    states = np.concatenate([v.states for v in vectors])
    actions = np.concatenate([v.actions for v in vectors])
    per_sample = sample_bytes(source, preprocess)
    buffer = max(1, int(memory_budget_mb * 2**20 // per_sample))
    return SFTStream(source, preprocess, states, actions, buffer, workers)


def sample_bytes(source: EpisodeSource, preprocess: Preprocess) -> int:
    """Bytes one preprocessed sample holds (its images and state), from the first episode's first."""
    first = source.samples(0)
    if not first.observations:
        raise ValueError("the first episode has no samples")
    obs = preprocess(first.observations[:1])
    return int(
        obs.images.numel() * obs.images.element_size() + obs.state.numel() * 4 + first.actions[0].nbytes
    )


def _one_thread(_worker_id: int) -> None:
    torch.set_num_threads(1)  # the workers decode; the main process's threads train


def _collate(samples: list[Sample]) -> tuple[ObsBatch, torch.Tensor, list[str], list[str]]:
    images, states, actions, prompts, tasks = zip(*samples, strict=True)
    obs = ObsBatch(images=torch.stack(images), state=torch.stack(states))
    return obs, torch.stack(actions), list(prompts), list(tasks)


class _ShuffledSamples(IterableDataset[Sample]):
    """Each worker: its episodes (every ``num_workers``-th), in a seeded random order per epoch,
    through a shuffle buffer of its share of ``buffer_samples``."""

    def __init__(self, source: EpisodeSource, preprocess: Preprocess, buffer_samples: int, seed: int) -> None:
        self.source, self.preprocess = source, preprocess
        self.buffer_samples, self.seed = buffer_samples, seed

    def __iter__(self) -> Iterator[Sample]:
        info = get_worker_info()
        worker, n_workers = (0, 1) if info is None else (info.id, info.num_workers)
        mine = np.arange(worker, len(self.source), n_workers)
        rng = np.random.default_rng([self.seed, worker])
        capacity = max(1, self.buffer_samples // n_workers)
        buffer: list[Sample] = []
        for _epoch in itertools.count():
            for i in rng.permutation(mine):
                ep = self.source.samples(int(i))
                obs = self.preprocess(ep.observations)
                actions = torch.from_numpy(np.ascontiguousarray(ep.actions, dtype=np.float32))
                for k in range(len(obs)):
                    # clone: a view would keep the whole episode's tensor alive
                    buffer.append(
                        (obs.images[k].clone(), obs.state[k].clone(), actions[k], ep.prompts[k], ep.tasks[k])
                    )
                del obs, actions
                while len(buffer) > capacity:
                    yield _swap_pop(buffer, int(rng.integers(len(buffer))))
            while len(buffer) > capacity // 2:  # epoch end: give out most of it before refilling
                yield _swap_pop(buffer, int(rng.integers(len(buffer))))


def _swap_pop(buffer: list[Sample], j: int) -> Sample:
    buffer[j], buffer[-1] = buffer[-1], buffer[j]
    return buffer.pop()
