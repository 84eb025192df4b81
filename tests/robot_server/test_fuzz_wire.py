"""Wire-level fuzzing of `pde robot-server --backend sim` (a real subprocess on 127.0.0.1).

Several raw clients send random bytes, mutated and truncated valid messages, valid messages with
fields of the wrong type, deep nesting, extra frames and oversized messages, while a well-behaved
client keeps submitting chunks (pushing at the limits) with heartbeats. Bounded: a fixed number of
messages per client from a fixed seed (~50 s on a 2-core machine). A longer soak of the same:
``PDE_FUZZ_MESSAGES=5000 PDE_FUZZ_SEED=7 pytest tests/robot_server/test_fuzz_wire.py``
(``bench/bench_fuzz_soak.py`` runs that and keeps the figures: ``PDE_FUZZ_REPORT=path.json``).

Asserted: every message gets exactly one decodable ``Reply``; the server answers ``Health`` all
along and afterwards, and a valid chunk still executes; the measured TCP stays in the workspace box
(+ 10 mm) and moves at most the per-tick limit (+ 20 mm) per control tick; the measured gripper
width stays in [0, 0.08] m (+ 2 mm; away from the table, where contact pushes the fingers apart).
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import numpy as np
import pytest
import zmq

from pde_contract.client import RobotClient, RobotServerError
from pde_contract.codec import CodecError, packb, unpackb
from pde_contract.messages import (
    MAX_COMMAND_BYTES,
    PROTOCOL_VERSION,
    ActionChunk,
    ActionSpace,
    Envelope,
    EStop,
    GetStatus,
    GripperCommand,
    Health,
    Heartbeat,
    Hello,
    Observation,
    ReleaseEStop,
    Reply,
    Reset,
    SetGuidingMode,
    Stop,
    SubmitChunk,
)
from robot_server.safety import SafetyLimits
from tests.robot_server.test_server_sim import ServerProc, start_server

LIMITS = SafetyLimits()
BOX_TOL_M = 0.0
STEP_TOL_M = 0.0
FUZZ_CLIENTS = 3
MESSAGES_PER_CLIENT = int(os.environ.get("PDE_FUZZ_MESSAGES", "400"))
SEED = int(os.environ.get("PDE_FUZZ_SEED", "0"))
REPLY_TIMEOUT_MS = 10_000  # generous: a loaded machine, and a reset may take seconds


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProc]:
    srv = start_server("--image-size", "32x32")
    yield srv
    assert srv.stop() == 0, "".join(srv.lines)


def _chunk(rng: np.random.Generator, seq: int, episode: str) -> ActionChunk:
    if rng.random() < 0.7:
        a = np.zeros((int(rng.integers(1, 12)), 7))
        a[:, :3] = rng.normal(0.0, 0.2, size=(len(a), 3))  # often far beyond the per-tick limit
        a[:, 3:6] = rng.normal(0.0, 0.3, size=(len(a), 3))
        a[:, 6] = rng.uniform(-0.05, 0.15, size=len(a))
        space = ActionSpace.EE_DELTA
    else:
        a = rng.uniform(-3.5, 4.5, size=(int(rng.integers(1, 12)), 8))
        space = ActionSpace.JOINT_ABS
    return ActionChunk(seq=seq, episode_id=episode, action_space=space, actions=a, control_rate_hz=10.0)


def _valid_requests(rng: np.random.Generator) -> list[Any]:
    return [
        Hello(protocol_version=PROTOCOL_VERSION, client_name="fuzz"),
        Hello(protocol_version=PROTOCOL_VERSION + 1, client_name="old"),
        Heartbeat(),
        SubmitChunk(chunk=_chunk(rng, int(rng.integers(0, 1000)), "fuzz")),
        Reset(task="", seed=int(rng.integers(0, 100))),
        GripperCommand(width_m=float(rng.uniform(-0.1, 0.2))),
        Stop(),
        EStop(reason="fuzz"),
        ReleaseEStop(),
        SetGuidingMode(enabled=bool(rng.random() < 0.5)),
        GetStatus(),
        Health(),
    ]


_ODD_VALUES: list[Any] = [
    None,
    True,
    -1,
    2**63 - 1,
    -(2**63),
    1e308,
    float("nan"),
    float("inf"),
    "",
    "ee_delta",
    "x" * 300,
    b"\x00\xff",
    [1],
    [],
    {"a": 1},
    {"type": "SubmitChunk"},
    [[[[[[[[[[1]]]]]]]]]],
    msgspec.msgpack.Ext(1, b"\xff\xff\xff\xff"),
    msgspec.msgpack.Ext(1, b"\x05\x00\x00\x00\x92\xa3<f8\x91\x07"),  # header of a float64[7], no body
    msgspec.msgpack.Ext(7, b"abc"),
]


def _replace_random_field(rng: np.random.Generator, obj: Any) -> Any:
    """``obj`` (nested dicts/lists) with one value replaced, one key dropped or one key added."""
    if isinstance(obj, dict) and obj:
        key = list(obj)[int(rng.integers(len(obj)))]
        roll = rng.random()
        out = dict(obj)
        if roll < 0.1:
            del out[key]
        elif roll < 0.15:
            out["extra"] = _ODD_VALUES[int(rng.integers(len(_ODD_VALUES)))]
        elif isinstance(obj[key], dict | list) and roll < 0.6:
            out[key] = _replace_random_field(rng, obj[key])
        else:
            out[key] = _ODD_VALUES[int(rng.integers(len(_ODD_VALUES)))]
        return out
    return _ODD_VALUES[int(rng.integers(len(_ODD_VALUES)))]


def _fuzz_message(rng: np.random.Generator, rid: int) -> list[bytes]:
    """One bad (or occasionally valid) message, as the frames to send."""
    requests = _valid_requests(rng)
    request = requests[int(rng.integers(len(requests)))]
    valid = packb(Envelope(request_id=rid, request=request))
    kind = int(rng.integers(9))
    if kind == 0:  # random bytes
        return [rng.bytes(int(rng.integers(0, 2000)))]
    if kind == 1:  # truncated
        return [valid[: int(rng.integers(0, len(valid)))]]
    if kind == 2:  # bytes flipped
        data = bytearray(valid)
        for i in rng.integers(0, len(data), size=int(rng.integers(1, 6))):
            data[i] = int(rng.integers(256))
        return [bytes(data)]
    if kind == 3:  # a field of the wrong type / missing / extra
        builtin = msgspec.msgpack.decode(valid)  # dicts; arrays stay msgpack Ext values
        return [packb(_replace_random_field(rng, builtin))]
    if kind == 4:  # deep nesting in the request or in a skipped field
        depth = int(rng.choice([200, 1000, 5000, 50_000]))
        head = b"\x82\xaarequest_id" + packb(rid) + b"\xa7request"
        if rng.random() < 0.5:
            return [head + b"\x91" * depth + b"\xc0"]
        return [head + b"\x82\xa4type\xa6Health\xa1x" + b"\x91" * depth + b"\xc0"]
    if kind == 5:  # extra or missing frames
        return [valid, valid] if rng.random() < 0.5 else [b"", valid]
    if kind == 6:  # over the command limit (rarely: they are 1 MiB each)
        if rng.random() < 0.05:
            return [b"\x00" * (MAX_COMMAND_BYTES + int(rng.integers(1, 1000)))]
        return [valid]
    return [valid]  # valid: commands from someone else, interleaved


def _fuzz_client(endpoint: str, seed: int, failures: list[str]) -> None:
    rng = np.random.default_rng(seed)
    sock: zmq.Socket
    with zmq.Context.instance().socket(zmq.DEALER) as sock:
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
        for i in range(MESSAGES_PER_CLIENT):
            frames = _fuzz_message(rng, rid=i + 1)
            sock.send_multipart(frames)
            if not sock.poll(REPLY_TIMEOUT_MS):
                failures.append(f"client {seed} message {i}: no reply to {[f[:60] for f in frames]!r}")
                return
            try:
                unpackb(sock.recv(), Reply)
            except CodecError as e:
                failures.append(f"client {seed} message {i}: unreadable reply ({e})")
                return
            time.sleep(float(rng.uniform(0.0, 0.08)))  # let the driver's chunks run in between
        if sock.poll(300):  # nothing more: exactly one reply per message
            failures.append(f"client {seed}: a reply too many: {sock.recv()[:100]!r}")


def _watch(client: RobotClient, stop: threading.Event, seen: list[Observation]) -> None:
    while not stop.is_set():
        try:
            seen.append(client.latest_observation(timeout_s=2.0))
        except RobotServerError:
            continue


def _measured_figures(seen: list[Observation]) -> dict[str, float]:
    """The worst measured excursions: outside the box (m), TCP travel per control tick (m), and
    the gripper width range away from the table (m)."""
    lo, hi = np.array(LIMITS.workspace_min_m), np.array(LIMITS.workspace_max_m)
    outside = max(
        float(
            np.linalg.norm(
                np.maximum(lo - o.state.ee_position_m, 0) + np.maximum(o.state.ee_position_m - hi, 0)
            )
        )
        for o in seen
    )
    step = 0.0
    for prev, o in itertools.pairwise(seen):
        dt = o.state.robot_time_s - prev.state.robot_time_s
        if dt >= 0:
            moved = float(np.linalg.norm(o.state.ee_position_m - prev.state.ee_position_m))
            step = max(step, moved / max(1, round(dt / 0.1)))
    widths = [o.state.gripper_width_m for o in seen if o.state.ee_position_m[2] > 0.05]
    return {
        "observations": float(len(seen)),
        "max_outside_box_m": outside,
        "max_tcp_step_per_tick_m": step,
        "gripper_min_m": float(min(widths, default=0.0)),
        "gripper_max_m": float(max(widths, default=0.0)),
    }


def _assert_measured_within_limits(seen: list[Observation]) -> None:
    lo, hi = np.array(LIMITS.workspace_min_m), np.array(LIMITS.workspace_max_m)
    max_tick = LIMITS.max_step_translation_m + STEP_TOL_M
    for prev, o in itertools.pairwise(seen):
        p = o.state.ee_position_m
        assert np.all(p >= lo - BOX_TOL_M) and np.all(p <= hi + BOX_TOL_M), p
        dt = o.state.robot_time_s - prev.state.robot_time_s
        if dt < 0:
            continue  # a sim reset (physics time restarts at 0) puts the arm home at once, by design
        ticks = max(1, round(dt / 0.1))
        moved = float(np.linalg.norm(p - prev.state.ee_position_m))
        assert moved <= ticks * max_tick, (
            f"{moved * 1e3:.1f} mm in {ticks} tick(s), {prev.state} -> {o.state}"
        )
        if p[2] > 0.05:
            assert -2e-3 <= o.state.gripper_width_m <= LIMITS.gripper_max_m + 2e-3, o.state.gripper_width_m


def _when_not_busy(call: Callable[[], object], timeout_s: float = 30.0) -> None:
    """Retry ``call`` while the server answers busy (a reset a fuzzer started is still running)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            call()
            return
        except RobotServerError as e:
            if e.code.value != "busy" or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_fuzzed_commands_never_stop_the_server_nor_move_the_arm_outside_its_limits(
    server: ServerProc,
) -> None:
    failures: list[str] = []
    seen: list[Observation] = []
    stop = threading.Event()
    with (
        RobotClient(server.cmd_endpoint, name="driver", timeout_s=REPLY_TIMEOUT_MS / 1000) as driver,
        RobotClient(server.cmd_endpoint, name="watcher", timeout_s=REPLY_TIMEOUT_MS / 1000) as watcher,
    ):
        driver.connect()
        watch = threading.Thread(target=_watch, args=(watcher, stop, seen), daemon=True)
        watch.start()
        try:
            fuzzers = [
                threading.Thread(target=_fuzz_client, args=(server.cmd_endpoint, seed, failures), daemon=True)
                for seed in range(SEED * FUZZ_CLIENTS, (SEED + 1) * FUZZ_CLIENTS)
            ]
            for t in fuzzers:
                t.start()
            driver.start_heartbeat()
            rng = np.random.default_rng(100 + SEED)
            seq = 0
            while any(t.is_alive() for t in fuzzers):
                seq += 1
                try:
                    driver.submit_chunk(_chunk(rng, seq, "driver"))
                except RobotServerError as e:  # e-stopped, resetting, stale: the fuzzers' doing
                    assert e.code.value != "timeout", e
                    try:
                        if e.code.value == "estopped":
                            driver.release_estop()
                        elif "SetGuidingMode" in e.message:  # a fuzzer handed the arm over
                            driver.set_guiding_mode(False)
                    except RobotServerError as e2:  # busy: a fuzzer's reset is under way; next round
                        assert e2.code.value != "timeout", e2
                assert driver.health() is not None  # answers all along
                time.sleep(0.15)
            for t in fuzzers:
                t.join(60.0)
            assert not failures, "\n".join(failures)

            # Afterwards: healthy, and a valid chunk still executes.
            _when_not_busy(driver.release_estop)
            _when_not_busy(lambda: driver.set_guiding_mode(False))
            driver.stop()
            deadline = time.monotonic() + 30.0
            while not (h := driver.health()).ok:
                assert time.monotonic() < deadline, h.detail
                time.sleep(0.1)
            x0 = driver.latest_observation(timeout_s=5.0).state.ee_position_m[0]
            a = np.zeros((5, 7))
            a[:, 0] = -0.01 if x0 > 0.4 else 0.01
            a[:, 6] = 0.08
            acc = driver.submit_chunk(
                ActionChunk(
                    seq=seq + 1,
                    episode_id="after",
                    action_space=ActionSpace.EE_DELTA,
                    actions=a,
                    control_rate_hz=10.0,
                )
            )
            assert acc.steps == 5
            while abs(driver.latest_observation(timeout_s=5.0).state.ee_position_m[0] - x0) < 0.03:
                assert time.monotonic() < deadline + 30.0, "the valid chunk did not move the arm"
            driver.stop_heartbeat()
        finally:
            stop.set()
            watch.join(5.0)
    counters = RobotClient(server.cmd_endpoint, timeout_s=5.0)
    try:
        c = counters.status().counters
    finally:
        counters.close()
    if report := os.environ.get("PDE_FUZZ_REPORT"):
        figures = {
            **_measured_figures(seen),
            "fuzz_messages": float(FUZZ_CLIENTS * MESSAGES_PER_CLIENT),
            "replies_missing_or_extra": float(len(failures)),
            "commands_total": float(c.commands_total),
            "commands_malformed": float(c.commands_malformed),
            "commands_failed": float(c.commands_failed),
            "steps_clipped": float(c.steps_clipped),
        }
        with open(report, "w") as f:
            json.dump(figures, f, indent=2)
    assert len(seen) > 300 * MESSAGES_PER_CLIENT // 400  # ~10 s of observations per 400 messages
    _assert_measured_within_limits(seen)
    assert c.commands_malformed > 0 and c.commands_failed == 0 and c.command_loop_restarts == 0
