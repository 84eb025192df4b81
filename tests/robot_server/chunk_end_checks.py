"""What the chunk-end tests of both backends check (robot_server/robots/chunk_end.py measures)."""

from __future__ import annotations

from typing import Any

from pde_contract.messages import ActionSpace
from robot_server.robots.chunk_end import ChunkEndCase

OVERSHOOT_MAX_M = 0.003
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
    assert figures["outside_box_max_m"] == 0.0, figures
    assert figures["backend_errors"] == 0, figures
