"""Atomic file writes: neither a reader nor a crash ever sees a half-written file under its final
name (episode files, checkpoints, videos)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A fresh temporary path to write ``path``'s content to. When the block ends the file is
    flushed to disk and renamed onto ``path``; if the block raises, it is removed and ``path`` is
    left as it was. The temporary file sits in the same folder (a rename within one file system is
    atomic) and ends in ``.tmp``, so globs for the final suffix (``*.episode``) never pick it up."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see ``atomic_path``)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
