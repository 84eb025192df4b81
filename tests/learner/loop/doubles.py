"""Test doubles for the loop's neighbours (named Fake...): a robot that records resets, an actor
that returns small real episode files with scripted simulator outcomes, a trainer that records
its batches. The store under them is real."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from pde_contract.episodes import EpisodeFile
from teleop.base import TeleopSource
from tests.storage.factories import make_episode_file


class FakeRobot:
    def __init__(self) -> None:
        self.resets: list[tuple[str, int | None]] = []
        self.reset_poses: list[tuple[float, ...] | None] = []
        self.stops = 0
        self.fail_resets = 0  # the next this many resets raise (e.g. e-stop latched)

    def reset(
        self, task: str = "", seed: int | None = None, *, reset_joints_rad: tuple[float, ...] | None = None
    ) -> None:
        if self.fail_resets:
            self.fail_resets -= 1
            raise RuntimeError("[estopped] e-stop latched: release it on the page")
        self.resets.append((task, seed))
        self.reset_poses.append(reset_joints_rad)

    def stop(self) -> None:
        self.stops += 1


class FakeRestartingRobot(FakeRobot):
    """Reports a robot-server uptime and e-stop (a status); ``restart()`` starts it from zero, as a
    restarted server."""

    def __init__(self) -> None:
        super().__init__()
        # Up for an hour already: the loop detects a restart by the uptime going back, and a fake
        # started with the test would be "younger" at its first reset than a moment after restart().
        self.started_at = time.monotonic() - 3600.0
        self.estopped = False

    def restart(self) -> None:
        self.started_at = time.monotonic()

    def status(self) -> Any:
        class _Status:
            uptime_s = time.monotonic() - self.started_at
            estopped = self.estopped

        return _Status()


class FakeActor:
    def __init__(
        self,
        outcomes: Callable[[int], bool | None] = lambda i: i % 2 == 0,
        chunk_time_s: float = 0.0,
        n_chunks: int = 3,
    ) -> None:
        self.outcomes = outcomes
        self.chunk_time_s = chunk_time_s
        self.n_chunks = n_chunks
        self.calls: list[dict[str, Any]] = []
        self.policies: list[Any] = []
        self.fail_next: Exception | None = None
        self.started = threading.Event()

    def run_episode(
        self,
        *,
        episode_id: str,
        task: str,
        canonical_prompt: str,
        rollout_prompt: str,
        max_chunks: int,
        should_stop: Callable[[], bool] = lambda: False,
        seed: int | None = None,
        practice: bool = False,
    ) -> EpisodeFile:
        self.calls.append(
            dict(
                episode_id=episode_id,
                task=task,
                canonical_prompt=canonical_prompt,
                rollout_prompt=rollout_prompt,
                max_chunks=max_chunks,
                seed=seed,
                practice=practice,
            )
        )
        self.started.set()
        if self.fail_next is not None:
            err, self.fail_next = self.fail_next, None
            raise err
        n = 0
        for _ in range(min(self.n_chunks, max_chunks)):
            if should_stop():
                break
            time.sleep(self.chunk_time_s)
            n += 1
        ef = make_episode_file(
            int(episode_id), task, n_chunks=max(n, 1), success=self.outcomes(len(self.calls) - 1)
        )
        return ef

    def set_policy(self, policy: Any) -> None:
        self.policies.append(policy)


class PersonActorFake:
    """Fake of learner.actor.Actor's takeover side, without a robot: a FakeActor episode that, at
    each chunk's stop check, asks ``takeover_requested`` and, when a take is asked for, reads the
    person's rows until the take ends (recorded in ``takes``)."""

    def __init__(self, n_chunks: int, chunk_time_s: float = 0.0) -> None:
        self.inner = FakeActor(n_chunks=n_chunks, chunk_time_s=chunk_time_s)
        self.people: list[TeleopSource | None] = []
        self.takes: list[list[np.ndarray]] = []

    def run_episode(
        self,
        *,
        should_stop: Callable[[], bool] = lambda: False,
        person: TeleopSource | None = None,
        takeover_requested: Callable[[], bool] | None = None,
        **episode: Any,
    ) -> EpisodeFile:
        self.people.append(person)

        def take_then_stop_check() -> bool:
            if person is not None and takeover_requested is not None and takeover_requested():
                person.start_take(gripper_width_m=0.08)
                rows = []
                while not (cmd := person.read(0.1)).end:
                    rows.append(cmd.ee_delta_row())
                self.takes.append(rows)
            return should_stop()

        return self.inner.run_episode(should_stop=take_then_stop_check, **episode)

    def set_policy(self, policy: Any) -> None:
        self.inner.set_policy(policy)


class FakeTrainer:
    def __init__(self, update_time_s: float = 0.0, fail: bool = False) -> None:
        self.batches: list[list[tuple[EpisodeFile, float]]] = []
        self.update_time_s = update_time_s
        self.fail = fail
        self.n_updates = 0

    def update(self, batch: Any) -> dict[str, float]:
        time.sleep(self.update_time_s)
        if self.fail:
            raise RuntimeError("loss is NaN")
        self.batches.append(list(batch))
        self.n_updates += 1
        return {"pg_loss": 0.1 * self.n_updates, "approx_kl": 0.01, "explained_variance": float("nan")}

    def policy_snapshot(self) -> Any:
        return f"policy-after-update-{self.n_updates}"
