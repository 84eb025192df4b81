"""One action chunk through the robot link, as the learner sends it: run inside a container of the
workstation stack (docker/check_images.py pipes it to `python -` there), where
PDE_ROBOT_CMD_ENDPOINT and the link's keys say how to reach the robot PC's server.

Homes the arm, submits ten zero ee_delta rows at the server's rate (the arm holds still), feeds the
watchdog while they run and reads the status back until the chunk has executed. Prints one JSON
line; exit 0 when the server executed every row.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid

import numpy as np

from pde_contract.client import RobotClient
from pde_contract.link import client_curve_from_env
from pde_contract.messages import ActionChunk, ActionSpace

ROWS = 10
DONE_TIMEOUT_S = 30.0


def main() -> int:
    endpoint = os.environ["PDE_ROBOT_CMD_ENDPOINT"]
    with RobotClient(endpoint, "check-images", timeout_s=10.0, curve=client_curve_from_env()) as client:
        info = client.connect()
        client.reset()
        before = client.status().counters.chunks_executed
        client.start_heartbeat()
        accepted = client.submit_chunk(
            ActionChunk(
                seq=1,
                episode_id=f"check-images-{uuid.uuid4().hex[:8]}",
                action_space=ActionSpace.EE_DELTA,
                actions=np.zeros((ROWS, 7), np.float32)
                + np.array([0, 0, 0, 0, 0, 0, 0.08], np.float32),  # hold still, gripper open
                control_rate_hz=info.control_rate_hz,
                sent_time_s=time.time(),
            )
        )
        deadline = time.monotonic() + DONE_TIMEOUT_S
        status = client.status()
        while status.counters.chunks_executed == before and time.monotonic() < deadline:
            time.sleep(0.2)
            status = client.status()
        client.stop_heartbeat()
    result = {
        "server": info.server_name,
        "backend": info.backend,
        "accepted_steps": accepted.steps,
        "chunks_executed": status.counters.chunks_executed - before,
        "steps_executed": status.counters.steps_executed,
        "watchdog_trips": status.counters.watchdog_trips,
        "last_error": status.last_error,
    }
    print(json.dumps(result))
    ok = accepted.steps == ROWS and result["chunks_executed"] == 1 and not status.last_error
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
