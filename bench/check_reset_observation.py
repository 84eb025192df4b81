"""Is the first observation a client reads after a Reset's reply from after the reset? (the sim
robot server, fast pacing, in this process; a check, not a test: the answer depends on timing)

    python bench/check_reset_observation.py [--resets 40] [--idle-s 0.25]

Each round idles ``--idle-s`` (the server publishes idle ticks, as between a loop's episodes),
resets to a new scene, then reads ``latest_observation()`` as ``Actor.run_episode`` does. An
observation whose ``tick`` is not past the tick at which the reset took effect shows the scene from
before the reset. Prints how many of ``--resets`` were such (docs/learner.md, Episode throughput).
"""

from __future__ import annotations

import argparse
import socket
import time

from pde_contract.client import RobotClient
from robot_server.backends import build_backend
from robot_server.executor import _ResetRequest
from robot_server.server import RobotServer
from robot_server.settings import RobotServerSettings

TASK = "put_green_container_in_front_of_camera"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--resets", type=int, default=40)
    ap.add_argument("--idle-s", type=float, default=0.25, help="idle time before each reset")
    args = ap.parse_args(argv)
    settings = RobotServerSettings(
        backend="sim",
        pacing="fast",
        cmd_port=free_port(),
        obs_port=free_port(),
        image_width=128,
        image_height=128,
    )
    backend = build_backend(settings)
    server = RobotServer(backend.robot, backend.cameras, settings)
    reset_ticks: list[int] = []
    do_reset = server.executor._do_reset

    def recording_reset(req: _ResetRequest) -> None:  # the control thread's tick count at the reset
        do_reset(req)
        reset_ticks.append(server.executor.snapshot().tick)

    server.executor._do_reset = recording_reset  # type: ignore[method-assign]
    server.start()
    stale = 0
    try:
        with RobotClient(settings.cmd_endpoint, name="reset-check") as client:
            client.connect()
            for seed in range(args.resets):
                time.sleep(args.idle_s)
                client.reset(task=TASK, seed=seed)
                stale += client.latest_observation(timeout_s=2.0).tick <= reset_ticks[-1]
    finally:
        server.close()
        backend.close()
    print(f"{stale} of {args.resets} first observations after a reset's reply were from before the reset")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
