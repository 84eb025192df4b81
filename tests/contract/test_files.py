"""pde_contract.files: the one atomic write (episode files, checkpoints, videos, calibration)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pde_contract.files import atomic_path, atomic_write_bytes


def test_the_content_appears_under_the_final_name_only_when_complete(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "ep.episode"
    with atomic_path(path) as tmp:
        assert tmp.parent == path.parent and tmp.name.endswith(".tmp") and not path.exists()
        tmp.write_bytes(b"first")
    assert path.read_bytes() == b"first" and list(path.parent.iterdir()) == [path]
    atomic_write_bytes(path, b"second")
    assert path.read_bytes() == b"second" and list(path.parent.iterdir()) == [path]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "policy-000001.pt"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="encoder died"), atomic_path(path) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("encoder died")
    assert path.read_bytes() == b"old" and list(tmp_path.iterdir()) == [path]
