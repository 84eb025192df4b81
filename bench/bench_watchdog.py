"""The watchdog and the e-stop, measured over the wire on the sim server (realtime pacing).

Watchdog: a client process submits a 4 s chunk, sends a heartbeat every 50 ms and is killed with
SIGKILL after 0.6 s; measured is the time from its last heartbeat to the first observation that
shows the chunk dropped. E-stop: a chunk runs, ``EStop`` is sent; measured is the time from sending
it to the first observation that shows the arm holding. Both include up to one observation period
(33 ms at 30 fps).

    python bench/bench_watchdog.py --trials 30
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from typing import Any

import _common  # noqa: F401  (sets sys.path)
import numpy as np
from _common import write_result
from _server import ServerProcess, ServerSpec

from pde_contract.client import RobotClient
from pde_contract.messages import ActionChunk, ActionSpace


def _chunk(seq: int, episode: str, rows: int) -> ActionChunk:
    a = np.zeros((rows, 7))
    a[:, 1] = 0.008 if seq % 2 == 0 else -0.008  # 8 cm/s, back and forth
    a[:, 6] = 0.08
    return ActionChunk(
        seq=seq, episode_id=episode, action_space=ActionSpace.EE_DELTA, actions=a, control_rate_hz=10.0
    )


def _victim(endpoint: str, seq: int, conn: Any) -> None:
    with RobotClient(endpoint, name="victim", timeout_s=5.0) as client:
        client.connect()
        client.submit_chunk(_chunk(seq, f"victim{seq}", rows=40))
        while True:
            t_sent = time.time()
            client.heartbeat()
            conn.send(t_sent)
            time.sleep(0.05)


def _first_observation(client: RobotClient, after_s: float, holding: Any) -> float:
    while True:
        obs = client.latest_observation(timeout_s=2.0)
        if obs.publish_time_s > after_s and holding(obs):
            return obs.publish_time_s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=30)
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    drops, estops = [], []
    starved = 0
    with (
        ServerProcess(ServerSpec(backend="sim", width=32, height=32)) as srv,
        RobotClient(srv.cmd_endpoint, name="bench", timeout_s=5.0) as client,
    ):
        client.connect()
        for i in range(args.trials):
            conn, child = ctx.Pipe()
            victim = ctx.Process(target=_victim, args=(srv.cmd_endpoint, i, child), daemon=True)
            victim.start()
            sent = [conn.recv()]  # started: the chunk runs
            t_kill = time.monotonic() + 0.6
            while time.monotonic() < t_kill:
                if conn.poll(0.01):
                    sent.append(conn.recv())
            running = client.latest_observation(timeout_s=2.0).executing_chunk_seq == i
            victim.kill()
            victim.join()
            while conn.poll():
                sent.append(conn.recv())
            dropped = _first_observation(client, sent[-1], lambda o: o.executing_chunk_seq == -1)
            if running:  # else the starved victim fell silent on its own before the kill: not counted
                drops.append(dropped - sent[-1])
            else:
                starved += 1
            time.sleep(0.3)
        client.start_heartbeat()
        for i in range(args.trials):
            client.submit_chunk(_chunk(i, f"estop{i}", rows=30))
            time.sleep(0.4)
            t_sent = time.time()
            client.estop("bench")
            held = _first_observation(client, t_sent, lambda o: o.estopped and o.executing_chunk_seq == -1)
            estops.append(held - t_sent)
            client.release_estop()
            time.sleep(0.2)
        client.stop_heartbeat()

    def ms(a: list[float]) -> dict[str, float]:
        x = np.asarray(a) * 1000
        return {
            "n": len(x),
            **{f"p{q}_ms": round(float(np.percentile(x, q)), 1) for q in (0, 50, 90)},
            "max_ms": round(float(x.max()), 1),
        }

    write_result(
        "watchdog",
        {
            "heartbeat_timeout_s": 0.2,
            "watchdog_drop": ms(drops),
            "victims_starved_before_the_kill": starved,
            "estop_to_hold": ms(estops),
        },
        " ".join(["python", *sys.argv]),
    )


if __name__ == "__main__":
    main()
