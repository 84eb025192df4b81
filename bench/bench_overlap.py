"""Does the arm wait for the policy? Hold time between chunks, sync vs overlapped inference.

The learner's Actor runs episodes on the sim robot server (realtime pacing, 10 Hz, in a child
process that sends its tick log back) with a policy slowed to 150 ms per chunk (the tiny CPU policy,
its ``sample`` padded with a sleep to 150 ms: a stand-in for π0.5's chunk time on a GPU). The same
run does ``sync`` (the reference: infer after each chunk has finished) and ``overlapped`` (infer
the next chunk while the current one runs; it takes over at the seam with its rows in the past
skipped). From the server's own tick log, per seam between two chunks of an episode: the ticks in
which no chunk row was commanded (the arm held), in ticks x period and in the tick log's own time
(first row of the next chunk - last row of the previous - one period). Goal: 0 ms overlapped.

    .venv/bin/python bench/bench_overlap.py [--episodes 4] [--chunks 8] [--inference-ms 150]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from typing import Any, Literal

import _common  # noqa: F401  (sets sys.path)
import numpy as np
from _common import write_result
from _server import ServerProcess, ServerSpec

RATE_HZ = 10.0
CHUNK_LEN = 10
TASK = "put_green_container_in_bowl"
PROMPT = "put the green container in the bowl"
MODES: tuple[Literal["sync", "overlapped"], ...] = ("sync", "overlapped")


def slowed(policy: Any, chunk_s: float) -> Any:
    """``policy`` whose ``sample`` takes at least ``chunk_s`` (its own time, then a sleep)."""
    sample = policy.sample

    def slow_sample(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = sample(*args, **kwargs)
        time.sleep(max(0.0, chunk_s - (time.perf_counter() - t0)))
        return out

    policy.sample = slow_sample
    return policy


def seams(log: list[tuple[float, float, int, int]], seqs: range) -> list[tuple[int, float]]:
    """(hold ticks, interval - period in s) for each seam between consecutive chunks in ``seqs``."""
    ticks = [(i, t) for i, t in enumerate(log) if t[2] in seqs]
    out = []
    for (i_prev, prev), (i, cur) in itertools.pairwise(ticks):
        if cur[2] != prev[2]:
            holds = sum(1 for t in log[i_prev + 1 : i] if t[2] < 0)
            out.append((holds, cur[0] - prev[0] - 1.0 / RATE_HZ))
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=4, help="per mode")
    ap.add_argument("--chunks", type=int, default=8, help="chunks per episode")
    ap.add_argument("--inference-ms", type=float, default=150.0, help="the policy's time per chunk")
    args = ap.parse_args(argv)

    import torch

    from learner.actor import Actor, ActorSettings
    from learner.policies.vla import make_test_policy
    from pde_contract.client import RobotClient

    torch.manual_seed(0)
    policy = slowed(make_test_policy("flow", chunk_len=CHUNK_LEN), args.inference_ms / 1000.0)
    # A starved heartbeat on a loaded machine would measure the watchdog, not the seam: allow 1 s.
    spec = ServerSpec(
        backend="sim", width=64, height=64, control_rate_hz=RATE_HZ, camera_fps=20.0, heartbeat_timeout_s=1.0
    )
    episodes: dict[str, list[tuple[range, Any]]] = {"sync": [], "overlapped": []}
    with (
        ServerProcess(spec) as srv,
        RobotClient(srv.cmd_endpoint, name="bench-overlap", timeout_s=5.0) as client,
    ):
        client.connect()  # the server's control rate and pacing, for the actor
        for i in range(args.episodes):
            for mode in MODES:  # interleaved: the same load on both
                actor = Actor(
                    policy,
                    client,
                    ActorSettings(obs_timeout_s=10.0, chunk_timing=mode),
                )
                first_seq = actor.session.seq + 1  # the seqs its chunks get
                ep = actor.run_episode(
                    episode_id=f"{mode}-{i}",
                    task=TASK,
                    canonical_prompt=PROMPT,
                    rollout_prompt=PROMPT,
                    max_chunks=args.chunks,
                    seed=i,
                )
                episodes[mode].append((range(first_seq, actor.session.seq + 1), ep))
    log = srv.result["tick_log"]
    counters = srv.result["counters"]

    period_ms = 1000.0 / RATE_HZ
    results: dict[str, Any] = {}
    for name, runs in episodes.items():
        found = [s for seqs, _ in runs for s in seams(log, seqs)]
        holds = np.array([h for h, _ in found], dtype=float)
        interval_ms = np.array([d for _, d in found]) * 1000.0
        chunks = [c for _, ep in runs for c in ep.chunks]
        skipped = [c.rows_run[0] for c in chunks if c.rows_run is not None]
        run = [c.rows_run[1] - c.rows_run[0] for c in chunks if c.rows_run is not None]
        inference_ms = np.array([c.inference_s for c in chunks if c.inference_s is not None]) * 1000.0
        results[name] = {
            "episodes": len(runs),
            "seams": len(found),
            "hold_ms_per_seam": {
                "mean": round(float(holds.mean() * period_ms), 1),
                "max": round(float(holds.max() * period_ms), 1),
                "seams_with_a_hold": int((holds > 0).sum()),
            },
            "seam_interval_minus_period_ms": {
                "p50": round(float(np.percentile(interval_ms, 50)), 1),
                "max": round(float(interval_ms.max()), 1),
            },
            "rows_per_chunk": CHUNK_LEN,
            "rows_skipped_per_chunk_mean": round(float(np.mean(skipped)), 2),
            "rows_run_per_chunk_mean": round(float(np.mean(run)), 2),
            "inference_ms": {
                "p50": round(float(np.percentile(inference_ms, 50)), 1),
                "max": round(float(inference_ms.max()), 1),
            },
        }
    write_result(
        "overlap",
        {
            "goal": "0 ms hold between chunks with a policy at 150 ms per chunk (overlapped)",
            "setup": (
                f"sim robot server (MuJoCo, realtime pacing, {RATE_HZ:.0f} Hz, 64x64 cameras, child "
                f"process); tiny flow policy, {CHUNK_LEN}-row chunks, sample padded to "
                f"{args.inference_ms:.0f} ms; {args.chunks} chunks per episode; modes interleaved"
            ),
            "hold_definition": (
                "per seam between consecutive chunks of an episode: control ticks between the last "
                "row of one chunk and the first row of the next in which no chunk row was commanded "
                "(the server's tick log), x the period"
            ),
            "results": results,
            "server_counters": {
                k: counters[k]
                for k in (
                    "chunks_executed",
                    "chunks_preempted",
                    "chunks_stale",
                    "watchdog_trips",
                    "tick_overruns",
                )
            },
        },
        "python bench/bench_overlap.py " + " ".join(argv),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
