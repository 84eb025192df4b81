"""Feature statistics as LeRobot computes them for a LeRobotDataset (format facts from LeRobot 0.6.1,
``lerobot/datasets/compute_stats.py``), so a policy normalised with our export's statistics sees the
numbers LeRobot would have written for the same rows.

Per episode and feature: min, max, mean, std (population), count and the quantiles q01, q10, q50,
q90, q99. LeRobot estimates quantiles from a 5000-bin histogram between the episode's min and max
(edges padded by 1e-10), interpolating inside the bin where the cumulative count passes q x count;
below 2 rows every quantile is the mean. Vectors: over the episode's rows, one value per entry.
Images: per channel over every pixel of up to 100 evenly spaced rows (``image_sample_indices``; images
of 300 px or more subsampled to ~150 px), in [0, 1], shape [3, 1, 1].
Over the dataset (``meta/stats.json``): min of mins, max of maxes, count-weighted mean, the pooled
variance, and each quantile as the count-weighted mean of the episodes' (LeRobot's approximation).
We compute in float64 where LeRobot keeps float32 data in float32: the figures agree to float32
rounding (bench/check_lerobot_roundtrip.py measures it against LeRobot's own code).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
QUANTILE_KEYS = tuple(f"q{round(q * 100):02d}" for q in QUANTILES)
HISTOGRAM_BINS = 5000
EDGE_PAD = 1e-10
# LeRobot samples at most this many images per episode for image stats (below ~500 rows: all rows
# up to 100), and downsamples images of 300 px or more to ~150 px first.
IMAGE_STATS_MIN_SAMPLES = 100
IMAGE_STATS_MAX_SAMPLES = 10_000
IMAGE_STATS_SAMPLE_POWER = 0.75

Stats = dict[str, np.ndarray]


def image_sample_indices(n_rows: int) -> np.ndarray:
    """Rows LeRobot samples for image stats: evenly spaced, n**0.75 of them within [100, 10000]."""
    lo = min(IMAGE_STATS_MIN_SAMPLES, n_rows)
    n = max(lo, min(int(n_rows**IMAGE_STATS_SAMPLE_POWER), IMAGE_STATS_MAX_SAMPLES))
    return np.round(np.linspace(0, n_rows - 1, n)).astype(int)


def _downsample_for_stats(img_chw: np.ndarray) -> np.ndarray:
    _, h, w = img_chw.shape
    if max(h, w) < 300:
        return img_chw
    step = int(max(h, w) / 150)
    return img_chw[:, ::step, ::step]


def histogram_quantiles(values: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """[len(QUANTILES), D] quantiles of ``values`` [N, D] (each row counted ``weights[i]`` times),
    LeRobot's histogram estimate."""
    n, d = values.shape
    w = np.ones(n) if weights is None else weights.astype(np.float64)
    total = w.sum()
    out = np.empty((len(QUANTILES), d))
    for j in range(d):
        col = values[:, j]
        edges = np.linspace(col.min() - EDGE_PAD, col.max() + EDGE_PAD, HISTOGRAM_BINS + 1)
        cumsum = np.cumsum(np.histogram(col, bins=edges, weights=w)[0])
        for k, q in enumerate(QUANTILES):
            target = q * total
            idx = int(np.searchsorted(cumsum, target))
            if idx == 0:
                out[k, j] = edges[0]
            elif idx >= len(cumsum):
                out[k, j] = edges[-1]
            else:
                before = cumsum[idx - 1]
                in_bin = cumsum[idx] - before
                fraction = 0.0 if in_bin == 0 else (target - before) / in_bin
                out[k, j] = edges[idx] + fraction * (edges[idx + 1] - edges[idx])
    return out


def _stats(values: np.ndarray, weights: np.ndarray | None, count: int, quantiles: bool) -> Stats:
    """``values`` [N, D] (rows weighted), reduced over rows; ``count``: what LeRobot records."""
    w = np.ones(len(values)) if weights is None else weights.astype(np.float64)
    mean = (w[:, None] * values).sum(axis=0) / w.sum()
    var = (w[:, None] * (values - mean) ** 2).sum(axis=0) / w.sum()
    out = {
        "min": values.min(axis=0),
        "max": values.max(axis=0),
        "mean": mean,
        "std": np.sqrt(var),
        "count": np.array([count]),
    }
    if quantiles:
        qs = histogram_quantiles(values, weights) if w.sum() >= 2 else np.tile(mean, (len(QUANTILES), 1))
        out.update(zip(QUANTILE_KEYS, qs, strict=True))
    return out


def vector_stats(values: np.ndarray, quantiles: bool = True) -> Stats:
    """Stats over rows; ``values`` is [N] (stats of shape [1]) or [N, D] (shape [D])."""
    v = values.astype(np.float64).reshape(len(values), -1)
    return _stats(v, None, len(values), quantiles)


def image_stats(images_hwc: Sequence[np.ndarray], counts: np.ndarray, quantiles: bool = True) -> Stats:
    """Per-channel stats in [0, 1], each [3, 1, 1], over ``counts[i]`` copies of image i (uint8 HWC):
    LeRobot's stats over its sampled rows, from the distinct chunk images and how often each is
    sampled. Pixels are counted per level (256 per channel), which gives the same histogram."""
    levels = np.zeros((3, 256))
    for img, k in zip(images_hwc, counts, strict=True):
        if k == 0:
            continue
        px = _downsample_for_stats(img.transpose(2, 0, 1)).reshape(3, -1)
        for c in range(3):
            levels[c] += k * np.bincount(px[c], minlength=256)
    channels = []
    for c in range(3):
        seen = np.nonzero(levels[c])[0]
        channels.append(
            _stats(seen[:, None].astype(np.float64), levels[c, seen], int(np.sum(counts)), quantiles)
        )
    return {
        key: channels[0][key]
        if key == "count"
        else (np.concatenate([ch[key] for ch in channels]) / 255.0).reshape(3, 1, 1)
        for key in channels[0]
    }


def aggregate_stats(episodes: Sequence[dict[str, Stats]]) -> dict[str, Stats]:
    """The dataset's statistics from its episodes', as LeRobot's ``aggregate_stats``."""
    out: dict[str, Stats] = {}
    for key in {k for ep in episodes for k in ep}:
        parts = [ep[key] for ep in episodes if key in ep]
        means = np.stack([p["mean"] for p in parts])
        counts = np.stack([p["count"] for p in parts]).astype(np.float64)
        total = counts.sum(axis=0)
        while counts.ndim < means.ndim:
            counts = counts[..., None]
        mean = (means * counts).sum(axis=0) / total
        var = ((np.stack([p["std"] for p in parts]) ** 2 + (means - mean) ** 2) * counts).sum(axis=0) / total
        agg = {
            "min": np.min(np.stack([p["min"] for p in parts]), axis=0),
            "max": np.max(np.stack([p["max"] for p in parts]), axis=0),
            "mean": mean,
            "std": np.sqrt(var),
            "count": total.astype(np.int64),
        }
        for q in QUANTILE_KEYS:
            if all(q in p for p in parts):
                agg[q] = (np.stack([p[q] for p in parts]) * counts).sum(axis=0) / total
        out[key] = agg
    return out


def as_lists(stats: dict[str, Stats]) -> dict[str, dict[str, Any]]:
    """JSON-ready: every array as a (nested) list, counts as ints."""
    return {key: {name: v.tolist() for name, v in s.items()} for key, s in stats.items()}
