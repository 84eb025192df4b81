"""``python -m tests.learner.loop.fake_loop_proc DB_URL MEDIA_DIR``: the real EpisodeLoop in its
own process with a FakeRobot and a slow FakeActor, so tests can kill -9 it mid-episode."""

from __future__ import annotations

import sys

from learner.loop.core import EpisodeLoop
from learner.loop.settings import LoopSettings
from pde_storage import Store
from tests.learner.loop.doubles import FakeActor, FakeRobot


def main() -> None:
    url, media = sys.argv[1], sys.argv[2]
    settings = LoopSettings.model_validate(
        dict(
            tasks=["put_green_container_in_bowl"],
            auto_start=True,
            auto_label=True,
            rollouts_per_prompt=1000,
            max_chunks=1000,
            poll_period_s=0.01,
        )
    )
    store = Store.open(url, media)
    EpisodeLoop(store, FakeRobot(), FakeActor(chunk_time_s=0.05, n_chunks=6), settings).run()


if __name__ == "__main__":
    main()
