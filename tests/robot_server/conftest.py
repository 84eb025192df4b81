"""Fixtures of the robot server's tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from robot_server.executor import ChunkExecutor, ExecutorConfig
from tests.robot_server.fakes import FakeRobot


@pytest.fixture
def make() -> Iterator[Callable[..., tuple[ChunkExecutor, FakeRobot]]]:
    made: list[ChunkExecutor] = []

    def _make(**kw: object) -> tuple[ChunkExecutor, FakeRobot]:
        robot = FakeRobot(home_time_s=float(kw.pop("home_time_s", 0.0)))  # type: ignore[arg-type]
        cfg = ExecutorConfig(**{"control_rate_hz": 50.0, "heartbeat_timeout_s": 0.0, **kw})  # type: ignore[arg-type]
        ex = ChunkExecutor(robot, cfg)
        ex.start()
        made.append(ex)
        return ex, robot

    yield _make
    for ex in made:
        ex.close()
