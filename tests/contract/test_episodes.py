"""Episode files written before a field existed still read, with the field's default."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pde_contract.codec import packb, unpackb
from pde_contract.episodes import ChunkRecord, EpisodeFile, read_episode, rows_commanded_by
from pde_contract.messages import ActionSpace
from tests.storage.factories import make_observation


def test_a_file_from_before_takeovers_reads_as_all_policy(tmp_path: Path) -> None:
    rows = np.zeros((4, 7), np.float32)
    episode = EpisodeFile(
        episode_id="old",
        task="t",
        canonical_prompt="p",
        rollout_prompt="p",
        action_space=ActionSpace.EE_DELTA,
        control_rate_hz=10.0,
        chunks=[ChunkRecord(observation=make_observation(0), actions=rows, rows_run=(1, 4))],
    )
    raw = unpackb(packb(episode), dict)  # as written before, without the new fields
    for chunk in raw["chunks"]:
        del chunk["commanded_by"]
    del raw["interventions"]
    path = tmp_path / "old.episode"
    path.write_bytes(packb(raw))
    back = read_episode(path)
    assert back.chunks[0].commanded_by == "policy" and back.interventions == []
    assert rows_commanded_by(back, "policy") == 3 and rows_commanded_by(back, "person") == 0
