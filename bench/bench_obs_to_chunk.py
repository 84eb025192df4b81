"""Observation -> action-chunk round trip through a do-nothing policy (transport and codec only):
pde_contract.inference (length-prefixed msgpack frames over TCP, msgspec) next to openpi's
transport (a websockets server with openpi-client's msgpack_numpy codec, driven by its
WebsocketClientPolicy, compression=None), same payload, same run. Goal: ours <= 0.5x openpi's.

    .venv/bin/python bench/bench_obs_to_chunk.py [--n 2000] [--paced-n 300] [--rounds 3]

Payload: two JPEG frames (quality 90) + robot state (joints, velocities, pose, gripper) + prompt;
reply float32[10, 8]. Both servers run in their own process; the client in this one.

Also measured, back to back, as floors (not references for the goal): the same request bytes
(already encoded, no decoding) echoed over raw pyzmq DEALER/ROUTER and over a raw TCP socket, to
show what the transport alone costs.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from typing import Any

import _common  # noqa: F401  (sets sys.path)
import numpy as np
from _common import SIZES, jpeg_frame, measure, stats_us, write_result

ACTIONS_SHAPE = (10, 8)
PROMPT = "put the green container in the bowl"


def _zeros_policy(*_: Any) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    return np.zeros(ACTIONS_SHAPE, np.float32), {}


def serve_ours(port: int) -> None:
    from pde_contract.inference import PolicyServer

    PolicyServer(_zeros_policy, f"tcp://127.0.0.1:{port}").serve()


def serve_openpi(port: int) -> None:
    import asyncio

    from openpi_client import msgpack_numpy
    from websockets.asyncio.server import serve

    async def handler(ws: Any) -> None:
        packer = msgpack_numpy.Packer()
        await ws.send(packer.pack({"server": "bench", "action_shape": ACTIONS_SHAPE}))  # metadata first
        async for message in ws:
            msgpack_numpy.unpackb(message)
            await ws.send(packer.pack({"actions": np.zeros(ACTIONS_SHAPE, np.float32)}))

    async def main() -> None:
        async with serve(handler, "127.0.0.1", port, compression=None, max_size=None):
            await asyncio.Future()

    asyncio.run(main())


def _reply_bytes() -> bytes:
    from pde_contract.codec import packb
    from pde_contract.inference import InferReply

    return packb(InferReply(ok=True, actions=np.zeros(ACTIONS_SHAPE, np.float32)))


def serve_raw_zmq(port: int) -> None:
    import zmq

    sock = zmq.Context().socket(zmq.ROUTER)
    sock.bind(f"tcp://127.0.0.1:{port}")
    reply = _reply_bytes()
    while True:
        ident, _ = sock.recv_multipart()
        sock.send_multipart([ident, reply])


def _recv_exact(sock: Any, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if not k:
            raise EOFError
        got += k
    return buf


def serve_raw_tcp(port: int) -> None:
    import socket
    import struct

    listener = socket.create_server(("127.0.0.1", port))
    reply = _reply_bytes()
    frame = struct.pack("<I", len(reply)) + reply
    while True:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                _recv_exact(conn, struct.unpack("<I", _recv_exact(conn, 4))[0])
                conn.sendall(frame)
        except (EOFError, OSError):
            conn.close()


def raw_calls(zmq_port: int, tcp_port: int, request: bytes) -> dict[str, Any]:
    import socket
    import struct

    import zmq

    dealer: zmq.Socket = zmq.Context.instance().socket(zmq.DEALER)
    dealer.connect(f"tcp://127.0.0.1:{zmq_port}")
    conn = socket.create_connection(("127.0.0.1", tcp_port))
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    frame = struct.pack("<I", len(request)) + request

    def zmq_call() -> None:
        dealer.send(request)
        dealer.recv()

    def tcp_call() -> None:
        conn.sendall(frame)
        _recv_exact(conn, struct.unpack("<I", _recv_exact(conn, 4))[0])

    return {"floor_raw_pyzmq_dealer_router": zmq_call, "floor_raw_tcp": tcp_call}


def payloads(width: int, height: int) -> tuple[Any, dict[str, Any]]:
    from pde_contract.messages import CameraFrame, Observation, RobotState

    jpegs = {"external": jpeg_frame(width, height, 1), "wrist": jpeg_frame(width, height, 2)}
    rng = np.random.default_rng(0)
    q, dq, pos, quat = (rng.standard_normal(n) for n in (7, 7, 3, 4))
    now = time.time()
    ours = Observation(
        seq=1,
        publish_time_s=now,
        state=RobotState(
            joint_positions_rad=q,
            joint_velocities_rad_s=dq,
            ee_position_m=pos,
            ee_quat_xyzw=quat,
            gripper_width_m=0.04,
            robot_time_s=now,
        ),
        cameras=[
            CameraFrame(name=n, jpeg=j, width=width, height=height, capture_time_s=now, frame_index=1)
            for n, j in jpegs.items()
        ],
    )
    openpi = {
        "observation/exterior_image_1_left": np.frombuffer(jpegs["external"], np.uint8),
        "observation/wrist_image_left": np.frombuffer(jpegs["wrist"], np.uint8),
        "observation/joint_position": q,
        "observation/joint_velocity": dq,
        "observation/ee_position": pos,
        "observation/ee_quat": quat,
        "observation/gripper_position": np.array([0.04]),
        "prompt": PROMPT,
    }
    return ours, openpi


def wait_port(port: int, timeout_s: float = 20.0) -> None:
    import socket

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"server on port {port} did not start")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000, help="back-to-back round trips per transport and size")
    ap.add_argument("--paced-n", type=int, default=300, help="round trips at 30 Hz per transport and size")
    ap.add_argument("--rounds", type=int, default=3, help="alternate the transports this many times")
    args = ap.parse_args(argv)

    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    from pde_contract.inference import PolicyClient
    from tests.helpers import free_port

    ctx = mp.get_context("spawn")
    ours_port, openpi_port, zmq_port, tcp_port = (free_port() for _ in range(4))
    procs = [
        ctx.Process(target=serve_ours, args=(ours_port,), daemon=True),
        ctx.Process(target=serve_openpi, args=(openpi_port,), daemon=True),
        ctx.Process(target=serve_raw_zmq, args=(zmq_port,), daemon=True),
        ctx.Process(target=serve_raw_tcp, args=(tcp_port,), daemon=True),
    ]
    for p in procs:
        p.start()
    results: dict[str, Any] = {}
    try:
        for port in (ours_port, openpi_port, tcp_port):
            wait_port(port)
        ours_client = PolicyClient(f"tcp://127.0.0.1:{ours_port}")
        openpi_client = WebsocketClientPolicy("127.0.0.1", openpi_port)
        for size, (w, h) in SIZES.items():
            obs, obs_dict = payloads(w, h)

            def ours_call(obs: Any = obs) -> None:
                reply = ours_client.infer(obs, PROMPT)
                assert reply.actions is not None and reply.actions.shape == ACTIONS_SHAPE

            def openpi_call(obs_dict: dict[str, Any] = obs_dict) -> None:
                reply = openpi_client.infer(obs_dict)
                assert reply["actions"].shape == ACTIONS_SHAPE

            calls = {"ours_tcp": ours_call, "openpi_websocket": openpi_call}
            floors = raw_calls(zmq_port, tcp_port, _encoded(obs))
            for call in (*calls.values(), *floors.values()):
                measure(call, 100, None)  # warm up
            for mode, n, hz in (("back_to_back", args.n, None), ("paced_30hz", args.paced_n, 30.0)):
                timed = {**calls, **floors} if hz is None else calls
                samples: dict[str, list[float]] = {name: [] for name in timed}
                for _ in range(args.rounds):
                    for name, call in timed.items():
                        samples[name] += measure(call, n // args.rounds, hz)
                ours_s, ref_s = stats_us(samples["ours_tcp"]), stats_us(samples["openpi_websocket"])
                results[f"{size}/{mode}"] = {
                    "ours_tcp": ours_s,
                    "openpi_websocket": ref_s,
                    "ratio_p50": round(ours_s["p50_us"] / ref_s["p50_us"], 3),
                    "ratio_p99": round(ours_s["p99_us"] / ref_s["p99_us"], 3),
                    "request_bytes": len(_encoded(obs)),
                    **{name: stats_us(samples[name]) for name in floors if name in samples},
                }
                print(size, mode, results[f"{size}/{mode}"], flush=True)
        ours_client.close()
    finally:
        for p in procs:
            p.terminate()
            p.join(5)
    write_result(
        "obs_to_chunk",
        {
            "goal": "ratio_p50 <= 0.5 (ours / openpi transport)",
            "payload": "2 JPEG q90 + state + prompt -> f32[10,8]",
            "results": results,
        },
        "python bench/bench_obs_to_chunk.py " + " ".join(argv),
    )
    return 0


def _encoded(obs: Any) -> bytes:
    from pde_contract.codec import packb
    from pde_contract.inference import InferRequest

    return packb(InferRequest(observation=obs, prompt=PROMPT))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
