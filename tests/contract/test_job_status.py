from pathlib import Path

import msgspec
import pytest

from pde_contract.job_status import JobStatus, read_status, write_status


def test_round_trip_and_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "sft.status.json"
    assert read_status(path) is None  # not written yet
    write_status(path, JobStatus(job="sft", phase="loading", total_steps=10))
    assert read_status(path) == JobStatus(job="sft", phase="loading", step=0, total_steps=10)
    done = JobStatus(job="sft", phase="done", step=10, total_steps=10, loss=0.5, checkpoint="c/policy.pt")
    write_status(path, done)
    assert read_status(path) == done
    assert sorted(p.name for p in path.parent.iterdir()) == ["sft.status.json"]  # no temporary left


def test_not_a_status_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text('{"job": "sft", "phase": "sleeping"}')
    with pytest.raises(msgspec.ValidationError):
        read_status(path)
