"""Is the first observation a client reads after a Reset's reply from after the reset? (the sim
robot server, fast pacing, in this process; a check, not a test: the raw answer depends on timing)

    python bench/check_reset_observation.py [--resets 40] [--idle-s 0.25]

Each round idles ``--idle-s`` (the server publishes idle ticks, as between a loop's episodes),
resets to a new scene (``RobotClient.reset`` returns the tick at which it took effect), then reads
the newest observation: in even rounds as it arrived (``latest_observation_bytes``, decoded here),
in odd rounds through ``RobotClient.latest_observation``, which skips those from before the reset.
One whose ``tick`` is not past the reset's shows the scene the reset replaced. Prints how many
of each kind were such (docs/learner.md, Episode throughput).
"""

from __future__ import annotations

import argparse
import socket
import time

from pde_contract.client import RobotClient
from pde_contract.codec import unpackb
from pde_contract.messages import Observation
from robot_server.backends import build_backend
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
    server.start()
    stale = {"as it arrived": [0, 0], "through latest_observation": [0, 0]}  # [stale, reads]
    try:
        with RobotClient(settings.cmd_endpoint, name="reset-check") as client:
            client.connect()
            for seed in range(args.resets):
                time.sleep(args.idle_s)
                tick = client.reset(task=TASK, seed=seed)
                if seed % 2 == 0:
                    kind, obs = "as it arrived", unpackb(client.latest_observation_bytes(2.0), Observation)
                else:
                    kind, obs = "through latest_observation", client.latest_observation(timeout_s=2.0)
                stale[kind][0] += obs.tick <= tick
                stale[kind][1] += 1
    finally:
        server.close()
        backend.close()
    for kind, (n, reads) in stale.items():
        print(f"{kind}: {n} of {reads} first observations after a reset's reply were from before it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
