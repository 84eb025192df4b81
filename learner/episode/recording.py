"""Subscribers: what listens to an episode as it runs (openpi's runtime subscribers).

``EpisodeRecorder`` keeps every chunk that ran and every take, and makes the ``EpisodeFile``
(the terminal reward comes later, from the label: ``learner.rewards.reward_from_label``).
``InterventionDemos`` writes each take as a demonstration under the data folder's demos tree
(beyond the paper: HIL-SERL's demo buffer; ``ActorSettings.intervention_demos``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import msgspec

from learner.episode.person import Take
from pde_contract.episodes import ChunkRecord, EpisodeFile, Intervention, write_episode
from pde_contract.settings import DataLayout


class Subscriber(Protocol):
    def on_chunk(self, record: ChunkRecord) -> None:
        """The policy sent a chunk (its ``rows_run`` is settled when the next one preempts it)."""
        ...

    def on_take(self, take: Take) -> None:
        """A person's take ended."""
        ...

    def on_episode_end(self, episode: EpisodeFile) -> None: ...


@dataclass
class EpisodeRecorder:
    """What an episode has recorded so far."""

    chunks: list[ChunkRecord] = field(default_factory=list)
    interventions: list[Intervention] = field(default_factory=list)

    def on_chunk(self, record: ChunkRecord) -> None:
        self.chunks.append(record)

    def on_take(self, take: Take) -> None:
        if not take.records:
            return
        self.interventions.append(
            Intervention(
                first_chunk=len(self.chunks),
                n_rows=len(take.records),
                trigger=take.trigger,
                start_tick=take.start_tick,
            )
        )
        self.chunks.extend(take.records)

    def on_episode_end(self, episode: EpisodeFile) -> None:
        pass


@dataclass
class InterventionDemos:
    """Writes each take of an episode, when it ends, as a demonstration of its task."""

    layout: DataLayout
    written: list[Path] = field(default_factory=list)

    def on_chunk(self, record: ChunkRecord) -> None:
        pass

    def on_take(self, take: Take) -> None:
        pass

    def on_episode_end(self, episode: EpisodeFile) -> None:
        self.written += write_intervention_demos(episode, self.layout.demos)


def intervention_demos(episode: EpisodeFile) -> list[EpisodeFile]:
    """Each takeover's rows as a demonstration of the episode's task (beyond the paper: HIL-SERL
    adds a person's corrections to its demo buffer). ``success`` True marks a demonstration, as a
    kept take's does (what SFT selects); the RL episode's own label and reward are untouched."""
    return [
        msgspec.structs.replace(
            episode,
            episode_id=f"{episode.episode_id}-intervention-{k}",
            chunks=episode.chunks[iv.first_chunk : iv.first_chunk + iv.n_rows],
            success=True,
            source=f"intervention:{episode.source}",
            interventions=[],
        )
        for k, iv in enumerate(episode.interventions)
    ]


def write_intervention_demos(episode: EpisodeFile, demos_dir: Path) -> list[Path]:
    """Write ``intervention_demos(episode)`` as ``<demos_dir>/<task>/<episode>-intervention-<k>.episode``."""
    paths = []
    for demo in intervention_demos(episode):
        path = demos_dir / episode.task / f"{demo.episode_id}.episode"
        write_episode(path, demo)
        paths.append(path)
    return paths
