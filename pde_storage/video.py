"""The one mp4 writer: RGB frames -> H.264 or AV1 in an mp4 container (PyAV), yuv420p.

Its two users differ only in settings: episode videos for the operator page
(``pde_storage/media.py: EPISODE_VIDEO``: x264 veryfast, main profile, faststart so Chromium's
<video> plays and seeks before the whole file arrives) and the LeRobot export
(``pde_storage/lerobot_export.py``: LeRobot's AV1 or H.264, a keyframe every ``gop`` frames, each
chunk's image repeated over its rows)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np


@dataclass(frozen=True)
class VideoEncoding:
    """How frames are encoded (the PyAV encoder and the options it is given)."""

    codec: str = "libx264"  # a PyAV encoder name: "libx264", "libsvtav1"
    crf: int = 23  # quality, lower is better (x264's default 23; LeRobot's AV1 30)
    gop: int | None = None  # a keyframe every this many frames; None: the encoder's default
    preset: str | None = None  # the encoder's speed preset ("veryfast"); None: its default
    profile: str | None = None  # "main": what every browser decodes; None: the encoder's choice
    faststart: bool = False  # the index (moov) before the frames: a browser plays while loading
    # the container's time base is 1/fps, so the n-th frame's timestamp is exactly n / fps (LeRobot's
    # loader checks them); False: the muxer picks its own time base, as the episode videos always had
    frame_rate_time_base: bool = False


class VideoWriter:
    """An mp4 file being written: frames are appended (``add``) until ``close``; the n-th frame
    shown has pts n in a 1/``fps`` time base. Odd sides are padded by one black row or column
    (4:2:0 needs even sizes). Written in place: callers that need atomicity pass a temporary path."""

    def __init__(self, path: Path, fps: float, encoding: VideoEncoding) -> None:
        self.path = path
        self.frames_written = 0
        self.bytes_written = 0  # encoded so far (packets muxed), before the container's index
        self._rate = Fraction(fps).limit_denominator(1000)
        self._encoding = encoding
        self._size: tuple[int, int] | None = None  # (h, w) of the first frame
        self._out: av.container.OutputContainer | None = None
        self._stream: av.VideoStream | None = None

    def _open(self, h: int, w: int) -> av.VideoStream:
        enc = self._encoding
        options = {"crf": str(enc.crf)}
        for key, value in (("g", enc.gop), ("preset", enc.preset), ("profile", enc.profile)):
            if value is not None:
                options[key] = str(value)
        if enc.codec == "libsvtav1":
            # SVT-AV1 prints a banner to stderr for every video unless told to log errors only
            os.environ.setdefault("SVT_LOG", "1")
        container_options = {"movflags": "+faststart"} if enc.faststart else {}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._out = av.open(str(self.path), mode="w", format="mp4", options=container_options)
        stream = self._out.add_stream(enc.codec, rate=self._rate, options=options)
        assert isinstance(stream, av.VideoStream)
        stream.width, stream.height, stream.pix_fmt = w + w % 2, h + h % 2, "yuv420p"
        if enc.frame_rate_time_base:
            stream.time_base = 1 / self._rate
        self._size, self._stream = (h, w), stream
        return stream

    def _mux(self, packets: list[av.Packet]) -> None:
        assert self._out is not None
        for packet in packets:
            self.bytes_written += packet.size
            self._out.mux(packet)

    def add(self, frames: Sequence[np.ndarray], repeats: Sequence[int] | None = None) -> None:
        """Append RGB uint8 frames [H, W, 3]; frame ``i`` is shown ``repeats[i]`` times (once each
        without ``repeats``)."""
        if repeats is not None and len(repeats) != len(frames):
            raise ValueError(f"{self.path.name}: {len(repeats)} repeat counts for {len(frames)} frames")
        for i, img in enumerate(frames):
            h, w = img.shape[:2]
            stream = self._stream or self._open(h, w)
            if self._size != (h, w):
                fh, fw = self._size or (h, w)
                raise ValueError(f"{self.path.name}: frame size changed from {fw}x{fh} to {w}x{h}")
            if h % 2 or w % 2:
                img = np.pad(img, ((0, h % 2), (0, w % 2), (0, 0)))
            # converted once, however often it is shown
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24").reformat(
                format="yuv420p"
            )
            for _ in range(1 if repeats is None else int(repeats[i])):
                frame.pts, frame.time_base = self.frames_written, 1 / self._rate
                self._mux(stream.encode(frame))
                self.frames_written += 1

    def close(self) -> None:
        """Flush the encoder and write the container's index."""
        if self._out is None:
            raise ValueError(f"{self.path.name}: no frames to encode")
        assert self._stream is not None
        self._mux(self._stream.encode(None))
        self._out.close()
        self._out = None

    def abort(self) -> None:
        """Close the file as it is (after an error; the caller deletes it)."""
        if self._out is not None:
            self._out.close()
            self._out = None


def write_video(
    path: Path,
    frames: Sequence[np.ndarray],
    fps: float,
    encoding: VideoEncoding,
    *,
    repeats: Sequence[int] | None = None,
) -> None:
    """Encode RGB uint8 frames [H, W, 3] to the mp4 file ``path`` (``VideoWriter``, one call)."""
    if not frames:
        raise ValueError(f"{path.name}: no frames to encode")
    writer = VideoWriter(path, fps, encoding)
    try:
        writer.add(frames, repeats)
    except BaseException:
        writer.abort()
        raise
    writer.close()
