"""The real ``openai`` client against FakeOpenAIServer: request contents, retries, repair, fallback."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.frames import rollout_frames
from supervisor.settings import SupervisorSettings
from supervisor.vlm.base import (
    CallRecord,
    CandidateRequest,
    PromptEvidence,
    RolloutFrames,
    SuccessRequest,
    SummaryRequest,
    VLMError,
)
from supervisor.vlm.openai_vlm import OpenAIVLM
from tests.fakes.fake_openai import FakeOpenAIServer
from tests.helpers import REPO_ROOT, free_port
from tests.supervisor.episodes import make_episode

GOAL = "put the green container in the bowl"


@pytest.fixture
def fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


def settings_for(base_url: str, **kw: object) -> SupervisorSettings:
    values: dict[str, object] = dict(
        base_url=base_url,
        model="fake-vlm",
        api_key="test-key",
        # generous: a loaded CI machine must not turn a normal reply into a retried timeout;
        # the timeout tests set their own short value
        request_timeout_s=10.0,
        connect_timeout_s=5.0,
        max_attempts=3,
        backoff_initial_s=0.01,
        backoff_max_s=0.2,
    )
    values.update(kw)
    return SupervisorSettings(**values)  # type: ignore[arg-type]


class Recorder:
    def __init__(self) -> None:
        self.calls: list[CallRecord] = []
        self.sleeps: list[float] = []

    def on_call(self, rec: CallRecord) -> None:
        self.calls.append(rec)

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        time.sleep(s)


def make_vlm(fake: FakeOpenAIServer, **kw: object) -> tuple[OpenAIVLM, Recorder]:
    rec = Recorder()
    return OpenAIVLM(settings_for(fake.base_url, **kw), on_call=rec.on_call, sleep=rec.sleep), rec


def rollout(success: bool | None = None, k: int = 8) -> RolloutFrames:
    return RolloutFrames(rollout_frames(make_episode(n_chunks=30), "external", k, 448, 85), success)


def summary_request() -> SummaryRequest:
    return SummaryRequest("t", GOAL, "place the green container into the bowl", [rollout(True)], 0.5)


def candidate_request(n_new: int = 5) -> CandidateRequest:
    pool = [
        PromptEvidence(
            "place the green container into the bowl", 0.3, 10, "grasps then drops", [rollout(True)]
        ),
        PromptEvidence("drop the green box inside the bowl", 1.0, 10, "", [rollout(True)]),
    ]
    failed = [PromptEvidence("move the container", 0.0, 10, "wanders")]
    return CandidateRequest("t", GOAL, 0.1, "flat", 2, n_new, pool, failed)


def test_candidate_request_carries_frames_and_schema(fake: FakeOpenAIServer) -> None:
    vlm, rec = make_vlm(fake)
    result = vlm.propose_prompts(candidate_request(n_new=5))
    assert len(result.new_prompts) == 5 and result.source == "vlm"
    [req] = fake.requests
    assert req["problems"] == []
    assert req["kind"] == "candidates" and req["response_format"] == "json_schema"
    assert req["n_images"] == 16  # two pool prompts x one rollout x 8 frames
    assert req["goal"] == GOAL and req["n_new"] == 5
    [call] = rec.calls
    assert call.ok and call.kind == "candidates" and call.model == "fake-vlm"
    assert call.prompt_tokens > 16 * 85 and call.completion_tokens > 0 and call.attempts == 1


def test_summary_and_success_requests(fake: FakeOpenAIServer) -> None:
    fake.set_script({"success": [{"success": False}]})
    vlm, rec = make_vlm(fake)
    assert vlm.summarize_rollouts(summary_request()).summary.startswith("The robot")
    verdict = vlm.judge_success(SuccessRequest("t", GOAL, GOAL, rollout()))
    assert verdict.success is False and verdict.reason
    assert [r["kind"] for r in fake.requests] == ["summary", "success"]
    assert all(r["n_images"] == 8 and not r["problems"] for r in fake.requests)
    assert [c.kind for c in rec.calls] == ["summary", "success"]


def test_429_and_500_are_retried_with_growing_backoff(fake: FakeOpenAIServer) -> None:
    fake.set_script([{"status": 429}, {"status": 500}, {"auto": True}])
    vlm, rec = make_vlm(fake, backoff_initial_s=0.02)
    assert vlm.summarize_rollouts(summary_request()).summary
    assert len(fake.requests) == 3
    assert len(rec.sleeps) == 2 and rec.sleeps[1] > rec.sleeps[0]
    [call] = rec.calls
    assert call.ok and call.attempts == 3


def test_retry_after_header_is_honoured(fake: FakeOpenAIServer) -> None:
    fake.set_script([{"status": 429, "retry_after_s": 0.1}])
    vlm, rec = make_vlm(fake, backoff_initial_s=0.001)
    vlm.summarize_rollouts(summary_request())
    assert rec.sleeps[0] >= 0.09


def test_timeout_is_retried(fake: FakeOpenAIServer) -> None:
    # The slow reply never comes while the test runs (the fake's stop wakes it). The deadline
    # leaves the retry seconds: on a loaded machine a normal reply took up to 0.6 s, and a 0.3 s
    # deadline made it a third attempt.
    fake.set_script([{"delay_s": 60.0}, {"auto": True}])
    vlm, rec = make_vlm(fake, request_timeout_s=3.0)
    t0 = time.monotonic()
    assert vlm.summarize_rollouts(summary_request()).summary
    assert time.monotonic() - t0 < 30.0  # the slow reply (60 s) was abandoned, not awaited
    assert rec.calls[0].attempts == 2


def test_gives_up_after_max_attempts_and_records_the_failure(fake: FakeOpenAIServer) -> None:
    fake.set_script([{"status": 500}] * 5)
    vlm, rec = make_vlm(fake, max_attempts=3)
    with pytest.raises(VLMError, match="after 3 attempt"):
        vlm.summarize_rollouts(summary_request())
    assert len(fake.requests) == 3
    [call] = rec.calls
    assert not call.ok and "500" in call.error and call.attempts == 3


def test_client_errors_are_not_retried(fake: FakeOpenAIServer) -> None:
    fake.set_script([{"status": 401}])
    vlm, _ = make_vlm(fake)
    with pytest.raises(VLMError, match="AuthenticationError"):
        vlm.summarize_rollouts(summary_request())
    assert len(fake.requests) == 1


def test_malformed_json_gets_one_repair(fake: FakeOpenAIServer) -> None:
    fake.set_script([{"malformed": True}, {"auto": True}])
    vlm, rec = make_vlm(fake)
    result = vlm.propose_prompts(candidate_request())
    assert result.new_prompts
    first, repair = fake.requests
    assert first["n_messages"] == 2 and repair["n_messages"] == 4  # + bad answer + correction
    assert [(c.kind, c.ok) for c in rec.calls] == [("candidates", False), ("candidates_repair", True)]
    assert "invalid answer" in rec.calls[0].error and rec.calls[0].completion_tokens > 0


def test_invalid_twice_raises(fake: FakeOpenAIServer) -> None:
    fake.set_script([{"malformed": True}, {"invalid": True}, {"auto": True}])
    vlm, _ = make_vlm(fake)
    with pytest.raises(VLMError, match="still invalid after one repair"):
        vlm.propose_prompts(candidate_request())
    assert len(fake.requests) == 2


def test_schema_refused_falls_back_to_json_mode(fake: FakeOpenAIServer) -> None:
    fake.set_script([{"reject_json_schema": True}, {"reject_json_schema": True}])
    vlm, _ = make_vlm(fake)
    assert vlm.summarize_rollouts(summary_request()).summary
    assert vlm.summarize_rollouts(summary_request()).summary
    assert [r["response_format"] for r in fake.requests] == ["json_schema", "json_object", "json_object"]


def test_cost_from_configured_prices(fake: FakeOpenAIServer) -> None:
    vlm, rec = make_vlm(fake, price_input_usd_per_mtok=2.0, price_output_usd_per_mtok=8.0)
    vlm.summarize_rollouts(summary_request())
    c = rec.calls[0]
    assert c.cost_usd == pytest.approx((c.prompt_tokens * 2.0 + c.completion_tokens * 8.0) / 1e6)


def test_too_many_images_refused_before_sending(fake: FakeOpenAIServer) -> None:
    vlm, _ = make_vlm(fake, max_images_per_request=8)
    with pytest.raises(VLMError, match="max_images_per_request"):
        vlm.propose_prompts(candidate_request())
    assert fake.requests == []


def test_placeholder_key_refused() -> None:
    with pytest.raises(ValueError, match="placeholder"):
        SupervisorSettings(api_key="changeme")  # type: ignore[arg-type]


def test_fake_server_runs_as_a_process(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"summary": [{"status": 500}]}))
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(REPO_ROOT / "tests/fakes/fake_openai.py"),
            "--port",
            str(port),
            "--script",
            str(script),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert proc.stdout is not None and "listening" in proc.stdout.readline().decode()
        rec = Recorder()
        vlm = OpenAIVLM(settings_for(f"http://127.0.0.1:{port}/v1"), on_call=rec.on_call, sleep=rec.sleep)
        assert vlm.summarize_rollouts(summary_request()).summary
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_requests", timeout=5) as r:
            log = json.load(r)
        assert [x["step"] for x in log] == [{"status": 500}, {"auto": True}]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
