"""The supervisor's job queue: one job in flight per key, each handed back once it ends."""

from __future__ import annotations

import threading

from pde_contract.records import PromptStatus
from supervisor.jobs import JobKey, JobQueue, SummarizePrompt
from supervisor.pool import PromptRecord
from supervisor.vlm.base import SummaryResult


def test_one_job_per_key_handed_back_once_when_it_ends() -> None:
    queue = JobQueue(workers=1)
    release = threading.Event()
    job = SummarizePrompt(
        "t", "put the cube in the bowl", PromptRecord(3, "drop the cube", PromptStatus.POOL), []
    )

    def run() -> SummaryResult:
        release.wait()
        return SummaryResult("it drops the cube")

    try:
        queue.start(job, run)
        assert job.key == JobKey("summary", 3)
        assert job.key in queue and len(queue) == 1
        assert [str(k) for k in queue.in_flight()] == ["summary:3"]  # as the supervisor publishes it
        assert queue.finished() == []  # still running: stays in flight
        release.set()
        for _ in range(1000):  # the future is done a moment after run returns
            if done := queue.finished():
                break
            threading.Event().wait(0.01)
        [(got, future)] = done
        assert got is job and future.result() == SummaryResult("it drops the cube")
        assert not queue and queue.finished() == []
    finally:
        release.set()
        queue.close()
