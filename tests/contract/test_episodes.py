"""Episode files written before a field existed still read, with the field's default; format-1 and
format-2 files (tests/fixtures/episode_v1 and episode_v2, written by that format's code) read as
format 3."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from pde_contract.codec import packb, unpackb
from pde_contract.episodes import (
    EPISODE_FORMAT_VERSION,
    ChunkRecord,
    EpisodeFile,
    PolicyTrace,
    observation_of_row,
    read_episode,
    rows_commanded_by,
    write_episode,
)
from pde_contract.messages import ActionSpace
from tests.storage.factories import make_episode_file, make_observation

EPISODE_V1 = Path(__file__).resolve().parents[1] / "fixtures" / "episode_v1"
EPISODE_V2 = Path(__file__).resolve().parents[1] / "fixtures" / "episode_v2"


@functools.cache
def format_1_traces() -> dict[str, list[PolicyTrace | None]]:
    """What the format-1 trainer made of each chunk of the fixture's files (make_fixture.py)."""
    data = (EPISODE_V1 / "expected_traces.msgpack").read_bytes()
    traces: dict[str, list[PolicyTrace | None]] = unpackb(data, dict[str, list[PolicyTrace | None]])
    return traces


def assert_same_trace(got: PolicyTrace | None, want: PolicyTrace | None) -> None:
    assert (got is None) == (want is None)
    if got is not None and want is not None:
        assert got.log_prob == want.log_prob and got.value == want.value
        assert got.chain.dtype == want.chain.dtype
        np.testing.assert_array_equal(got.chain, want.chain)
        if want.log_prob_elements is None:
            assert got.log_prob_elements is None
        else:
            assert got.log_prob_elements is not None
            assert got.log_prob_elements.dtype == want.log_prob_elements.dtype
            np.testing.assert_array_equal(got.log_prob_elements, want.log_prob_elements)


@pytest.mark.parametrize(
    "name",
    ["rollout_extras.episode", "rollout_extras_no_elements.episode", "rollout_trace.episode", "demo.episode"],
)
def test_a_format_1_file_reads_with_the_trace_the_format_1_trainer_read(name: str) -> None:
    assert unpackb((EPISODE_V1 / name).read_bytes(), dict)["format_version"] == 1
    episode = read_episode(EPISODE_V1 / name)
    assert episode.format_version == EPISODE_FORMAT_VERSION == 3
    want = format_1_traces()[name]
    assert len(episode.chunks) == len(want)
    for chunk, trace in zip(episode.chunks, want, strict=True):
        assert_same_trace(chunk.trace, trace)
    assert (name == "demo.episode") == (want[0] is None)


def test_an_upgraded_format_1_file_writes_as_format_3(tmp_path: Path) -> None:
    write_episode(tmp_path / "up.episode", read_episode(EPISODE_V1 / "rollout_extras.episode"))
    raw = unpackb((tmp_path / "up.episode").read_bytes(), dict)
    assert raw["format_version"] == 3 and not any("extras" in c for c in raw["chunks"])
    for chunk, trace in zip(
        read_episode(tmp_path / "up.episode").chunks, format_1_traces()["rollout_extras.episode"], strict=True
    ):
        assert_same_trace(chunk.trace, trace)


@pytest.mark.parametrize(
    ("version", "advice"), [(4, "written by newer code"), (0, "not one of this project")]
)
def test_an_unknown_format_is_refused_saying_what_to_do(tmp_path: Path, version: int, advice: str) -> None:
    raw = unpackb(packb(make_episode_file(1, "t", n_chunks=1)), dict)
    raw["format_version"] = version
    path = tmp_path / "x.episode"
    path.write_bytes(packb(raw))
    with pytest.raises(
        ValueError, match=rf"x.episode: episode format {version}; this code reads formats 1 to 3.*{advice}"
    ):
        read_episode(path)


def test_a_format_2_file_reads_as_format_3_with_the_chunk_start_for_every_row(tmp_path: Path) -> None:
    raw = unpackb((EPISODE_V2 / "demo.episode").read_bytes(), dict)
    assert raw["format_version"] == 2 and not any("row_observations" in c for c in raw["chunks"])
    episode = read_episode(EPISODE_V2 / "demo.episode")
    assert episode.format_version == 3 and len(episode.chunks) == 3
    for chunk in episode.chunks:
        assert chunk.row_observations == {}
        assert observation_of_row(chunk, 0) == (chunk.observation, True)
        assert observation_of_row(chunk, 2) == (chunk.observation, False)
    write_episode(tmp_path / "up.episode", episode)  # and writes as format 3
    assert unpackb((tmp_path / "up.episode").read_bytes(), dict)["format_version"] == 3


def test_row_observations_round_trip(tmp_path: Path) -> None:
    episode = make_episode_file(1, "t", n_chunks=2, rows=3)
    episode.chunks[1].row_observations = {1: make_observation(7), 2: make_observation(8)}
    write_episode(tmp_path / "x.episode", episode)
    back = read_episode(tmp_path / "x.episode").chunks[1]
    assert sorted(back.row_observations) == [1, 2]
    obs, own = observation_of_row(back, 2)
    assert own and obs.seq == 8 and obs.cameras[0].jpeg == make_observation(8).cameras[0].jpeg


def test_a_file_that_is_not_an_episode_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.episode"
    path.write_bytes(packb({"hello": 1}))
    with pytest.raises(ValueError, match=r"notes.episode: not an episode file .*format_version"):
        read_episode(path)


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
