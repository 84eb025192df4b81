"""What the chunk-end tests of both backends check (robot_server/robots/chunk_end.py measures)."""

from __future__ import annotations

from typing import Any

from pde_contract.messages import ActionSpace
from robot_server.robots.chunk_end import ChunkEndCase

OVERSHOOT_MAX_M = 0.003
# The "down" case's final target lies on the box's floor: the measured TCP settles around it within
# the controller's tracking error at rest (0.04-0.13 mm measured on franky-sim), so "outside" is
# judged beyond that, not at exactly 0.
OUTSIDE_BOX_TOLERANCE_M = 0.001
# at the fastest step the safety layer allows: down onto the box's floor, and sideways in joint space
CASES_AT_5CM = [
    ChunkEndCase(ActionSpace.EE_DELTA, "down", 0.05),
    ChunkEndCase(ActionSpace.JOINT_ABS, "side", 0.05),
]


def case_id(case: ChunkEndCase) -> str:
    return case.name


def assert_stops_at_the_end(figures: dict[str, Any]) -> None:
    print(figures)
    assert figures["overshoot_m"] <= OVERSHOOT_MAX_M, figures
    assert figures["outside_box_max_m"] <= OUTSIDE_BOX_TOLERANCE_M, figures
    # A target franky's planner rejects (error -111, seen now and then on a starved franky-sim) makes
    # the backend hold: safe, and counted in the bench's figures, but not what this test judges.
