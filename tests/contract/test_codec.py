import subprocess
import sys
import time

import numpy as np
import pytest

from pde_contract.codec import CodecError, packb, unpackb
from pde_contract.messages import (
    ActionChunk,
    ActionSpace,
    CameraFrame,
    Counters,
    Envelope,
    Observation,
    Reply,
    RobotState,
    Status,
    SubmitChunk,
)
from tests.helpers import subprocess_env

DTYPES = [
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    ">f4",
    ">i8",
]
SHAPES = [(), (0,), (1,), (7,), (3, 4), (10, 8), (2, 3, 4), (1, 224, 224, 3), (0, 5)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_array_round_trip(dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    arr = np.asarray(rng.standard_normal(shape) * 100).astype(dtype)
    out = unpackb(packb({"a": arr}))["a"]
    assert out.dtype == arr.dtype
    assert out.shape == arr.shape
    np.testing.assert_array_equal(out, arr)
    assert out.flags.writeable  # decoded arrays are copies, safe to modify


def test_non_contiguous_and_fortran_arrays() -> None:
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    for arr in (a[:, ::2], np.asfortranarray(a), a.T):
        np.testing.assert_array_equal(unpackb(packb(arr)), arr)


@pytest.mark.parametrize("bad", [np.array(["a", "b"]), np.array([object()], dtype=object)])
def test_object_and_string_arrays_are_refused(bad: np.ndarray) -> None:
    with pytest.raises(CodecError, match="dtype"):
        packb(bad)


def _state() -> RobotState:
    return RobotState(
        joint_positions_rad=np.linspace(-1, 1, 7),
        joint_velocities_rad_s=np.zeros(7),
        ee_position_m=np.array([0.4, 0.0, 0.3]),
        ee_quat_xyzw=np.array([1.0, 0.0, 0.0, 0.0]),
        gripper_width_m=0.08,
        robot_time_s=12.5,
    )


def test_typed_observation_round_trip() -> None:
    obs = Observation(
        seq=7,
        publish_time_s=time.time(),
        state=_state(),
        cameras=[
            CameraFrame(
                name=n, jpeg=bytes(range(256)) * 40, width=224, height=224, capture_time_s=1.5, frame_index=i
            )
            for i, n in enumerate(["wrist", "external"])
        ],
        task_success=False,
    )
    out = unpackb(packb(obs), Observation)
    assert out.seq == 7 and out.task_success is False
    assert [c.name for c in out.cameras] == ["wrist", "external"]
    assert out.cameras[0].jpeg == obs.cameras[0].jpeg
    np.testing.assert_array_equal(out.state.joint_positions_rad, obs.state.joint_positions_rad)


def test_typed_reply_with_payload() -> None:
    reply = Reply(
        ok=True,
        payload=Status(
            backend="sim",
            connected=True,
            estopped=False,
            estop_reason="",
            executing_chunk_seq=-1,
            episode_id="",
            steps_remaining=0,
            holding=True,
            counters=Counters(chunks_executed=3),
            state=_state(),
        ),
    )
    out = unpackb(packb(reply), Reply)
    assert isinstance(out.payload, Status) and out.payload.counters.chunks_executed == 3


def test_wrong_field_type_names_the_field() -> None:
    env = {
        "type": "Envelope",
        "request_id": 1,
        "request": {
            "type": "SubmitChunk",
            "chunk": {
                "type": "ActionChunk",
                "seq": 1,
                "episode_id": "e",
                "action_space": "ee_delta",
                "actions": [[0.0] * 7],
                "control_rate_hz": 10.0,
            },
        },
    }
    with pytest.raises(CodecError, match=r"\$\.request\.chunk\.actions"):
        unpackb(packb(env), Envelope)


def test_unknown_action_space_and_message_type_are_refused() -> None:
    chunk = Envelope(
        request_id=1,
        request=SubmitChunk(
            chunk=ActionChunk(
                seq=1,
                episode_id="e",
                action_space=ActionSpace.EE_DELTA,
                actions=np.zeros((2, 7)),
                control_rate_hz=10.0,
            )
        ),
    )
    raw = unpackb(packb(chunk))
    raw["request"]["chunk"]["action_space"] = "torque"
    with pytest.raises(CodecError, match="action_space"):
        unpackb(packb(raw), Envelope)
    raw["request"] = {"type": "SelfDestruct"}
    with pytest.raises(CodecError, match="SelfDestruct"):
        unpackb(packb(raw), Envelope)


@pytest.mark.parametrize("data", [b"", b"\xc1", b"\x92\x01", b"\xff" * 100, bytes(range(256))])
def test_garbage_bytes_raise_codec_error(data: bytes) -> None:
    with pytest.raises(CodecError):
        unpackb(data, Envelope)


def test_truncated_array_body_is_refused() -> None:
    good = packb(np.arange(10, dtype=np.float64))
    with pytest.raises(CodecError):
        unpackb(good[:-8])


@pytest.mark.parametrize("depth", [1_000, 100_000])
@pytest.mark.parametrize("typed", [False, True])
def test_deep_nesting_is_a_codec_error(depth: int, typed: bool) -> None:
    # ~1 KB of one-element arrays nested `depth` deep, as the value of an unknown field of a valid
    # request when typed: msgspec stops at the recursion limit and that must read as a bad message.
    nested = b"\x91" * depth + b"\xc0"
    if typed:
        data = b"\x82" + packb("request_id") + b"\x01" + packb("request") + b"\x82" + packb("type")
        data += packb("Health") + packb("x") + nested
    else:
        data = nested
    with pytest.raises(CodecError, match="nested too deeply"):
        unpackb(data, Envelope if typed else None)


# Run in a child process: on broken code the race kills the interpreter (SIGSEGV), which must read
# as this test failing, not as the whole test run dying.
_FIRST_DECODES_AT_ONCE = """
import sys, threading
import msgspec
from pde_contract.codec import convert, decode_json, packb, unpackb

sys.setswitchinterval(1e-6)  # switch threads as often as possible: the race shows in a few rounds
for i in range(100):  # new struct classes every round: msgspec has built nothing for them yet
    inner = msgspec.defstruct(f"Inner{i}", [("a", int), ("b", str), ("c", list[float])])
    middle = msgspec.defstruct(f"Middle{i}", [("inner", list[inner]), ("extra", dict[str, int])])
    outer = msgspec.defstruct(f"Outer{i}", [("middles", list[middle]), ("first", inner)])
    x = inner(1, "x", [1.0])
    message = outer([middle([x, x], {"k": 1})], x)
    as_msgpack, as_json = packb(message), msgspec.json.encode(message)
    as_builtins = msgspec.to_builtins(message)
    reads = [
        lambda: unpackb(as_msgpack, outer),
        lambda: convert(as_builtins, outer),
        lambda: decode_json(as_json, outer),
        lambda: unpackb(as_msgpack, outer),
    ]
    start = threading.Barrier(len(reads))
    got = []

    def first_read(read):
        start.wait()
        got.append(read().middles[0].inner[1].c)

    threads = [threading.Thread(target=first_read, args=(read,)) for read in reads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [[1.0]] * len(reads), got
print("decoded")
"""


def test_threads_decoding_a_type_for_the_first_time_at_once_do_not_crash() -> None:
    # msgspec caches a struct's type info on its class before filling it in; a decoder built in
    # another thread meanwhile took the half-built info and crashed the process (the supervisor's
    # two workers reading their first episode files at once). Before the fix: SIGSEGV in 3 of 3 runs.
    proc = subprocess.run(
        [sys.executable, "-c", _FIRST_DECODES_AT_ONCE],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "decoded", (
        f"exit {proc.returncode} (-11 is a segmentation fault): {proc.stderr[-2000:]}"
    )
