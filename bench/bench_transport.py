"""Camera -> subscriber latency: two camera streams at 30 fps through the robot server (camera
threads, PUB, RobotClient.latest_observation with decoding) next to the same JPEG bytes sent over
raw pyzmq PUB/SUB (multipart, 30 Hz, no decoding) in the same run, and the robot server again with
the robot link's CURVE keys (encrypted, authenticated: pde_contract/link.py) to give the cost of
the security against the plain link, measured in the same rounds.
Goal: ours <= 1.3x raw and p50 <= 5 ms.

    .venv/bin/python bench/bench_transport.py [--seconds 30] [--rounds 3]   # per transport and size

Latency of a frame = host clock when the subscriber holds the decoded observation - the frame's
capture time (stamped when the camera returns it). Both ends run on this host, so one clock.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common  # noqa: F401  (sets sys.path)
from _common import SIZES, jpeg_frame, sleep_until, stats_us, write_result
from _server import ServerProcess, ServerSpec


def raw_publisher(port: int, width: int, height: int, fps: float, conn: Any) -> None:
    import zmq

    jpegs = [jpeg_frame(width, height, 1), jpeg_frame(width, height, 2)]
    pub = zmq.Context().socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 2)
    pub.bind(f"tcp://127.0.0.1:{port}")
    conn.send("ready")
    t_next = time.monotonic()
    while not conn.poll(0):
        t_next += 1.0 / fps
        sleep_until(t_next)
        pub.send_multipart([b"obs", struct.pack("<d", time.time()), *jpegs])
    pub.close(linger=0)


def measure_ours(
    width: int, height: int, seconds: float, capture_threads: str, keys_dir: str = ""
) -> tuple[list[float], list[float], int]:
    """``keys_dir``: a `pde keys init` folder for a CURVE link ("" plain)."""
    from pde_contract.client import RobotClient
    from pde_contract.codec import unpackb
    from pde_contract.link import ClientCurve
    from pde_contract.messages import Observation

    curve = None
    if keys_dir:
        ws = Path(keys_dir) / "workstation"
        curve = ClientCurve.from_files(ws / "server.key", ws / "learner.key_secret")

    lat: list[float] = []
    lat_bytes: list[float] = []  # the same, taken before decoding (for the breakdown)
    missed = 0
    with (
        ServerProcess(
            ServerSpec(width=width, height=height, capture_threads=capture_threads, link_keys_dir=keys_dir)
        ) as srv,
        RobotClient(srv.cmd_endpoint, name="bench", timeout_s=5.0, curve=curve) as client,
    ):
        client.connect()
        client.latest_observation(timeout_s=5.0)
        last_index: dict[str, int] = {}
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            data = client.latest_observation_bytes(timeout_s=2.0)
            t_bytes = time.time()
            obs = unpackb(data, Observation)  # what latest_observation() does
            now = time.time()
            for f in obs.cameras:
                lat.append(now - f.capture_time_s)
                lat_bytes.append(t_bytes - f.capture_time_s)
                if f.name in last_index:
                    missed += max(0, f.frame_index - last_index[f.name] - 1)
                last_index[f.name] = f.frame_index
    return lat, lat_bytes, missed


def measure_raw(width: int, height: int, seconds: float) -> tuple[list[float], int]:
    import zmq

    from tests.helpers import free_port

    port = free_port()
    ctx = mp.get_context("spawn")
    conn, child = ctx.Pipe()
    proc = ctx.Process(target=raw_publisher, args=(port, width, height, 30.0, child), daemon=True)
    proc.start()
    assert conn.poll(30) and conn.recv() == "ready"
    sub: zmq.Socket = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"obs")
    sub.connect(f"tcp://127.0.0.1:{port}")
    lat: list[float] = []
    try:
        sub.poll(5000)
        sub.recv_multipart()
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            if not sub.poll(2000):
                raise RuntimeError("raw publisher stopped")
            frames = sub.recv_multipart()
            now = time.time()
            (sent,) = struct.unpack("<d", frames[1])
            lat += [now - sent] * (len(frames) - 2)  # one sample per frame, as for ours
    finally:
        conn.send("stop")
        proc.join(5)
        sub.close(linger=0)
    return lat, 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0, help="per transport and size, split over rounds")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--capture-threads",
        default="shared",
        choices=["shared", "per_camera"],
        help="shared: one thread reads both cameras (the sim's setting); per_camera: one each (hardware)",
    )
    args = ap.parse_args(argv)
    from pde.keys import init as keys_init

    keys_dir = tempfile.mkdtemp(prefix="bench-transport-keys-")
    keys_init(Path(keys_dir), ["learner"])
    results: dict[str, Any] = {}
    for size, (w, h) in SIZES.items():
        ours: list[float] = []
        ours_bytes: list[float] = []
        curve: list[float] = []
        raw: list[float] = []
        missed = curve_missed = 0
        for _ in range(args.rounds):
            lat, lat_b, m = measure_ours(w, h, args.seconds / args.rounds, args.capture_threads)
            ours += lat
            ours_bytes += lat_b
            missed += m
            lat, _, m = measure_ours(w, h, args.seconds / args.rounds, args.capture_threads, keys_dir)
            curve += lat
            curve_missed += m
            raw += measure_raw(w, h, args.seconds / args.rounds)[0]
        o, c, r = stats_us(ours), stats_us(curve), stats_us(raw)
        results[size] = {
            "ours_robot_server": o,
            "ours_before_decode": stats_us(ours_bytes),
            "ours_curve": c,
            "raw_pyzmq": r,
            "ratio_p50": round(o["p50_us"] / r["p50_us"], 3),
            "ratio_p99": round(o["p99_us"] / r["p99_us"], 3),
            # the robot link's security: CURVE over the plain link, same server, same rounds
            "curve_over_plain_p50": round(c["p50_us"] / o["p50_us"], 3),
            "curve_over_plain_p99": round(c["p99_us"] / o["p99_us"], 3),
            "ours_frames_missed": missed,
            "curve_frames_missed": curve_missed,
            "jpeg_bytes": len(jpeg_frame(w, h, 1)),
        }
        print(size, results[size], flush=True)
    write_result(
        "transport",
        {
            "goal": "ratio <= 1.3 (ours / raw pyzmq) and ours p50 <= 5 ms",
            "setup": "2 cameras x 30 fps, JPEG q90, PUB SNDHWM 2, subscriber keeps the newest",
            "capture_threads": args.capture_threads,
            "results": results,
        },
        "python bench/bench_transport.py " + " ".join(argv),
    )
    shutil.rmtree(keys_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
