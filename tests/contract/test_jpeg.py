import cv2
import numpy as np
import pytest

from pde_contract.jpeg import decode_jpeg


def _jpeg_of_rgb(rgb: np.ndarray, quality: int = 95) -> bytes:
    ok, buf = cv2.imencode(".jpg", rgb[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return buf.tobytes()


def test_channels_come_back_in_rgb_order() -> None:
    rgb = np.zeros((48, 64, 3), np.uint8)
    rgb[:, :21] = (255, 0, 0)
    rgb[:, 21:42] = (0, 255, 0)
    rgb[:, 42:] = (0, 0, 255)
    out = decode_jpeg(_jpeg_of_rgb(rgb))
    assert out.shape == (48, 64, 3) and out.dtype == np.uint8 and out.flags.c_contiguous
    # Away from the blocks that straddle a colour edge the decoded colour is the source's.
    for col, expected in ((4, (255, 0, 0)), (28, (0, 255, 0)), (60, (0, 0, 255))):
        assert np.abs(out[24, col].astype(int) - expected).max() <= 8


def test_same_pixels_as_opencv_reads_them() -> None:
    """The policy was trained on OpenCV's decode: the shared decoder gives exactly those pixels."""
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)
    data = _jpeg_of_rgb(rgb, quality=90)
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    np.testing.assert_array_equal(decode_jpeg(data), bgr[:, :, ::-1])


@pytest.mark.parametrize(
    "data",
    [b"", b"\xff\xd8", b"\xff\xd8\xff\xe0garbage", b"\x89PNG\r\n\x1a\n"],
    ids=["empty", "soi-only", "garbage", "png-magic-only"],
)
def test_not_a_jpeg_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError, match="not a decodable JPEG"):
        decode_jpeg(data)
