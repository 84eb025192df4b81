"""Our statistics against the ones LeRobot 0.6.1 itself wrote into the fixture
(tests/fixtures/lerobot_v30/): per episode (meta/episodes) from the fixture's rows and the frames its
script gave LeRobot, and over the dataset (meta/stats.json)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from pde_storage.lerobot_stats import (
    HISTOGRAM_BINS,
    QUANTILE_KEYS,
    Stats,
    aggregate_stats,
    histogram_quantiles,
    image_stats,
    vector_stats,
)

FIXTURE_DIR = Path(__file__).parents[1] / "fixtures" / "lerobot_v30"
VECTORS = ("observation.state", "action", "timestamp", "frame_index", "episode_index", "index", "task_index")
# LeRobot keeps float32 data in float32 and takes std as sqrt(E[x^2] - E[x]^2): against our float64,
# measured at most 2.7e-5 (state std) and 2.8e-4 (image std, in [0, 1]) on this fixture; min, max
# and mean agree to 3e-7; quantiles within one histogram bin (LeRobot's edges are float32).
STD_TOLERANCE = {"vector": 5e-5, "image": 5e-4}


def _script():
    spec = importlib.util.spec_from_file_location("make_fixture", FIXTURE_DIR / "make_fixture.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ours() -> list[dict[str, Stats]]:
    fix = _script()
    rows = pq.read_table(fix.DATASET / "data/chunk-000/file-000.parquet").to_pydict()
    episode = np.asarray(rows["episode_index"])
    out = []
    for e in range(len(fix.LENGTHS)):
        stats = {key: vector_stats(np.asarray(rows[key])[episode == e]) for key in VECTORS}
        given = fix.episode(e)
        for cam in fix.CAMERAS:  # under 100 rows LeRobot samples every frame once
            frames = given[f"observation.images.{cam}"]
            stats[f"observation.images.{cam}"] = image_stats(list(frames), np.ones(len(frames), dtype=int))
        out.append(stats)
    return out


def _assert_close(ours: Stats, theirs: dict[str, list[float]], what: str) -> None:
    kind = "image" if "images" in what else "vector"
    span = np.asarray(theirs["max"], dtype=np.float64) - np.asarray(theirs["min"], dtype=np.float64)
    assert set(ours) == set(theirs), what
    for name, value in ours.items():
        got = np.asarray(theirs[name], dtype=np.float64)
        assert got.shape == value.shape, (what, name)
        if name == "count":
            assert got.tolist() == value.tolist(), what
            continue
        tol: float | np.ndarray = {"std": STD_TOLERANCE[kind]}.get(name, 1e-6)
        if name in QUANTILE_KEYS:
            tol = span / HISTOGRAM_BINS + 1e-6
        assert np.all(np.abs(got - value) <= tol), (what, name, np.max(np.abs(got - value)))


def test_episode_stats_are_the_ones_lerobot_wrote() -> None:
    fix = _script()
    episodes = pq.read_table(fix.DATASET / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    for e, ours in enumerate(_ours()):
        for key, stats in ours.items():
            theirs = {k.split("/")[-1]: v for k, v in episodes[e].items() if k.startswith(f"stats/{key}/")}
            _assert_close(stats, theirs, f"episode {e} {key}")


def test_dataset_stats_are_the_ones_lerobot_wrote() -> None:
    theirs = json.loads((FIXTURE_DIR / "dataset" / "meta" / "stats.json").read_text())
    ours = aggregate_stats(_ours())
    assert set(ours) == set(theirs)
    for key, stats in ours.items():
        _assert_close(stats, theirs[key], f"dataset {key}")


def test_quantiles_of_weighted_rows_equal_the_repeated_rows() -> None:
    rng = np.random.default_rng(3)
    values = rng.normal(size=(12, 4))
    weights = rng.integers(1, 5, size=12)
    np.testing.assert_allclose(
        histogram_quantiles(values, weights),
        histogram_quantiles(np.repeat(values, weights, axis=0)),
        rtol=1e-12,
    )
    # one row: every quantile is the mean (LeRobot's rule below 2 rows)
    one = vector_stats(np.array([[1.0, 2.0]]))
    assert all(one[q].tolist() == [1.0, 2.0] for q in QUANTILE_KEYS)
