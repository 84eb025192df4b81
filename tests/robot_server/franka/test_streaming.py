"""The feed-forward velocity of the FR3 streams (pure functions; the arm itself in
test_chunk_end_franka.py)."""

from __future__ import annotations

import numpy as np
import pytest

from robot_server.robots.franka.streaming import stopping_speed, through_velocity

PERIOD_S = 0.1


def test_a_steady_stream_is_passed_at_its_speed() -> None:
    step = np.array([0.05, -0.02, 0.0])
    np.testing.assert_allclose(through_velocity(step, step, PERIOD_S), step / PERIOD_S)


@pytest.mark.parametrize(
    ("step_out", "why"),
    [
        (np.zeros(3), "the stream stops here (a row clipped at the floor, the hold after a chunk)"),
        (np.array([0.0, 0.0, 0.05]), "it turns back"),
    ],
)
def test_the_arm_arrives_at_rest_where_the_stream_stops_or_turns(step_out: np.ndarray, why: str) -> None:
    step_in = np.array([0.0, 0.0, -0.05])
    assert np.all(through_velocity(step_in, step_out, PERIOD_S) == 0.0), why


def test_the_slower_of_the_two_steps_sets_the_speed_per_axis() -> None:
    v = through_velocity(np.array([0.05, 0.01, 0.03]), np.array([0.01, 0.05, -0.03]), PERIOD_S)
    np.testing.assert_allclose(v, [0.1, 0.1, 0.0])


def test_stopping_speed_brakes_within_the_distance() -> None:
    v = float(stopping_speed(0.05, 2.7))  # 5 cm at FR3's 9 m/s^2 x 0.3
    assert v**2 / (2 * 2.7) < 0.05
    assert v > 0.4  # a 5 cm/tick stream (0.5 m/s) is barely slowed
    np.testing.assert_allclose(stopping_speed(np.array([0.0, -0.01]), np.array([1.0, 1.0]))[0], 0.0)
