"""Where takes go on disk, and what is there (``demos`` is ``<data dir>/demos`` by default,
``DataLayout.demos``, where `pde learner sft` reads):

    <demos>/<task>/<take>.episode                kept takes, ee_delta rows (beside `pde sim record`'s)
    <demos>/<task>/<take>.discarded              discarded takes (success False): no reader takes them
    <demos>/takes.jsonl                          one line per take: kept, note, files, row counts
    <demos>_joint_abs/<task>/<take>.episode      the same takes as joint_abs rows (.discarded alike),
                                                 outside <demos>: SFT trains one action space

A kept take is a demonstration of its task (``success`` True, what SFT selects); the operator's note
goes into the log beside the counts.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import msgspec

from pde_contract.episodes import EPISODE_SUFFIX, write_episode
from pde_contract.messages import ActionSpace
from teleop.recorder import Take

KEPT_SUFFIX = EPISODE_SUFFIX
DISCARDED_SUFFIX = ".discarded"
LOG_NAME = "takes.jsonl"


def space_dir(demos_dir: str | Path, space: ActionSpace) -> Path:
    """The folder of ``space``'s takes: ``demos_dir`` itself for ee_delta, a sibling otherwise."""
    root = Path(demos_dir)
    return root if space is ActionSpace.EE_DELTA else root.with_name(f"{root.name}_{space.value}")


def save_take(demos_dir: str | Path, take: Take, kept: bool, note: str = "") -> list[Path]:
    """Write both action spaces of ``take`` and its log line; returns the files written (ee_delta
    first)."""
    root = Path(demos_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    ee = take.episodes[ActionSpace.EE_DELTA]
    name = f"{take.task}__{stamp}-{ee.episode_id[:8]}{KEPT_SUFFIX if kept else DISCARDED_SUFFIX}"
    paths = []
    for space, episode in take.episodes.items():
        path = space_dir(root, space) / take.task / name
        write_episode(path, msgspec.structs.replace(episode, success=kept))
        paths.append(path)
    line = {
        "time_utc": stamp,
        "task": take.task,
        "source": take.source,
        "kept": kept,
        "note": note,
        "files": [str(p) for p in paths],
        "task_success": take.task_success,
        **asdict(take.stats),
    }
    root.mkdir(parents=True, exist_ok=True)
    with (root / LOG_NAME).open("a") as f:
        f.write(json.dumps(line) + "\n")
    return paths


def counts_per_task(demos_dir: str | Path) -> dict[str, tuple[int, int]]:
    """Task -> (kept, discarded) demonstrations under ``demos_dir`` (ee_delta; kept counts every
    episode file there, `pde sim record`'s too)."""
    out: dict[str, tuple[int, int]] = {}
    base = Path(demos_dir)
    if not base.is_dir():
        return out
    for task_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        kept = sum(1 for _ in task_dir.glob(f"*{KEPT_SUFFIX}"))
        discarded = sum(1 for _ in task_dir.glob(f"*{DISCARDED_SUFFIX}"))
        out[task_dir.name] = (kept, discarded)
    return out
