"""Command round trip through the robot server (RobotClient -> ROUTER -> reply) while it streams
two 224x224 cameras at 30 fps and ticks at 10 Hz, next to a raw pyzmq DEALER/ROUTER echo of the
same request and reply bytes in the same run.

    .venv/bin/python bench/bench_command_rtt.py [--n 2000] [--paced-n 300] [--rounds 3]

Commands: Heartbeat (-> Ack), GetStatus (-> Status with state and counters), SubmitChunk of a
10x7 ee_delta chunk (-> ChunkAccepted; zero deltas, so the arm holds still).
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing as mp
import sys
from collections.abc import Callable
from typing import Any

import _common  # noqa: F401  (sets sys.path)
import numpy as np
from _common import measure, stats_us, write_result
from _server import ServerProcess, ServerSpec


def echo_server(port: int, replies: dict[bytes, bytes], conn: Any) -> None:
    """Answers each known request with the recorded reply bytes, nothing else."""
    import zmq

    sock = zmq.Context().socket(zmq.ROUTER)
    sock.bind(f"tcp://127.0.0.1:{port}")
    sock.setsockopt(zmq.RCVTIMEO, 100)
    conn.send("ready")
    while not conn.poll(0):
        try:
            ident, body = sock.recv_multipart()
        except zmq.Again:
            continue
        sock.send_multipart([ident, replies[body]])
    sock.close(linger=0)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--paced-n", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)

    import zmq

    from pde_contract.client import RobotClient
    from pde_contract.codec import packb
    from pde_contract.messages import ActionChunk, ActionSpace, Envelope, GetStatus, Heartbeat, SubmitChunk
    from tests.helpers import free_port

    seq = iter(range(10**9))

    def chunk() -> ActionChunk:
        a = np.zeros((10, 7), np.float32)
        a[:, 6] = 0.08
        return ActionChunk(
            seq=next(seq),
            episode_id="bench",
            action_space=ActionSpace.EE_DELTA,
            actions=a,
            control_rate_hz=10.0,
        )

    results: dict[str, Any] = {}
    with (
        ServerProcess(ServerSpec(width=224, height=224)) as srv,
        RobotClient(srv.cmd_endpoint, name="bench", timeout_s=5.0) as client,
    ):
        client.connect()
        client.start_heartbeat(0.05)  # what a learner does while chunks run
        ours: dict[str, Callable[[], Any]] = {
            "heartbeat": client.heartbeat,
            "status": client.status,
            "submit_chunk": lambda: client.submit_chunk(chunk()),
        }
        # Record one request/reply pair per command for the raw reference.
        recorded: dict[str, tuple[bytes, bytes]] = {}
        for name, req in (("heartbeat", Heartbeat()), ("status", GetStatus()), ("submit_chunk", None)):
            request = SubmitChunk(chunk=chunk()) if req is None else req
            body = packb(Envelope(request_id=0, request=request))
            client.request(request)
            assert client.last_reply is not None
            recorded[name] = (body, packb(client.last_reply))
        port = free_port()
        ctx = mp.get_context("spawn")
        conn, child = ctx.Pipe()
        proc = ctx.Process(target=echo_server, args=(port, dict(recorded.values()), child), daemon=True)
        proc.start()
        assert conn.poll(30) and conn.recv() == "ready"
        dealer: zmq.Socket = zmq.Context.instance().socket(zmq.DEALER)
        dealer.connect(f"tcp://127.0.0.1:{port}")

        def raw_call(body: bytes) -> None:
            dealer.send(body)
            if not dealer.poll(5000):
                raise RuntimeError("echo server did not answer")
            dealer.recv()

        try:
            for name, call in ours.items():
                body = recorded[name][0]
                raw = functools.partial(raw_call, body)
                measure(call, 50, None)
                measure(raw, 50, None)
                for mode, n, hz in (("back_to_back", args.n, None), ("paced_30hz", args.paced_n, 30.0)):
                    o: list[float] = []
                    r: list[float] = []
                    for _ in range(args.rounds):
                        o += measure(call, n // args.rounds, hz)
                        r += measure(raw, n // args.rounds, hz)
                    os_, rs = stats_us(o), stats_us(r)
                    results[f"{name}/{mode}"] = {
                        "ours_robot_client": os_,
                        "raw_pyzmq_echo": rs,
                        "ratio_p50": round(os_["p50_us"] / rs["p50_us"], 3),
                        "ratio_p99": round(os_["p99_us"] / rs["p99_us"], 3),
                        "request_bytes": len(body),
                        "reply_bytes": len(recorded[name][1]),
                    }
                    print(name, mode, results[f"{name}/{mode}"], flush=True)
        finally:
            conn.send("stop")
            proc.join(5)
            dealer.close(linger=0)
            client.stop_heartbeat()
    write_result(
        "command_rtt",
        {
            "setup": "server streams 2x224x224 @30 fps, 10 Hz control; client has a 20 Hz heartbeat thread",
            "results": results,
        },
        "python bench/bench_command_rtt.py " + " ".join(argv),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
