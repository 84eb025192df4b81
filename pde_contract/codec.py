"""numpy over msgpack. Arrays travel as a msgpack extension (dtype, shape, raw bytes); object
arrays and unknown types are refused, and nothing is ever pickled.

Decoding is depth-bounded: msgspec stops at the interpreter's recursion limit (about 1000 levels of
nested arrays/maps; messages nest fewer than 10) and raises ``RecursionError``, which ``unpackb``
turns into a ``CodecError`` like any other bad message, so ~1 KB of nesting cannot escape a caller
that handles ``CodecError``."""

from __future__ import annotations

import functools
import math
import threading
from typing import Any, TypeVar

import msgspec
import numpy as np

_NDARRAY_EXT = 1
# Fixed-size numeric and bool dtypes only: anything that needs Python objects to rebuild is refused.
_ALLOWED_KINDS = frozenset("biufc")

T = TypeVar("T")


class CodecError(ValueError):
    """A message could not be encoded or decoded; the text says which field and why."""


def _pack_array(arr: np.ndarray) -> msgspec.msgpack.Ext:
    if arr.dtype.kind not in _ALLOWED_KINDS:
        raise CodecError(
            f"cannot send an array of dtype {arr.dtype}: only bool, integer, float and complex "
            "arrays go on the wire (convert strings/objects to plain fields)"
        )
    # C order whatever the strides
    return msgspec.msgpack.Ext(_NDARRAY_EXT, _array_prefix(arr.dtype.str, arr.shape) + arr.tobytes(order="C"))


@functools.lru_cache(maxsize=256)
def _array_prefix(dtype_str: str, shape: tuple[int, ...]) -> bytes:
    """Length + msgpack header ``(dtype, shape)`` of an array; the few shapes a robot sends repeat,
    so this is computed once per shape instead of once per observation."""
    header = msgspec.msgpack.encode((dtype_str.encode(), shape))  # e.g. b'<f4': byte order explicit
    return len(header).to_bytes(4, "little") + header


@functools.lru_cache(maxsize=64)
def _dtype(dtype_str: bytes | str) -> np.dtype:
    dtype = np.dtype(dtype_str.decode() if isinstance(dtype_str, bytes) else dtype_str)
    if dtype.kind not in _ALLOWED_KINDS:
        raise CodecError(f"refusing an array of dtype {dtype} from the wire")
    return dtype


_array_header = msgspec.msgpack.Decoder(tuple[bytes, tuple[int, ...]])


def _unpack_array(data: memoryview | bytes) -> np.ndarray:
    # Few numpy calls on purpose: an observation's arrays are decoded right after the subscriber
    # wakes, with cold caches, where each extra call costs microseconds.
    n = int.from_bytes(data[:4], "little")
    try:
        dtype_str, shape = _array_header.decode(data[4 : 4 + n])
    except msgspec.ValidationError as e:
        raise CodecError(f"bad array header: {e}") from e
    dtype = _dtype(dtype_str)
    body = data[4 + n :]
    # math.prod, not np.prod: a few microseconds per array on every observation
    expected = dtype.itemsize * math.prod(shape)
    if len(body) != expected or min(shape, default=0) < 0:
        raise CodecError(f"array body is {len(body)} bytes, shape {shape} of {dtype} needs {expected}")
    # a bytearray copy: the receive buffer is reused by zmq and the caller may write into the array
    arr = np.frombuffer(bytearray(body), dtype=dtype)
    return arr if len(shape) == 1 else arr.reshape(shape)


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return _pack_array(obj)
    if isinstance(obj, np.generic):
        return obj.item()
    raise CodecError(
        f"cannot encode a {type(obj).__name__} on the wire "
        "(allowed: messages, numbers, str, bytes, numpy arrays)"
    )


def _ext_hook(code: int, data: memoryview) -> Any:
    if code == _NDARRAY_EXT:
        return _unpack_array(data)
    raise CodecError(f"unknown msgpack extension type {code}")


def _dec_hook(type_: type, obj: Any) -> Any:
    if type_ is np.ndarray:
        if isinstance(obj, np.ndarray):
            return obj
        raise CodecError(f"expected a numpy array, got {type(obj).__name__}")
    raise CodecError(f"cannot decode into {type_}")


_encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_any_decoder = msgspec.msgpack.Decoder(ext_hook=_ext_hook)
_typed_decoders: dict[Any, msgspec.msgpack.Decoder[Any]] = {}
# msgspec caches a struct's type info on its class BEFORE filling it in (so recursive types resolve),
# and with the GIL nothing stops another thread from taking that half-built info meanwhile: a
# decoder built (or used) in a second thread then dereferences the missing field types and the
# process dies of a segmentation fault (the supervisor's two workers reading their first episode
# files at once, in a test run). One decoder is built at a time, and only a finished one is shared.
_typed_decoders_lock = threading.Lock()


def _typed_decoder(type_: Any) -> msgspec.msgpack.Decoder[Any]:
    dec = _typed_decoders.get(type_)
    if dec is None:
        with _typed_decoders_lock:
            dec = _typed_decoders.get(type_)
            if dec is None:
                dec = msgspec.msgpack.Decoder(type_, ext_hook=_ext_hook, dec_hook=_dec_hook)
                _typed_decoders[type_] = dec
    return dec


def convert(obj: Any, type_: type[T]) -> T:
    """``msgspec.convert`` (its errors unchanged), safe in any thread: the type info it shares
    with every other decoder is built first, as ``unpackb`` builds it."""
    _typed_decoder(type_)
    return msgspec.convert(obj, type_)


def decode_json(data: bytes, type_: type[T]) -> T:
    """``msgspec.json.decode`` into ``type_`` (its errors unchanged), safe in any thread (see
    ``convert``)."""
    _typed_decoder(type_)
    return msgspec.json.decode(data, type=type_)


def packb(obj: Any) -> bytes:
    """Encode a message (or plain data with numpy arrays) to msgpack bytes."""
    try:
        return _encoder.encode(obj)
    except CodecError:
        raise
    except (TypeError, ValueError, OverflowError) as e:
        raise CodecError(f"cannot encode message: {e}") from e


def packb_into(buf: bytearray, offset: int, obj: Any) -> bytearray:
    """Encode ``obj`` into ``buf`` from ``offset`` on (``buf`` is truncated after the message and
    keeps its capacity): reusing one buffer avoids growing a fresh one for every camera-sized
    message, and whatever precedes ``offset`` (a topic, a frame header) needs no concatenation."""
    try:
        _encoder.encode_into(obj, buf, offset)
    except CodecError:
        raise
    except (TypeError, ValueError, OverflowError) as e:
        raise CodecError(f"cannot encode message: {e}") from e
    return buf


def unpackb(data: bytes | memoryview, type_: Any = None) -> Any:
    """Decode msgpack bytes. With ``type_`` the result is validated against it (a message class
    or a union of them) and a mismatch raises CodecError naming the field."""
    try:
        if type_ is None:
            return _any_decoder.decode(data)
        return _typed_decoder(type_).decode(data)
    except CodecError:
        raise
    except msgspec.ValidationError as e:
        raise CodecError(f"invalid message: {e}") from e
    except RecursionError as e:
        raise CodecError(
            f"malformed message ({len(data)} bytes): arrays/maps nested too deeply (messages nest fewer "
            "than 10 levels)"
        ) from e
    except (msgspec.DecodeError, ValueError, TypeError) as e:
        raise CodecError(f"malformed message ({len(data)} bytes): {e}") from e
